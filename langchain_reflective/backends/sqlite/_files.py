"""Writing a cache file next to the memory file: all of it, or nothing left behind."""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_file"]

STALE_TEMP_SECONDS = 24 * 3600
"""Age after which a leftover temporary file of a target is removed when the target is next
written: only a process killed mid-write leaves one, and no writer holds one for a day."""


@contextlib.contextmanager
def atomic_file(target: Path) -> Iterator[BinaryIO]:
    """Yield a private temporary file to write; on success fsync it and rename it onto
    ``target``.

    The temporary file has a name of its own (``<target>.<random>.tmp``, mode 0600, in the
    target's directory), so two processes writing the same cache at once (both closing one
    memory file) each rename a whole file of their own: with one shared name, the later writer
    truncated the earlier one's file and renamed it, and the earlier one then wrote on into
    the target and failed. On any failure (a full disk, a permission error, an exception of
    the writer) this writer's temporary file, and only it, is removed, so a failed cache
    write leaves no partial file taking the space of a disk that is already full, and
    ``target`` keeps its previous contents. Temporary files of the same target older than
    :data:`STALE_TEMP_SECONDS` (left by a process killed mid-write) are removed.
    """
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the caches are private
    _remove_stale_temps(target)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _remove_stale_temps(target: Path) -> None:
    """Remove ``target``'s temporary files left by writers killed long ago (best effort)."""
    cutoff = time.time() - STALE_TEMP_SECONDS
    with contextlib.suppress(OSError):
        for leftover in target.parent.glob(f"{glob.escape(target.name)}.*.tmp"):
            with contextlib.suppress(OSError):
                if leftover.stat().st_mtime < cutoff:
                    leftover.unlink()
