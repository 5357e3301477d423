"""Opening a memory file read-only (``read_only=True``), also on storage this process cannot
write: a read-only mount or directory, a file it may not write, a backup copy. The memory file
itself is never written.

Where nobody can be writing the file, it is opened ``immutable=1``: SQLite reads the file alone,
takes no locks, and creates nothing beside it. That is correct only while nobody writes the
file, so it is done only when

* no ``<file>-shm`` exists: every connection that has the file open in WAL mode keeps one
  (one left by a crashed writer counts too), so no process has it open now;
* no ``<file>-wal`` holds anything: the main file then holds every committed change. A WAL left
  by a crash, or copied along, may hold commits the main file lacks, which an immutable read
  would miss in silence;
* nobody can start writing it meanwhile: its file system is mounted read-only, or its
  directory has no write permission for anyone (a writer creates ``-wal`` and ``-shm``
  there). A file without write permission in a directory someone may write does not count:
  its owner can make it writable and write it while the connection is open, and an
  immutable connection would go on answering from the file as it was, in silence. Root, or
  a ``chmod`` of the directory, could still write it: read-only storage is a promise this
  code takes the permission bits for.

Otherwise the file is opened with SQLite's ``mode=ro`` and read as any reader reads it: through
its WAL and the WAL's index ``<file>-shm``, used as SQLite finds them (a ``-shm`` it cannot
write too), so it sees every write committed meanwhile. Where ``-wal`` or ``-shm`` is missing
and the directory can be written, SQLite creates it with the file's permission bits, owned by
this process's user, and leaves it when it closes (a reader does not remove them; the next
writer to close the file last does). Beside a file without write permission (a backup made
read-only, 0444) they get no write permission either: before the file is written again (made
writable), they must be deleted or made writable too, or every write fails ("attempt to write
a readonly database"); the same holds for any SQLite reader, and for files another user's
reader created. Where SQLite cannot create them (read-only storage), it refuses, as it cannot
coordinate with a writer, and so does :func:`connect_read_only`, with an error that says what
to do.

A symbolic link is resolved first: SQLite keeps ``-wal`` and ``-shm`` beside the file the link
points to, so that is where the checks look (beside the link they would miss the WAL).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from pathlib import Path

from langchain_reflective.backends.sqlite._errors import is_read_only_failure
from langchain_reflective.errors import StorageError

__all__ = ["connect_read_only"]

_PROBE = "SELECT count(*) FROM sqlite_master"
"""A first read: SQLite opens the WAL and ``-shm`` only when it reads."""


def _connect(uri: str, timeout: float) -> sqlite3.Connection:
    return sqlite3.connect(
        uri, uri=True, timeout=timeout, check_same_thread=False, isolation_level=None
    )


def connect_read_only(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection that can only read the existing memory file ``path`` (see the module:
    ``immutable`` where nobody can be writing it, creating nothing; ``mode=ro`` otherwise).

    A failure other than SQLite's refusal to share the WAL's index (a damaged file, a busy
    one) is left to the connection's first query, which the caller checks and reports.

    Raises:
        StorageError: SQLite cannot read the file where it is without ``-shm``, and reading
            it without (``immutable``) could miss changes; the message says what to do.
    """
    # SQLite keeps -wal and -shm beside the file a link points to, not beside the link: the
    # checks look where SQLite does (a link's folder is not the file's)
    real = path.resolve()
    uri = real.as_uri()  # (percent-encodes "?", "#" and "%" of the path)
    try:
        refused = _unsafe_unlocked(real)
    except OSError as exc:  # cannot look: read it as any reader does, refused if that fails
        refused = f"cannot check who may write it ({exc})"
    if refused is None:  # read it as it is: mode=ro would create -wal and -shm beside it
        return _connect(f"{uri}?mode=ro&immutable=1", timeout)
    conn = _connect(f"{uri}?mode=ro", timeout)
    try:
        conn.execute(_PROBE).fetchall()
    except sqlite3.Error as exc:
        if not is_read_only_failure(exc):
            return conn
        conn.close()
        raise StorageError(f"cannot read {path}: {refused}") from exc
    return conn


def _unsafe_unlocked(path: Path) -> str | None:
    """Why ``path`` must not be read ``immutable`` (the module's conditions), or ``None``."""
    wal, shm = (path.with_name(path.name + suffix) for suffix in ("-wal", "-shm"))
    folder = path.parent
    if shm.exists():
        return (
            f"SQLite cannot use {shm} (a process may have the file open for writing): retry "
            f"when it is closed, or copy {path} with its -wal to a writable directory and read "
            "the copy"
        )
    with contextlib.suppress(FileNotFoundError):
        if wal.stat().st_size:
            return (
                f"{wal} holds changes that may not be in the file yet, and SQLite cannot read "
                f"them without creating {shm} in {folder}, which this process cannot write: "
                "open the file once where it can be written (that copies the changes into "
                "it), or copy it with its -wal to a writable directory and read the copy"
            )
    if not _nobody_writes(path):
        return (
            f"SQLite cannot create {shm} in {folder}, which this process cannot write, and "
            "others may write the file meanwhile (reading it without could see a half-written "
            f"change): copy {path} to a writable directory and read the copy"
        )
    return None


def _nobody_writes(path: Path) -> bool:
    """Whether nobody can start writing ``path``: a read-only mount, or no write permission
    bit on its directory (a writer must create ``-wal`` and ``-shm`` there). A file without
    write bits in a directory someone may write does not count: its owner can make it
    writable and write it while this connection is open, and an ``immutable`` one would go on
    answering from the file as it was, in silence."""
    statvfs = getattr(os, "statvfs", None)
    if statvfs is not None and statvfs(path.parent).f_flag & os.ST_RDONLY:
        return True
    return stat.S_IMODE(path.parent.stat().st_mode) & 0o222 == 0
