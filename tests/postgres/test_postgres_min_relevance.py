"""``min_relevance`` on the Postgres backend's approximate candidate paths.

A retrieval asks for ``k`` memories at least as relevant as the threshold. When fewer than
``k`` of the approximate candidates pass it, more may pass among the memories the vector index
did not propose; the retrieval must still return ``k`` whenever ``k`` exist: the memories
exact scoring returns. Both paths are checked against the exact statement (``exact=True``):
the server's candidate statement once the namespace is served by its IVFFlat index (weak on
uniformly random vectors), and the local index (``local_index=True``), which gathers them with
the SQLite backend's code above its own ``EXACT_LIMIT``. Also: a very large ``k`` on the
server path.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.local_index import EXACT_LIMIT
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k
from tests.postgres.sample_memories import DIM, T0, WORDS, _fill, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

CONFIG = ScoringConfig.hybrid()
NOW = (T0 + timedelta(days=3)).timestamp()
MEMORIES = 3000
PASSING = 15
"""Memories of the namespace each query's threshold keeps (fewer than ``K``)."""
K = 20


def _top(
    backend: PostgresBackend, query: str, vec: np.ndarray, flt: RetrievalFilter, *, exact: bool
) -> list[int]:
    found = backend.candidates("default", query, vec, k=K, filter=flt, config=CONFIG, exact=exact)
    comps, _ = score_candidates(CONFIG, found, NOW)
    return found.keys[top_k(comps.score, K)].tolist()


def _threshold(backend: PostgresBackend, query: str, vec: np.ndarray) -> float:
    """The relevance of the namespace's ``PASSING``-th most relevant memory, as the server
    computes it (so exactly ``PASSING`` memories pass it, ties aside)."""
    every = backend.candidates(
        "default", query, vec, k=K, filter=RetrievalFilter(), config=CONFIG, exact=True
    )
    return float(np.sort(every.relevance[: every.size])[-PASSING])


def _assert_exact_under_thresholds(backend: PostgresBackend) -> None:
    rng = np.random.default_rng(11)
    for q, vec in enumerate(_unit(rng, 8)):
        query = f"{WORDS[q]} {WORDS[q + 1]}"
        flt = RetrievalFilter(min_relevance=_threshold(backend, query, vec))
        want = _top(backend, query, vec, flt, exact=True)
        assert len(want) == PASSING
        got = _top(backend, query, vec, flt, exact=False)
        assert got == want, f"query {q}: {len(got)} of the {len(want)} memories passing"


@pytest.fixture
def indexed(postgres_url: str) -> Iterator[PostgresBackend]:
    """3,000 random memories served by an IVFFlat index (55 lists, 8 probes, the default
    dense candidates): the vector index proposes only part of each query's nearest."""
    b = PostgresBackend.from_conn_string(
        postgres_url, max_size=4, ivf_min_rows=200, auto_reindex=False
    )
    b.setup()
    b.bind_embeddings("test-model", DIM)
    b.configure(CONFIG)
    _fill(b, MEMORIES)
    b.reindex()
    assert b.index_state().lists == 55
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ANALYZE reflective_memories")  # (the namespace is the table: no sort)
    yield b
    b.close()


def test_the_server_statement_returns_every_memory_passing_up_to_k(
    indexed: PostgresBackend,
) -> None:
    """The dense candidates came from the vector index unfiltered and the threshold was
    applied to them afterwards: of the 15 memories passing it, a retrieval of 20 returned
    those the index happened to propose (11-14 of them). The threshold is now part of the dense
    search's filter, as a kind or time filter is, so the index scan goes on until it has them
    all."""
    _assert_exact_under_thresholds(indexed)


def test_the_local_index_returns_every_memory_passing_up_to_k(postgres_url: str) -> None:
    """The local index ranks with the SQLite backend's ``partition_candidates``, whose
    approximate path scores every memory when too few candidates pass the threshold."""
    with PostgresBackend.from_conn_string(
        postgres_url, max_size=4, local_index=True, local_index_wait=True
    ) as b:
        b.setup()
        b.bind_embeddings("test-model", DIM)
        b.configure(CONFIG)
        _fill(b, MEMORIES)
        assert b.preload("default")
        local = b._candidates.local
        assert local is not None
        part = local._replicas["default"].part
        assert part.live > EXACT_LIMIT and part.ann is not None  # the approximate path
        _assert_exact_under_thresholds(b)


@pytest.mark.parametrize("k", [10**6, 3 * 10**18, 10**30])
def test_a_very_large_k_returns_every_memory(indexed: PostgresBackend, k: int) -> None:
    """The statement gathers ``4 * k`` candidates of each kind: ``k = 10**6`` asks for more
    than the namespace holds and gets all of it (the dense ones sorted from the namespace's
    own rows, as for a small namespace: one read of it), as the SQLite backend does; a ``k``
    whose ``4 * k`` did not fit a ``bigint`` failed with ``StorageError: ... bigint out of
    range``, as if the database were at fault."""
    vec = _unit(np.random.default_rng(5), 1)[0]
    every = indexed.candidates(
        "default", "tea", vec, k=K, filter=RetrievalFilter(), config=CONFIG, exact=True
    )
    keys = every.keys[: every.size]
    relevance = every.relevance[: every.size]
    threshold = float(np.sort(relevance)[-PASSING])
    for flt, want in (
        (RetrievalFilter(), keys),
        (RetrievalFilter(min_relevance=threshold), keys[relevance >= threshold]),
    ):
        found = indexed.candidates("default", "tea", vec, k=k, filter=flt, config=CONFIG)
        assert sorted(found.keys[: found.size].tolist()) == sorted(want.tolist())
