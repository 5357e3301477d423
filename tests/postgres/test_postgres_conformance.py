"""The backend conformance suite on Postgres (a fresh database per backend), with the hybrid
scoring compared too: the Postgres backend's BM25 equals the SQLite backend's."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import numpy as np
import pytest

from langchain_reflective.backends.base import BaseMemoryBackend, RetrievalFilter
from langchain_reflective.records import OBSERVATION
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k
from tests.backends.conformance import BackendConformance
from tests.backends.conformance_base import (
    NOW,
    QUERIES,
    SHARED_SCORINGS,
    corpus,
    query_vector,
)
from tests.postgres.conftest import fresh_backends

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

TIE = 1e-6
"""Scores closer than this are ties (float32 cosines differ by about 1e-7)."""


def _scored(
    backend: BaseMemoryBackend,
    query: str,
    config: ScoringConfig,
    flt: RetrievalFilter | None,
    *,
    namespace: str = "alice",
) -> list[tuple[str, float]]:
    """Every candidate's (id, score) under exact scoring, best first."""
    found = backend.candidates(
        namespace, query, query_vector(query), k=10, filter=flt or RetrievalFilter(),
        config=config, exact=True,
    )  # fmt: skip
    comps, _ = score_candidates(config, found, NOW.timestamp())
    order = top_k(comps.score, found.size)
    keys = found.keys[order].tolist()
    records = backend.fetch(namespace, keys)
    return [(records[k].id, float(s)) for k, s in zip(keys, comps.score[order], strict=True)]


class TestPostgresBackend(BackendConformance):
    lexical_matches_reference = True

    @pytest.fixture
    def make_backend(self, postgres_server: str) -> Callable[[], BaseMemoryBackend]:
        return fresh_backends(postgres_server)

    def test_same_top10_as_the_reference_under_exact_scoring(
        self, backend: BaseMemoryBackend, reference: BaseMemoryBackend
    ) -> None:
        """The suite's comparison, up to floating-point ties.

        pgvector and FAISS both sum a dot product's float32 products, in different orders,
        so two memories whose cosines are equal in exact arithmetic can differ by one float32
        step in one backend and not in the other (FAISS's SIMD lanes make even the reference
        split such ties by position). So: every score agrees with the reference's within
        ``TIE``, the top-10 score lists agree, and the top 10 differ at most by the order of
        tied memories (and which of the memories tied at the cut are in).
        """
        records = corpus(160)
        for b in (backend, reference):
            self.fill(b, records[:100])
            self.fill(b, records[100:])
        configs = [*SHARED_SCORINGS, ScoringConfig.hybrid(), ScoringConfig.hybrid(context=False)]
        filters = [
            None,
            RetrievalFilter(kinds=frozenset({OBSERVATION})),
            RetrievalFilter(created_after=NOW - timedelta(days=20)),
        ]
        reordered = 0
        for config in configs:
            backend.configure(config)
            reference.configure(config)
            for query in QUERIES:
                for flt in filters:
                    got = _scored(backend, query, config, flt)
                    want = _scored(reference, query, config, flt)
                    assert [i for i, _ in got] != [] and len(got) == len(want)
                    ref = dict(want)
                    ours = np.array([s for _, s in got])
                    assert np.allclose(ours, [ref[i] for i, _ in got], atol=TIE)
                    assert np.allclose(ours[:10], [s for _, s in want[:10]], atol=TIE)
                    top, cut = [i for i, _ in got[:10]], want[9][1]
                    same = set(top) & {i for i, _ in want[:10]}
                    assert all(abs(ref[i] - cut) <= TIE for i in set(top) - same)
                    reordered += top != [i for i, _ in want[:10]]
        assert reordered <= len(configs) * len(QUERIES) * len(filters) // 4

    def assert_same_ranking(
        self,
        got: BaseMemoryBackend,
        reference: BaseMemoryBackend,
        query: str,
        config: ScoringConfig,
    ) -> None:
        """The same scores up to floating-point ties (see the test above), so the round trip
        of the export -> import test compares rankings that way here."""
        ours = _scored(got, query, config, None, namespace="default")
        want = dict(_scored(reference, query, config, None, namespace="default"))
        assert len(ours) == len(want)
        assert all(abs(want[i] - s) <= TIE for i, s in ours)


class TestPostgresLocalIndex(TestPostgresBackend):
    """The same suite with ``local_index=True``: candidates are gathered in the process from
    the namespace held in memory, caught up with the server before each retrieval (loaded on
    its first retrieval, in the retrieving thread: ``local_index_wait``)."""

    @pytest.fixture
    def make_backend(self, postgres_server: str) -> Callable[[], BaseMemoryBackend]:
        return fresh_backends(postgres_server, local_index=True, local_index_wait=True)
