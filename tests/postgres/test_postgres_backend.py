"""PostgresBackend against a real server: schema, candidates, isolation, counters, locks."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.base import CounterUpdate, PendingMemory, RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.failures import ConnectionLostError
from langchain_reflective.backends.postgres.schema import SCHEMA_VERSION
from langchain_reflective.errors import (
    DimensionMismatchError,
    DuplicateIdError,
    EmbeddingError,
    PendingConflictError,
    SchemaVersionError,
    StorageError,
)
from langchain_reflective.records import MemoryRecord, new_memory_id
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k
from langchain_reflective.stream import MemoryStream
from tests.fakes import WordEmbeddings
from tests.postgres.conftest import read_write_role

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

T0 = datetime(2025, 1, 1, tzinfo=UTC)
DIM = 16
WORDS = [
    "tea",
    "paris",
    "dog",
    "running",
    "garden",
    "music",
    "river",
    "coffee",
    "train",
    "winter",
    "book",
    "mountain",
]


@pytest.fixture
def backend(postgres_url: str) -> Iterator[PostgresBackend]:
    b = PostgresBackend.from_conn_string(postgres_url, max_size=4)
    b.setup()
    b.bind_embeddings("test-model", DIM)
    yield b
    b.close()


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _records(n: int, namespace: str = "default", seed: int = 0) -> list[MemoryRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = rng.choice(WORDS, size=3, replace=False)
        out.append(
            MemoryRecord(
                id=new_memory_id(),
                text=f"memory {i} about {' and '.join(words)}",
                kind="observation" if i % 5 else "reflection",
                created_at=T0 + timedelta(minutes=i),
                importance=float(rng.integers(1, 11)) / 10,
                namespace=namespace,
                metadata={"i": i},
            )
        )
    return out


def _fill(
    backend: PostgresBackend, n: int, namespace: str = "default", seed: int = 0
) -> tuple[list[MemoryRecord], np.ndarray]:
    records = _records(n, namespace, seed)
    vectors = _unit(np.random.default_rng(seed + 1), n)
    backend.put(records, vectors)
    return records, vectors


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


def test_records_round_trip_exactly(backend: PostgresBackend) -> None:
    records, vectors = _fill(backend, 30)
    got = backend.get("default", [r.id for r in reversed(records)])
    assert got == list(reversed(records))
    batches = list(backend.iter_records("default", batch_size=7))
    assert [r for b in batches for r in b.records] == records
    stacked = np.concatenate([b.vectors for b in batches if b.vectors is not None])
    assert stacked.dtype == np.float32 and np.array_equal(stacked, vectors)


def test_exact_candidates_carry_every_component(backend: PostgresBackend) -> None:
    records, vectors = _fill(backend, 60)
    _fill(backend, 20, namespace="other", seed=5)
    backend.configure(ScoringConfig.hybrid(context=False))
    query = _unit(np.random.default_rng(9), 1)[0]
    c = backend.candidates(
        "default", "Paris dogs", query, k=5, filter=RetrievalFilter(),
        config=ScoringConfig.hybrid(), exact=True,
    )  # fmt: skip
    assert c.exact and c.size == 60 and c.keys.shape == (60,)
    assert list(c.keys) == sorted(c.keys)
    by_key = dict(zip(c.keys.tolist(), range(60), strict=True))
    # keys increase with insertion order: the i-th key is the i-th record
    assert np.allclose(c.relevance, vectors @ query, atol=1e-5)
    assert np.allclose(c.importance, [r.importance for r in records])
    assert np.allclose(c.created, [r.created_at.timestamp() for r in records])
    # lexical: positive exactly where a stemmed query term ("paris", "dog") occurs
    assert c.lexical is not None
    matches = np.array([("paris" in r.text) or ("dog" in r.text) for r in records])
    assert np.array_equal(c.lexical > 0, matches)
    assert c.lexical_max == pytest.approx(float(c.lexical.max()))
    # neighbours: the previous/next observation in insertion order; none for reflections
    assert c.previous is not None and c.next is not None
    obs = [i for i, r in enumerate(records) if r.kind == "observation"]
    for j, i in enumerate(obs):
        row = by_key[int(c.keys[i])]
        assert c.previous[row] == (obs[j - 1] if j else -1)
        assert c.next[row] == (obs[j + 1] if j + 1 < len(obs) else -1)
    refl = [i for i, r in enumerate(records) if r.kind == "reflection"]
    assert all(c.previous[i] == -1 and c.next[i] == -1 for i in refl)


def test_candidates_are_one_statement(
    backend: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(backend, 40)
    calls: list[str] = []
    real = psycopg.Connection.execute

    def counting(self: psycopg.Connection, query: object, *a: object, **kw: object) -> object:
        calls.append(str(query)[:40])
        return real(self, query, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    for exact in (True, False):
        calls.clear()
        backend.candidates(
            "default", "tea", _unit(np.random.default_rng(1), 1)[0], k=4,
            filter=RetrievalFilter(kinds=frozenset({"observation"})),
            config=ScoringConfig.hybrid(), exact=exact,
        )  # fmt: skip
        assert len(calls) == 1, calls


def test_approximate_candidates_hold_the_exact_top_10(backend: PostgresBackend) -> None:
    """HNSW + lexical + recent + important candidates hold the exact top 10, with the same
    scores (the hybrid score of a memory does not depend on the other candidates)."""
    _fill(backend, 3000)
    rng = np.random.default_rng(3)
    config = ScoringConfig.hybrid()
    now = (T0 + timedelta(days=3)).timestamp()
    agree = 0
    for q in range(10):
        query = f"{WORDS[q]} {WORDS[q + 1]}"
        vec = _unit(rng, 1)[0]
        kw = {"k": 10, "filter": RetrievalFilter(), "config": config}
        exact = backend.candidates("default", query, vec, exact=True, **kw)  # type: ignore[arg-type]
        approx = backend.candidates("default", query, vec, exact=False, **kw)  # type: ignore[arg-type]
        assert not approx.exact and approx.size < exact.size
        e_comps, _ = score_candidates(config, exact, now)
        a_comps, _ = score_candidates(config, approx, now)
        e_top = exact.keys[top_k(e_comps.score, 10)]
        a_top = approx.keys[top_k(a_comps.score, 10)]
        agree += len(set(e_top.tolist()) & set(a_top.tolist()))
        common = np.intersect1d(e_top, a_top)
        e_score = dict(zip(exact.keys.tolist(), e_comps.score.tolist(), strict=False))
        a_score = dict(zip(approx.keys.tolist(), a_comps.score.tolist(), strict=False))
        assert all(abs(e_score[k] - a_score[k]) < 1e-9 for k in common.tolist())
    assert agree >= 98  # of 100


@pytest.mark.parametrize("exact", [True, False])
def test_filters_restrict_candidates_not_neighbours(backend: PostgresBackend, exact: bool) -> None:
    records, vectors = _fill(backend, 50)
    flt = RetrievalFilter(
        kinds=frozenset({"observation"}),
        created_after=T0 + timedelta(minutes=10),
        created_before=T0 + timedelta(minutes=40),
        min_relevance=-0.2,
    )
    vec = vectors[21]
    c = backend.candidates(
        "default", "tea", vec, k=3, filter=flt, config=ScoringConfig.hybrid(), exact=exact
    )
    expected = {
        i
        for i, r in enumerate(records)
        if r.kind == "observation"
        and T0 + timedelta(minutes=10) <= r.created_at < T0 + timedelta(minutes=40)
        and float(vectors[i] @ vec) >= -0.2
    }
    found = backend.fetch("default", c.keys[: c.size].tolist())
    got = {records.index(found[int(k)]) for k in c.keys[: c.size]}
    assert got <= expected and (got == expected if exact else 21 in got)
    # neighbour rows (outside the filter) are there only to lift their neighbours
    assert c.previous is not None
    outside = c.keys[c.size :].tolist()
    assert all(records.index(backend.fetch("default", [k])[k]) not in expected for k in outside)


def test_namespaces_never_see_each_other(backend: PostgresBackend) -> None:
    mine, vecs = _fill(backend, 10, namespace="alice")
    theirs, _ = _fill(backend, 10, namespace="bob", seed=7)
    vec = vecs[0]
    for exact in (True, False):
        c = backend.candidates(
            "bob", mine[0].text, vec, k=5, filter=RetrievalFilter(),
            config=ScoringConfig.hybrid(), exact=exact,
        )  # fmt: skip
        got = backend.fetch("bob", c.keys.tolist())
        assert {r.namespace for r in got.values()} == {"bob"}
    alice_keys = backend.candidates(
        "alice", "x", vec, k=5, filter=RetrievalFilter(), config=ScoringConfig.paper(), exact=True
    ).keys.tolist()
    assert backend.fetch("bob", alice_keys) == {}
    assert backend.touch("bob", alice_keys, T0) == {}
    assert backend.get("bob", [r.id for r in mine]) == []
    assert backend.delete("bob", [r.id for r in mine]) == 0
    assert backend.count("alice") == 10 and backend.namespaces() == ["alice", "bob"]
    assert backend.purge("bob") == 10
    assert backend.count("alice") == 10 and backend.count() == 10
    assert theirs[0].id not in {r.id for r in backend.recent("alice")}


def test_touch_is_one_update_returning_the_records(backend: PostgresBackend) -> None:
    records, _ = _fill(backend, 5)
    keys = backend.candidates(
        "default", "x", _unit(np.random.default_rng(2), 1)[0], k=5, filter=RetrievalFilter(),
        config=ScoringConfig.paper(), exact=True,
    ).keys.tolist()  # fmt: skip
    when = T0 + timedelta(days=2)
    touched = backend.touch("default", keys[:2], when)
    assert sorted(touched) == sorted(keys[:2])
    assert all(r.last_accessed_at == when for r in touched.values())
    again = backend.fetch("default", keys)
    assert [again[k].last_accessed_at == when for k in keys] == [True, True, False, False, False]
    assert again[keys[2]] == records[2]


def test_touch_skips_the_wal_flush_for_its_own_transaction_only(
    backend: PostgresBackend, postgres_url: str
) -> None:
    """The touch statement turns ``synchronous_commit`` off for the transaction it runs in and
    never for the connection: memory writes later on the same pooled connection still wait
    for their flush (docs/architecture.md)."""
    from langchain_reflective.backends.postgres.queries import TOUCH

    _fill(backend, 3)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        args = {"when": T0, "ns": "default", "keys": [1, 2]}
        assert len(conn.execute(TOUCH, args).fetchall()) == 2  # its own transaction
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        with conn.transaction():
            conn.execute(TOUCH, args)
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    assert all(r.last_accessed_at == T0 for r in backend.fetch("default", [1, 2]).values())


def test_deleted_keys_are_never_reused(backend: PostgresBackend) -> None:
    records, _ = _fill(backend, 3)
    before = backend.candidates(
        "default", "x", _unit(np.random.default_rng(2), 1)[0], k=3, filter=RetrievalFilter(),
        config=ScoringConfig.paper(), exact=True,
    ).keys  # fmt: skip
    assert backend.delete("default", [records[-1].id]) == 1
    _fill(backend, 1, seed=4)
    after = backend.candidates(
        "default", "x", _unit(np.random.default_rng(2), 1)[0], k=3, filter=RetrievalFilter(),
        config=ScoringConfig.paper(), exact=True,
    ).keys  # fmt: skip
    assert after[-1] > before[-1]


def test_counter_is_exact_under_concurrent_writers(backend: PostgresBackend) -> None:
    rng = np.random.default_rng(0)

    def writer(w: int) -> None:
        for i in range(20):
            rec = MemoryRecord(id=new_memory_id(), text=f"w{w} m{i}", importance=0.25)
            backend.put([rec], _unit(rng, 1), counter=CounterUpdate("default", 0.25, 1))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    state = backend.reflection_state("default")
    assert (state.adds_since, state.importance_sum) == (120, 30.0)
    assert backend.count("default") == 120
    # a reset written with memories leaves them out of the new count
    late = MemoryRecord(id=new_memory_id(), text="the reflection", kind="reflection")
    backend.put([late], _unit(rng, 1), counter=CounterUpdate("default", reset_at=T0))
    state = backend.reflection_state("default")
    assert (state.adds_since, state.importance_sum, state.last_reflection_at) == (0, 0.0, T0)
    assert backend.recent("default", since_last_reflection=True) == []
    newer = MemoryRecord(id=new_memory_id(), text="after it")
    backend.put([newer], _unit(rng, 1), counter=CounterUpdate("default", 0.5, 1))
    assert backend.recent("default", since_last_reflection=True) == [newer]
    assert backend.reflection_state("other") == type(state)(generation=0)


def test_reflection_lock_excludes_other_connections(postgres_url: str) -> None:
    with (
        PostgresBackend.from_conn_string(postgres_url) as one,
        PostgresBackend.from_conn_string(postgres_url) as two,
    ):
        one.setup()
        with one.reflection_lock("alice"):
            with pytest.raises(TimeoutError), two.reflection_lock("alice", timeout=0):
                pass  # pragma: no cover
            with pytest.raises(TimeoutError), two.reflection_lock("alice", timeout=0.2):
                pass  # pragma: no cover
            with two.reflection_lock("bob", timeout=0):
                pass  # another namespace is not blocked
        with two.reflection_lock("alice", timeout=0):
            pass  # released on exit
        with pytest.raises(RuntimeError), one.reflection_lock("alice"):
            raise RuntimeError("the reflection failed")
        with two.reflection_lock("alice", timeout=0):
            pass  # released on errors too


@pytest.mark.parametrize("step", ["take", "release"])
def test_a_lock_interrupted_while_taken_or_released_is_not_left_held(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Ctrl-C (or a cancellation) while the lock was taken or released returned its
    connection to the pool still holding the lock: no other process could reflect on the
    namespace until that pooled session ended."""
    from langchain_reflective.backends.postgres import connection

    with PostgresBackend.from_conn_string(postgres_url, min_size=2, max_size=2) as backend:
        backend.setup()
        if step == "release":

            def interrupted(conn: Any, key: Any) -> None:
                raise KeyboardInterrupt

            monkeypatch.setattr(connection, "_unlock", interrupted)
            with pytest.raises(KeyboardInterrupt), backend.reflection_lock("alice"):
                pass
        else:
            real = psycopg.Connection.execute

            def interrupted_after(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                cursor = real(self, query, *args, **kwargs)
                if "pg_advisory_lock(" in str(query):  # taken on the server, then interrupted
                    raise KeyboardInterrupt
                return cursor

            monkeypatch.setattr(psycopg.Connection, "execute", interrupted_after)
            with pytest.raises(KeyboardInterrupt), backend.reflection_lock("alice", timeout=5):
                pass  # pragma: no cover
        monkeypatch.undo()
        with psycopg.connect(postgres_url, autocommit=True) as other:  # another session
            row = other.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (0x52464C54, "alice")
            ).fetchone()
            assert row == (True,)
        assert backend.count() == 0  # the pool goes on with a new connection


