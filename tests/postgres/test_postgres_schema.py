"""PostgresBackend's schema against a real server: a concurrent, idempotent, versioned
``setup()``, a role without CREATE, newer and foreign version tables, the stored embedding
identity, a database never set up."""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest

from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.schema import SCHEMA_VERSION
from langchain_reflective.errors import (
    DimensionMismatchError,
    EmbeddingError,
    SchemaVersionError,
    StorageError,
)
from langchain_reflective.stream import MemoryStream
from tests.fakes import WordEmbeddings
from tests.postgres.conftest import read_write_role

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def test_setup_is_idempotent_concurrent_and_versioned(postgres_url: str) -> None:
    backends = [PostgresBackend.from_conn_string(postgres_url, max_size=2) for _ in range(4)]
    try:
        errors: list[BaseException] = []

        def run(b: PostgresBackend) -> None:
            try:
                b.setup()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(b,)) for b in backends]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        backends[0].setup()
        assert backends[0].schema_version() == SCHEMA_VERSION
        with psycopg.connect(postgres_url) as conn:
            rows = conn.execute("SELECT version FROM reflective_schema_version").fetchall()
        assert rows == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    finally:
        for b in backends:
            b.close()


def test_a_role_that_may_only_read_and_write_can_call_setup_and_use_the_memory(
    postgres_url: str,
) -> None:
    """An administrator set the tables up; the application's role has no CREATE privilege:
    its setup() at start-up failed ("permission denied for schema public") on the
    CREATE TABLE IF NOT EXISTS of an up-to-date database."""
    role = f"app_{time.monotonic_ns()}"
    with PostgresBackend.from_conn_string(postgres_url) as admin:
        admin.setup()
        with MemoryStream(WordEmbeddings(8), backend=admin) as stream:
            stream.add("set up by the administrator", importances=0.5)  # (binds the dimension)
    app_url = read_write_role(postgres_url, role, revoke_create=True)
    with PostgresBackend.from_conn_string(app_url) as app:
        app.setup()  # (nothing to do: no DDL)
        with MemoryStream(WordEmbeddings(8), backend=app) as stream:
            stream.add("written by the application", importances=0.5)
            assert [h.record.text for h in stream.retrieve("application", k=1)] == [
                "written by the application"
            ]
    with psycopg.connect(postgres_url, autocommit=True) as conn, contextlib.suppress(psycopg.Error):
        conn.execute(f"REASSIGN OWNED BY {role} TO CURRENT_USER")
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


def test_a_newer_schema_is_refused(backend: PostgresBackend, postgres_url: str) -> None:
    """By setup() and, without it, by the first use: a stream over the database (whose add
    stored rows silently before); the reflective command: test_postgres_cli.py."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO reflective_schema_version (version) VALUES (%s)", (99,))
    with pytest.raises(SchemaVersionError, match="99"):
        backend.setup()
    with PostgresBackend.from_conn_string(postgres_url) as fresh:
        with pytest.raises(SchemaVersionError, match="99"):
            MemoryStream(WordEmbeddings(8), backend=fresh)
        assert fresh.count("default") == 0


def test_a_foreign_version_table_is_a_typed_error(postgres_url: str) -> None:
    """Tables named like ours but holding something else: a StorageError saying so, not a raw
    ValueError from reading the version."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE reflective_schema_version (version text PRIMARY KEY)")
        conn.execute("INSERT INTO reflective_schema_version VALUES ('v2.1')")
    with PostgresBackend.from_conn_string(postgres_url) as foreign:
        for call in (foreign.setup, foreign.schema_version):
            with pytest.raises(StorageError, match="another application"):
                call()


def test_embedding_identity_is_stored_and_checked(postgres_url: str) -> None:
    with PostgresBackend.from_conn_string(postgres_url) as first:
        first.setup()
        assert first.dimension is None
        first.bind_embeddings("model-a", 8)
    with PostgresBackend.from_conn_string(postgres_url) as again:
        assert (again.dimension, again.embedding_model) == (8, "model-a")
        again.bind_embeddings("model-a", 8)
        with pytest.raises(DimensionMismatchError):
            again.bind_embeddings("model-a", 9)
        with pytest.raises(EmbeddingError, match="model-a"):
            again.bind_embeddings("model-b", 8)


def test_a_database_without_setup_is_a_clear_error(postgres_url: str) -> None:
    from langchain_reflective import MemoryStream
    from tests.fakes import WordEmbeddings

    with (
        PostgresBackend.from_conn_string(postgres_url) as backend,
        pytest.raises(StorageError, match=r"setup\(\)"),
    ):
        MemoryStream(WordEmbeddings(), backend=backend)
