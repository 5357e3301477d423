"""Connections of the Postgres backend: per-connection settings and typed errors."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from langchain_reflective.errors import InvalidMemoryError, StorageError

__all__ = ["aconfigure_connection", "configure_connection", "storage_error"]


def storage_error(exc: BaseException) -> Exception:
    """The package's typed error for a database error."""
    if isinstance(exc, UnicodeEncodeError):
        return InvalidMemoryError(f"text cannot be encoded as UTF-8: {exc}")
    if isinstance(exc, pg_errors.IntegrityError):
        return StorageError(f"could not store memories (duplicate id?): {exc}")
    if isinstance(exc, pg_errors.UndefinedTable):
        return StorageError(
            f"the database has no langchain-reflective tables ({exc}); call "
            "PostgresBackend.setup() once (it is idempotent)"
        )
    if isinstance(exc, psycopg.OperationalError):
        return StorageError(f"the Postgres server could not be reached: {exc}")
    return StorageError(f"the Postgres backend failed: {exc}")


def configure_connection(conn: psycopg.Connection[Any]) -> None:
    """Per-connection settings: UTC timestamps and HNSW search breadth."""
    conn.execute("SET TIME ZONE 'UTC'")
    # pgvector >= 0.8: keep scanning the HNSW graph until the namespace filter is satisfied
    with contextlib.suppress(psycopg.Error):
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
    conn.execute("SET hnsw.ef_search = 200")


async def aconfigure_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute("SET TIME ZONE 'UTC'")
    with contextlib.suppress(psycopg.Error):
        await conn.execute("SET hnsw.iterative_scan = relaxed_order")
    await conn.execute("SET hnsw.ef_search = 200")
