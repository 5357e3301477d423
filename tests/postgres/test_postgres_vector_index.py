"""The Postgres vector index against a real server: IVFFlat trained and retrained as the table
grows (also while others add and retrieve), HNSW on request, and version-1 databases."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.base import CounterUpdate, RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.schema import MIGRATIONS, SCHEMA_VERSION
from langchain_reflective.backends.postgres.vector_index import VectorIndexSettings
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k
from tests.postgres.sample_memories import DIM, T0, WORDS, _fill, _records, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def _vector_indexes(url: str) -> list[tuple[str, str, bool]]:
    """(name, access method, valid) of every index on the embedding column."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, am.amname, i.indisvalid FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam "
            "WHERE i.indrelid = 'reflective_memories'::regclass AND am.amname IN "
            "('ivfflat', 'hnsw') ORDER BY c.relname"
        ).fetchall()
    return [(str(r[0]), str(r[1]), bool(r[2])) for r in rows]


@pytest.fixture
def small_ivf(postgres_url: str) -> Iterator[PostgresBackend]:
    """IVFFlat from 200 rows, retrained at 2x growth, built in the background."""
    b = PostgresBackend.from_conn_string(postgres_url, max_size=4, ivf_min_rows=200, ivf_growth=2.0)
    b.setup()
    b.bind_embeddings("test-model", DIM)
    yield b
    b.close()


def test_settings_are_checked() -> None:
    for bad in (
        {"kind": "flat"},
        {"min_rows": 0},
        {"growth": 1.0},
        {"probes": 0},
    ):
        with pytest.raises(ValueError):
            VectorIndexSettings(**bad)  # type: ignore[arg-type]
    s = VectorIndexSettings()
    assert s.lists_for(100_000) == 316
    assert s.probes_for(316) == 18 and s.probes_for(4) == 4
    assert VectorIndexSettings(probes=5).probes_for(316) == 5


def test_ivfflat_is_built_once_big_enough_and_retrained_as_the_table_grows(
    small_ivf: PostgresBackend, postgres_url: str
) -> None:
    _fill(small_ivf, 150, seed=1)
    small_ivf.wait_for_index()
    assert _vector_indexes(postgres_url) == []  # below min_rows: exact scan
    assert small_ivf.index_state().name is None

    _fill(small_ivf, 100, seed=2)  # 250 rows: due
    small_ivf.wait_for_index()
    first = small_ivf.index_state()
    assert first.kind == "ivfflat" and first.rows == 250 and first.lists == 16
    assert _vector_indexes(postgres_url) == [(first.name, "ivfflat", True)]
    with psycopg.connect(postgres_url) as conn:  # the planner has statistics of the new size
        stats = conn.execute(
            "SELECT relname, n_live_tup > 0 AND last_analyze IS NOT NULL FROM pg_stat_user_tables "
            "WHERE relname IN ('reflective_memories', 'reflective_terms', 'reflective_access') "
            "ORDER BY relname"
        ).fetchall()
    assert stats == [
        (t, True) for t in ("reflective_access", "reflective_memories", "reflective_terms")
    ]

    _fill(small_ivf, 200, seed=3)  # 450 < 2 x 250: not yet
    small_ivf.wait_for_index()
    assert small_ivf.index_state() == first

    _fill(small_ivf, 100, seed=4)  # 550 >= 500: retrained, the old index dropped
    small_ivf.wait_for_index()
    second = small_ivf.index_state()
    assert second.rows == 550 and second.lists == 23 and second.name != first.name
    assert _vector_indexes(postgres_url) == [(second.name, "ivfflat", True)]


