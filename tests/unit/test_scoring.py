from __future__ import annotations

import math

import numpy as np
import pytest

from langchain_reflective.scoring import (
    ScoringConfig,
    combine,
    cosine_similarity,
    min_max,
    neighbor_context,
    recency,
    top_k,
)

HOUR = 3600.0


def _reference(config, rel, rec, imp, lex):
    """Plain-loop implementation of the documented formula."""

    def norm(values):
        lo, hi = min(values), max(values)
        if hi - lo <= 1e-12:
            return [0.5] * len(values)
        return [(v - lo) / (hi - lo) for v in values]

    if config.normalization == "minmax":
        rel_n, rec_n = norm(rel), norm(rec)
    else:
        rel_n, rec_n = list(rel), list(rec)
    top = max(lex) if lex else 0
    lex_n = [v / top if top > 0 else 0.0 for v in lex]
    return [
        config.relevance_weight * rel_n[i]
        + config.lexical_weight * lex_n[i]
        + config.recency_weight * rec_n[i]
        + config.importance_weight * imp[i]
        for i in range(len(rel))
    ]


@pytest.mark.parametrize("config", [ScoringConfig.paper(), ScoringConfig.hybrid()])
@pytest.mark.parametrize("seed", range(5))
def test_vectorised_equals_plain_loop(config: ScoringConfig, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 200
    vectors = rng.normal(size=(n, 16))
    query = rng.normal(size=16)
    now = 1_700_000_000.0
    accessed = now - rng.uniform(0, 24 * 90, size=n) * HOUR
    imp = rng.uniform(0.1, 1.0, size=n)
    lex = np.where(rng.uniform(size=n) < 0.3, rng.uniform(0, 12, size=n), 0.0)

    rel = cosine_similarity(vectors, query)
    rec = recency(accessed, now, config.decay)
    got = combine(config, relevance=rel, recency=rec, importance=imp, lexical=lex).score

    ref_rel = [
        float(np.dot(v, query) / (np.linalg.norm(v) * np.linalg.norm(query))) for v in vectors
    ]
    ref_rec = [config.decay ** ((now - a) / HOUR) for a in accessed]
    want = _reference(config, ref_rel, ref_rec, list(imp), list(lex))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_newest_memory_has_highest_recency() -> None:
    now = 1_000_000.0
    accessed = np.array([now - 100 * HOUR, now - 1 * HOUR, now - 5000 * HOUR, now])
    rec = recency(accessed, now, 0.995)
    assert int(np.argmax(rec)) == 3
    assert rec[3] == 1.0
    assert rec[0] == pytest.approx(0.995**100)
    # strictly decreasing with age (the original code sorted the other way round)
    order = np.argsort(-rec)
    assert order.tolist() == [3, 1, 0, 2]


def test_future_access_counts_as_now() -> None:
    assert recency(np.array([2000.0]), 1000.0, 0.9)[0] == 1.0


def test_min_max_edge_cases() -> None:
    assert min_max(np.array([])).size == 0
    np.testing.assert_array_equal(min_max(np.array([3.0, 3.0, 3.0])), [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(min_max(np.array([7.0])), [0.5])
    np.testing.assert_allclose(min_max(np.array([1.0, 2.0, 3.0])), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(min_max(np.array([-1.0, 1.0])), [0.0, 1.0])


def test_cosine_of_zero_vector_is_zero() -> None:
    sims = cosine_similarity(np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([1.0, 0.0]))
    np.testing.assert_allclose(sims, [0.0, 1.0])


def test_paper_preset_is_the_paper_formula() -> None:
    config = ScoringConfig.paper()
    assert (config.recency_weight, config.importance_weight, config.relevance_weight) == (1, 1, 1)
    assert config.lexical_weight == 0
    assert config.decay == 0.995
    assert config.normalization == "minmax"
    rel = np.array([0.2, 0.6, 0.4])
    rec = np.array([1.0, 0.5, 0.25])
    imp = np.array([0.3, 0.1, 0.9])
    got = combine(config, relevance=rel, recency=rec, importance=imp).score
    want = min_max(rel) + min_max(rec) + imp
    np.testing.assert_allclose(got, want)


def test_lexical_is_scaled_by_best_match() -> None:
    comps = combine(
        ScoringConfig.hybrid(),
        relevance=np.zeros(3),
        recency=np.ones(3),
        importance=np.zeros(3),
        lexical=np.array([0.0, 4.0, 2.0]),
    )
    np.testing.assert_allclose(comps.lexical, [0.0, 1.0, 0.5])
    none = combine(
        ScoringConfig.hybrid(),
        relevance=np.zeros(2),
        recency=np.ones(2),
        importance=np.zeros(2),
        lexical=np.zeros(2),
    )
    np.testing.assert_array_equal(none.lexical, [0.0, 0.0])


def test_top_k_orders_best_first_and_handles_edges() -> None:
    scores = np.array([0.1, 0.9, 0.5, 0.9, -1.0])
    assert top_k(scores, 2).tolist() == [1, 3]
    assert top_k(scores, 10).tolist() == [1, 3, 2, 0, 4]
    assert top_k(scores, 0).tolist() == []
    assert top_k(np.array([]), 3).tolist() == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"decay": 0.0},
        {"decay": 1.5},
        {"relevance_weight": -1.0},
        {"relevance_weight": math.nan},
        {
            "relevance_weight": 0.0,
            "recency_weight": 0.0,
            "importance_weight": 0.0,
            "lexical_weight": 0.0,
        },
        {"normalization": "zscore"},
    ],
)
def test_invalid_config_is_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ScoringConfig(**kwargs)


def test_neighbor_context_matches_plain_loop() -> None:
    rng = np.random.default_rng(7)
    h = rng.uniform(-0.2, 1.0, size=50)
    prev = np.array([-1, *range(49)])
    nxt = np.array([*range(1, 50), -1])
    prev[10] = -1  # a gap (e.g. a deleted or non-observation neighbour)
    got = neighbor_context(h, prev, nxt, 0.5)
    for i in range(50):
        best = max(0.0, h[prev[i]] if prev[i] >= 0 else 0.0, h[nxt[i]] if nxt[i] >= 0 else 0.0)
        assert got[i] == pytest.approx(h[i] + 0.5 * best)
    np.testing.assert_array_equal(neighbor_context(h, prev, nxt, 0.0), h)


def test_hybrid_default_formula() -> None:
    config = ScoringConfig.hybrid()
    rel = np.array([0.5, 0.2, 0.9])
    lex = np.array([2.0, 0.0, 4.0])
    rec = np.array([1.0, 0.5, 0.25])
    imp = np.array([0.3, 0.1, 0.9])
    prev, nxt = np.array([-1, 0, 1]), np.array([1, 2, -1])
    got = combine(
        config,
        relevance=rel,
        recency=rec,
        importance=imp,
        lexical=lex,
        lexical_max=8.0,
        neighbors=(prev, nxt),
    ).score
    h = 0.6 * rel + 0.4 * lex / 8.0
    want = [
        h[0] + 0.5 * max(0, h[1]) + 0.05 * rec[0] + 0.05 * imp[0],
        h[1] + 0.5 * max(0, h[0], h[2]) + 0.05 * rec[1] + 0.05 * imp[1],
        h[2] + 0.5 * max(0, h[1]) + 0.05 * rec[2] + 0.05 * imp[2],
    ]
    np.testing.assert_allclose(got, want)