def test_a_dead_holder_releases_the_lock(postgres_url: str) -> None:
    holder = psycopg.connect(postgres_url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (0x52464C54, "alice"))
    with PostgresBackend.from_conn_string(postgres_url) as b:
        with pytest.raises(TimeoutError), b.reflection_lock("alice", timeout=0):
            pass  # pragma: no cover
        holder.close()  # the process holding it dies: its session ends
        with b.reflection_lock("alice", timeout=5):
            pass


def test_pending_queue_and_its_conflicts(backend: PostgresBackend) -> None:
    items = [
        PendingMemory(
            id=new_memory_id(), namespace="default", text=f"turn {i}", kind="observation",
            created_at=T0 + timedelta(seconds=i), importance=None if i else 0.4, metadata={"i": i},
        )
        for i in range(3)
    ]  # fmt: skip
    backend.enqueue(items)
    assert backend.pending() == items
    assert backend.pending(limit=1, newest=True) == items[-1:]
    assert backend.count_pending("default") == 3 and backend.count_pending("other") == 0
    with pytest.raises(StorageError):
        backend.enqueue(items[:1])  # already queued
    done = MemoryRecord(id=items[0].id, text=items[0].text, created_at=items[0].created_at)
    rng = np.random.default_rng(0)
    backend.put([done], _unit(rng, 1), pending=[items[0].id])
    assert backend.count_pending() == 2 and backend.get("default", [done.id]) == [done]
    # completing it again (another process did) writes nothing
    twice = MemoryRecord(id=new_memory_id(), text="other")
    with pytest.raises(PendingConflictError):
        backend.put([twice], _unit(rng, 1), pending=[items[0].id])
    assert backend.get("default", [twice.id]) == []
    with pytest.raises(StorageError):
        backend.enqueue(
            [PendingMemory(done.id, "default", "x", "observation", T0, None, {})]
        )  # already stored
    assert backend.purge("default") == 1 and backend.count_pending() == 0


