"""What a failed Postgres statement means: psycopg's errors as the package's typed errors (a
missing table explained by the database's schema version, which is read here too)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors

from langchain_reflective._llm import Flow, Op
from langchain_reflective.backends.sqlite.lexical import MAX_TERM_CHARS
from langchain_reflective.errors import DuplicateIdError, InvalidMemoryError, StorageError
from langchain_reflective.records import MAX_IDENTIFIER_BYTES

__all__ = [
    "MISSING",
    "ConnectionLostError",
    "TransactionStillOpenError",
    "WriteOutcomeUnknownError",
    "call",
    "read_version",
    "storage_error",
    "typed_error",
    "version_after",
    "version_of",
]


MISSING = (pg_errors.UndefinedTable, pg_errors.UndefinedColumn)
"""The errors of a statement that names a table or column the database does not have."""


def storage_error(exc: BaseException, version: int | None = None) -> Exception:
    """The package's typed error for a database error.

    Args:
        exc: the error.
        version: for a missing table or column, the database's schema version, read after the
            failure (``None``: unknown); it decides what the error tells the user to do.
    """
    if isinstance(exc, UnicodeEncodeError):
        return InvalidMemoryError(f"text cannot be encoded as UTF-8: {exc}")
    if isinstance(exc, pg_errors.UniqueViolation):
        return DuplicateIdError(
            f"could not store memories: an id is already stored (or queued): {exc}"
        )
    if isinstance(exc, pg_errors.IntegrityError):
        return StorageError(f"could not store memories: {exc}")
    if isinstance(exc, MISSING):
        return _missing_error(exc, version)
    if isinstance(exc, pg_errors.QueryCanceled | pg_errors.LockNotAvailable):
        return StorageError(
            f"Postgres cancelled the statement ({exc.diag.message_primary or exc}); its "
            "transaction was rolled back, so nothing of this call is stored and it can be "
            "retried. A statement_timeout or lock_timeout set for this role, database or "
            "connection (e.g. options=-c statement_timeout=... in the URL) is the usual cause: "
            "another session held a lock this call needed for that long, or the call needs "
            "a longer timeout."
        )
    if isinstance(exc, psycopg.OperationalError) and not _connection_failure(exc):
        return _refused(exc)
    if isinstance(exc, psycopg.OperationalError):
        return StorageError(f"the connection to Postgres failed: {exc}")
    return StorageError(f"the Postgres backend failed: {exc}")


def _connection_failure(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` is about the connection: libpq's own errors (no SQLSTATE), SQLSTATE
    class 08 (connection exception) and 57P (the server shut down, is starting, ended the
    session). psycopg makes every error of classes 40, 53, 54, 55, 57 and 58 an
    ``OperationalError`` too, though the connection is fine after most of them."""
    code = exc.sqlstate
    return code is None or code.startswith(("08", "57P"))


def _refused(exc: psycopg.OperationalError) -> StorageError:
    """The error for a statement the server refused over a limit, a resource or a conflict
    (the connection is fine)."""
    detail = exc.diag.message_primary or str(exc)
    rolled_back = "its transaction was rolled back, so nothing of this call is stored"
    code = exc.sqlstate or ""
    if code.startswith("54"):  # program_limit_exceeded: index row size, statement size, ...
        return StorageError(
            f"Postgres refused the statement over one of its limits ({detail}; SQLSTATE "
            f"{code}): not a connection failure. Its transaction was rolled back, so nothing "
            "of this call is stored, and the same call fails the same way again: make what it "
            "writes smaller. (An index entry holds at most ~2.7 KB; langchain-reflective "
            f"refuses ids, namespaces and kinds over {MAX_IDENTIFIER_BYTES:,} bytes and cuts "
            f"lexical terms at {MAX_TERM_CHARS} characters, so an index size error is a value "
            "that bypassed those checks, or a bug: please report it with this message.)"
        )
    if code.startswith("53"):  # insufficient_resources: disk full, out of memory, ...
        return StorageError(
            f"Postgres lacks a resource to run the statement ({detail}; SQLSTATE {code}, not "
            f"a connection failure); {rolled_back}. Free it (disk space, memory, "
            "max_connections) and retry."
        )
    if code.startswith("40"):  # transaction_rollback: serialization failure, deadlock
        return StorageError(
            f"Postgres rolled the transaction back to resolve a conflict with another session "
            f"({detail}; SQLSTATE {code}); nothing of this call is stored, and it can be retried."
        )
    return StorageError(
        f"the Postgres backend failed (SQLSTATE {code}, not a connection failure): {exc}"
    )


