"""Candidate generation of the SQLite backend: which rows of a partition to score, and their
components as a :class:`~langchain_reflective.backends.base.CandidateSet`.

Up to ``exact_limit`` live memories a namespace is scored exactly: every matching row is a
candidate. Above it, the candidates are the best rows of the IVF index, the best BM25 matches,
the most recently accessed and the most important memories, and any memory not yet in the IVF
index (see :func:`gather`). With ``normalization="none"`` (the default scoring) a memory's score
does not depend on which other memories are candidates, so the approximate path returns the
exact ranking whenever the exact top ``k`` are among the candidates.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.base import CandidateSet, RetrievalFilter
from langchain_reflective.backends.sqlite._arrays import TopRows
from langchain_reflective.backends.sqlite.index.faiss_flat import _BY_INDEX_MIN_DIM
from langchain_reflective.backends.sqlite.partition import (
    Partition,
    top_cache_rows,
    unique_rows,
)
from langchain_reflective.backends.types import trusted_candidates
from langchain_reflective.records import OBSERVATION
from langchain_reflective.scoring import ScoringConfig

if TYPE_CHECKING:
    from langchain_reflective.backends.sqlite.lexical import BM25Index, QueryScores

__all__ = [
    "DEFAULT_ANN_CANDIDATES",
    "DEFAULT_ANN_NPROBE",
    "DEFAULT_EXACT_LIMIT",
    "filter_mask",
    "fused",
    "gather",
    "partition_candidates",
    "recent_rows",
    "row_set",
    "top_rows",
    "triple_set",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

DEFAULT_EXACT_LIMIT = 20_000
"""Namespaces with more live memories than this use the approximate candidate path."""
DEFAULT_ANN_CANDIDATES = 128
"""Dense and lexical candidates the approximate path gathers (at least ``4 * k``)."""
DEFAULT_ANN_NPROBE = 8
"""IVF lists the approximate path searches."""
SELECTIVE_SPREAD = 4
"""A filter keeping less than ``1 / SELECTIVE_SPREAD`` of a namespace's live memories probes
twice ``ann_nprobe`` IVF lists: few of its rows lie in the query's nearest lists, and its best
ones are spread over more (``benchmarks/filtered_agreement.py``, 1M memories, a filter keeping
3%: top-10 agreement 0.973 with 8 lists, 0.992 with 16, ~0.3 ms dearer; without a filter 16
lists gain 0.002)."""
DENSE_DEPTH_FROM = 100_000
"""Above this many live memories the dense candidates grow with the square root of the
namespace (``ann_candidates * sqrt(live / DENSE_DEPTH_FROM)``), and a filter's are as deep among
its rows (times the spread, at most 16 x ``ann_candidates``). The more memories, the more lie
within a near-tie of the tenth best, where a memory of middling cosine reaches the top 10
through its neighbour's relevance, recency and importance together: at 1M memories top-10
agreement with exact scoring went 0.968 -> 0.999 unfiltered and 0.933 -> 0.998 under a filter
keeping 60%, for ~0.1-0.6 ms on 4-6 ms (``benchmarks/filtered_agreement.py``). Up to 100k,
where 128 agree at 0.999, nothing changes."""


def partition_candidates(
    part: Partition,
    lexical: BM25Index | None,
    query: str,
    vector: F32,
    *,
    k: int,
    filter: RetrievalFilter,
    config: ScoringConfig,
    exact: bool,
    exact_limit: int | None,
    ann_candidates: int,
    ann_nprobe: int,
) -> CandidateSet:
    """The candidate set of one query over a loaded, non-empty partition (the caller holds its
    lock and has brought its IVF index up to date).

    Exact (every matching live row) when ``exact``, when the partition has no IVF index or is
    too small for ``k``, or when a filter leaves too few rows; else the rows of :func:`gather`,
    built in one pass by :func:`triple_set` when :func:`fused` applies. ``lexical`` is the
    partition's BM25 index, needed when ``config.uses_lexical``.
    """
    mask = filter_mask(part, filter) if filter.restricts_rows else None
    lex = lexical.query_scores(query) if lexical is not None and config.uses_lexical else None
    try:
        rows: I64 | None = None
        if not exact and part.ann is not None and 4 * k < part.live:
            rows = gather(
                part,
                vector,
                k,
                mask,
                lex,
                config,
                exact_limit=exact_limit,
                ann_candidates=ann_candidates,
                ann_nprobe=ann_nprobe,
            )
        if rows is not None and rows.size and filter.min_relevance is None and fused(part, config):
            return triple_set(part, vector, rows, lex, exact=False)
        complete = rows is None
        if rows is None:  # exact: every (matching) live row is a candidate
            rows = np.flatnonzero(part.index.alive if mask is None else mask)
        if rows.size == 0:
            return CandidateSet.empty()
        relevance = part.index.scores(vector, rows).astype(np.float64)
        if filter.min_relevance is not None:
            keep = relevance >= filter.min_relevance
            if not complete and int(np.count_nonzero(keep)) < k:
                # the threshold removed too many candidates (as a filter's rows may, see
                # gather): score every matching row, so k of them are found if k exist
                complete = True
                rows = np.flatnonzero(part.index.alive if mask is None else mask)
                relevance = part.index.scores(vector, rows).astype(np.float64)
                keep = relevance >= filter.min_relevance
            rows, relevance = rows[keep], relevance[keep]
            if rows.size == 0:
                return CandidateSet.empty()
        return row_set(part, vector, rows, relevance, lex, config, exact=complete)
    finally:
        if lex is not None:
            lex.release()


def top_rows(
    part: Partition,
    cache: TopRows,
    values: npt.NDArray[np.float64],
    alive: npt.NDArray[np.bool_],
    n: int,
    version: int,
) -> I64:
    """The ``n`` live rows with the largest ``values`` (from a cache kept across calls).

    ``version`` changes whenever ``values`` change in place; the answer is reused while the
    cached set, the deletions, the values and ``n`` are all unchanged.
    """
    results = part._top_results
    if results is None:
        results = part._top_results = {}
    deleted = part.index.n_deleted
    known = results.get(id(cache))
    if (
        known is not None
        and cache.valid
        and known[0] is cache._rows
        and known[1:5] == (len(cache._rows), deleted, version, n)
    ):
        return known[5]
    rows = top_cache_rows(part, cache) if cache.valid else None
    if rows is not None:
        usable = alive[rows] & (values[rows] >= cache.floor)
        if int(usable.sum()) < min(n, cache.size):
            rows = None
    if rows is None:
        cache.rebuild(values, alive)
        rows = top_cache_rows(part, cache)
    rows = rows[alive[rows]]
    if rows.shape[0] > n:
        rows = rows[np.argpartition(-values[rows], n - 1)[:n]]
    results[id(cache)] = (cache._rows, len(cache._rows), deleted, version, n, rows)
    return rows


def recent_rows(part: Partition, alive: npt.NDArray[np.bool_], n: int) -> I64:
    """The ``n`` most recently accessed live rows (ties in any order).

    Kept across calls and updated from what changed since: rows appended and rows touched
    (whose access time only went up) can displace the previous answer, nothing else can.
    Deletions, a lowered access time or a different ``n`` recompute it from every row.
    """
    values = part.accessed.view
    size = len(part)
    deleted = part.index.n_deleted
    known = part._recent
    rows: I64
    if (
        known is not None
        and not part._recent_stale
        and known[1] == n
        and known[3] == deleted
        and known[2] <= size
    ):
        rows, _, upto, _ = known
        pending = part._recent_touched or []
        if upto == size and not pending:
            return rows
        pool = [rows, *pending]
        if upto < size:
            pool.append(upto + np.flatnonzero(alive[upto:]))
        rows = unique_rows(np.concatenate(pool))
    else:
        rows = np.flatnonzero(alive)
    if rows.shape[0] > n:
        rows = rows[np.argpartition(-values[rows], n - 1)[:n]]
    part._recent = (rows, n, size, deleted)
    part._recent_touched = None
    part._recent_stale = False
    return rows


def filter_mask(part: Partition, filter: RetrievalFilter) -> npt.NDArray[np.bool_]:
    mask = np.array(part.index.alive, copy=True)
    if filter.kinds is not None:
        codes = [part.kinds[k] for k in filter.kinds if k in part.kinds]
        mask &= np.isin(part.kind_codes.view, codes)
    if filter.created_after is not None:
        mask &= part.created.view >= filter.created_after.timestamp()
    if filter.created_before is not None:
        mask &= part.created.view < filter.created_before.timestamp()
    return mask


def gather(
    part: Partition,
    qvec: F32,
    k: int,
    mask: npt.NDArray[np.bool_] | None,
    lex: QueryScores | None,
    config: ScoringConfig,
    *,
    exact_limit: int | None,
    ann_candidates: int,
    ann_nprobe: int,
) -> I64 | None:
    """Rows to score exactly on a large partition, or ``None`` to score every row.

    The union of: the IVF index's best rows (more of them in a large namespace:
    :data:`DENSE_DEPTH_FROM`; from twice ``ann_nprobe`` lists under a filter keeping less than
    a quarter of the rows: :data:`SELECTIVE_SPREAD`), the rows of the probed
    IVF lists that match the query lexically, rows not yet in the IVF index, the best BM25 rows
    among those matching the filter, the neighbours of the best dense and BM25 rows, the most
    recently accessed and the most important rows -- restricted to live rows matching the
    filter. A filter matching at most ``exact_limit`` rows is scored exactly instead. Sorted
    ascending.
    """
    assert part.ann is not None
    want = max(ann_candidates, 4 * k)
    depth = dense_depth(part.live)
    dense_want = math.ceil(want * depth)
    nprobe = ann_nprobe
    alive = part.index.alive
    if mask is not None:
        matched = int(np.count_nonzero(mask))
        if exact_limit is None or matched <= exact_limit or 4 * k >= matched:
            return None
        spread = math.ceil(part.live / matched)
        dense_want = min(part.live, math.ceil(want * min(16, depth * spread)))
        if spread > SELECTIVE_SPREAD:
            nprobe = 2 * ann_nprobe
    best_seqs, probed = part.ann.search_lists(qvec, dense_want, nprobe)
    dense = part.rows_of(best_seqs)  # best first
    pieces: list[I64] = [dense]
    if lex is not None and probed.shape[0]:
        # every row of the probed IVF lists that also matches the query lexically: fairly
        # close in meaning and sharing a word scores like the dense and BM25 leaders (0.6 *
        # cosine + 0.4 * BM25) without being in either top list
        looked_at = part.rows_of(probed)
        pieces.append(looked_at[lex.matched(looked_at)])
    pending: I64 | None = None
    if part.ann_upto < len(part):
        pending = part.ann_upto + np.flatnonzero(alive[part.ann_upto :])
        if pending.shape[0]:  # rows not in the IVF index yet: exact search over them
            sims = part.index.scores(qvec, pending)
            pending = pending[np.argsort(-sims, kind="stable")[:dense_want]]
            pieces.append(pending)
    lexical: I64 | None = None
    if lex is not None:
        # best first; with a filter, among its rows: the namespace's best BM25 rows may all
        # fail a selective one (benchmarks/filtered_agreement.py, 100k memories, a filter
        # matching 6,000: top-10 agreement with exact scoring 0.822 that way, 0.996 this way)
        lexical = lex.top(want) if mask is None else lex.top_among(mask, want)
        pieces.append(lexical)
    if config.neighbor_weight > 0 and part.kinds.get(OBSERVATION) is not None:
        # a memory also scores through its neighbours' relevance: the neighbours of the most
        # relevant candidates are candidates too (-1 for none, dropped below)
        near = max(4 * k, want // 4)
        best = [dense[:near]]
        if pending is not None:
            best.append(pending[:near])
        if lexical is not None:
            best.append(lexical[:near])
        top = np.concatenate(best) if len(best) > 1 else best[0]
        pieces.append(part.neighbor_table()[top].ravel())
    # the most recent / most important rows, as many as their weight can matter: a component
    # weighted 0.05 against relevance's 0.6 cannot lift a row past many relevant ones
    top_weight = max(config.relevance_weight, config.lexical_weight, 1e-12)
    if config.recency_weight > 0:
        count = max(4 * k, min(want, math.ceil(want * config.recency_weight / top_weight)))
        pieces.append(recent_rows(part, alive, count))
    if config.importance_weight > 0:
        count = max(4 * k, min(want, math.ceil(want * config.importance_weight / top_weight)))
        important = part.important_top
        pieces.append(top_rows(part, important, part.importance.view, alive, count, 0))
    rows = unique_rows(np.concatenate(pieces))
    if rows.shape[0] and rows[0] < 0:
        rows = rows[int(np.searchsorted(rows, 0)) :]
    keep = alive[rows] if mask is None else mask[rows]
    out: I64 = rows[keep]
    if out.shape[0] < k and mask is not None:
        return None  # the filter removed too many candidates: score exactly
    return out


def dense_depth(live: int) -> float:
    """How many times ``ann_candidates`` dense candidates to gather in a namespace of ``live``
    memories (:data:`DENSE_DEPTH_FROM`)."""
    return max(1.0, math.sqrt(live / DENSE_DEPTH_FROM))


def fused(part: Partition, config: ScoringConfig) -> bool:
    """Whether :func:`triple_set` applies: unnormalised scoring with lexical and neighbour
    context on a partition with observations, in a dimension where FAISS computes every
    cosine the same way whatever its position (its small-dimension kernels round by position)."""
    return (
        config.normalization == "none"
        and config.neighbor_weight > 0
        and config.uses_lexical
        and part.index.dimension > _BY_INDEX_MIN_DIM
        and part.kinds.get(OBSERVATION) is not None
    )


def _kind_names(part: Partition) -> tuple[str, ...]:
    names = part.kind_names
    if len(names) != len(part.kinds):
        names = part.kind_names = tuple(part.kinds)  # codes are handed out in order
    return names


def row_set(
    part: Partition,
    qvec: F32,
    rows: I64,
    relevance: F64,
    lex: QueryScores | None,
    config: ScoringConfig,
    *,
    exact: bool,
) -> CandidateSet:
    """The candidate set of ``rows`` (ascending, distinct) with their cosine ``relevance``.

    With ``config.neighbor_weight`` the neighbours of the candidates that are not candidates
    themselves are appended as neighbour rows, so a memory's score depends only on itself and
    its neighbours, never on which other memories are candidates.
    """
    m = rows.shape[0]
    previous: I64 | None = None
    following: I64 | None = None
    scored = rows
    if config.neighbor_weight > 0 and part.kinds.get(OBSERVATION) is None:
        previous = np.full(m, -1, dtype=np.int64)  # no observations: no neighbours
        following = previous.copy()
    elif config.neighbor_weight > 0 and m:
        # previous then next neighbour of every candidate; -1 for none
        linked = part.neighbor_table()[rows].T.ravel()
        n = len(part)
        if m == n:  # every row (rows is 0..n-1): a neighbour's row is its position
            index = linked.copy()
            extra_at = np.zeros(0, dtype=np.int64)
        else:
            if 4 * m >= n:  # most rows (the exact path): a row -> position table
                position = np.full(n, -1, dtype=np.int64)
                position[rows] = np.arange(m)
                index = np.where(linked >= 0, position[linked], -1)
                known = index >= 0
            else:  # a few candidates: binary search among them
                pos = np.searchsorted(rows, linked)
                np.minimum(pos, m - 1, out=pos)
                known = rows[pos] == linked  # -1 never matches a row
                index = np.where(known, pos, -1)
            extra_at = np.flatnonzero(linked >= 0)
            extra_at = extra_at[~known[extra_at]]
            # neighbours that are not candidates are appended after them (repeats are
            # harmless: only the candidates' scores are used)
            index[extra_at] = np.arange(m, m + extra_at.shape[0])
        previous, following = index[:m], index[m:]
        if extra_at.shape[0]:
            scored = np.concatenate((rows, linked[extra_at]))
            pad = np.full(extra_at.shape[0], -1, dtype=np.int64)
            previous = np.concatenate((previous, pad))
            following = np.concatenate((following, pad))
    rel = relevance
    if scored is not rows:
        rel = np.concatenate((relevance, part.index.scores(qvec, scored[m:])))
    return CandidateSet(
        keys=part.seqs.view[scored],
        size=m,
        relevance=np.asarray(rel, dtype=np.float64),
        accessed=part.accessed.view[scored],
        created=part.created.view[scored],
        importance=part.importance.view[scored],
        kinds=part.kind_codes.view[scored],
        kind_names=_kind_names(part),
        lexical=lex.lookup(scored) if lex is not None else None,
        lexical_max=lex.max() if lex is not None else 0.0,
        previous=previous,
        next=following,
        exact=exact,
    )


def triple_set(
    part: Partition, qvec: F32, rows: I64, lex: QueryScores | None, *, exact: bool
) -> CandidateSet:
    """:func:`row_set` for an approximate candidate set with neighbour context, in one pass.

    Every candidate's previous and next neighbour gets its own neighbour row (rows ``m + i``
    and ``2m + i`` for candidate ``i``; a missing one reads row 0 and is not linked), so one
    FAISS call computes every cosine and one lookup every BM25 score, and no neighbour has to
    be found among the candidates. Only for :func:`fused` configurations (the cosines are the
    same bits at any position there). Runs on every large retrieval, so each column is one
    ``take`` (cheaper than fancy indexing) and the set is built without re-validation.
    """
    m = rows.shape[0]
    pairs = part.neighbor_table().take(rows, axis=0)  # (m, 2): previous, next; -1 for none
    ids = np.empty(3 * m, dtype=np.int64)  # candidates, then previous, then next neighbours
    ids[:m] = rows
    sides = ids[m:].reshape(2, m)
    sides[...] = pairs.T
    has = sides >= 0
    np.maximum(sides, 0, out=sides)  # a missing neighbour reads row 0 (and is not linked)
    links = np.full((2, 3 * m), -1, dtype=np.int64)  # previous row, next row of every row
    np.copyto(links[:, :m], _span(3 * m)[m:].reshape(2, m), where=has)
    seqs = part.seqs.view
    first = int(seqs[0])
    consecutive = int(seqs[-1]) - first == seqs.shape[0] - 1  # then keys need no lookup
    keys = ids + first if consecutive else seqs.take(ids)
    # cosines with each candidate next to its neighbours, (row, previous, next): adjacent
    # rows of the matrix, so the kernel reads one stretch of memory per candidate (~7% faster
    # than three passes); then back in the set's order, as float64, in one copy
    cosine = part.index.scores(qvec, np.ascontiguousarray(ids.reshape(3, m).T).reshape(-1))
    relevance = np.ascontiguousarray(cosine.reshape(m, 3).T, dtype=np.float64).reshape(-1)
    return trusted_candidates(
        keys=keys,
        size=m,
        relevance=relevance,
        accessed=part.accessed.view.take(ids),
        created=part.created.view.take(ids),
        importance=part.importance.view.take(ids),
        kinds=part.kind_codes.view.take(ids),
        kind_names=_kind_names(part),
        lexical=lex.lookup(ids) if lex is not None else None,
        lexical_max=lex.max() if lex is not None else 0.0,
        previous=links[0],
        next=links[1],
        exact=exact,
    )


_SPAN: list[I64] = [np.arange(4096, dtype=np.int64)]
_SPAN[0].flags.writeable = False


def _span(n: int) -> I64:
    """``np.arange(n)`` as a read-only view of a cached array (grown when too short)."""
    span = _SPAN[0]
    if span.shape[0] < n:
        span = np.arange(max(n, 2 * span.shape[0]), dtype=np.int64)
        span.flags.writeable = False
        _SPAN[0] = span
    return span[:n]