def test_a_failed_batch_writes_nothing(backend: PostgresBackend) -> None:
    records, _ = _fill(backend, 3)
    fresh = _records(3, seed=11)
    rng = np.random.default_rng(0)
    with pytest.raises(StorageError, match="duplicate"):
        backend.put([*fresh, records[0]], _unit(rng, 4), counter=CounterUpdate("default", 1.0, 4))
    assert backend.count("default") == 3
    assert backend.reflection_state("default").adds_since == 0


async def test_async_twins_match_sync(backend: PostgresBackend) -> None:
    records, vectors = _fill(backend, 20)
    kw = {"k": 4, "filter": RetrievalFilter(), "config": ScoringConfig.hybrid()}
    sync = backend.candidates("default", "tea", vectors[3], **kw)  # type: ignore[arg-type]
    got = await backend.acandidates("default", "tea", vectors[3], **kw)  # type: ignore[arg-type]
    assert np.array_equal(sync.keys, got.keys) and np.allclose(sync.relevance, got.relevance)
    touched = await backend.atouch("default", sync.keys[:2].tolist(), T0)
    assert all(r.last_accessed_at == T0 for r in touched.values()) and len(touched) == 2
    assert await backend.aget("default", [records[0].id]) == [records[0]]
    await backend.aclose()


