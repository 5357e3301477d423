"""The SQLite backend's candidate helpers against the straightforward code they replaced.

The references below are the implementations before the retrieval path was fused (neighbours
found by binary search over the observation rows, every scored row deduplicated); the fused
code must give the same neighbours and the same scores bit for bit, on partitions with deleted
rows and mixed kinds.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from langchain_reflective.backends.sqlite import candidates as cand
from langchain_reflective.backends.sqlite._arrays import TopRows
from langchain_reflective.backends.sqlite.lexical import BM25Index, QueryScores
from langchain_reflective.backends.sqlite.partition import Partition as _Partition
from langchain_reflective.backends.sqlite.partition import top_cache_rows as _top_cache_rows
from langchain_reflective.records import OBSERVATION, REFLECTION
from langchain_reflective.scoring import (
    ScoreComponents,
    ScoringConfig,
    combine,
    recency,
    score_candidates,
)
from langchain_reflective.stream import MemoryStream
from langchain_reflective.validation import as_unit_vectors as _as_unit_vectors

DIM = 24


def _neighbors(part: _Partition, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The previous and next live observation rows of each row (-1: none or not one)."""
    if rows.size == 0 or part.kinds.get(OBSERVATION) is None:
        none = np.full(rows.shape[0], -1, dtype=np.int64)
        return none, none.copy()
    pairs = part.neighbor_table()[rows]
    return pairs[:, 0], pairs[:, 1]


def _score_rows(
    part: _Partition,
    qvec: np.ndarray,
    rows: np.ndarray,
    relevance: np.ndarray,
    lex: QueryScores | None,
    config: ScoringConfig,
    now: float,
) -> tuple[np.ndarray, np.ndarray, ScoreComponents]:
    """The backend's candidate set of ``rows``, scored by the pure scorer."""
    found = cand.row_set(part, qvec, rows, relevance, lex, config, exact=True)
    np.testing.assert_array_equal(found.keys[: found.size], part.seqs.view[rows])
    comps, rec = score_candidates(config, found, now)
    return found.relevance[: found.size], rec, comps


def _score_triples(
    part: _Partition,
    qvec: np.ndarray,
    rows: np.ndarray,
    lex: QueryScores | None,
    config: ScoringConfig,
    now: float,
) -> tuple[np.ndarray, np.ndarray, ScoreComponents]:
    """The one-pass candidate set (each candidate with its own neighbour rows), scored."""
    found = cand.triple_set(part, qvec, rows, lex, exact=False)
    comps, rec = score_candidates(config, found, now)
    return found.relevance[: found.size], rec, comps


def _ref_unique(values: np.ndarray) -> np.ndarray:
    return np.unique(np.asarray(values, dtype=np.int64))