def _clustered(rng: np.random.Generator, centers: np.ndarray, n: int) -> np.ndarray:
    """Unit vectors around topic centres, as text embeddings cluster by topic."""
    v = centers[rng.integers(0, len(centers), n)] + 0.25 * rng.normal(size=(n, DIM))
    v = v.astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _agreement(backend: PostgresBackend, queries: np.ndarray) -> int:
    """How many of the exact top 10 the approximate path finds, summed over the queries."""
    config = ScoringConfig.hybrid()
    now = (T0 + timedelta(days=3)).timestamp()
    agree = 0
    for q, vec in enumerate(queries):
        query = f"{WORDS[q % 10]} {WORDS[q % 10 + 1]}"
        kw = {"k": 10, "filter": RetrievalFilter(), "config": config}
        exact = backend.candidates("default", query, vec, exact=True, **kw)  # type: ignore[arg-type]
        approx = backend.candidates("default", query, vec, exact=False, **kw)  # type: ignore[arg-type]
        e_comps, _ = score_candidates(config, exact, now)
        a_comps, _ = score_candidates(config, approx, now)
        e_top = exact.keys[top_k(e_comps.score, 10)]
        a_top = approx.keys[top_k(a_comps.score, 10)]
        agree += len(set(e_top.tolist()) & set(a_top.tolist()))
    return agree


def _dense_plan(backend: PostgresBackend, vec: np.ndarray) -> tuple[str, str]:
    """The IVFFlat probes a retrieval connection searches with, and the dense scan's plan."""
    with backend._pools.conn() as conn:
        backend._index.prepare(conn)
        probes = conn.execute("SHOW ivfflat.probes").fetchone()
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT seq FROM reflective_memories WHERE namespace = 'default' "
                "ORDER BY embedding <=> %s::vector LIMIT 10",
                (str(vec.tolist()),),
            ).fetchall()
        )
    assert probes is not None
    return str(probes[0]), plan


def test_retrievals_through_ivfflat_hold_the_exact_top_10(
    small_ivf: PostgresBackend, postgres_url: str
) -> None:
    """Clustered vectors (as embeddings of text are): the default probes find the exact top
    10 of the full hybrid score."""
    rng = np.random.default_rng(7)
    centers = rng.normal(size=(30, DIM))
    small_ivf.put(_records(3000), _clustered(rng, centers, 3000))
    small_ivf.wait_for_index()
    small_ivf.reindex()  # trained on all 3,000: 55 lists, 8 probes
    assert small_ivf.index_state().lists == 55
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ANALYZE reflective_memories")
    queries = _clustered(rng, centers, 10)
    assert _agreement(small_ivf, queries) >= 98  # of 100
    probes, plan = _dense_plan(small_ivf, queries[0])
    assert probes == "8" and small_ivf.index_state().name in plan


def test_unclustered_vectors_need_more_probes(postgres_url: str) -> None:
    """Uniformly random vectors have no clusters for IVFFlat to exploit: searching every list
    gives the exact path's top 10 (what ``ivf_probes`` buys), the default fewer."""
    with PostgresBackend.from_conn_string(
        postgres_url, ivf_min_rows=200, ivf_probes=55, auto_reindex=False
    ) as b:
        b.setup()
        b.bind_embeddings("test-model", DIM)
        _fill(b, 3000)
        assert b.index_state().name is None  # auto_reindex=False: nothing built by adds
        b.reindex()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE reflective_memories")
        queries = _unit(np.random.default_rng(3), 10)
        assert _agreement(b, queries) >= 98
        probes, plan = _dense_plan(b, queries[0])
        assert probes == "55" and b.index_state().name in plan


