"""Retrieval scoring: pure, vectorised numpy. Nothing here reads the clock or does I/O.

A memory's score for a query is a weighted sum of components::

    score = w_rel * N(relevance) + w_lex * lexical + w_rec * N(recency) + w_imp * importance

* ``relevance``: cosine similarity of the query and memory embeddings;
* ``lexical``: BM25 score of the memory for the query divided by the best BM25 score among the
  candidates (so in [0, 1]; 0 when nothing matches lexically);
* ``recency``: ``decay ** hours_since_last_access``;
* ``importance``: the memory's importance in [0, 1];
* ``N``: min-max normalisation over the candidate set (``normalization="minmax"``, the paper's
  choice; all-equal -> 0.5) or the identity (``normalization="none"``).

:meth:`ScoringConfig.paper` reproduces the Generative Agents formula exactly;
:meth:`ScoringConfig.hybrid` is the package default (see ``docs/benchmarks.md`` for why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from langchain_reflective.backends.base import CandidateSet

__all__ = [
    "ScoreComponents",
    "ScoringConfig",
    "combine",
    "cosine_similarity",
    "min_max",
    "neighbor_context",
    "recency",
    "score_candidates",
    "top_k",
]

FloatArray = npt.NDArray[np.floating]
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """How retrieval ranks memories. Frozen; build variants with ``dataclasses.replace``."""

    relevance_weight: float = 1.0
    """Weight of embedding relevance (cosine similarity)."""
    lexical_weight: float = 0.0
    """Weight of the lexical (BM25) relevance; 0 disables the lexical index for scoring."""
    recency_weight: float = 1.0
    """Weight of recency (``decay ** hours since last access``)."""
    importance_weight: float = 1.0
    """Weight of importance (rating / 10)."""
    decay: float = 0.995
    """Recency decay factor per hour (0 < decay <= 1)."""
    normalization: Literal["minmax", "none"] = "minmax"
    """``"minmax"``: min-max normalise relevance and recency over the candidates (paper);
    ``"none"``: use raw values, so a memory's score does not depend on the other candidates."""
    neighbor_weight: float = 0.0
    """Context from neighbouring memories: a memory's relevance ``h`` (dense + lexical) gains
    ``neighbor_weight * max(0, h of the memory just before, h of the memory just after)``.
    Evidence in conversations is often spread over adjacent turns."""
    lexical_context: bool = False
    """Index each observation for BM25 together with the text of the observation before it
    (set on the stream's own config: it decides what the lexical index holds)."""
    name: str = "custom"
    """A label carried into traces and benchmark tables."""

    def __post_init__(self) -> None:
        weights = (
            self.relevance_weight,
            self.lexical_weight,
            self.recency_weight,
            self.importance_weight,
        )
        if not np.isfinite(self.neighbor_weight) or self.neighbor_weight < 0:
            raise ValueError(f"neighbor_weight must be finite and >= 0, got {self.neighbor_weight}")
        if any(not np.isfinite(w) or w < 0 for w in weights):
            raise ValueError(f"scoring weights must be finite and >= 0, got {weights}")
        if sum(weights) == 0:
            raise ValueError("at least one scoring weight must be > 0")
        if not 0.0 < self.decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {self.decay}")
        if self.normalization not in ("minmax", "none"):
            raise ValueError(
                f"normalization must be 'minmax' or 'none', got {self.normalization!r}"
            )

    @classmethod
    def paper(cls) -> ScoringConfig:
        """The Generative Agents formula (Park et al. 2023) with equal weights.

        Recency ``0.995 ** hours`` and cosine relevance, both min-max normalised over the
        candidates, plus importance; no lexical component. On long histories this ranks mostly by
        recency (see ``docs/benchmarks.md``).
        """
        return cls(
            relevance_weight=1.0,
            lexical_weight=0.0,
            recency_weight=1.0,
            importance_weight=1.0,
            decay=0.995,
            normalization="minmax",
            name="paper",
        )

    @classmethod
    def hybrid(cls, *, context: bool = True) -> ScoringConfig:
        """The default: dense + lexical relevance with neighbour context; recency and importance
        break near-ties.

        ``h = 0.6 * cosine + 0.4 * bm25 / max bm25`` (BM25 over each observation plus the one
        before it), ``relevance = h + 0.5 * max(0, h_prev, h_next)``, ``score = relevance +
        0.05 * recency + 0.05 * importance``. On LoCoMo (495 questions) it reaches R@5 0.698 and
        R@10 0.783 against 0.501/0.596 for stemmed BM25, the best single baseline; recency and
        importance weights above ~0.2 start drowning relevance (``docs/benchmarks.md``).

        Args:
            context: use the neighbour and previous-observation context. Right for streams
                of related observations (conversations, an agent's experience); pass
                ``False`` when memories are independent facts stored back to back, where a
                neighbour's relevance would pull unrelated facts up.
        """
        return cls(
            relevance_weight=0.6,
            lexical_weight=0.4,
            recency_weight=0.05,
            importance_weight=0.05,
            decay=0.995,
            normalization="none",
            neighbor_weight=0.5 if context else 0.0,
            lexical_context=context,
            name="hybrid" if context else "hybrid-facts",
        )

    @classmethod
    def dense(cls) -> ScoringConfig:
        """Dense relevance only (cosine), like a plain vector-store retriever."""
        return cls(
            relevance_weight=1.0,
            lexical_weight=0.0,
            recency_weight=0.0,
            importance_weight=0.0,
            normalization="none",
            name="dense",
        )

    @property
    def uses_lexical(self) -> bool:
        """Whether the lexical index takes part in scoring."""
        return self.lexical_weight > 0