def test_lexical_scores_are_the_sqlite_backends_bm25(backend: PostgresBackend) -> None:
    """BM25 computed in SQL equals the SQLite backend's index on the same documents (an
    observation's document includes the previous observation with ``lexical_context``),
    also after deletes change ``N``, the average length and the document frequencies."""
    from langchain_reflective.backends.sqlite.lexical import BM25Index

    backend.configure(ScoringConfig.hybrid())  # lexical_context
    records, vectors = _fill(backend, 80)
    gone = {records[3].id, records[40].id}
    assert backend.delete("default", sorted(gone)) == 2
    docs, prev = [], None
    for r in records:
        doc = r.text if r.kind != "observation" or prev is None else prev + "\n" + r.text
        prev = r.text if r.kind == "observation" else prev
        docs.append(doc)
    index = BM25Index()
    index.add(docs)
    index.remove([i for i, r in enumerate(records) if r.id in gone])
    live = [i for i, r in enumerate(records) if r.id not in gone]
    for query in ("paris paris dogs running", "tea in the garden", "nothing matches zzz"):
        c = backend.candidates(
            "default", query, vectors[0], k=5, filter=RetrievalFilter(),
            config=ScoringConfig.hybrid(), exact=True,
        )  # fmt: skip
        with index.query_scores(query) as expected:
            want = expected.lookup(np.asarray(live))
            assert c.lexical is not None and c.size == len(live)
            assert np.array_equal(c.lexical[: c.size], want)  # the same float32 values
            assert c.lexical_max == expected.max()