def test_rebuilds_while_others_add_and_retrieve_lose_nothing(
    small_ivf: PostgresBackend, postgres_url: str
) -> None:
    """Two writers (their own pools, as two processes would have) add in batches while a third
    backend rebuilds the index over and over and a reader retrieves: no write or retrieval
    fails, every memory is stored once, the counter is exact, one valid index remains."""
    _fill(small_ivf, 300, namespace="w0", seed=9)
    small_ivf.wait_for_index()
    backends = [
        PostgresBackend.from_conn_string(postgres_url, max_size=3, ivf_min_rows=200, ivf_growth=1.5)
        for _ in range(3)
    ]
    errors: list[BaseException] = []
    written: list[list[str]] = [[], []]
    done = threading.Event()

    def writer(w: int) -> None:
        try:
            for batch in range(8):
                records = _records(60, namespace=f"w{w}", seed=100 * w + batch)
                vectors = _unit(np.random.default_rng(1000 * w + batch), 60)
                counter = CounterUpdate(namespace=f"w{w}", importance=1.0, adds=60)
                backends[w].put(records, vectors, counter=counter)
                written[w].extend(r.id for r in records)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def rebuilder() -> None:
        try:
            while not done.is_set():
                backends[2].reindex()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        rng = np.random.default_rng(5)
        config = ScoringConfig.hybrid()
        try:
            while not done.is_set():
                for ns in ("w0", "w1"):
                    backends[2].candidates(
                        ns, "tea garden", _unit(rng, 1)[0], k=10,
                        filter=RetrievalFilter(), config=config,
                    )  # fmt: skip
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    others = [threading.Thread(target=rebuilder), threading.Thread(target=reader)]
    try:
        for t in others + writers:
            t.start()
        for t in writers:
            t.join()
        time.sleep(0.2)
        done.set()
        for t in others:
            t.join()
        for b in backends:
            b.wait_for_index()
    finally:
        for b in backends:
            b.close()
    assert errors == []
    with psycopg.connect(postgres_url) as conn:
        for w in range(2):
            rows = conn.execute(
                "SELECT count(*), count(DISTINCT id), (SELECT adds FROM reflective_counters "
                "WHERE namespace = %s) FROM reflective_memories WHERE namespace = %s",
                (f"w{w}", f"w{w}"),
            ).fetchone()
            expected = len(written[w]) + (300 if w == 0 else 0)
            assert rows == (expected, expected, len(written[w]))
    indexes = _vector_indexes(postgres_url)
    assert len(indexes) == 1 and indexes[0][1:] == ("ivfflat", True)


def test_hnsw_on_request(postgres_url: str) -> None:
    with PostgresBackend.from_conn_string(postgres_url, index="hnsw", ivf_min_rows=10) as b:
        b.setup()
        b.bind_embeddings("test-model", DIM)
        _fill(b, 50)
        b.wait_for_index()
        state = b.index_state()
        assert (state.kind, state.lists) == ("hnsw", 0)
    assert _vector_indexes(postgres_url) == [("reflective_memories_embedding_hnsw", "hnsw", True)]


def test_a_version_1_database_upgrades_keeps_hnsw_and_can_switch(postgres_url: str) -> None:
    # a database set up and bound by version 1 of the schema (its exact DDL)
    with psycopg.connect(postgres_url, autocommit=True) as conn, conn.transaction():
        conn.execute(
            "CREATE TABLE reflective_schema_version (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(MIGRATIONS[0])
        conn.execute("INSERT INTO reflective_schema_version (version) VALUES (1)")
        conn.execute(
            f"ALTER TABLE reflective_memories ALTER COLUMN embedding TYPE vector({DIM});"
            "CREATE INDEX IF NOT EXISTS reflective_memories_embedding_hnsw "
            "ON reflective_memories USING hnsw (embedding vector_cosine_ops);"
        )
        conn.execute(
            "INSERT INTO reflective_meta (key, value) VALUES ('dimension', %s), "
            "('embedding_model', 'test-model')",
            (str(DIM),),
        )
    with PostgresBackend.from_conn_string(postgres_url, ivf_min_rows=10) as b:
        b.setup()
        b.setup()  # idempotent
        assert b.schema_version() == SCHEMA_VERSION == 8
        records, _ = _fill(b, 40)
        b.wait_for_index()
        assert b.index_state().kind == "hnsw"  # kept: no IVFFlat built past min_rows
        assert _vector_indexes(postgres_url) == [
            ("reflective_memories_embedding_hnsw", "hnsw", True)
        ]
        b.reindex(kind="ivfflat")
        state = b.index_state()
        assert (state.kind, state.rows, state.lists) == ("ivfflat", 40, 6)
        assert _vector_indexes(postgres_url) == [(state.name, "ivfflat", True)]
        assert [r.id for r in b.get("default", [r.id for r in records])] == [r.id for r in records]


def test_an_interrupted_builds_invalid_index_is_dropped(
    small_ivf: PostgresBackend, postgres_url: str
) -> None:
    """A build that dies half-way leaves an invalid index (still maintained on every insert);
    the next build drops it."""
    _fill(small_ivf, 300)
    small_ivf.wait_for_index()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "CREATE INDEX reflective_memories_embedding_ivfflat_9 ON reflective_memories "
            "USING ivfflat (embedding vector_cosine_ops) WITH (lists = 3)"
        )
        conn.execute(  # what a cancelled CREATE INDEX CONCURRENTLY leaves behind
            "UPDATE pg_index SET indisvalid = false "
            "WHERE indexrelid = 'reflective_memories_embedding_ivfflat_9'::regclass"
        )
    assert ("reflective_memories_embedding_ivfflat_9", "ivfflat", False) in _vector_indexes(
        postgres_url
    )
    small_ivf.reindex()
    state = small_ivf.index_state()
    assert _vector_indexes(postgres_url) == [(state.name, "ivfflat", True)]


