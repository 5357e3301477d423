"""Schema migrations against a real server: a database written by an older schema upgrades in
``setup()`` and then answers exactly as one written by the current schema."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.base import CounterUpdate, RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.schema import MIGRATIONS, SCHEMA_VERSION
from langchain_reflective.errors import (
    DuplicateIdError,
    ReflectionConflictError,
    SchemaVersionError,
    StorageError,
)
from langchain_reflective.records import MemoryRecord
from langchain_reflective.scoring import ScoringConfig
from tests.postgres.conftest import create_database
from tests.postgres.sample_memories import DIM, _fill

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

_TERMS = "lex_terms, lex_tfs, lex_len, ctx_terms, ctx_tfs, ctx_len"
_MEMORY = (
    "seq, id, namespace, text, kind, created_at, importance, importance_source, evidence, "
    "depth, metadata, embedding"
)


def _columns(conn: psycopg.Connection[tuple[object, ...]], table: str) -> set[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = %s", (table,)
    ).fetchall()
    return {str(r[0]) for r in rows}


_V3_COPIED = (
    ("reflective_access", "seq, namespace, last_accessed_at, prev_obs, next_obs"),
    (
        "reflective_counters",
        "namespace, importance_sum, adds, last_reflection_at, last_reflection_seq, lex_docs, "
        "lex_total, ctx_total",
    ),
    ("reflective_meta", "key, value"),
)
"""The tables copied as they are, with their version-3 columns."""


def _version_3_copy(source: str, target: str) -> None:
    """``target`` becomes the database schema version 3 would have written for ``source``'s
    memories: the term columns inside ``reflective_memories`` (copied from ``source``'s
    ``reflective_terms``), the same access rows, counters and metadata."""
    with psycopg.connect(target, autocommit=True) as conn, conn.transaction():
        conn.execute(
            "CREATE TABLE reflective_schema_version (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, ddl in enumerate(MIGRATIONS[:3], start=1):
            conn.execute(ddl)
            conn.execute("INSERT INTO reflective_schema_version (version) VALUES (%s)", (version,))
        conn.execute(f"ALTER TABLE reflective_memories ALTER COLUMN embedding TYPE vector({DIM})")
    with psycopg.connect(source) as src, psycopg.connect(target) as dst, dst.transaction():
        memories = src.execute(
            f"SELECT {', '.join('m.' + c.strip() for c in _MEMORY.split(','))}, "
            f"{', '.join('t.' + c.strip() for c in _TERMS.split(','))} "
            "FROM reflective_memories m JOIN reflective_terms t ON t.seq = m.seq ORDER BY m.seq"
        ).fetchall()
        dst.cursor().executemany(
            f"INSERT INTO reflective_memories ({_MEMORY}, {_TERMS}) OVERRIDING SYSTEM VALUE "
            f"VALUES ({', '.join(['%s'] * 18)})",
            [(*r[:10], psycopg.types.json.Jsonb(r[10]), *r[11:]) for r in memories],
        )
        for table, columns in _V3_COPIED:
            rows = src.execute(f"SELECT {columns} FROM {table}").fetchall()
            if rows:
                dst.cursor().executemany(
                    f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(rows[0]))}) "
                    "ON CONFLICT DO NOTHING",
                    rows,
                )
        dst.execute(
            "SELECT setval(pg_get_serial_sequence('reflective_memories', 'seq'), "
            "(SELECT max(seq) FROM reflective_memories))"
        )
        assert "ctx_terms" in _columns(dst, "reflective_memories")


def _candidates(backend: PostgresBackend, query: str, vector: np.ndarray) -> list[np.ndarray]:
    got = backend.candidates(
        "default", query, vector, k=5, filter=RetrievalFilter(), config=ScoringConfig.hybrid(),
        exact=True,
    )  # fmt: skip
    assert got.lexical is not None and got.previous is not None and got.next is not None
    return [got.keys, got.relevance, got.lexical, np.array([got.lexical_max]), got.previous]


def test_a_version_3_database_moves_its_terms_and_ranks_as_a_new_one(
    postgres_url: str, postgres_server: str
) -> None:
    old_url = create_database(postgres_server)
    with PostgresBackend.from_conn_string(postgres_url) as new:
        new.setup()
        records, vectors = _fill(new, 60, seed=3)
    _version_3_copy(postgres_url, old_url)

    with (
        PostgresBackend.from_conn_string(postgres_url) as new,
        PostgresBackend.from_conn_string(old_url) as old,
    ):
        old.setup()
        old.setup()  # idempotent
        assert old.schema_version() == SCHEMA_VERSION == 8
        with psycopg.connect(old_url) as conn:
            assert not {"lex_terms", "ctx_terms"} & _columns(conn, "reflective_memories")
        with psycopg.connect(old_url) as a, psycopg.connect(postgres_url) as b:
            moved = a.execute("SELECT * FROM reflective_terms ORDER BY seq").fetchall()
            written = b.execute("SELECT * FROM reflective_terms ORDER BY seq").fetchall()
        assert len(moved) == 60 and moved == written
        for i in (0, 7, 31):
            query = records[i].text
            for mine, theirs in zip(
                _candidates(old, query, vectors[i]),
                _candidates(new, query, vectors[i]),
                strict=True,
            ):
                np.testing.assert_array_equal(mine, theirs)
        # and the upgraded database keeps working: writes, lexical hits, deletes
        more, more_vectors = _fill(old, 5, seed=4)
        got = _candidates(old, more[2].text, more_vectors[2])
        assert got[2].max() > 0
        assert old.delete("default", [more[2].id, records[0].id]) == 2
        assert old.count("default") == 63
        with psycopg.connect(old_url) as conn:
            assert conn.execute("SELECT count(*) FROM reflective_terms").fetchone() == (63,)


def _retrieve(backend: PostgresBackend, vector: np.ndarray) -> None:
    backend.candidates(
        "default", "tea", vector, k=3, filter=RetrievalFilter(), config=ScoringConfig.hybrid()
    )


async def _aretrieve(backend: PostgresBackend, vector: np.ndarray) -> None:
    try:
        await backend.acandidates(
            "default", "tea", vector, k=3, filter=RetrievalFilter(), config=ScoringConfig.hybrid()
        )
    finally:
        await backend.aclose()


def test_an_unmigrated_database_says_to_call_setup(postgres_url: str, postgres_server: str) -> None:
    """Code of this version against tables of an older schema (no ``setup()`` yet), and
    against no tables at all: a typed error that says what to do, not a raw psycopg one, and
    (sync and async) names the version it found."""
    old_url = create_database(postgres_server)
    with PostgresBackend.from_conn_string(postgres_url) as new:
        new.setup()
        records, vectors = _fill(new, 5)
    _version_3_copy(postgres_url, old_url)
    empty_url = create_database(postgres_server)
    cases = [
        (old_url, rf"at schema version 3, this package needs {SCHEMA_VERSION} .*setup\(\)"),
        (empty_url, r"has no langchain-reflective tables .*setup\(\)"),
    ]
    for url, message in cases:
        with (
            PostgresBackend.from_conn_string(url) as backend,
            pytest.raises(StorageError, match=message) as raised,
        ):
            _retrieve(backend, vectors[0])
        assert not isinstance(raised.value, SchemaVersionError)
        with pytest.raises(StorageError, match=message):
            asyncio.run(_aretrieve(PostgresBackend.from_conn_string(url), vectors[0]))
    with PostgresBackend.from_conn_string(old_url) as backend:
        backend.setup()
        assert backend.get("default", [records[0].id])[0].text == records[0].text


def test_a_missing_column_at_the_current_or_a_newer_version_is_not_blamed_on_setup(
    postgres_url: str,
) -> None:
    """A table or column missing from a database at this package's schema version is no
    migration problem: the error says so instead of asking for ``setup()`` (which would change
    nothing); from a newer version's database it is a ``SchemaVersionError`` asking for an
    upgrade of the package."""
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        _, vectors = _fill(backend, 3)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE reflective_access DROP COLUMN prev_obs")
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        with pytest.raises(StorageError, match=r"prev_obs.*no migration is missing") as raised:
            _retrieve(backend, vectors[0])
        assert "setup()" not in str(raised.value)
        assert not isinstance(raised.value, SchemaVersionError)
        backend.setup()  # idempotent: it cannot bring the column back
        with pytest.raises(StorageError, match="no migration is missing"):
            _retrieve(backend, vectors[0])
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO reflective_schema_version (version) VALUES (%s)", (SCHEMA_VERSION + 1,)
        )
    newer = rf"schema version {SCHEMA_VERSION + 1}, set up by a newer version.*Upgrade"
    with (
        PostgresBackend.from_conn_string(postgres_url) as backend,
        pytest.raises(SchemaVersionError, match=newer),
    ):
        _retrieve(backend, vectors[0])
    with pytest.raises(SchemaVersionError, match=newer):
        asyncio.run(_aretrieve(PostgresBackend.from_conn_string(postgres_url), vectors[0]))


def _undo_version_7(conn: psycopg.Connection[Any]) -> None:
    """Take a database back to what version 6 set up (the change log of version 7 gone)."""
    conn.execute("DROP TRIGGER reflective_memories_removed ON reflective_memories")
    conn.execute("DROP TRIGGER reflective_access_touched ON reflective_access")
    conn.execute("DROP FUNCTION reflective_log_removals(), reflective_stamp_touch()")
    conn.execute("DROP TABLE reflective_removed, reflective_touches")
    conn.execute("ALTER TABLE reflective_counters DROP COLUMN removals")
    conn.execute("ALTER TABLE reflective_access DROP COLUMN touched")  # (and its index)


def test_a_version_5_database_counts_resets_from_the_upgrade_on(postgres_url: str) -> None:
    """Version 6: ``reflective_counters.reflection_generation``, 0 in every row (resets before
    the upgrade were not counted). Until ``setup()`` the code says to call it; after it, every
    reset counts and a reset conditional on a generation read before another stores nothing."""
    at = datetime(2025, 1, 1, tzinfo=UTC)
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        _, vectors = _fill(backend, 4)
        backend.update_counter(CounterUpdate("default", importance=1.5, adds=3))
        backend.mark_reflected("default", at, consumed=backend.reflection_state("default"))
        backend.update_counter(CounterUpdate("default", importance=0.5, adds=1))
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # what version 5 set up
        fresh = _columns(conn, "reflective_counters")
        conn.execute("ALTER TABLE reflective_counters DROP COLUMN reflection_generation")
        _undo_version_7(conn)
        conn.execute("DELETE FROM reflective_schema_version WHERE version >= 6")
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        with pytest.raises(StorageError, match=r"at schema version 5, .* needs 8 .*setup\(\)"):
            backend.reflection_state("default")
        backend.setup()
        assert backend.schema_version() == SCHEMA_VERSION == 8
        with psycopg.connect(postgres_url) as conn:
            assert _columns(conn, "reflective_counters") == fresh
        seen = backend.reflection_state("default")
        assert (seen.importance_sum, seen.adds_since, seen.generation) == (0.5, 1, 0)
        assert seen.last_reflection_at == at
        insight = MemoryRecord(
            id="insight", text="an insight", kind="reflection", created_at=at, namespace="default"
        )
        backend.put([insight], vectors[:1], counter=CounterUpdate("default", reset_at=at,
                                                                  consumed=seen))  # fmt: skip
        with pytest.raises(ReflectionConflictError):
            backend.mark_reflected("default", at, consumed=seen)
        state = backend.reflection_state("default")
        assert (state.importance_sum, state.adds_since, state.generation) == (0.0, 0, 1)
        assert backend.count("default") == 5


def _undo_version_8(conn: psycopg.Connection[Any]) -> None:
    """Take a database back to what version 7 set up: ids unique in the whole database."""
    for table in ("reflective_memories", "reflective_pending"):
        conn.execute(  # (named unlike Postgres' default: the upgrade finds it by its column)
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_namespace_id_key, "
            f"ADD CONSTRAINT {table}_ids_once UNIQUE (id)"
        )
    conn.execute("DELETE FROM reflective_schema_version WHERE version >= 8")


def test_a_version_7_database_takes_ids_per_namespace(postgres_url: str) -> None:
    """Version 8: an id is unique within its namespace. Before ``setup()`` an id of another
    namespace is still refused (as version 7 did); after it, two namespaces may hold one id,
    stored or queued, and within a namespace it is still unique."""
    from langchain_reflective.backends.base import PendingMemory

    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        records, vectors = _fill(backend, 3, namespace="alice")
        at = records[0].created_at
        backend.enqueue([PendingMemory("q1", "alice", "queued", "observation", at, None, {})])
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        _undo_version_8(conn)
    theirs = dataclasses.replace(records[0], namespace="bob", text="bob's own")
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        with pytest.raises(DuplicateIdError):  # (version 7's rule)
            backend.put([theirs], vectors[:1])
        backend.setup()
        assert backend.schema_version() == SCHEMA_VERSION == 8
        backend.put([theirs], vectors[:1])
        assert backend.get("bob", [theirs.id]) == [theirs]
        assert backend.get("alice", [records[0].id]) == records[:1]
        with pytest.raises(DuplicateIdError):
            backend.put([dataclasses.replace(theirs, text="again")], vectors[:1])
        bob_q = PendingMemory("q1", "bob", "bob's queued", "observation", theirs.created_at,
                              None, {})  # fmt: skip
        backend.enqueue([bob_q])
        assert [(p.id, p.namespace) for p in backend.pending()] == [("q1", "alice"), ("q1", "bob")]
        assert backend.count("alice") == 3 and backend.count("bob") == 1


_TERM_INDEXES = ("reflective_terms_lex", "reflective_terms_ctx")


def _pending_pages(url: str) -> list[int]:
    """Pages of each term index's GIN pending list (what every lexical search reads through)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        found = [
            conn.execute("SELECT pending_pages FROM pgstatginindex(%s)", (ix,)).fetchone()
            for ix in _TERM_INDEXES
        ]
    return [int(row[0]) for row in found if row is not None]