@pytest.mark.parametrize("exact", [True, False])
def test_neighbour_links_follow_deletes_and_later_writes(
    backend: PostgresBackend, exact: bool
) -> None:
    """Each observation's previous/next live observation, kept through deletes (of single,
    consecutive and last observations) and later batches."""
    records, _ = _fill(backend, 30)
    gone = {records[i].id for i in (2, 3, 4, 11, 29)}
    assert backend.delete("default", sorted(gone)) == 5
    more, _ = _fill(backend, 6, seed=12)
    live = [r for r in records + more if r.id not in gone]
    rng = np.random.default_rng(5)
    c = backend.candidates(
        "default", "tea", _unit(rng, 1)[0], k=40, filter=RetrievalFilter(),
        config=ScoringConfig.hybrid(), exact=exact,
    )  # fmt: skip
    assert c.previous is not None and c.next is not None
    ids = {k: r.id for k, r in backend.fetch("default", c.keys.tolist()).items()}
    row_id = [ids[int(k)] for k in c.keys]
    obs = [r.id for r in live if r.kind == "observation"]
    for row in range(c.size):
        rid = row_id[row]
        if rid not in obs:
            assert c.previous[row] == c.next[row] == -1
            continue
        j = obs.index(rid)
        assert (row_id[c.previous[row]] if c.previous[row] >= 0 else None) == (
            obs[j - 1] if j else None
        )
        assert (row_id[c.next[row]] if c.next[row] >= 0 else None) == (
            obs[j + 1] if j + 1 < len(obs) else None
        )


def test_a_database_without_setup_is_a_clear_error(postgres_url: str) -> None:
    from langchain_reflective import MemoryStream
    from tests.fakes import WordEmbeddings

    with (
        PostgresBackend.from_conn_string(postgres_url) as backend,
        pytest.raises(StorageError, match=r"setup\(\)"),
    ):
        MemoryStream(WordEmbeddings(), backend=backend)


def test_a_pool_too_small_for_the_reflection_lock_is_refused(postgres_url: str) -> None:
    with pytest.raises(ValueError, match="max_size"):
        PostgresBackend.from_conn_string(postgres_url, max_size=1)


def test_a_small_analysed_table_still_finds_query_terms_through_the_gin_index(
    postgres_url: str,
) -> None:
    """With Postgres' default ``random_page_cost`` (4), a freshly analysed table of ~1k
    memories got a plan that read every row of ``reflective_terms`` and tested it against each
    query term; the backend's connections plan the GIN index lookup instead (the text
    terms here: the backend was not configured for `lexical_context`)."""
    rng = np.random.default_rng(7)
    vocabulary = [f"term{i}" for i in range(5000)]
    records = [
        MemoryRecord(
            id=new_memory_id(),
            text=" ".join(rng.choice(vocabulary, size=16)),
            kind="observation",
            created_at=T0 + timedelta(minutes=i),
            importance=0.5,
            namespace="default",
        )
        for i in range(1000)
    ]
    vectors = _unit(rng, len(records))
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        backend.put(records, vectors)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE")
        sql, params = backend._candidates._statement(
            "default", records[3].text[:40], vectors[3], 10, RetrievalFilter(),
            ScoringConfig.hybrid(), False,
        )  # fmt: skip
        with backend._pools.conn() as conn:
            plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + sql, params))
    assert "Bitmap Index Scan on reflective_terms_lex" in plan
    assert "Seq Scan on reflective_terms" not in plan


async def test_sync_and_async_connections_carry_the_same_settings(postgres_url: str) -> None:
    names = ("TimeZone", "jit", "random_page_cost", "hnsw.ef_search", "ivfflat.iterative_scan")
    expected = ["UTC", "off", "1.1", "200", "relaxed_order"]
    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.setup()
    with backend._pools.conn() as conn:
        sync = [str(conn.execute(f'SHOW "{n}"').fetchone()[0]) for n in names]  # type: ignore[index]
    async with backend._pools.aconn() as aconn:
        found = [await (await aconn.execute(f'SHOW "{n}"')).fetchone() for n in names]
    await backend.aclose()  # (a sync close inside the loop would leave the async pool open)
    assert sync == expected
    assert [str(row[0]) for row in found if row is not None] == expected


async def test_async_with_closes_the_loops_connections(postgres_url: str) -> None:
    from langchain_reflective import MemoryStream
    from tests.fakes import WordEmbeddings

    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.setup()
    async with MemoryStream(WordEmbeddings(), backend=backend) as stream:
        await stream.aadd(["tea in Lisbon", "rain in Porto"])
        assert [h.record.text for h in await stream.aretrieve("tea", k=1)] == ["tea in Lisbon"]
        (_, pool), *_ = backend._pools._apools.values()
    assert pool.closed and backend._pools._apools == {}
    await stream.aclose()  # idempotent
    async with PostgresBackend.from_conn_string(postgres_url) as other:
        assert await other.acount("default") == 2
        hits = await other.acandidates(
            "default", "tea", np.asarray(WordEmbeddings().embed_query("tea"), np.float32), k=1,
            filter=RetrievalFilter(), config=ScoringConfig.hybrid(),
        )  # fmt: skip
        assert hits.size == 2
        (_, pool), *_ = other._pools._apools.values()
    assert pool.closed


