"""One query's BM25 scores: the dense per-row buffer a query fills, and what is read from it.

``BM25Index.query_scores`` (in ``lexical``) builds a :class:`QueryScores`; candidate generation
reads it (``lookup``, ``matched``, ``top``, ``max``) and hands the buffer back with ``release``.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

__all__ = ["QueryScores", "top_matches"]

_SAMPLE_STRIDE = 16
""":meth:`QueryScores.top` estimates its score floor from every this-many-th posting."""


def _keys_above(
    rows: npt.NDArray[np.int32], scores: npt.NDArray[np.float32], floor: np.float32, k: int
) -> npt.NDArray[np.int64] | None:
    """:func:`_row_keys` of the postings scoring at least ``floor``; ``None`` when they hold
    fewer than ``k`` rows."""
    keep = scores >= floor
    keys = _row_keys(rows[keep], scores[keep])
    return keys if keys.shape[0] >= k else None


def _row_keys(
    rows: npt.NDArray[np.int32], scores: npt.NDArray[np.float32]
) -> npt.NDArray[np.int64]:
    """One int64 key per distinct row, sorted by score descending, then row ascending.

    The key is ``(0x7FFFFFFF - score bits) << 32 | row``: the bits of a float32 that is not
    negative order like the float (BM25 scores are positive), and a row's postings all carry
    its one score, so equal keys are one row's.
    """
    keys = (0x7FFFFFFF - scores.view(np.int32).astype(np.int64)) << 32
    keys |= rows
    keys.sort()
    if keys.shape[0] < 2:
        return keys
    first = np.empty(keys.shape[0], dtype=np.bool_)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    out: npt.NDArray[np.int64] = keys[first]
    return out


def top_matches(
    rows: npt.NDArray[np.int64], scores: npt.NDArray[np.float32], k: int | None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """The ``k`` best of ``(rows, scores)`` (all when ``None``): by score descending, ties by
    row ascending (the order of :meth:`BM25Index.search`)."""
    n = rows.shape[0]
    if k is not None and k < n:
        kth = np.partition(scores, n - k)[n - k]
        keep = scores >= kth
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))
    if k is not None:
        order = order[:k]
    return rows[order], scores[order]


class QueryScores:
    """One query's BM25 scores over every row (from :meth:`BM25Index.query_scores`).

    Holds a dense per-row buffer of the scores (the index's, until :meth:`release`): looking up
    any rows is one gather. Scores are the float32 values :meth:`BM25Index.search` returns.
    Use it as a context manager, or call :meth:`release` when done.
    """

    __slots__ = ("_dense", "_lock", "_matches", "_max", "_postings", "_terms")

    def __init__(
        self,
        dense: npt.NDArray[np.float64] | None,
        postings: npt.NDArray[np.int32] | None,
        lock: threading.Lock | None,
        terms: int = 0,
    ) -> None:
        self._dense = dense
        self._postings = postings
        self._lock = lock
        self._terms = terms
        """Distinct query terms among ``postings`` (a row has one posting per term it holds)."""
        self._matches: tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]] | None = None
        self._max: float | None = None

    def __enter__(self) -> QueryScores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Zero the buffer and hand it back to the index (idempotent)."""
        dense, postings, lock = self._dense, self._postings, self._lock
        self._dense = self._postings = self._lock = None
        if dense is not None and postings is not None:
            if self._matches is not None:  # the same rows, once each and as int64: cheaper
                dense[self._matches[0]] = 0.0
            else:
                dense[postings] = 0.0
        if lock is not None:
            lock.release()

    def matches(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """``(rows, scores)`` of every matching row: rows ascending, float32 scores."""
        if self._matches is None:
            if self._dense is None or self._postings is None:
                self._matches = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
            else:
                ordered = np.sort(self._postings)
                first = np.empty(ordered.shape[0], dtype=np.bool_)
                first[0] = True
                np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
                rows = ordered[first].astype(np.int64)
                self._matches = (rows, self._dense[rows].astype(np.float32))
        return self._matches

    def max(self) -> float:
        """The best score (0 when nothing matches)."""
        if self._max is None:
            if self._matches is not None or self._dense is None or self._postings is None:
                scores = self.matches()[1]
                self._max = float(scores.max()) if scores.shape[0] else 0.0
            else:  # rounding to float32 keeps the order: the largest posting's, rounded
                self._max = float(np.float32(self._dense[self._postings].max()))
        return self._max

    def top(self, k: int) -> npt.NDArray[np.int64]:
        """The ``k`` best rows, best first (ties by row ascending), as :meth:`BM25Index.search`.

        Found among the postings without sorting every matching row (what :meth:`matches`
        does; it was a third of a 1M-memory retrieval's lexical half). Any score floor works
        if the postings at or above it hold at least ``k`` distinct rows: a row below it has
        ``k`` rows ahead. Floors tried, cheapest first: one estimated from every
        :data:`_SAMPLE_STRIDE`-th posting, meant to keep a few times ``k`` postings; then the
        ``k * terms``-th best posting's score, exact (a row has one posting per query term
        it holds, so ``k * terms`` postings hold ``k`` rows); then no floor.
        """
        dense, postings = self._dense, self._postings
        if k <= 0 or self._matches is not None or dense is None or postings is None:
            return self._top_of_matches(k)
        scores = dense[postings].astype(np.float32)  # a row's score once per posting
        n = scores.shape[0]
        want = k * max(self._terms, 1)
        keys: npt.NDArray[np.int64] | None = None
        sample = scores[::_SAMPLE_STRIDE]
        above = max(4 * k // _SAMPLE_STRIDE, 2)  # sampled postings kept: ~4k of all
        if n > 4 * want and sample.shape[0] > above:
            floor = np.partition(sample, sample.shape[0] - above)[-above]
            keys = _keys_above(postings, scores, floor, k)
        if keys is None and n > want:
            floor = np.partition(scores, n - want)[n - want]
            keys = _keys_above(postings, scores, floor, k)
            if keys is None:  # fewer rows than ``want`` postings promise: count every match
                return self._top_of_matches(k)
        if keys is None:
            keys = _row_keys(postings, scores)
        best: npt.NDArray[np.int64] = keys[:k] & 0xFFFFFFFF
        if best.shape[0] and self._max is None:
            self._max = float(np.float32(dense[best[0]]))  # the best score of all
        return best

    def top_among(self, mask: npt.NDArray[np.bool_], k: int) -> npt.NDArray[np.int64]:
        """:meth:`top` among the rows where ``mask`` (one flag per row) is true: the ``k``
        best of them, best first (ties by row ascending)."""
        rows, scores = self.matches()
        keep = mask[rows]
        best, _ = top_matches(rows[keep], scores[keep], k)
        return best

    def _top_of_matches(self, k: int) -> npt.NDArray[np.int64]:
        """:meth:`top` through :meth:`matches` (every matching row, sorted)."""
        rows, scores = self.matches()
        best, best_scores = top_matches(rows, scores, k)
        if best_scores.shape[0] and self._max is None:
            self._max = float(best_scores[0])  # the best score of all (best first)
        return best

    def matched(self, rows: npt.NDArray[np.integer]) -> npt.NDArray[np.bool_]:
        """Whether each of ``rows`` matches the query (a positive score)."""
        if self._dense is None:
            return np.zeros(np.shape(rows)[0], dtype=np.bool_)
        out: npt.NDArray[np.bool_] = self._dense[rows] > 0
        return out

    def lookup(self, rows: npt.NDArray[np.integer]) -> npt.NDArray[np.float64]:
        """Scores of ``rows`` (any rows of the index; 0 where nothing matches), as float64."""
        if self._dense is None:
            return np.zeros(np.shape(rows)[0], dtype=np.float64)
        out: npt.NDArray[np.float64] = self._dense[rows].astype(np.float32).astype(np.float64)
        return out