class ConnectionLostError(StorageError):
    """The server dropped the connection a statement ran on (a restart, a failover): a
    :class:`StorageError` that :meth:`Pools.retrying` runs again once, and after which
    :meth:`Pools.writing` finds out whether its write committed."""


class WriteOutcomeUnknownError(ConnectionLostError):
    """A write's connection was lost, and so was every connection that asked afterwards
    whether it committed: it may be stored. Look its memories up by id before writing them
    again (the message, or a note, names them)."""


class TransactionStillOpenError(StorageError):
    """An outcome check (``Pools.writing``) waited in vain for the transaction of a lost
    connection to end (the server has not noticed the connection is gone, or its commit is still
    running): whether it commits is unknown. ``Pools.writing`` raises
    :class:`WriteOutcomeUnknownError` for it."""


def typed_error(exc: BaseException, lost: bool) -> Exception:
    """:func:`storage_error`, as a :class:`ConnectionLostError` when the connection was lost."""
    error = storage_error(exc)
    if lost and type(error) is StorageError:
        return ConnectionLostError(str(error))
    return error


def _missing_error(exc: psycopg.Error, version: int | None) -> StorageError:
    """What a missing table or column means at the database's schema ``version``."""
    from langchain_reflective.backends.postgres.schema import SCHEMA_VERSION, newer_schema_error

    detail = exc.diag.message_primary or str(exc)  # (without the statement's excerpt)
    setup = "call PostgresBackend.setup(), which creates or upgrades them (idempotent)"
    if version is None:  # the version could not be read
        return StorageError(
            f"the database's langchain-reflective tables are missing or not at this package's "
            f"schema version ({detail}); {setup}. If another process set the database up with "
            "a newer version of langchain-reflective, upgrade this one."
        )
    if version == 0:
        return StorageError(f"the database has no langchain-reflective tables ({detail}); {setup}.")
    if version < SCHEMA_VERSION:
        return StorageError(
            f"the database's langchain-reflective tables are at schema version {version}, "
            f"this package needs {SCHEMA_VERSION} ({detail}); {setup}."
        )
    if version > SCHEMA_VERSION:
        return newer_schema_error(version, detail)
    return StorageError(
        f"the Postgres backend failed: {detail}. The database is at this package's schema "
        f"version ({version}), so no migration is missing: a table or column was dropped by "
        "hand, or this is a bug in langchain-reflective (please report it with this message)."
    )


def call(target: Any, name: str, *args: Any) -> Op[Any]:
    """``target.name(*args)`` as a flow's op. psycopg's async connections, cursors and pools
    have the sync ones' method names, so one bound method serves :func:`run_sync` and
    :func:`run_async` (which awaits it)."""
    method = getattr(target, name)
    return Op(method, method, args)


def read_version(conn: Any) -> Flow[int]:
    """The database's schema version (0 before ``setup()``), read on ``conn``."""
    cur = yield call(conn, "execute", "SELECT to_regclass('reflective_schema_version') IS NOT NULL")
    found = yield call(cur, "fetchone")
    if not found or not found[0]:
        return 0
    cur = yield call(conn, "execute", "SELECT max(version) FROM reflective_schema_version")
    row = yield call(cur, "fetchone")
    return version_of(row)


def version_of(row: Any) -> int:
    """The schema version in ``row`` (``max(version)``; 0 when empty).

    Raises:
        StorageError: it is not an integer: the table belongs to another application.
    """
    value = row[0] if row else None
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise StorageError(
        f"the table reflective_schema_version holds {value!r}, not a langchain-reflective "
        "schema version: the database's reflective_* tables belong to another application. "
        "Use another database (or schema) for langchain-reflective."
    )


def version_after(conn: Any) -> Flow[int | None]:
    """:func:`read_version` after a failure (``None`` if it cannot be read)."""
    try:
        return (yield from read_version(conn))
    except psycopg.Error:
        return None
