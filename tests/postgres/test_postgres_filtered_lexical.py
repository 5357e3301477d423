"""The server's candidate statement under a filter: its lexical candidates are the best BM25
matches among the memories the filter keeps (the SQLite backend's and the local index's rule,
``QueryScores.top_among``), not the namespace's best restricted to the filter afterwards."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.records import MemoryRecord, new_memory_id
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k
from tests.postgres.sample_memories import DIM, T0

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def _axis(i: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[i] = 1.0
    return v


def test_a_filtered_retrieval_finds_the_lexical_matches_the_filter_keeps(
    postgres_url: str,
) -> None:
    """Three reflections match the query "tea" only lexically (their vectors are orthogonal to
    the query's, and they are the oldest and least important reflections), among 30 reflections
    nearer the query without the word and 30 observations that match "tea" better. Filtered to
    reflections, the retrieval returns the three: they were never candidates, as the lexical
    candidates were the namespace's best 12 matches (all observations) before the filter."""
    query = _axis(0)
    later = T0 + timedelta(days=1)

    def memory(text: str, kind: str, importance: float, when: object) -> MemoryRecord:
        return MemoryRecord(
            id=new_memory_id(), text=text, kind=kind, created_at=when,  # type: ignore[arg-type]
            importance=importance, namespace="default",
        )  # fmt: skip

    observations = [memory("tea tea", "observation", 0.5, later) for _ in range(30)]
    nearer = [memory(f"garden walk {i}", "reflection", 0.5, later) for i in range(30)]
    tea = [memory("tea with milk", "reflection", 0.1, T0) for _ in range(3)]
    near = 0.2 * query + np.sqrt(1 - 0.2**2) * np.stack([_axis(2 + i % 14) for i in range(30)])
    vectors = np.concatenate(
        [np.stack([_axis(1)] * 30), near.astype(np.float32), np.stack([_axis(1)] * 3)]
    )
    config = ScoringConfig.hybrid(context=False)
    flt = RetrievalFilter(kinds=frozenset({"reflection"}))
    with PostgresBackend.from_conn_string(
        postgres_url, dense_candidates=8, lexical_candidates=8
    ) as backend:
        backend.setup()
        backend.bind_embeddings("test-model", DIM)
        backend.configure(config)
        backend.put([*observations, *nearer, *tea], vectors)
        ids = {r.id for r in tea}
        found = {}
        for exact in (True, False):
            got = backend.candidates(
                "default", "tea", query, k=3, filter=flt, config=config, exact=exact
            )
            comps, _ = score_candidates(config, got, (later + timedelta(hours=1)).timestamp())
            keys = got.keys[top_k(comps.score, 3)].tolist()
            found[exact] = {r.id for r in backend.fetch("default", keys).values()}
        assert found[True] == ids  # (what exact scoring returns)
        assert found[False] == ids