def test_close_cancels_a_background_build_instead_of_waiting_for_it(
    small_ivf: PostgresBackend, postgres_url: str
) -> None:
    """A process shutting down mid-build does not hang on it: ``close()`` cancels the
    concurrent build (its invalid leftover is dropped by the next build, above)."""
    _fill(small_ivf, 150, seed=1)
    with psycopg.connect(postgres_url) as blocker:
        # an open writer: CREATE INDEX CONCURRENTLY waits for it before it can finish
        blocker.execute("LOCK TABLE reflective_memories IN ROW EXCLUSIVE MODE")
        _fill(small_ivf, 100, seed=2)  # 250 rows: a background build starts, and waits
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with psycopg.connect(postgres_url) as conn:
                waiting = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE 'CREATE INDEX CONCURRENTLY%%'"
                ).fetchone()
            if waiting and waiting[0]:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the background build never started")
        closer = threading.Thread(target=small_ivf.close)
        closer.start()
        closer.join(10)
        cancelled = not closer.is_alive()  # while the writer is still open
        blocker.rollback()
        closer.join()
    assert cancelled, "close() waited for the build instead of cancelling it"
    with PostgresBackend.from_conn_string(postgres_url) as fresh:
        assert fresh.index_state().name is None  # nothing recorded
    assert all(not valid for _, _, valid in _vector_indexes(postgres_url))


async def test_async_candidates_search_the_ivfflat_index_like_sync(
    small_ivf: PostgresBackend,
) -> None:
    rng = np.random.default_rng(11)
    centers = rng.normal(size=(30, DIM))
    small_ivf.put(_records(1000), _clustered(rng, centers, 1000))
    await small_ivf.areindex()
    assert small_ivf.index_state().lists == 32
    config = ScoringConfig.hybrid()
    for vec in _clustered(rng, centers, 3):
        kw = {"k": 10, "filter": RetrievalFilter(), "config": config}
        sync = small_ivf.candidates("default", "tea garden", vec, **kw)  # type: ignore[arg-type]
        other = await small_ivf.acandidates("default", "tea garden", vec, **kw)  # type: ignore[arg-type]
        assert sorted(sync.keys.tolist()) == sorted(other.keys.tolist())
    await small_ivf.aclose()


