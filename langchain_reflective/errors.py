"""Typed errors raised by langchain-reflective.

Every error the package raises on purpose derives from :class:`ReflectiveError`, so callers can
catch one base class. Each message says what went wrong and what to do about it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DimensionMismatchError",
    "DuplicateIdError",
    "EmbeddingError",
    "ExportError",
    "ForeignFileError",
    "ImportanceError",
    "InvalidFilterError",
    "InvalidMemoryError",
    "PendingConflictError",
    "ReflectionConflictError",
    "ReflectionError",
    "ReflectiveError",
    "SchemaVersionError",
    "StorageError",
]


class ReflectiveError(Exception):
    """Base class of every error raised by langchain-reflective."""


class InvalidMemoryError(ReflectiveError, ValueError):
    """A memory's text or fields are not acceptable (empty, not a string, too large, ...)."""


class InvalidFilterError(ReflectiveError, ValueError):
    """A retrieval filter has an unknown key or a value of the wrong type."""


class EmbeddingError(ReflectiveError, ValueError):
    """The embeddings object returned something unusable (NaN/inf, wrong count or shape)."""


class DimensionMismatchError(EmbeddingError):
    """Vectors do not have the dimension the memory file was created with."""


class StorageError(ReflectiveError):
    """The durable store could not be read or written."""


class DuplicateIdError(StorageError):
    """A memory with one of the call's ids is already stored in its namespace (earlier, or by
    another process or ``MemoryStream`` at the same moment); nothing of the call was stored."""


class PendingConflictError(StorageError):
    """A pending memory to complete is no longer queued (another process completed it)."""


class ReflectionConflictError(StorageError):
    """A reflection's counter reset lost a race: another reflection of the namespace reset the
    counter after this one read it (``ReflectionState.generation`` moved on); nothing was
    written. The reflection graph reports it as ``skipped="superseded"``."""


class ForeignFileError(StorageError):
    """The file is not a langchain-reflective memory file (or is truncated/corrupt)."""


class SchemaVersionError(StorageError):
    """The file was written by a newer, incompatible version of langchain-reflective."""


class ExportError(StorageError, OSError):
    """An export file could not be written (a full disk, a folder this process cannot write,
    a missing folder, ...). The message names the file and says what to do; no partial file
    is left, and an earlier file at that path is unchanged.

    It is an ``OSError`` too, so code that catches ``OSError`` around an export keeps
    working: ``errno`` and ``strerror`` are the failed call's (e.g. ``errno.ENOSPC``) and
    ``filename`` is the export's path. It is not one of ``OSError``'s subclasses (e.g. a
    ``PermissionError``): compare ``errno`` instead.
    """

    def __init__(
        self,
        message: str,
        *,
        errno: int | None = None,
        strerror: str | None = None,
        filename: str | None = None,
    ) -> None:
        super().__init__(message)
        self.errno = errno
        self.strerror = strerror
        self.filename = filename

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # not OSError's "[Errno n] ..." form

    def __reduce__(self) -> tuple[Any, ...]:  # a copy keeps errno, strerror and filename
        state = {"errno": self.errno, "strerror": self.strerror, "filename": self.filename}
        return type(self), self.args, state


class ImportanceError(ReflectiveError):
    """Importance could not be rated by the model (raised only in strict mode)."""


class ReflectionError(ReflectiveError):
    """A reflection failed; nothing was written."""