def test_a_burst_of_writes_leaves_lexical_searches_a_short_pending_list(postgres_url: str) -> None:
    """Version 5: the term indexes merge new entries once 256 kB (32 pages) are pending, not
    4 MB, so a search right after many writes does not scan thousands of unsorted entries; a
    database at version 4 gets the limit, and its pending entries merged, in ``setup()``."""
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        for seed in range(6):  # ~130 pages of entries under Postgres' default limit
            _fill(backend, 500, seed=10 + seed)
    assert max(_pending_pages(postgres_url)) <= 32

    # a version-4 database (no limit) with a long pending list, upgraded by setup()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for ix in _TERM_INDEXES:
            conn.execute(f"ALTER INDEX {ix} RESET (gin_pending_list_limit)")
        conn.execute("DELETE FROM reflective_schema_version WHERE version >= 5")
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        _fill(backend, 3000, seed=20)
        assert min(_pending_pages(postgres_url)) > 32  # what a version-4 database holds
        backend.setup()
        assert backend.schema_version() == SCHEMA_VERSION
    with psycopg.connect(postgres_url) as conn:
        options = conn.execute(
            "SELECT c.reloptions FROM pg_class c WHERE c.relname = ANY(%s)",
            (list(_TERM_INDEXES),),
        ).fetchall()
    assert options == [(["gin_pending_list_limit=256"],)] * 2
    assert _pending_pages(postgres_url) == [0, 0]  # merged by the migration
