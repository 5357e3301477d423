"""What a database's vectors are, as one ``PostgresBackend`` learns it from the server, once.

The schema version the tables were set up with (a version newer than this package is refused
before any read or write: its tables may no longer mean what this version expects), the
embedding model and dimension the database is bound to (``reflective_meta``; bound by the
first add, under the setup lock, :func:`schema.bind_meta`), and the oid of pgvector's
``vector`` type, which the binary ``COPY`` of the writes needs. Each is read at its first use
and kept: none of them changes while the database is in use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from langchain_reflective._llm import run_sync
from langchain_reflective.backends.postgres.connection import Pools
from langchain_reflective.backends.postgres.failures import read_version
from langchain_reflective.backends.postgres.schema import (
    SCHEMA_VERSION,
    bind_meta,
    newer_schema_error,
)
from langchain_reflective.errors import DimensionMismatchError, EmbeddingError

__all__ = ["VectorIdentity"]


class VectorIdentity:
    """The schema version, embedding model, dimension and ``vector`` oid of one database.

    Args:
        pools: the backend's connections.
        bind_index: called with the connection when the first add binds the dimension (in
            that transaction): the vector index records its kind or builds itself
            (``VectorIndex.bind``).
    """

    def __init__(self, pools: Pools, bind_index: Callable[[psycopg.Connection[Any]], None]) -> None:
        self._pools = pools
        self._bind_index = bind_index
        self.dimension: int | None = None
        self.model: str | None = None
        self._vector_type: int | None = None
        self._version_checked = False

    def schema_version(self) -> int:
        """The database's schema version (0 before ``setup()``)."""
        return self._pools.retrying(lambda conn: run_sync(read_version(conn)))

    def check_version(self) -> None:
        """Refuse, once, a database set up by a newer version of this package."""
        if self._version_checked:
            return
        version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise newer_schema_error(version)
        self._version_checked = True

    def load(self) -> None:
        """Read the bound model and dimension, if any (once: until one is bound, every call
        reads them again)."""
        if self.dimension is not None:
            return
        self.check_version()
        rows: dict[str, str] = dict(self._pools.rows("SELECT key, value FROM reflective_meta"))
        if "dimension" in rows:
            self.dimension = int(rows["dimension"])
            self.model = rows.get("embedding_model")

    def bind(self, model: str, dimension: int) -> None:
        """Bind the database to ``model`` and ``dimension`` if it is bound to nothing yet;
        else check they are the ones it holds.

        Raises:
            DimensionMismatchError: the database holds vectors of another dimension.
            EmbeddingError: the database was written with another embedding model.
        """
        if self.dimension is None:
            self.load()
        if self.dimension is None:
            with self._pools.conn() as conn, conn.transaction():
                rows = bind_meta(conn, model, dimension, self._bind_index)
            self.dimension = int(rows["dimension"])
            self.model = rows.get("embedding_model")
        if dimension != self.dimension:
            raise DimensionMismatchError(
                f"the database holds {self.dimension}-dimensional vectors; got {dimension}. "
                "Use the embedding model the database was written with."
            )
        if self.model is not None and model != self.model:
            raise EmbeddingError(
                f"the database was written with embedding model {self.model!r}, not "
                f"{model!r}; vectors from different models are not comparable"
            )

    def vector_oid(self, conn: psycopg.Connection[Any]) -> int:
        """The oid of pgvector's ``vector`` type in this database (read once, on ``conn``)."""
        if self._vector_type is None:
            row = conn.execute("SELECT 'vector'::regtype::oid").fetchone()
            assert row is not None
            self._vector_type = int(row[0])
        return self._vector_type
