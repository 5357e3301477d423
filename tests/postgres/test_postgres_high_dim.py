"""Embeddings of more than 2,000 dimensions on Postgres (OpenAI's ``text-embedding-3-large`` has
3,072): pgvector's HNSW and IVFFlat index ``vector`` values of at most 2,000 dimensions, so the
index holds them cast to ``halfvec`` (up to 4,000), or there is none (exact scans).

Before: with ``index="hnsw"`` the first add failed; with IVFFlat the background build failed and
logged a traceback every 10 s in every writing process; ``reindex()`` raised a raw psycopg
``ProgramLimitExceeded``.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import psycopg
import pytest

from langchain_reflective import MemoryStream, PostgresBackend
from langchain_reflective.backends.postgres import vector_index
from langchain_reflective.backends.postgres.rows import vector_text
from langchain_reflective.backends.postgres.vector_index import IndexState, dense_distance
from langchain_reflective.errors import StorageError
from langchain_reflective.records import MemoryRecord
from tests.fakes import WordEmbeddings
from tests.postgres.conftest import create_database, read_write_role
from tests.postgres.sample_memories import T0

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

LARGE = 3072
"""``text-embedding-3-large``'s dimension."""
TOPICS = ["tea", "paris", "dog", "running", "garden", "music", "river", "coffee", "train"]


def _texts(n: int) -> list[str]:
    return [
        f"memory {i} about {TOPICS[i % len(TOPICS)]} and {TOPICS[(i * 5) % 9]}" for i in range(n)
    ]


def _vector_index(url: str) -> tuple[str, str, bool] | None:
    """(name, definition, valid) of the memories' vector index, if there is one."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisvalid FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam "
            "WHERE i.indrelid = 'reflective_memories'::regclass AND am.amname IN "
            "('ivfflat', 'hnsw')"
        ).fetchall()
    assert len(rows) <= 1, rows
    return (str(rows[0][0]), str(rows[0][1]), bool(rows[0][2])) if rows else None


def _plan(url: str, order: str, vector: np.ndarray) -> str:
    """The plan of the dense candidates' ordering by ``order`` (sequential scans discouraged,
    as a large table would)."""
    with psycopg.connect(url) as conn:
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute(
            "EXPLAIN WITH q AS MATERIALIZED (SELECT %s::vector AS v) "
            f"SELECT m.seq FROM reflective_memories m ORDER BY {order} LIMIT 5",
            (vector_text(vector),),
        ).fetchall()
    return "\n".join(str(r[0]) for r in rows)


def _retrieves(stream: MemoryStream, n: int) -> None:
    """Some of the first ``n`` memories' own texts find them first, with the relevance of the
    full vectors (1: the index orders candidates; it does not score them)."""
    for i in range(0, n, max(1, n // 6)):
        text = _texts(n)[i]
        [best, *_] = stream.retrieve(text, k=3)
        assert best.record.text == text
        assert best.relevance == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("kind", ["hnsw", "ivfflat"])
def test_3072_dimensional_embeddings_are_added_indexed_retrieved_and_reindexed(
    postgres_url: str, kind: str
) -> None:
    """At 3,072 dimensions the first add succeeds (HNSW: its index is built when the
    embeddings are bound), the index holds the vectors cast to ``halfvec(3072)``, the dense
    candidates' ordering (``dense_distance``) is the one the index serves, retrievals find what
    they should, and ``reindex`` rebuilds the index, of either kind."""
    backend = PostgresBackend.from_conn_string(postgres_url, index=kind, ivf_min_rows=50)
    backend.setup()
    with MemoryStream(WordEmbeddings(LARGE), backend=backend) as stream:
        stream.add(_texts(60))
        backend.wait_for_index(60)
        state = backend.index_state()
        assert state.kind == kind and state.name is not None, state
        found = _vector_index(postgres_url)
        assert found is not None and found[0] == state.name and found[2], found
        assert f"halfvec({LARGE})" in found[1] and "halfvec_cosine_ops" in found[1], found
        query = np.asarray(WordEmbeddings(LARGE)._embed("tea"), dtype=np.float32)
        assert state.name in _plan(postgres_url, dense_distance(LARGE, state), query)
        # (the vectors themselves: an ordering no index serves)
        assert state.name not in _plan(postgres_url, dense_distance(LARGE, IndexState()), query)
        _retrieves(stream, 60)

        backend.reindex()
        rebuilt = backend.index_state()
        assert rebuilt.kind == kind and rebuilt.name not in (None, state.name), rebuilt
        found = _vector_index(postgres_url)
        assert found is not None and found[0] == rebuilt.name and found[2], found
        other = "hnsw" if kind == "ivfflat" else "ivfflat"
        backend.reindex(kind=other)  # type: ignore[arg-type]
        assert backend.index_state().kind == other
        found = _vector_index(postgres_url)
        assert found is not None and f"USING {other}" in found[1], found
        _retrieves(stream, 60)


def test_halfvec_ordering_keeps_the_nearest_among_the_dense_candidates(postgres_url: str) -> None:
    """What the ``halfvec`` cast costs the dense candidates: ordered by it (as the index holds
    the vectors), the 40 nearest of 400 clustered 3,072-d vectors (by the exact search of that
    ordering) hold the 10 nearest by the full vectors, for every query; the relevance scores
    the retrieval ranks by are the full vectors' (float32 inner products)."""
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(20, LARGE))
    vectors = centres[rng.integers(0, 20, 400)] + 0.6 * rng.normal(size=(400, LARGE))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    records = [
        MemoryRecord(id=f"m{i}", text=f"memory {i}", created_at=T0, namespace="default")
        for i in range(400)
    ]
    with PostgresBackend.from_conn_string(postgres_url, index="hnsw") as backend:
        backend.setup()
        backend.bind_embeddings("test-model", LARGE)
        backend.put(records, vectors)
        state = backend.index_state()
        assert state.name is not None
        order = dense_distance(LARGE, state)
        with psycopg.connect(postgres_url) as conn:
            conn.execute("SET enable_indexscan = off")  # (the exact ordering, not HNSW's)
            for q in range(20):
                noise = 0.3 * rng.normal(size=LARGE) / np.sqrt(LARGE)  # (of norm ~0.3)
                query = vectors[q * 17] + noise.astype(np.float32)
                query = (query / np.linalg.norm(query)).astype(np.float32)
                rows = conn.execute(
                    "WITH q AS MATERIALIZED (SELECT %s::vector AS v) SELECT m.id, "
                    "-(m.embedding <#> (SELECT v FROM q)) FROM reflective_memories m "
                    f"ORDER BY {order} LIMIT 40",
                    (vector_text(query),),
                ).fetchall()
                nearest = {f"m{i}" for i in np.argsort(-(vectors @ query))[:10]}
                assert nearest <= {r[0] for r in rows}, q
                full = {r[0]: float(vectors[int(r[0][1:])] @ query) for r in rows}
                for id_, relevance in rows:
                    assert relevance == pytest.approx(full[id_], abs=1e-5)


