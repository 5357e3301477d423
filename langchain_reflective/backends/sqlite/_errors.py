"""SQLite and file-system failures as :class:`StorageError` messages that say what to do."""

from __future__ import annotations

import errno
import os
import sqlite3

from langchain_reflective.errors import DuplicateIdError, StorageError

__all__ = ["integrity_error", "is_environment_failure", "is_read_only_failure", "storage_error"]

_SQLITE_PERM, _SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 3, 8, 10, 13, 14


def _cause(exc: BaseException) -> str | None:
    """``full``, ``readonly``, ``cantopen`` or ``ioerr`` when the failure is the disk's or the
    permissions', not the data's; ``None`` otherwise."""
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return "full"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return "readonly"
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        primary = code & 0xFF
        if primary == _SQLITE_FULL:
            return "full"
        if primary in (_SQLITE_READONLY, _SQLITE_PERM):
            return "readonly"
        if primary == _SQLITE_CANTOPEN:
            return "cantopen"
        if primary == _SQLITE_IOERR:
            return "ioerr"
    text = str(exc).lower()  # an error raised without its code (e.g. by a wrapper)
    for needle, cause in (
        ("disk is full", "full"),
        ("readonly", "readonly"),
        ("unable to open", "cantopen"),
        ("disk i/o error", "ioerr"),
    ):
        if needle in text:
            return cause
    return None


_SQLITE_CONSTRAINT_PRIMARYKEY, _SQLITE_CONSTRAINT_UNIQUE = 1555, 2067


def integrity_error(doing: str, exc: sqlite3.IntegrityError) -> StorageError:
    """``doing: exc`` as :class:`DuplicateIdError` when a stored id is the cause (a unique or
    primary key constraint), else as :class:`StorageError`."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code in (_SQLITE_CONSTRAINT_PRIMARYKEY, _SQLITE_CONSTRAINT_UNIQUE) or (
        code is None and "UNIQUE constraint failed" in str(exc)
    ):
        return DuplicateIdError(f"{doing}: an id is already stored: {exc}")
    return StorageError(f"{doing}: {exc}")


def is_environment_failure(exc: sqlite3.Error | OSError) -> bool:
    """Whether ``exc`` comes from the disk or the permissions (not from a damaged file)."""
    return _cause(exc) is not None


def is_read_only_failure(exc: sqlite3.Error | OSError) -> bool:
    """Whether ``exc`` says a file could not be written or created (read-only storage)."""
    return _cause(exc) in ("readonly", "cantopen")


def storage_error(
    doing: str, exc: sqlite3.Error | OSError, path: str | os.PathLike[str] | None
) -> StorageError:
    """``doing: exc``, followed by what to do when the disk is full or the file read-only."""
    where = "the memory store" if path is None else os.fspath(path)
    hints = {
        "full": f"the disk holding {where} is full: free space (or move the file) and retry; "
        "the failed call wrote nothing and what was stored before is intact",
        "readonly": f"{where} cannot be written by this process: a memory file needs write "
        "access to the file and to its directory, and to <file>-wal and <file>-shm next to it "
        "if they exist (a reader of the file while it could not be written may have left them "
        "without write permission: delete them when no process has the file open, or make "
        "them writable)",
        "cantopen": f"{where} or a file next to it cannot be opened: check that its directory "
        "exists and is writable",
        "ioerr": f"writing {where} failed (the disk may be full, over a size limit or failing): "
        "free space or check the disk, then retry; the failed call wrote nothing",
    }
    hint = hints.get(_cause(exc) or "")
    return StorageError(f"{doing}: {exc}" + (f" ({hint})" if hint else ""))