async def test_a_sync_close_inside_the_loop_warns_and_leaves_aclose_able_to_finish(
    postgres_url: str,
) -> None:
    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.setup()
    async with backend._pools.aconn() as conn:  # opens this loop's async pool
        await conn.execute("SELECT 1")
    (_, pool), *_ = backend._pools._apools.values()
    with pytest.warns(RuntimeWarning, match=r"await backend\.aclose\(\)"):
        backend.close()
    assert not pool.closed
    await backend.aclose()
    assert pool.closed


async def test_a_reflective_memory_closes_the_loops_connections_with_async_with(
    postgres_url: str,
) -> None:
    """``async with ReflectiveMemory(...)`` (``aclose``) completes the queued memories, then
    closes the async connections of this loop, without the warning of a sync close."""
    import time
    import warnings

    from langchain_reflective import MemoryStream, ReflectiveMemory
    from tests.fakes import WordEmbeddings

    class SlowToDrain(WordEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            if "tea in Lisbon" in texts:  # the queued batch: still embedding at the close
                time.sleep(0.5)
            return super().embed_documents(texts)

    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.setup()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        async with ReflectiveMemory(None, MemoryStream(SlowToDrain(), backend=backend)) as mem:
            await mem.aenqueue(["tea in Lisbon", "rain in Porto"], importances=0.5)
            await mem.aadd(["coffee in Braga"], importances=0.5)
            assert [h.record.text for h in await mem.stream.aretrieve("coffee", k=1)] == [
                "coffee in Braga"
            ]
            (_, pool), *_ = backend._pools._apools.values()
    assert pool.closed and backend._pools.closed
    with PostgresBackend.from_conn_string(postgres_url) as other:
        assert other.count("default") == 3
        assert other.count_pending() == 0


def test_a_wrong_connection_string_fails_at_once_with_the_servers_reason(
    postgres_server: str,
) -> None:
    """``from_conn_string`` checks the connection once: a missing database, a closed port or
    a malformed URL raise there, saying why (not at the first use, after the pool's 30 s
    wait, as "couldn't get a connection"); a malformed URL's password is not echoed."""
    head, sep, query = postgres_server.partition("?")
    missing = f"{head.rsplit('/', 1)[0]}/no_such_database{sep}{query}"
    with pytest.raises(StorageError, match='database "no_such_database" does not exist'):
        PostgresBackend.from_conn_string(missing)
    with pytest.raises(StorageError, match="refused"):
        PostgresBackend.from_conn_string("postgresql://ana@127.0.0.1:1/memories")
    with pytest.raises(StorageError, match="not a valid Postgres connection string") as bad:
        PostgresBackend.from_conn_string("postgresql://ana:s3cret@[db/memories")
    assert "s3cret" not in str(bad.value) and bad.value.__cause__ is None


@pytest.mark.parametrize(
    "url",
    [
        # an unencoded "/" ends libpq's host:port early: it quotes the password's head as "port"
        "postgresql://ana:Sup3rS3cret/x@/memories?host=/nonexistent",
        # an unencoded "%": libpq quotes the token, in the userinfo or as a parameter
        "postgresql://ana:Sup3rS3cretPW%zz@/memories?host=/nonexistent",
        "postgresql:///memories?host=/nonexistent&user=ana&password=Sup3rS3cretPW%zz",
        "host=/nonexistent port=x5 password='Sup3rS3cretPW' dbname=memories",
    ],
)
def test_a_malformed_connection_string_never_shows_its_password(url: str) -> None:
    """libpq quotes the parts of a connection string it cannot parse, and with a password
    holding an unencoded / or % those parts are the password: the error (and its chain, which
    ``--debug`` prints) shows ``***`` instead. No server is contacted."""
    with pytest.raises(StorageError) as bad:
        PostgresBackend.from_conn_string(url)
    assert "S3cret" not in str(bad.value) and bad.value.__cause__ is None
    assert "***" in str(bad.value) or "port" in str(bad.value)


def _drop_connections(url: str) -> int:
    """What a server restart, a failover or a proxy's idle timeout does to a pool: every other
    connection to the database is closed by the server (waiting until each is gone)."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def test_connections_the_server_dropped_while_idle_are_replaced_unseen(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pooled connection idle for a while is checked before use: after the server dropped
    them all, the next calls succeed on new connections, a delete included (a delete is never
    run again, so only the check saves it). The async pool's calls are reads, which the retry
    would also save: that part checks the two together."""
    from langchain_reflective.backends.postgres import connection

    with PostgresBackend.from_conn_string(postgres_url, min_size=3) as backend:
        backend.setup()
        records, vectors = _fill(backend, 3)
        for _ in range(4):
            assert backend.count("default") == 3
        monkeypatch.setattr(connection, "IDLE_CHECK_SECONDS", 0.0)  # every connection is idle
        assert _drop_connections(postgres_url) >= 3
        assert backend.delete("default", [records[0].id]) == 1  # no StorageError
        assert backend.count("default") == 2
        backend.put([records[0]], vectors[:1])

    async def candidates(backend: PostgresBackend) -> int:  # (through the async pool)
        found = await backend.acandidates(
            "default", "tea", vectors[0], k=3, filter=RetrievalFilter(),
            config=ScoringConfig.hybrid(),
        )  # fmt: skip
        return found.size

    async def run() -> None:
        async with PostgresBackend.from_conn_string(postgres_url) as other:
            assert await candidates(other) == 3
            assert _drop_connections(postgres_url) >= 2
            assert await candidates(other) == 3

    asyncio.run(run())


def test_a_connection_dropped_in_use_is_retried_for_reads_never_for_writes(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections in steady use are not checked. When the server drops them, a read (or a
    touch, which only sets values) runs again on a new connection; a delete fails with a
    StorageError rather than run twice; then the pool has discarded the other dead ones."""
    from langchain_reflective.backends.postgres import connection

    monkeypatch.setattr(connection, "IDLE_CHECK_SECONDS", 3600.0)
    with PostgresBackend.from_conn_string(postgres_url, min_size=3) as backend:
        backend.setup()
        records, vectors = _fill(backend, 3)

        def candidates() -> int:
            found = backend.candidates(
                "default", "tea", vectors[0], k=3, filter=RetrievalFilter(),
                config=ScoringConfig.hybrid(),
            )  # fmt: skip
            return found.size

        for _ in range(4):
            assert backend.count("default") == 3
        assert _drop_connections(postgres_url) >= 3
        assert backend.count("default") == 3  # a read: run again
        assert _drop_connections(postgres_url) >= 3
        assert candidates() == 3
        assert _drop_connections(postgres_url) >= 3
        with pytest.raises(ConnectionLostError, match="connection to Postgres failed"):
            backend.delete("default", [records[0].id])  # a write: not run twice
        assert backend.count("default") == 3 and candidates() == 3

        async def run() -> None:
            try:
                found = await backend.acandidates(
                    "default", "tea", vectors[0], k=3, filter=RetrievalFilter(),
                    config=ScoringConfig.hybrid(),
                )  # fmt: skip
                assert found.size == 3
                assert _drop_connections(postgres_url) >= 1
                keys = found.keys[:1].tolist()
                assert len(await backend.atouch("default", keys, datetime.now(UTC))) == 1
            finally:
                await backend.aclose()  # (this loop's pool, closed in it)

        asyncio.run(run())


@contextlib.contextmanager
def _commits_wait_for_a_standby(url: str) -> Iterator[None]:
    """Every commit waits for a synchronous standby that never comes: the transaction is
    committed on the server, but its client has no reply until the wait ends. Terminating
    such a connection is a commit whose reply was lost (a failover or a network cut at the
    wrong moment)."""

    def reconfigure(names: str | None) -> None:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SET synchronous_commit = local")  # (its own commits do not wait)
            if names is None:
                admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            else:
                admin.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
            admin.execute("SELECT pg_reload_conf()")
        # the reload is asynchronous: once a new session sees the setting, the server has
        # re-read its configuration and signalled every session, so the pool's connections
        # apply it before their next statement (else, on a loaded machine, a commit could
        # still not wait)
        want = names or ""
        for _ in range(200):
            with psycopg.connect(url, autocommit=True) as probe:
                row = probe.execute("SHOW synchronous_standby_names").fetchone()
            if row and row[0] == want:
                return
            time.sleep(0.05)
        raise AssertionError(f"synchronous_standby_names never became {want!r}")

    reconfigure("no_such_standby")
    try:
        yield
    finally:
        reconfigure(None)


@contextlib.contextmanager
def _terminated_while_waiting_for_the_standby(url: str) -> Iterator[None]:
    """Around a write: a thread terminates the first connection it finds waiting for the
    standby; fails if none waited."""
    done: list[bool] = []

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as admin:
            for _ in range(600):
                row = admin.execute(
                    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event = 'SyncRep'"
                ).fetchone()
                if row:
                    done.append(bool(row[0]))
                    return
                time.sleep(0.05)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        thread.join()
    assert done == [True], "no commit waited for the standby"


def test_a_write_whose_connection_was_lost_is_stored_exactly_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server drops the connection of a put or an enqueue: in the middle of its
    transaction (nothing committed: the write runs again), or while its commit waits for a
    reply (committed: it is not run again). Either way the call succeeds, and the memories,
    the queue and the reflection counter hold each write once."""
    from langchain_reflective.backends.postgres import connection, writes

    monkeypatch.setattr(connection, "IDLE_CHECK_SECONDS", 3600.0)
    durable = postgres_url + "&options=-c%20synchronous_commit%3Don"  # (the server's is off)
    with PostgresBackend.from_conn_string(durable, min_size=2) as backend:
        backend.setup()
        rng = np.random.default_rng(5)
        first = _records(2, "default", seed=1)
        add_stats = writes.add_lexical_stats
        drops: list[int] = []

        def dropped_midway(*args: Any) -> None:
            if not drops:
                drops.append(_drop_connections(postgres_url))
            add_stats(*args)

        monkeypatch.setattr(writes, "add_lexical_stats", dropped_midway)
        backend.put(first, _unit(rng, 2), counter=CounterUpdate("default", 0.5, 2))
        assert drops and drops[0] >= 1  # (the put's own connection among them)
        monkeypatch.setattr(writes, "add_lexical_stats", add_stats)

        second = _records(3, "default", seed=2)
        items = [PendingMemory(new_memory_id(), "default", "queued", "observation", T0, None, {})]
        with _commits_wait_for_a_standby(postgres_url):
            with _terminated_while_waiting_for_the_standby(postgres_url):
                backend.put(second, _unit(rng, 3), counter=CounterUpdate("default", 0.25, 3))
            with _terminated_while_waiting_for_the_standby(postgres_url):
                backend.enqueue(items)
        assert backend.count("default") == 5
        assert {r.id for r in backend.recent("default")} == {r.id for r in first + second}
        state = backend.reflection_state("default")
        assert state.adds_since == 5 and state.importance_sum == pytest.approx(0.75)
        assert backend.pending() == items


def test_a_write_whose_outcome_cannot_be_read_says_so_and_names_its_memories(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write's connection is lost as its commit is sent, and so is the server for the
    check that follows: the error said only "the connection to Postgres failed", so a caller
    retrying the add stored it twice when the first had committed. It now says the outcome is
    unknown, names the memories, and the write is not run again."""
    from langchain_reflective.backends.postgres import backend as backend_module
    from langchain_reflective.backends.postgres import connection
    from langchain_reflective.backends.postgres.failures import WriteOutcomeUnknownError

    monkeypatch.setattr(connection, "IDLE_CHECK_SECONDS", 3600.0)
    with PostgresBackend.from_conn_string(postgres_url, min_size=2) as backend:
        backend.setup()
        write_batch, calls = backend_module.write_batch, []

        def dropped_after(*args: Any) -> int:
            newest = write_batch(*args)
            calls.append(_drop_connections(postgres_url))  # (then its commit is sent)
            return newest

        def server_gone(conn: Any, records: Any) -> None:
            raise ConnectionLostError("the connection to Postgres failed: server gone")

        monkeypatch.setattr(backend_module, "write_batch", dropped_after)
        monkeypatch.setattr(backend_module, "stored_outcome", server_gone)
        records = _records(7, "default", seed=4)
        with pytest.raises(WriteOutcomeUnknownError, match="whether the write committed") as lost:
            backend.put(records, _unit(np.random.default_rng(4), 7))
        assert isinstance(lost.value, StorageError)
        assert (
            records[0].id in " ".join(lost.value.__notes__) and "2 more" in lost.value.__notes__[0]
        )
        assert len(calls) == 1  # (not written again)
        monkeypatch.setattr(backend_module, "write_batch", write_batch)
        assert backend.count("default") == 0  # (dropped before its commit: nothing stored)


def test_a_lost_write_stored_in_part_is_reported_not_repeated(postgres_url: str) -> None:
    """What a write's outcome check reads: all of it stored (the newest key), none (run it
    again), or a part, which only another write holding some of the ids can cause: this one
    did not commit, and it is refused as a duplicate (``DuplicateIdError``, a StorageError), so
    a caller can write again without those ids, rather than a second write failing."""
    from langchain_reflective.backends.postgres.writes import queued_outcome, stored_outcome

    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        stored, _ = _fill(backend, 2)
        other = _records(1, seed=9)
        queued = [PendingMemory(new_memory_id(), "default", "q", "observation", T0, None, {})]
        backend.enqueue(queued)
        with psycopg.connect(postgres_url) as conn:
            newest = conn.execute("SELECT max(seq) FROM reflective_memories").fetchone()
            assert stored_outcome(conn, stored) == newest[0]  # type: ignore[index]
            assert stored_outcome(conn, other) is None
            assert stored_outcome(conn, [r.with_access(T0) for r in stored[:1]]) is not None
            moved = [MemoryRecord(id=stored[0].id, text="x", namespace="elsewhere")]
            assert stored_outcome(conn, moved) is None  # (that id is another namespace's)
            with pytest.raises(DuplicateIdError, match="1 of 2 of the ids are taken now"):
                stored_outcome(conn, [stored[0], *other])
            assert queued_outcome(conn, queued) is True
            fresh = [PendingMemory(new_memory_id(), "default", "n", "observation", T0, None, {})]
            assert queued_outcome(conn, fresh) is None
            with pytest.raises(DuplicateIdError, match="1 of 2 of the ids are taken now"):
                queued_outcome(conn, queued + fresh)
            elsewhere = [dataclasses.replace(queued[0], namespace="elsewhere")]
            assert queued_outcome(conn, elsewhere) is None  # (that id is another namespace's)
