"""Writing a cache file next to the memory file: all of it, or nothing left behind."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_file"]


@contextlib.contextmanager
def atomic_file(target: Path) -> Iterator[BinaryIO]:
    """Yield a private ``<target>.tmp`` to write; on success fsync it and rename it onto
    ``target``. On any failure (a full disk, a permission error, an exception of the writer)
    the temporary file is removed, so a failed cache write leaves no partial file taking the
    space of a disk that is already full, and ``target`` keeps its previous contents.
    """
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the caches are private
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