@dataclass(frozen=True, slots=True)
class ScoreComponents:
    """Per-candidate score components (arrays of equal length)."""

    relevance: FloatArray
    lexical: FloatArray
    recency: FloatArray
    importance: FloatArray
    score: FloatArray


def recency(last_access: FloatArray, now: float, decay: float) -> FloatArray:
    """``decay ** hours`` since each memory's last access.

    Args:
        last_access: POSIX seconds of each memory's last access.
        now: POSIX seconds of "now" (passed in; this module never reads the clock).
        decay: decay factor per hour.

    Memories accessed "in the future" (clock skew) count as just accessed (recency 1).
    """
    hours = np.maximum(now - np.asarray(last_access, dtype=np.float64), 0.0) / SECONDS_PER_HOUR
    return np.power(decay, hours)


def min_max(values: FloatArray) -> FloatArray:
    """Min-max normalise to [0, 1]; an empty input stays empty, all-equal values map to 0.5."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return arr
    lo = float(arr.min())
    hi = float(arr.max())
    if hi - lo <= 1e-12:
        return np.full_like(arr, 0.5)
    return (arr - lo) / (hi - lo)


def cosine_similarity(matrix: FloatArray, query: FloatArray) -> FloatArray:
    """Cosine similarity of each row of ``matrix`` with ``query`` (zero vectors give 0)."""
    m = np.asarray(matrix, dtype=np.float32)
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    norms = np.linalg.norm(m, axis=1) * np.linalg.norm(q)
    dots = m @ q
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)
    return out.astype(np.float64)


def neighbor_context(
    hybrid: FloatArray,
    prev: npt.NDArray[np.integer],
    next_: npt.NDArray[np.integer],
    weight: float,
) -> FloatArray:
    """``hybrid + weight * max(0, hybrid[prev], hybrid[next])`` per element.

    Args:
        hybrid: per-memory dense + lexical relevance.
        prev: index (into ``hybrid``) of each memory's previous neighbour, ``-1`` for none.
        next_: index of each memory's next neighbour, ``-1`` for none.
        weight: how much of the better neighbour's relevance is added.
    """
    h = np.asarray(hybrid, dtype=np.float64)
    if weight == 0 or h.size == 0:
        return h
    p = np.asarray(prev)
    n = np.asarray(next_)
    before = np.where(p >= 0, h[np.maximum(p, 0)], 0.0)
    after = np.where(n >= 0, h[np.maximum(n, 0)], 0.0)
    return h + weight * np.maximum(0.0, np.maximum(before, after))


def combine(
    config: ScoringConfig,
    *,
    relevance: FloatArray,
    recency: FloatArray,
    importance: FloatArray,
    lexical: FloatArray | None = None,
    lexical_max: float | None = None,
    neighbors: tuple[npt.NDArray[np.integer], npt.NDArray[np.integer]] | None = None,
) -> ScoreComponents:
    """Combine raw components of one candidate set into scores.

    Args:
        config: weights, normalisation.
        relevance: raw cosine similarities.
        recency: raw recency values (see :func:`recency`).
        importance: importances in [0, 1].
        lexical: raw BM25 scores (any non-negative scale) or ``None``.
        lexical_max: the best BM25 score over the whole partition (default: over these
            candidates); passing it keeps scores independent of the candidate set.
        neighbors: ``(prev, next)`` indices into these arrays for the neighbour context
            (``config.neighbor_weight``); ``-1`` where a memory has no neighbour.

    Returns:
        The components as used in the sum (lexical scaled to [0, 1]; relevance and recency
        normalised when ``config.normalization == "minmax"``) and the scores.
    """
    rel = np.asarray(relevance, dtype=np.float64)
    rec = np.asarray(recency, dtype=np.float64)
    imp = np.asarray(importance, dtype=np.float64)
    if lexical is None:
        lex = np.zeros_like(rel)
    else:
        lex = np.asarray(lexical, dtype=np.float64)
        top = lexical_max if lexical_max is not None else (float(lex.max()) if lex.size else 0.0)
        lex = lex / top if top > 0 else np.zeros_like(lex)
    if config.normalization == "minmax":
        rel_n, rec_n = min_max(rel), min_max(rec)
    else:
        rel_n, rec_n = rel, rec
    hybrid: FloatArray = config.relevance_weight * rel_n + config.lexical_weight * lex
    if neighbors is not None and config.neighbor_weight > 0:
        hybrid = neighbor_context(hybrid, neighbors[0], neighbors[1], config.neighbor_weight)
    score = hybrid + config.recency_weight * rec_n + config.importance_weight * imp
    return ScoreComponents(relevance=rel_n, lexical=lex, recency=rec_n, importance=imp, score=score)


def top_k(scores: FloatArray, k: int) -> npt.NDArray[np.intp]:
    """Indices of the ``k`` highest scores, best first; ties keep the earlier index first."""
    arr = np.asarray(scores)
    n = arr.shape[0]
    if k <= 0 or n == 0:
        return np.empty(0, dtype=np.intp)
    if k >= n:
        return np.argsort(-arr, kind="stable")
    part = np.argpartition(-arr, k - 1)[:k]
    # order the selected ones by score desc, then by index for stable ties
    order = np.lexsort((part, -arr[part]))
    out: npt.NDArray[np.intp] = part[order]
    return out


def score_candidates(
    config: ScoringConfig, candidates: CandidateSet, now: float
) -> tuple[ScoreComponents, FloatArray]:
    """Score a backend's candidate set (see ``BaseMemoryBackend.candidates``).

    :func:`combine` over every row of the set (candidates and neighbour rows, so min-max
    normalisation and the neighbour context see the same values whichever backend produced
    them), cut to the candidates.

    Args:
        config: weights, normalisation, decay.
        candidates: the rows and their raw components.
        now: POSIX seconds of "now" (passed in; this module never reads the clock).

    Returns:
        The components and scores of the candidates (``candidates.size`` entries each), and
        their raw recency (before any normalisation).
    """
    m = candidates.size
    if config.normalization == "none" and m < candidates.keys.shape[0]:
        return _score_unnormalised(config, candidates, now)
    rec = np.asarray(recency(candidates.accessed, now, config.decay), dtype=np.float64)
    neighbors = None
    if candidates.previous is not None and candidates.next is not None:
        neighbors = (candidates.previous, candidates.next)
    comps = combine(
        config,
        relevance=candidates.relevance,
        recency=rec,
        importance=candidates.importance,
        lexical=candidates.lexical,
        lexical_max=candidates.lexical_max if candidates.lexical is not None else None,
        neighbors=neighbors,
    )
    if m == candidates.keys.shape[0]:
        return comps, rec
    picked = ScoreComponents(
        relevance=comps.relevance[:m],
        lexical=comps.lexical[:m],
        recency=comps.recency[:m],
        importance=comps.importance[:m],
        score=comps.score[:m],
    )
    return picked, rec[:m]


def _score_unnormalised(
    config: ScoringConfig, candidates: CandidateSet, now: float
) -> tuple[ScoreComponents, FloatArray]:
    """:func:`score_candidates` without normalisation: neighbour rows only lend their dense +
    lexical relevance, so recency and the sum are computed for the candidates alone. Every
    element is computed as :func:`combine` computes it (the same bits), with fewer temporaries
    (this runs on every retrieval)."""
    m = candidates.size
    n = candidates.keys.shape[0]
    rel = np.asarray(candidates.relevance, dtype=np.float64)
    top = candidates.lexical_max
    context = (
        candidates.previous is not None
        and candidates.next is not None
        and config.neighbor_weight > 0
    )
    # with context, one more slot: row -1 (no neighbour) reads the 0.0 at the end
    padded = np.empty(n + 1 if context else n, dtype=np.float64)
    hybrid = padded[:n]
    np.multiply(rel, config.relevance_weight, out=hybrid)
    if candidates.lexical is None or not top > 0:
        lex = np.zeros(n, dtype=np.float64)
    else:
        lex = np.asarray(candidates.lexical, dtype=np.float64) / top
    hybrid += lex * config.lexical_weight
    head = hybrid[:m]
    if context:
        assert candidates.previous is not None and candidates.next is not None
        padded[n] = 0.0
        side = padded.take(candidates.previous[:m])
        np.maximum(side, padded.take(candidates.next[:m]), out=side)
        np.maximum(side, 0.0, out=side)
        side *= config.neighbor_weight
        head = head + side
    rec = np.asarray(recency(candidates.accessed[:m], now, config.decay), dtype=np.float64)
    imp = np.asarray(candidates.importance[:m], dtype=np.float64)
    score = rec * config.recency_weight
    score += head  # (x + y == y + x bit for bit: the sum combine computes)
    score += imp * config.importance_weight
    comps = ScoreComponents(
        relevance=rel[:m], lexical=lex[:m], recency=rec, importance=imp, score=score
    )
    return comps, rec