def test_over_4000_dimensions_there_is_no_vector_index_and_nothing_fails(
    postgres_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    """pgvector indexes no vectors of more than 4,000 dimensions, not even as ``halfvec``: adds
    and retrievals work on exact scans, a background build finds nothing to build, says so once
    (no traceback) and is not attempted again by this process, and ``reindex`` warns instead
    of failing."""
    dim = 4096
    caplog.set_level(logging.INFO, logger=vector_index.__name__)
    for kind in ("hnsw", "ivfflat"):
        url = create_database(postgres_server)
        backend = PostgresBackend.from_conn_string(url, index=kind, ivf_min_rows=20)
        backend.setup()
        with MemoryStream(WordEmbeddings(dim), backend=backend) as stream:
            for part in range(3):  # (three adds past the threshold)
                stream.add(_texts(30)[part * 10 : part * 10 + 10])
                backend.wait_for_index(30)
            assert backend.index_state() == IndexState(kind=kind)  # type: ignore[arg-type]
            assert _vector_index(url) is None
            [best, *_] = stream.retrieve(_texts(30)[4], k=3)
            assert best.record.text == _texts(30)[4]
            backend.reindex()
            assert backend.index_state() == IndexState(kind=kind)  # type: ignore[arg-type]
    said = [r for r in caplog.records if "no vector index" in r.getMessage()]
    # the HNSW database's reindex; the IVFFlat database's background build (once), its reindex
    assert [r.levelname for r in said] == ["WARNING", "INFO", "WARNING"], said
    assert all("4,096 dimensions" in r.getMessage() and not r.exc_info for r in said)
    assert not [r for r in caplog.records if r.getMessage().startswith("rebuilding")]


def test_a_build_that_cannot_succeed_is_reported_once_and_reindex_raises_the_packages_error(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An application role that may only read and write the tables (an administrator set them
    up, as docs/reliability.md allows) cannot build the index (``must be owner of table``):
    another attempt cannot cure that, so its background build is logged once and no later add
    starts it again in this process (it was every 10 s, with a traceback, in every writing
    process); ``reindex`` raises a ``StorageError`` with the server's reason (it raised
    psycopg's own error); once a ``reindex`` succeeds, background builds run again."""
    role = f"app_{time.monotonic_ns()}"
    with PostgresBackend.from_conn_string(postgres_url) as admin:
        admin.setup()
        with MemoryStream(WordEmbeddings(16), backend=admin) as stream:
            stream.add("set up by the administrator")  # (binds the embeddings)
    app_url = read_write_role(postgres_url, role)
    try:
        app = PostgresBackend.from_conn_string(app_url, ivf_min_rows=20, ivf_growth=1.1)
        with MemoryStream(WordEmbeddings(16), backend=app) as stream:
            stream.add(_texts(20))
            app.wait_for_index(30)
            index = app._index
            first = index._builder
            assert first is not None and index._retry_at == float("inf")
            for part in range(3):  # (each past the threshold: no build is started)
                stream.add(_texts(40)[20 + part * 5 : 25 + part * 5])
                assert index._builder is first
            failed = [r for r in caplog.records if r.getMessage().startswith("rebuilding")]
            assert len(failed) == 1 and "it would fail again" in failed[0].getMessage(), failed
            with pytest.raises(StorageError, match="must be owner") as raised:
                app.reindex()
            assert not isinstance(raised.value, psycopg.Error)
            assert app.index_state().name is None
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                conn.execute(f"ALTER TABLE reflective_memories OWNER TO {role}")
                conn.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
            app.reindex()
            assert app.index_state().name is not None
            assert index._retry_at == 0.0
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"REASSIGN OWNED BY {role} TO CURRENT_USER")
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