def test_an_ivfflat_build_gets_the_memory_it_needs_and_gives_it_back(postgres_url: str) -> None:
    """pgvector refuses an IVFFlat build whose k-means does not fit ``maintenance_work_mem``
    (64 MB by default: a ~160k-memory table at 384 dimensions). Here the database allows
    1 MB, which 5,000 rows (71 lists) exceed; the build raises it for itself only."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        db = conn.execute("SELECT current_database()").fetchone()
        assert db is not None
        conn.execute(f"ALTER DATABASE \"{db[0]}\" SET maintenance_work_mem = '1MB'")
    b = PostgresBackend.from_conn_string(postgres_url, max_size=2, ivf_min_rows=10**9)
    try:
        b.setup()
        b.bind_embeddings("test-model", DIM)
        _fill(b, 5000, seed=5)
        b.reindex(kind="ivfflat")
        state = b.index_state()
        assert state.kind == "ivfflat" and state.lists == 71
        assert [(n, valid) for n, _, valid in _vector_indexes(postgres_url)] == [(state.name, True)]
        for _ in range(2):  # both pooled connections: the setting was put back
            with b._pools.conn() as conn:
                row = conn.execute("SHOW maintenance_work_mem").fetchone()
                assert row is not None and row[0] == "1MB"
    finally:
        b.close()


def _dense_step(backend: PostgresBackend, namespace: str, vector: np.ndarray) -> list[str]:
    """The executed plan's lines of the retrieval statement's ``dense`` step, for ``vector`` in
    ``namespace`` (the first is the step's top node)."""
    sql, params = backend._candidates._statement(
        namespace, "tea", vector, 10, RetrievalFilter(), ScoringConfig.hybrid(), False
    )
    with backend._pools.conn() as conn:
        backend._index.prepare(conn)
        explain = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + sql
        plan = [str(r[0]) for r in conn.execute(explain, params)]
    start = plan.index("  CTE dense") + 1
    end = next(i for i in range(start, len(plan)) if plan[i].startswith("  CTE "))
    return plan[start:end]


def _dense_from_index(backend: PostgresBackend, namespace: str, vector: np.ndarray) -> bool:
    """Whether a retrieval in ``namespace`` took its dense candidates from the vector-index
    branch of the statement (``ORDER BY`` distance: the index, or a scan the planner prefers
    on a table this small) rather than from sorting the namespace's rows: which of the two
    branches' scans ran."""
    step = _dense_step(backend, namespace, vector)
    scans = [line for line in step if re.search(r"on reflective_memories m_\d+", line)]
    assert len(scans) == 2, step  # the sort branch's, then the index branch's
    ran = ["never executed" not in line for line in scans]
    assert sum(ran) == 1, scans
    return ran[1]


def test_a_small_namespace_among_many_sorts_its_own_rows_for_dense_candidates(
    small_ivf: PostgresBackend, postgres_url: str
) -> None:
    """A namespace of ``r`` rows in a table of ``R``: sorted by cosine when ``r ** 2 <= dense *
    R`` (a filtered index search would read ~``dense * R / r`` rows to find ``dense`` of its
    own), from the vector index otherwise; the sorted candidates are the exact nearest."""
    rng = np.random.default_rng(5)
    small_ivf.put(_records(3000, "big", seed=1), _unit(rng, 3000))
    for u in range(10):
        small_ivf.put(_records(60, f"user{u}", seed=10 + u), _unit(rng, 60))
    small_ivf.wait_for_index()
    assert small_ivf.index_state().kind == "ivfflat"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
    query = _unit(rng, 1)[0]
    # 60 ** 2 <= 320 * 3600, 3000 ** 2 > 320 * 3600
    assert not _dense_from_index(small_ivf, "user3", query)
    assert _dense_from_index(small_ivf, "big", query)


def _dense_rows(backend: PostgresBackend, namespace: str, vector: np.ndarray) -> int:
    """How many dense candidates the statement gathered for ``vector`` in ``namespace``."""
    top = _dense_step(backend, namespace, vector)[0]
    found = re.search(r"actual rows=(\d+)", top)
    assert found is not None, top
    return int(found.group(1))


def test_a_large_namespace_gathers_deeper_dense_candidates(
    small_ivf: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``DENSE_DEPTH_FROM`` memories a namespace's dense candidates grow with the square
    root of its size, as on the SQLite backend (at 1M memories 320 agreed with exact scoring
    at only 0.835); the count is read from the namespace's counter row by the statement, so a
    smaller namespace in the same table keeps ``dense_candidates``."""
    from langchain_reflective.backends.postgres import queries

    rng = np.random.default_rng(6)
    small_ivf.put(_records(3000, "big", seed=1), _unit(rng, 3000))
    small_ivf.put(_records(1000, "mid", seed=2), _unit(rng, 1000))
    small_ivf.wait_for_index()
    query = _unit(rng, 1)[0]
    assert _dense_rows(small_ivf, "big", query) == 320  # (the default threshold: no deeper)
    monkeypatch.setattr(queries, "DENSE_DEPTH_FROM", 750)  # 3,000 memories: 2 x 320
    assert _dense_rows(small_ivf, "big", query) == 640
    assert _dense_rows(small_ivf, "mid", query) == 370  # ceil(320 * sqrt(1000 / 750))
    monkeypatch.setattr(queries, "DENSE_DEPTH_FROM", 3000)
    assert _dense_rows(small_ivf, "big", query) == 320