def _ref_neighbors(part: _Partition, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    none = np.full(rows.shape[0], -1, dtype=np.int64)
    code = part.kinds.get(OBSERVATION)
    if code is None or rows.size == 0:
        return none, none.copy()
    observations = np.flatnonzero(part.index.alive & (part.kind_codes.view == code))
    if observations.size == 0:
        return none, none.copy()
    pos = np.searchsorted(observations, rows)
    inside = pos < observations.size
    is_obs = np.zeros(rows.shape[0], dtype=bool)
    is_obs[inside] = observations[pos[inside]] == rows[inside]
    prev = np.where(is_obs & (pos > 0), observations[np.maximum(pos - 1, 0)], -1)
    nxt_pos = np.minimum(pos + 1, observations.size - 1)
    nxt = np.where(is_obs & (pos + 1 < observations.size), observations[nxt_pos], -1)
    return prev.astype(np.int64), nxt.astype(np.int64)


def _ref_lookup(found: tuple[np.ndarray, np.ndarray], rows: np.ndarray) -> np.ndarray:
    found_rows, found_scores = found
    out = np.zeros(rows.shape[0], dtype=np.float64)
    if found_rows.shape[0] == 0 or rows.shape[0] == 0:
        return out
    order = np.argsort(found_rows, kind="stable")
    sorted_rows = found_rows[order]
    pos = np.minimum(np.searchsorted(sorted_rows, rows), sorted_rows.shape[0] - 1)
    hit = sorted_rows[pos] == rows
    out[hit] = found_scores[order][pos[hit]]
    return out


def _ref_score_rows(
    part: _Partition,
    qvec: np.ndarray,
    rows: np.ndarray,
    relevance: np.ndarray,
    lex_sorted: tuple[np.ndarray, np.ndarray] | None,
    config: ScoringConfig,
    now: float,
) -> tuple[np.ndarray, np.ndarray, ScoreComponents]:
    lexical_max = (
        float(lex_sorted[1].max()) if lex_sorted is not None and lex_sorted[1].size else 0.0
    )
    neighbors = None
    scored = rows
    rel = relevance
    if config.neighbor_weight > 0:
        prev, nxt = _ref_neighbors(part, rows)
        scored = _ref_unique(np.concatenate([rows, prev[prev >= 0], nxt[nxt >= 0]]))
        if scored.shape[0] != rows.shape[0]:
            at = np.searchsorted(scored, rows)
            known = np.zeros(scored.shape[0], dtype=bool)
            known[at] = True
            rel = np.empty(scored.shape[0], dtype=np.float64)
            rel[at] = relevance
            rel[~known] = part.index.scores(qvec, scored[~known])
        else:
            order = np.argsort(rows)
            scored, rel = rows[order], relevance[order]
        prev_s, nxt_s = _ref_neighbors(part, scored)
        prev_i = np.searchsorted(scored, prev_s)
        nxt_i = np.searchsorted(scored, nxt_s)
        prev_ok = (prev_s >= 0) & (prev_i < scored.shape[0])
        prev_ok[prev_ok] = scored[prev_i[prev_ok]] == prev_s[prev_ok]
        nxt_ok = (nxt_s >= 0) & (nxt_i < scored.shape[0])
        nxt_ok[nxt_ok] = scored[nxt_i[nxt_ok]] == nxt_s[nxt_ok]
        neighbors = (np.where(prev_ok, prev_i, -1), np.where(nxt_ok, nxt_i, -1))
    lexical = _ref_lookup(lex_sorted, scored) if lex_sorted is not None else None
    rec = np.asarray(recency(part.accessed.view[scored], now, config.decay), dtype=np.float64)
    comps = combine(
        config,
        relevance=rel,
        recency=rec,
        importance=part.importance.view[scored],
        lexical=lexical,
        lexical_max=lexical_max if lex_sorted is not None else None,
        neighbors=neighbors,
    )
    if scored is rows:
        return rel, rec, comps
    at = np.searchsorted(scored, rows)
    picked = ScoreComponents(
        relevance=comps.relevance[at],
        lexical=comps.lexical[at],
        recency=comps.recency[at],
        importance=comps.importance[at],
        score=comps.score[at],
    )
    return rel[at], rec[at], picked


def _random_partition(rng: np.random.Generator, n: int, kinds_mix: bool) -> _Partition:
    part = _Partition("ns", DIM, 0)
    start = 0
    while start < n:  # appended in uneven batches, and runs of queued one-row adds
        size = int(min(n - start, rng.choice([1, 1, 7, 50, 300])))
        vectors = rng.standard_normal((size, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        kinds = (
            [str(k) for k in rng.choice([OBSERVATION, REFLECTION, "plan"], size, p=[0.7, 0.2, 0.1])]
            if kinds_mix
            else [OBSERVATION] * size
        )
        stamps = 1.7e9 + rng.uniform(0, 3e7, size)
        importance = rng.integers(1, 11, size) / 10
        if size == 1:
            part.queue_one(
                start + 10, vectors[0], float(stamps[0]), float(importance[0]), kinds[0], "t"
            )
        else:
            part.flush_queue()  # the stream flushes queued rows before any other append
            part.append(
                np.arange(start + 10, start + 10 + size),
                vectors,
                stamps,
                stamps,
                importance,
                kinds,
                None,
            )
        start += size
    part.flush_queue()
    return part


def _check_neighbors(part: _Partition, rng: np.random.Generator) -> None:
    n = len(part)
    rows = np.arange(n, dtype=np.int64)
    prev, nxt = _neighbors(part, rows)
    ref_prev, ref_nxt = _ref_neighbors(part, rows)
    np.testing.assert_array_equal(prev, ref_prev)
    np.testing.assert_array_equal(nxt, ref_nxt)
    table = part.neighbor_table()
    assert table.shape == (n, 2)
    np.testing.assert_array_equal(table[:, 0], ref_prev)
    np.testing.assert_array_equal(table[:, 1], ref_nxt)
    some = rng.integers(0, n, 40).astype(np.int64)
    np.testing.assert_array_equal(np.stack(_neighbors(part, some)), table[some].T)


@pytest.mark.parametrize("kinds_mix", [False, True])
def test_neighbor_table_equals_the_binary_search_reference(kinds_mix: bool) -> None:
    rng = np.random.default_rng(11 + kinds_mix)
    part = _random_partition(rng, 900, kinds_mix)
    _check_neighbors(part, rng)
    for _ in range(6):  # deletes, appends, one-row appends, in turns, checked after each
        part.delete_rows(np.unique(rng.integers(0, len(part), 60)).astype(np.int64))
        _check_neighbors(part, rng)
        more = _random_partition(rng, int(rng.integers(1, 200)), kinds_mix)
        vectors = more.index.vectors()
        kinds = {code: kind for kind, code in more.kinds.items()}
        part.append(
            more.seqs.view + len(part) + 10_000,
            np.ascontiguousarray(vectors),
            more.created.view,
            more.accessed.view,
            more.importance.view,
            [kinds[int(c)] for c in more.kind_codes.view],
            None,
        )
        _check_neighbors(part, rng)
        part.queue_one(
            10**7 + len(part),
            vectors[0],
            1.7e9,
            0.5,
            OBSERVATION if rng.random() < 0.7 else "x",
            "t",
        )
        part.flush_queue()
        _check_neighbors(part, rng)


def test_neighbor_table_without_observations() -> None:
    part = _Partition("ns", DIM, 0)
    vectors = np.eye(DIM, dtype=np.float32)[:5]
    part.append(np.arange(5), vectors, [1.0] * 5, [1.0] * 5, [0.5] * 5, [REFLECTION] * 5, None)
    np.testing.assert_array_equal(part.neighbor_table(), np.full((5, 2), -1))
    prev, nxt = _neighbors(part, np.arange(5, dtype=np.int64))
    assert prev.tolist() == nxt.tolist() == [-1] * 5
    part.append(
        np.arange(5, 8), vectors[:3], [2.0] * 3, [2.0] * 3, [0.5] * 3, [OBSERVATION] * 3, None
    )
    assert part.neighbor_table().tolist() == [[-1, -1]] * 5 + [[-1, 6], [5, 7], [6, -1]]


CONFIGS = [
    ScoringConfig.hybrid(),
    ScoringConfig.hybrid(context=False),
    ScoringConfig.paper(),
    ScoringConfig.dense(),
    ScoringConfig(
        relevance_weight=0.5,
        lexical_weight=0.5,
        recency_weight=0.2,
        importance_weight=0.1,
        normalization="minmax",
        neighbor_weight=0.3,
    ),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.name}-{c.normalization}")
@pytest.mark.parametrize("kinds_mix", [False, True])
def test_score_rows_equal_the_reference(config: ScoringConfig, kinds_mix: bool) -> None:
    rng = np.random.default_rng(5 + kinds_mix)
    part = _random_partition(rng, 1500, kinds_mix)
    part.delete_rows(np.unique(rng.integers(0, 1500, 200)).astype(np.int64))
    words = [f"w{i}" for i in range(60)]
    lexical = BM25Index()
    lexical.add([" ".join(rng.choice(words, 5)) for _ in range(len(part))])
    lexical.remove(np.flatnonzero(~part.index.alive).tolist())
    alive = np.flatnonzero(part.index.alive)
    for trial in range(12):
        qvec = _as_unit_vectors(rng.standard_normal((1, DIM)), 1, "test")[0]
        query = " ".join(rng.choice(words, 3))
        if trial == 0:
            rows = alive  # the exact path: every live row
        else:
            size = int(rng.integers(1, 300))
            rows = np.sort(rng.choice(alive, size, replace=False)).astype(np.int64)
        relevance = part.index.scores(qvec, rows).astype(np.float64)
        lex_sorted = lexical.search(query) if config.uses_lexical else None
        now = 1.7e9 + 3.5e7
        ref = _ref_score_rows(part, qvec, rows, relevance, lex_sorted, config, now)
        with lexical.query_scores(query) as scores:
            lex = scores if config.uses_lexical else None
            got = _score_rows(part, qvec, rows, relevance, lex, config, now)
            _assert_same_scores(got, ref)
            if trial and cand.fused(part, config):  # the one-pass candidate scorer
                fused = _score_triples(part, qvec, rows, lex, config, now)
                _assert_same_scores(fused, ref)


def _assert_same_scores(got: tuple, ref: tuple) -> None:
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])
    for name in ("relevance", "lexical", "recency", "importance", "score"):
        np.testing.assert_array_equal(getattr(got[2], name), getattr(ref[2], name), name)


def test_fused_scorer_applies_to_the_default_scoring_only() -> None:
    part = _random_partition(np.random.default_rng(0), 50, kinds_mix=False)
    assert cand.fused(part, ScoringConfig.hybrid())
    for config in CONFIGS[1:]:
        assert not cand.fused(part, config)
    small = _Partition("ns", 8, 0)  # FAISS's small-dimension kernels: never fused
    small.append([1], np.eye(8, dtype=np.float32)[:1], [1.0], [1.0], [0.5], [OBSERVATION], None)
    assert not cand.fused(small, ScoringConfig.hybrid())
    facts = _random_partition(np.random.default_rng(0), 50, kinds_mix=False)
    facts.kinds = {REFLECTION: 0}  # no observations: no neighbours
    assert not cand.fused(facts, ScoringConfig.hybrid())


def test_top_cache_rows_follow_the_set() -> None:
    rng = np.random.default_rng(2)
    part = _Partition("ns", DIM, 0)
    cache = TopRows(16)
    values = rng.random(500)
    cache.rebuild(values, None)
    first = _top_cache_rows(part, cache)
    np.testing.assert_array_equal(first, cache.rows())
    assert _top_cache_rows(part, cache) is first  # unchanged set: the same array
    cache.offer(np.array([3, 4]), np.array([2.0, 2.0]))
    np.testing.assert_array_equal(_top_cache_rows(part, cache), cache.rows())
    assert {3, 4} <= set(_top_cache_rows(part, cache).tolist())
    cache.rebuild(rng.random(500), None)  # a new set of the same size
    np.testing.assert_array_equal(_top_cache_rows(part, cache), cache.rows())
    other = TopRows(16)
    other.rebuild(values, None)
    np.testing.assert_array_equal(_top_cache_rows(part, other), other.rows())


def _ref_candidates(
    stream: MemoryStream,
    part: _Partition,
    qvec: np.ndarray,
    k: int,
    mask: np.ndarray | None,
    lex_sorted: tuple[np.ndarray, np.ndarray] | None,
    config: ScoringConfig,
    exact_limit: int,
) -> np.ndarray | None:
    import math

    assert part.ann is not None
    want = max(stream.ann_candidates, 4 * k)
    # past DENSE_DEPTH_FROM live memories, deeper by the square root of the growth
    depth = max(1.0, math.sqrt(part.live / cand.DENSE_DEPTH_FROM))
    dense_want = math.ceil(want * depth)
    nprobe = stream.ann_nprobe
    alive = part.index.alive
    if mask is not None:
        matched = int(np.count_nonzero(mask))
        if matched <= exact_limit or 4 * k >= matched:
            return None
        spread = math.ceil(part.live / matched)  # as deep among the filter's rows
        dense_want = int(min(part.live, math.ceil(want * min(16, depth * spread))))
        if 4 * matched < part.live:  # a selective filter: twice the lists
            nprobe *= 2
    dense = part.rows_of(part.ann.search(qvec, dense_want, nprobe))
    probed_hits = np.zeros(0, dtype=np.int64)
    if lex_sorted is not None:  # rows of the probed IVF lists that match the query lexically
        faiss = pytest.importorskip("faiss")
        index = part.ann._index
        nprobe = min(nprobe, index.nlist)
        _, lists = index.quantizer.search(qvec.reshape(1, -1).astype(np.float32), nprobe)
        invlists = faiss.extract_index_ivf(index).invlists
        seqs = [
            faiss.rev_swig_ptr(invlists.get_ids(int(i)), invlists.list_size(int(i))).copy()
            for i in lists[0]
            if i >= 0 and invlists.list_size(int(i))
        ]
        looked_at = part.rows_of(np.concatenate(seqs)) if seqs else probed_hits
        probed_hits = looked_at[np.isin(looked_at, lex_sorted[0])]
    pending = part.ann_upto + np.flatnonzero(alive[part.ann_upto :])
    if pending.shape[0]:
        sims = part.index.scores(qvec, pending)
        pending = pending[np.argsort(-sims, kind="stable")[:dense_want]]
    lexical = np.zeros(0, dtype=np.int64)
    if lex_sorted is not None:  # the best BM25 rows, of those the filter keeps
        ranked = lex_sorted[0] if mask is None else lex_sorted[0][mask[lex_sorted[0]]]
        lexical = ranked[:want]
    pieces = [dense, probed_hits, pending, lexical]
    if config.neighbor_weight > 0:
        near = max(4 * k, want // 4)
        best = _ref_unique(np.concatenate([dense[:near], pending[:near], lexical[:near]]))
        prev, nxt = _ref_neighbors(part, best)
        pieces += [prev[prev >= 0], nxt[nxt >= 0]]
    top_weight = max(config.relevance_weight, config.lexical_weight, 1e-12)
    if config.recency_weight > 0:  # equal access times tie in any order: see its own test
        count = max(4 * k, min(want, math.ceil(want * config.recency_weight / top_weight)))
        pieces.append(cand.recent_rows(part, alive, count))
    for weight, cache, values in (
        (config.importance_weight, part.important_top, part.importance.view),
    ):
        if weight > 0:
            count = max(4 * k, min(want, math.ceil(want * weight / top_weight)))
            rows = cache.rows() if cache.valid else None
            if rows is not None:
                usable = alive[rows] & (values[rows] >= cache.floor)
                if int(usable.sum()) < min(count, cache.size):
                    rows = None
            if rows is None:
                cache.rebuild(values, alive)
                rows = cache.rows()
            rows = rows[alive[rows]]
            if rows.shape[0] > count:
                rows = rows[np.argpartition(-values[rows], count - 1)[:count]]
            pieces.append(rows)
    rows = _ref_unique(np.concatenate(pieces))
    keep = alive[rows] if mask is None else mask[rows]
    out: np.ndarray = rows[keep]
    if out.shape[0] < k and mask is not None:
        return None
    return out


@pytest.mark.parametrize("depth_from", [cand.DENSE_DEPTH_FROM, 400])
def test_candidates_equal_the_reference(depth_from: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gather`` equals a plain reference; with ``depth_from`` 400 the ~1,600 memories gather
    twice the dense candidates, as 400,000 memories would by default."""
    from datetime import UTC, datetime, timedelta

    from langchain_reflective.backends.base import RetrievalFilter
    from tests.fakes import WordEmbeddings

    rng = np.random.default_rng(9)
    words = [f"w{i}" for i in range(150)]
    now = datetime(2024, 1, 1, tzinfo=UTC)
    emb = WordEmbeddings(32)
    with MemoryStream(emb, exact_limit=400, ann_candidates=64) as stream:
        for batch in range(8):
            texts = [" ".join(rng.choice(words, 6)) for _ in range(200)]
            kinds = [str(k) for k in rng.choice([OBSERVATION, REFLECTION], 200, p=[0.8, 0.2])]
            imps = (rng.integers(1, 11, 200) / 10).tolist()
            stream.add(texts, importances=imps, kinds=kinds, now=now + timedelta(hours=batch))
        stream.retrieve("w5 w6", k=3, touch=True, now=now + timedelta(days=2))  # builds caches
        records = stream.recent(None)
        stream.delete([r.id for r in records[::17]])
        fresh = [f"w1 w2 w3 fresh row {i}" for i in range(20)]
        stream.add(fresh, importances=0.9, now=now + timedelta(days=3))  # not in the IVF yet
        part = stream.backend._partitions["default"]
        assert part.ann is not None and part.ann_upto < len(part)  # pending rows exist too
        monkeypatch.setattr(cand, "DENSE_DEPTH_FROM", depth_from)
        limit = 200  # filters matching more take the approximate path (as exact_limit)
        selective = 0  # gathers under a filter keeping under a quarter, above the limit
        for i in range(15):
            query = " ".join(rng.choice(words, 4))
            qvec = _as_unit_vectors([emb.embed_query(query)], 1, "q")[0]
            for config in (ScoringConfig.hybrid(), ScoringConfig.paper(), ScoringConfig.dense()):
                lexical = stream.backend._lexical(part)
                lex_sorted = lexical.search(query) if config.uses_lexical else None
                for flt in (
                    None,
                    RetrievalFilter(kinds=frozenset({OBSERVATION})),
                    RetrievalFilter(kinds=frozenset({REFLECTION})),  # under a quarter
                ):
                    mask = None if flt is None else cand.filter_mask(part, flt)
                    matched = 0 if mask is None else int(mask.sum())
                    selective += limit < matched and 4 * matched < part.live
                    k = 1 + i % 5
                    with lexical.query_scores(query) as scores:
                        lex = scores if config.uses_lexical else None
                        got = cand.gather(
                            part,
                            qvec,
                            k,
                            mask,
                            lex,
                            config,
                            exact_limit=limit,
                            ann_candidates=stream.ann_candidates,
                            ann_nprobe=stream.ann_nprobe,
                        )
                    ref = _ref_candidates(stream, part, qvec, k, mask, lex_sorted, config, limit)
                    assert (got is None) == (ref is None)
                    if got is not None:
                        np.testing.assert_array_equal(got, ref)
            if i % 3 == 0:  # touched rows change the recency candidates
                stream.retrieve(query, k=2, touch=True, now=now + timedelta(days=4 + i))
        assert selective  # (the reflections' filter: more than the limit, under a quarter)


def test_top_rows_are_reused_only_while_nothing_changed() -> None:
    rng = np.random.default_rng(4)
    part = _random_partition(rng, 2000, kinds_mix=False)
    alive = part.index.alive
    values = part.accessed.view
    cache = TopRows(part.important_top.size)  # a cache over the access times

    def fresh(n: int) -> np.ndarray:
        return cand.top_rows(_Partition("x", DIM, 0), _copy_top(cache), values, alive, n, 0)

    first = cand.top_rows(part, cache, values, alive, 40, 0)
    assert cand.top_rows(part, cache, values, alive, 40, 0) is first  # reused
    best = set(np.argsort(-values)[:40].tolist())
    assert set(first.tolist()) == best
    dropped = int(first[0])  # in the set: lowering it changes only the values
    values[dropped] = values.min() - 1
    lowered = cand.top_rows(part, cache, values, alive, 40, 1)
    assert dropped not in lowered.tolist()
    assert set(lowered.tolist()) == set(np.argsort(-values)[:40].tolist())
    values[int(np.argmin(values))] = values.max() + 1  # changed in place: new version
    raised = int(np.argmax(values))
    cache.offer(np.array([raised]), np.array([values[raised]]))
    again = cand.top_rows(part, cache, values, alive, 40, 2)
    assert raised in again.tolist() and again is not first
    assert cand.top_rows(part, cache, values, alive, 30, 2).shape == (30,)
    assert cand.top_rows(part, cache, values, alive, 40, 2) is not again
    part.delete_rows(again[:5])  # deletions drop rows
    after = cand.top_rows(part, cache, values, part.index.alive, 40, 2)
    assert not set(again[:5].tolist()) & set(after.tolist())
    np.testing.assert_array_equal(np.sort(after), np.sort(fresh(40)))


def _copy_top(cache: TopRows) -> TopRows:
    copy = TopRows(cache.size)
    copy._rows = set(cache._rows)
    copy.floor = cache.floor
    copy.valid = cache.valid
    return copy


@pytest.mark.parametrize("spread", [0, 2, 3, 6, 40, 100_000])
def test_rows_of_equals_a_dictionary_while_the_partition_grows(spread: int) -> None:
    """Consecutive keys (``spread`` 0: by subtraction) and keys with gaps (other namespaces'
    keys in between: by the key table up to a spread of eight keys a row, by binary search
    beyond): the same rows every way, before and after appends (the table extends and
    grows), deleted rows included, unknown keys dropped, order and repeats kept."""
    rng = np.random.default_rng(spread)
    part = _Partition("ns", DIM, 0)
    reference: dict[int, int] = {}
    last = 1000
    for batch in (300, 1, 700, 2000):
        gaps = rng.integers(1, 2 * spread, size=batch) if spread else np.ones(batch, np.int64)
        seqs = last + np.cumsum(gaps)
        last = int(seqs[-1])
        for seq in seqs.tolist():
            reference[seq] = len(reference)
        vectors = np.eye(DIM, dtype=np.float32)[np.arange(batch) % DIM]
        ones = [1.0] * batch
        part.append(seqs, vectors, ones, ones, [0.5] * batch, [OBSERVATION] * batch, None)
        part.delete_rows(np.array([len(part) - 1]))  # tombstones keep their rows
        held = np.fromiter(reference, dtype=np.int64)
        wanted = np.concatenate(
            (
                rng.choice(held, 500),  # repeats and any order
                np.array([999, last + 1, held[0] + 1 if spread > 1 else 999]),  # unknown
                held[-3:],
            )
        )
        expected = [reference[s] for s in wanted.tolist() if s in reference]
        got = part.rows_of(wanted)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, expected)
    assert (part._keys is None) == (spread > 8 or spread == 0)  # a table only where needed


def test_score_rows_without_observations_equal_the_reference() -> None:
    rng = np.random.default_rng(21)
    part = _Partition("ns", DIM, 0)
    vectors = rng.standard_normal((300, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    stamps = 1.7e9 + rng.uniform(0, 3e7, 300)
    part.append(np.arange(300), vectors, stamps, stamps, [0.5] * 300, [REFLECTION] * 300, None)
    lexical = BM25Index()
    lexical.add([f"w{i % 7} w{i % 11}" for i in range(300)])
    rows = np.arange(0, 300, 3, dtype=np.int64)
    qvec = _as_unit_vectors(rng.standard_normal((1, DIM)), 1, "test")[0]
    relevance = part.index.scores(qvec, rows).astype(np.float64)
    config = ScoringConfig.hybrid()
    assert not cand.fused(part, config)
    ref = _ref_score_rows(part, qvec, rows, relevance, lexical.search("w3 w5"), config, 1.8e9)
    with lexical.query_scores("w3 w5") as lex:
        got = _score_rows(part, qvec, rows, relevance, lex, config, 1.8e9)
    _assert_same_scores(got, ref)


@pytest.mark.parametrize("share", [1.0, 0.6, 0.1])
@pytest.mark.parametrize("deleted", [False, True])
def test_score_rows_every_way_of_finding_neighbours(share: float, deleted: bool) -> None:
    # all rows (row = position), most rows (position table), few rows (binary search)
    rng = np.random.default_rng(int(share * 10) + deleted)
    part = _random_partition(rng, 800, kinds_mix=True)
    if deleted:
        part.delete_rows(np.unique(rng.integers(0, 800, 90)).astype(np.int64))
    alive = np.flatnonzero(part.index.alive)
    rows = np.sort(rng.choice(alive, int(len(alive) * share), replace=False)).astype(np.int64)
    lexical = BM25Index()
    lexical.add([f"w{i % 13} w{i % 17}" for i in range(800)])
    qvec = _as_unit_vectors(rng.standard_normal((1, DIM)), 1, "test")[0]
    relevance = part.index.scores(qvec, rows).astype(np.float64)
    for config in (ScoringConfig.hybrid(), ScoringConfig.paper()):
        ref = _ref_score_rows(part, qvec, rows, relevance, lexical.search("w4 w9"), config, 1.8e9)
        with lexical.query_scores("w4 w9") as lex:
            got = _score_rows(part, qvec, rows, relevance, lex, config, 1.8e9)
        _assert_same_scores(got, ref)


@pytest.mark.parametrize("gaps", [False, True])
def test_triple_set_rows_carry_their_memorys_values(gaps: bool) -> None:
    # every row of the one-pass set (candidates and neighbour rows) holds the key and the
    # values of the memory it stands for, whether keys come by arithmetic (consecutive
    # sequence numbers) or by lookup (gaps, e.g. another namespace's rows in between)
    rng = np.random.default_rng(31 + gaps)
    n = 900
    part = _Partition("ns", DIM, 0)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    kinds = [str(k) for k in rng.choice([OBSERVATION, REFLECTION], n, p=[0.8, 0.2])]
    created = 1.7e9 + np.sort(rng.uniform(0, 3e7, n))
    accessed = created + rng.uniform(0, 1e5, n)
    seqs = 5 + (np.cumsum(rng.integers(1, 4, n)) if gaps else np.arange(n))
    importance = rng.integers(1, 11, n) / 10
    part.append(seqs, vectors, created, accessed, importance, kinds, None)
    part.delete_rows(np.unique(rng.integers(0, n, 60)).astype(np.int64))
    lexical = BM25Index()
    lexical.add([f"w{i % 13} w{i % 17}" for i in range(n)])
    alive = np.flatnonzero(part.index.alive)
    rows = np.sort(rng.choice(alive, 200, replace=False)).astype(np.int64)
    qvec = _as_unit_vectors(rng.standard_normal((1, DIM)), 1, "test")[0]
    with lexical.query_scores("w4 w9") as lex:
        found = cand.triple_set(part, qvec, rows, lex, exact=False)
        at = part.rows_of(found.keys)  # the row of every key (a missing neighbour: row 0)
        assert at.shape == found.keys.shape
        np.testing.assert_array_equal(at[: found.size], rows)
        np.testing.assert_array_equal(found.accessed, part.accessed.view[at])
        np.testing.assert_array_equal(found.created, part.created.view[at])
        np.testing.assert_array_equal(found.importance, part.importance.view[at])
        np.testing.assert_array_equal(found.kinds, part.kind_codes.view[at])
        np.testing.assert_array_equal(found.relevance, part.index.scores(qvec, at))
        np.testing.assert_array_equal(found.lexical, lex.lookup(at))
    prev, nxt = _ref_neighbors(part, rows)
    for links, expected in ((found.previous, prev), (found.next, nxt)):
        assert links is not None
        head = links[: found.size]
        np.testing.assert_array_equal(head >= 0, expected >= 0)
        np.testing.assert_array_equal(at[head[head >= 0]], expected[expected >= 0])
        assert (links[found.size :] == -1).all()  # neighbour rows are not linked themselves


def test_recent_rows_follow_appends_touches_and_deletes() -> None:
    rng = np.random.default_rng(31)
    part = _random_partition(rng, 1200, kinds_mix=True)
    values = part.accessed.view
    values[rng.integers(0, 1200, 300)] = 1.7e9  # many equal access times: ties

    def check(n: int) -> None:
        alive = part.index.alive
        got = cand.recent_rows(part, alive, n)
        assert len(set(got.tolist())) == got.shape[0] == min(n, int(alive.sum()))
        assert alive[got].all()
        live = np.flatnonzero(alive)
        expected = np.sort(part.accessed.view[live])[::-1][:n]
        np.testing.assert_array_equal(np.sort(part.accessed.view[got])[::-1], expected)

    check(40)
    before = cand.recent_rows(part, part.index.alive, 40)
    assert cand.recent_rows(part, part.index.alive, 40) is before  # nothing changed
    stamp = 1.8e9
    for step in range(120):
        stamp += float(rng.integers(0, 3))  # equal stamps now and then
        action = step % 6
        if action in (0, 1, 2):  # a retrieval touched some rows
            rows = np.unique(rng.integers(0, len(part), 10)).astype(np.int64)
            rows = rows[part.index.alive[rows]]
            part.touched(rows, stamp)
            part.accessed.view[rows] = stamp
        elif action == 3:  # appended rows
            more = _random_partition(rng, int(rng.integers(1, 30)), kinds_mix=False)
            part.append(
                more.seqs.view + 10**6 + len(part),
                np.ascontiguousarray(more.index.vectors()),
                more.created.view,
                more.accessed.view + float(rng.integers(0, 2)) * 1e8,
                more.importance.view,
                [OBSERVATION] * len(more),
                None,
            )
        elif action == 4 and step % 12 == 4:  # deleted rows
            part.delete_rows(np.unique(rng.integers(0, len(part), 5)).astype(np.int64))
        elif action == 5 and step % 18 == 5:  # a touch back in time (a past ``now``)
            rows = np.flatnonzero(part.index.alive)[:3]
            part.touched(rows, 1.0)
            part.accessed.view[rows] = 1.0
        check(40)
    check(25)  # another n: recomputed
    for _ in range(70):  # touches while nothing asks (an exact-path partition): bounded
        part.touched(np.array([0]), stamp)
    assert part._recent_touched is None or len(part._recent_touched) <= 64
    check(25)


def test_trusted_candidates_build_what_the_validating_constructor_builds() -> None:
    # the unchecked constructor sets every field (a field added to CandidateSet must be added
    # there too) and makes an equal set
    import dataclasses
    import inspect

    from langchain_reflective.backends.types import CandidateSet, trusted_candidates

    names = [f.name for f in dataclasses.fields(CandidateSet)]
    assert list(inspect.signature(trusted_candidates).parameters) == names
    rng = np.random.default_rng(3)
    values = {
        "keys": np.arange(6, dtype=np.int64),
        "size": 4,
        "relevance": rng.random(6),
        "accessed": rng.random(6),
        "created": rng.random(6),
        "importance": rng.random(6),
        "kinds": np.zeros(6, dtype=np.int32),
        "kind_names": (OBSERVATION,),
        "lexical": rng.random(6),
        "lexical_max": 2.5,
        "previous": np.array([-1, 4, -1, 5, -1, -1], dtype=np.int64),
        "next": np.full(6, -1, dtype=np.int64),
        "exact": False,
    }
    checked = CandidateSet(**values)
    trusted = trusted_candidates(**values)
    assert type(trusted) is CandidateSet and len(trusted) == 4
    for name in names:
        assert getattr(trusted, name) is getattr(checked, name)


def test_trusted_scored_equals_the_dataclass() -> None:
    import dataclasses
    import inspect

    from langchain_reflective.backends.types import trusted_record, trusted_scored
    from langchain_reflective.records import ScoredMemory

    names = [f.name for f in dataclasses.fields(ScoredMemory)]
    assert list(inspect.signature(trusted_scored).parameters) == names
    when = datetime(2026, 1, 2, tzinfo=UTC)
    record = trusted_record("a", "t", OBSERVATION, when, when, 0.5, "given", (), 0, "ns", {})
    built = trusted_scored(record, 1.25, 0.5, 0.25, 0.75, 0.5)
    assert built == ScoredMemory(
        record=record, score=1.25, relevance=0.5, lexical=0.25, recency=0.75, importance=0.5
    )


_NOW = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize("as_numpy", [np.float32, np.float64])
def test_a_numpy_query_vector_retrieves_like_a_list(as_numpy: type) -> None:
    # embeddings that return numpy vectors take a shortcut into the unit vector; the ranking
    # and every score are those of the same vector given as a list
    from langchain_core.embeddings import Embeddings

    rng = np.random.default_rng(8)
    docs = rng.standard_normal((40, DIM)).astype(np.float32)
    query = rng.standard_normal(DIM).astype(as_numpy)

    class Fixed(Embeddings):
        def __init__(self, numpy: bool) -> None:
            self.numpy = numpy

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [docs[int(t.split()[1])].tolist() for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return query if self.numpy else query.tolist()  # type: ignore[return-value]

    texts = [f"doc {i} w{i % 5}" for i in range(40)]
    hits = []
    for numpy in (False, True):
        with MemoryStream(Fixed(numpy), embedding_model="fixed") as stream:
            stream.add(texts, importances=[0.5] * 40, now=_NOW)
            hits.append(stream.retrieve("w3", k=5, touch=False, now=_NOW))
    assert [(h.record.text, h.score, h.relevance) for h in hits[0]] == [
        (h.record.text, h.score, h.relevance) for h in hits[1]
    ]
