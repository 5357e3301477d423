"""Typed errors raised by langchain-reflective.

Every error the package raises on purpose derives from :class:`ReflectiveError`, so callers can
catch one base class. Each message says what went wrong and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "DimensionMismatchError",
    "EmbeddingError",
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


class ImportanceError(ReflectiveError):
    """Importance could not be rated by the model (raised only in strict mode)."""


class ReflectionError(ReflectiveError):
    """A reflection failed; nothing was written."""
