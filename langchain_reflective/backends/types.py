"""Value types every backend shares: records built without re-validation, the reflection
counter and its updates, pending memories, record batches, the retrieval filter and the
candidate set a backend hands to pure scoring (see :mod:`langchain_reflective.backends.base`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from types import MemberDescriptorType
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.errors import InvalidFilterError, InvalidMemoryError
from langchain_reflective.records import MemoryRecord, ScoredMemory, utc

__all__ = [
    "F32",
    "F64",
    "I32",
    "I64",
    "CandidateSet",
    "CounterUpdate",
    "PendingMemory",
    "RecordBatch",
    "ReflectionState",
    "RetrievalFilter",
    "concat_candidates",
    "pending_pairs",
    "trusted_candidates",
    "trusted_record",
    "trusted_scored",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

_new = object.__new__

_FILTER_KEYS = {
    "kind",
    "kinds",
    "created_after",
    "created_before",
    "min_relevance",
    "namespace",
}

# -- value types shared by every backend -------------------------------------------------------

_RECORD_FIELDS = (
    "id",
    "text",
    "kind",
    "created_at",
    "last_accessed_at",
    "importance",
    "importance_source",
    "evidence",
    "depth",
    "namespace",
    "metadata",
)
_FAST_RECORDS = tuple(f.name for f in fields(MemoryRecord)) == _RECORD_FIELDS
# the slot descriptors of the fields: setting through them is what object.__setattr__ does
# for a slotted class, minus the attribute lookup on every call
_SLOTS = [MemoryRecord.__dict__.get(name) for name in _RECORD_FIELDS]
if _FAST_RECORDS and all(isinstance(d, MemberDescriptorType) for d in _SLOTS):
    (
        _set_id,
        _set_text,
        _set_kind,
        _set_created_at,
        _set_last_accessed_at,
        _set_importance,
        _set_importance_source,
        _set_evidence,
        _set_depth,
        _set_namespace,
        _set_metadata,
    ) = (d.__set__ for d in _SLOTS)  # type: ignore[union-attr]
else:  # pragma: no cover - guards against records.py changing under us
    _FAST_RECORDS = False


def trusted_record(
    id: str,
    text: str,
    kind: str,
    created_at: datetime,
    last_accessed_at: datetime,
    importance: float,
    importance_source: str,
    evidence: tuple[str, ...],
    depth: int,
    namespace: str,
    metadata: Mapping[str, Any],
) -> MemoryRecord:
    """Build a :class:`MemoryRecord` from values that were already validated (for backends).

    Skips ``__post_init__`` (which re-validates the text, re-serialises the metadata, converts
    the timestamps): the add path validates every value once before a backend stores it, and
    backends read back what they wrote. The values must be exactly what validation would
    produce (UTC datetimes, a float importance, a tuple of str evidence, a plain dict of
    metadata). Falls back to the validating constructor if ``MemoryRecord`` changes shape.
    """
    if not _FAST_RECORDS:  # pragma: no cover - guards against records.py changing under us
        return MemoryRecord(
            id=id,
            text=text,
            kind=kind,
            created_at=created_at,
            last_accessed_at=last_accessed_at,
            importance=importance,
            importance_source=importance_source,  # type: ignore[arg-type]
            evidence=evidence,
            depth=depth,
            namespace=namespace,
            metadata=metadata,
        )
    record = _new(MemoryRecord)
    _set_id(record, id)
    _set_text(record, text)
    _set_kind(record, kind)
    _set_created_at(record, created_at)
    _set_last_accessed_at(record, last_accessed_at)
    _set_importance(record, importance)
    _set_importance_source(record, importance_source)
    _set_evidence(record, evidence)
    _set_depth(record, depth)
    _set_namespace(record, namespace)
    _set_metadata(record, metadata)
    return record


_SCORED_FIELDS = ("record", "score", "relevance", "lexical", "recency", "importance")
_SCORED_SLOTS = [ScoredMemory.__dict__.get(name) for name in _SCORED_FIELDS]
_FAST_SCORED = tuple(f.name for f in fields(ScoredMemory)) == _SCORED_FIELDS and all(
    isinstance(d, MemberDescriptorType) for d in _SCORED_SLOTS
)
if _FAST_SCORED:
    (
        _set_record,
        _set_score,
        _set_relevance,
        _set_lexical,
        _set_recency,
        _set_scored_importance,
    ) = (d.__set__ for d in _SCORED_SLOTS)  # type: ignore[union-attr]


def trusted_scored(
    record: MemoryRecord,
    score: float,
    relevance: float,
    lexical: float,
    recency: float,
    importance: float,
) -> ScoredMemory:
    """A :class:`ScoredMemory` built from plain floats (what a retrieval returns, ``k`` per
    call) without the frozen dataclass's per-field ``object.__setattr__`` lookups."""
    if not _FAST_SCORED:  # pragma: no cover - guards against records.py changing under us
        return ScoredMemory(
            record=record,
            score=score,
            relevance=relevance,
            lexical=lexical,
            recency=recency,
            importance=importance,
        )
    out = _new(ScoredMemory)
    _set_record(out, record)
    _set_score(out, score)
    _set_relevance(out, relevance)
    _set_lexical(out, lexical)
    _set_recency(out, recency)
    _set_scored_importance(out, importance)
    return out


@dataclass(frozen=True, slots=True)
class ReflectionState:
    """The reflection trigger state of one namespace (persisted with the stream)."""

    importance_sum: float = 0.0
    """Sum of the importance (0-1 units) of non-reflection memories added since the last
    reflection. The paper reflects when the 1-10 ratings sum to 150, i.e. 15.0 here."""
    adds_since: int = 0
    """Number of memories added since the last reflection."""
    last_reflection_at: datetime | None = None
    """When the last reflection was stored, if ever."""
    generation: int | None = None
    """How many times the counter was reset (``CounterUpdate.reset_at``) since the namespace
    was first written: the counter's version. A backend's :meth:`reflection_state` always sets
    it (``0`` before the first reset); a purge keeps it, so it never repeats. ``None`` (a
    state built by hand) says "unknown": a reset by it is not checked (see
    :attr:`CounterUpdate.consumed`).

    A version number rather than ``last_reflection_at``: runs may pass the same explicit
    ``now`` (fixed clocks in simulations and tests), so two resets can carry one timestamp."""


@dataclass(frozen=True, slots=True)
class CounterUpdate:
    """A change to a namespace's reflection counter, applied in the same transaction as a write."""

    namespace: str
    """Whose counter."""
    importance: float = 0.0
    """Importance added to ``importance_sum``."""
    adds: int = 0
    """Added to ``adds_since``."""
    reset_at: datetime | None = None
    """When set, the counter is reset (after adding nothing) and this becomes
    ``last_reflection_at``; memories written in the same transaction are left out of the new
    count."""
    consumed: ReflectionState | None = None
    """With ``reset_at``: the counter as the reflection read it before it began. Only that much
    is taken off (down to 0), so memories stored while the reflection ran keep counting towards
    the next one; ``None`` resets to 0.

    When its ``generation`` is set, the reset is conditional (optimistic concurrency): if the
    namespace's counter was reset since it was read (its generation moved on: another
    reflection was stored meanwhile), the whole write is refused -- nothing of it is stored --
    with :class:`~langchain_reflective.errors.ReflectionConflictError`. Every reset raises the
    generation by one."""


@dataclass(frozen=True, slots=True)
class PendingMemory:
    """A memory written durably but not yet embedded or rated (the pending queue, an outbox).

    :meth:`ReflectiveMemory.enqueue <langchain_reflective.memory.ReflectiveMemory.enqueue>`
    writes these in one cheap commit; a background drain embeds and rates them and moves each
    into the memories under the same id, in the transaction that stores it.
    """

    id: str
    """The id the memory keeps once it is stored."""
    namespace: str
    """Whose memory it is."""
    text: str
    """The validated text."""
    kind: str
    """The memory kind (``"observation"`` for a recorded turn)."""
    created_at: datetime
    """When it was enqueued (UTC): the stored memory's creation time."""
    importance: float | None
    """A given importance in [0, 1], or ``None`` to have it rated when it is completed."""
    metadata: Mapping[str, Any]
    """JSON-serialisable metadata."""

    def to_record(self) -> MemoryRecord:
        """The memory as the working context shows it before it is stored.

        Its importance is the given one, or ``0.0`` with ``importance_source="heuristic"``
        until it is rated (callers that filter by importance treat pending memories apart).
        """
        return trusted_record(
            id=self.id,
            text=self.text,
            kind=self.kind,
            created_at=self.created_at,
            last_accessed_at=self.created_at,
            importance=0.0 if self.importance is None else float(self.importance),
            importance_source="given" if self.importance is not None else "heuristic",
            evidence=(),
            depth=0,
            namespace=self.namespace,
            metadata=dict(self.metadata),
        )


def pending_pairs(ids: Sequence[str], records: Sequence[MemoryRecord]) -> list[tuple[str, str]]:
    """``(namespace, id)`` of each queued memory that a ``put(records, pending=ids)``
    completes: the id in the namespace of each record holding it (two namespaces may queue
    one id), and ``("", id)`` -- queued nowhere -- for an id no record holds, so the caller's
    count of deleted queue rows comes out short and it refuses the write."""
    wanted = set(ids)
    pairs = {(r.namespace, r.id) for r in records if r.id in wanted}
    pairs.update(("", i) for i in wanted.difference(r.id for r in records))
    return sorted(pairs)


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """A slice of one namespace's records in insertion order (see ``iter_records``)."""

    records: list[MemoryRecord]
    """The records, oldest first."""
    vectors: F32 | None
    """``(len(records), dimension)`` unit vectors, row ``i`` for ``records[i]`` (``None``
    when they were not asked for)."""


@dataclass(frozen=True, slots=True)
class RetrievalFilter:
    """Restricts which memories a retrieval may return.

    A plain mapping with the same keys (``kind``/``kinds``, ``created_after``,
    ``created_before``, ``min_relevance``, ``namespace``) is accepted wherever a filter is.
    """

    kinds: frozenset[str] | None = None
    """Only these kinds (``None``: all)."""
    created_after: datetime | None = None
    """Only memories created at or after this time."""
    created_before: datetime | None = None
    """Only memories created before this time."""
    min_relevance: float | None = None
    """Only memories whose cosine similarity to the query is at least this."""
    namespace: str | None = None
    """Read this namespace instead of the stream's default; a retrieval given another
    ``namespace`` refuses the filter (``InvalidFilterError``), so a filter from a request
    cannot read another user's memories."""

    def __post_init__(self) -> None:
        if self.kinds is not None:
            given: Any = self.kinds
            if isinstance(given, str):
                kinds = [given]
            elif isinstance(given, Iterable) and not isinstance(given, (bytes, Mapping)):
                kinds = list(given)
            else:
                kinds = []  # (not a string or a list of them: refused below)
            if not kinds or not all(isinstance(k, str) and k for k in kinds):
                raise InvalidFilterError("filter 'kinds' must be a non-empty list of strings")
            if any("\x00" in k for k in kinds):  # (no backend stores one: nothing to find)
                raise InvalidFilterError("filter 'kinds' holds a NUL character")
            object.__setattr__(self, "kinds", frozenset(kinds))
        for name in ("created_after", "created_before"):
            value = getattr(self, name)
            if value is not None:
                try:
                    object.__setattr__(self, name, utc(value))
                except InvalidMemoryError as exc:
                    raise InvalidFilterError(f"filter {name!r}: {exc}") from exc
        if self.min_relevance is not None:
            if isinstance(self.min_relevance, bool) or not isinstance(
                self.min_relevance, int | float
            ):
                raise InvalidFilterError("filter 'min_relevance' must be a number")
            if not math.isfinite(self.min_relevance):
                raise InvalidFilterError("filter 'min_relevance' must be finite")
        if self.namespace is not None and (
            not isinstance(self.namespace, str) or not self.namespace
        ):
            raise InvalidFilterError("filter 'namespace' must be a non-empty string")

    @property
    def restricts_rows(self) -> bool:
        """Whether the filter removes memories by kind or creation time."""
        return (
            self.kinds is not None
            or self.created_after is not None
            or self.created_before is not None
        )

    @classmethod
    def coerce(cls, value: RetrievalFilter | Mapping[str, Any] | None) -> RetrievalFilter:
        """Build a filter from a mapping (or pass a filter through).

        Raises:
            InvalidFilterError: unknown keys or values of the wrong type.
        """
        if value is None:
            return _NO_FILTER if cls is RetrievalFilter else cls()
        if isinstance(value, RetrievalFilter):
            return value
        if not isinstance(value, Mapping):
            raise InvalidFilterError(
                f"filter must be a RetrievalFilter or a mapping, got {type(value).__name__}"
            )
        unknown = set(value) - _FILTER_KEYS
        if unknown:
            raise InvalidFilterError(
                f"unknown filter key(s) {sorted(map(str, unknown))}; "
                f"allowed: {sorted(_FILTER_KEYS)}"
            )
        kinds = value.get("kinds", value.get("kind"))
        return cls(
            kinds=kinds,
            created_after=value.get("created_after"),
            created_before=value.get("created_before"),
            min_relevance=value.get("min_relevance"),
            namespace=value.get("namespace"),
        )


_NO_FILTER = RetrievalFilter()
"""The filter of every unfiltered retrieval (frozen, so one instance serves them all)."""


@dataclass(frozen=True, slots=True, eq=False)
class CandidateSet:
    """What a backend knows about the memories worth scoring for one query.

    Every array has one entry per *row*. Rows ``0 .. size - 1`` are the candidates (the
    memories a retrieval may return), in increasing key order (so equal scores rank the older
    memory first). Rows ``size ..`` (possibly none) are *neighbour rows*: memories that are not
    candidates but are the previous or next observation of one, scored only so their relevance
    can lift their neighbour (``ScoringConfig.neighbor_weight``). A memory may appear more than
    once among the neighbour rows (with the same values).

    Pure scoring turns this into scores with no other input than the clock
    (:func:`langchain_reflective.scoring.score_candidates`).
    """

    keys: I64
    """The backend's key of each row (see the module docstring)."""
    size: int
    """How many rows are candidates (the first ``size``)."""
    relevance: F64
    """Cosine similarity of each row's vector and the query vector."""
    accessed: F64
    """``last_accessed_at`` of each row, POSIX seconds."""
    created: F64
    """``created_at`` of each row, POSIX seconds."""
    importance: F64
    """Importance of each row, in [0, 1]."""
    kinds: I32
    """Kind of each row, as an index into :attr:`kind_names`."""
    kind_names: tuple[str, ...]
    """The kinds :attr:`kinds` refers to."""
    lexical: F64 | None = None
    """Raw lexical score of each row for the query (>= 0; 0: no lexical match), or ``None``
    when the scoring does not use the lexical index (``ScoringConfig.uses_lexical``)."""
    lexical_max: float = 0.0
    """The best lexical score of any live memory of the namespace for this query (not only of
    these rows), so ``lexical / lexical_max`` does not depend on which memories are candidates.
    ``0.0`` when nothing matches."""
    previous: I64 | None = None
    """Row (into these arrays) of each row's previous observation in insertion order among the
    namespace's live memories, ``-1`` for none; ``-1`` on both sides of rows that are not
    observations (only observations link). ``None`` when the scoring has no neighbour weight.
    Neighbour rows' own neighbours may be ``-1`` (they are not scored for themselves)."""
    next: I64 | None = None
    """Row of each row's next observation, as :attr:`previous`."""
    exact: bool = True
    """Whether the candidates are every live memory of the namespace that matches the filter
    (``False``: an approximate candidate set; see ``BaseMemoryBackend.candidates``)."""

    def __post_init__(self) -> None:
        shape = self.keys.shape
        n = shape[0]
        if not 0 <= self.size <= n:
            raise ValueError(f"CandidateSet size {self.size} out of range for {n} rows")
        arrays = (self.relevance, self.accessed, self.created, self.importance, self.kinds)
        optional = (self.lexical, self.previous, self.next)
        if any(a.shape != shape for a in arrays) or any(
            a is not None and a.shape != shape for a in optional
        ):
            raise ValueError(f"every CandidateSet array must have shape ({n},)")
        if (self.previous is None) != (self.next is None):
            raise ValueError("CandidateSet.previous and .next go together")

    def __len__(self) -> int:
        return self.size

    @classmethod
    def empty(cls) -> CandidateSet:
        """No candidates."""
        none_f = np.zeros(0, dtype=np.float64)
        return cls(
            keys=np.zeros(0, dtype=np.int64),
            size=0,
            relevance=none_f,
            accessed=none_f,
            created=none_f,
            importance=none_f,
            kinds=np.zeros(0, dtype=np.int32),
            kind_names=(),
        )


def trusted_candidates(
    *,
    keys: I64,
    size: int,
    relevance: F64,
    accessed: F64,
    created: F64,
    importance: F64,
    kinds: I32,
    kind_names: tuple[str, ...],
    lexical: F64 | None,
    lexical_max: float,
    previous: I64 | None,
    next: I64 | None,
    exact: bool,
) -> CandidateSet:
    """Build a :class:`CandidateSet` whose shapes the caller guarantees (for backends).

    Skips ``__post_init__``'s shape checks, which run on every retrieval otherwise: a
    backend that lays out every array from one index array (the SQLite backend) cannot get
    them wrong. Third-party backends should use the validating constructor.
    """
    found = object.__new__(CandidateSet)
    setattr_ = object.__setattr__
    setattr_(found, "keys", keys)
    setattr_(found, "size", size)
    setattr_(found, "relevance", relevance)
    setattr_(found, "accessed", accessed)
    setattr_(found, "created", created)
    setattr_(found, "importance", importance)
    setattr_(found, "kinds", kinds)
    setattr_(found, "kind_names", kind_names)
    setattr_(found, "lexical", lexical)
    setattr_(found, "lexical_max", lexical_max)
    setattr_(found, "previous", previous)
    setattr_(found, "next", next)
    setattr_(found, "exact", exact)
    return found


def concat_candidates(sets: list[CandidateSet]) -> tuple[CandidateSet, I64]:
    """Several namespaces' candidate sets for one query as one, to be scored as one ranking.

    The candidates of every set come first, in increasing key order as in one set (so equal
    scores rank the older memory first, whichever namespace holds it; a key in several sets:
    in the sets' order), then every set's neighbour rows, their links remapped; kinds are
    re-indexed into one list; ``lexical_max`` is the best of the sets' (each namespace's BM25
    statistics stay its own). Keys may repeat across sets: the second array returned says
    which set each candidate row came from.
    """
    sizes = np.array([s.size for s in sets], dtype=np.int64)
    extra = np.array([s.keys.shape[0] - s.size for s in sets], dtype=np.int64)
    total = int(sizes.sum())
    rows = total + int(extra.sum())
    first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    first_extra = total + np.concatenate(([0], np.cumsum(extra)[:-1]))
    names = tuple(dict.fromkeys(name for s in sets for name in s.kind_names))
    # the candidates by key (a stable sort: a key held by several sets keeps the sets' order)
    order = np.argsort(np.concatenate([s.keys[: s.size] for s in sets]), kind="stable")
    place = np.empty(total, dtype=np.int64)
    place[order] = np.arange(total, dtype=np.int64)
    where: list[I64] = []  # each set's row -> its row in the whole
    for s, at, at_extra in zip(sets, first.tolist(), first_extra.tolist(), strict=True):
        own = np.empty(s.keys.shape[0], dtype=np.int64)
        own[: s.size] = place[at : at + s.size]
        own[s.size :] = np.arange(at_extra, at_extra + own.shape[0] - s.size)
        where.append(own)

    def joined(column: str, dtype: Any, missing: float = 0.0) -> Any:
        out = np.full(rows, missing, dtype=dtype)
        for s, to in zip(sets, where, strict=True):
            values = getattr(s, column)
            if values is not None:
                out[to] = values
        return out

    def links(column: str) -> I64 | None:
        if all(getattr(s, column) is None for s in sets):
            return None
        out = np.full(rows, -1, dtype=np.int64)
        for s, to in zip(sets, where, strict=True):
            own = getattr(s, column)
            if own is not None:
                out[to] = np.where(own >= 0, to[np.maximum(own, 0)], -1)
        return out

    kinds = np.zeros(rows, dtype=np.int32)
    for s, to in zip(sets, where, strict=True):
        lookup = np.array([names.index(n) for n in s.kind_names] or [0], dtype=np.int32)
        kinds[to] = lookup[s.kinds]
    lexical = None if all(s.lexical is None for s in sets) else joined("lexical", np.float64)
    found = CandidateSet(
        keys=joined("keys", np.int64),
        size=total,
        relevance=joined("relevance", np.float64),
        accessed=joined("accessed", np.float64),
        created=joined("created", np.float64),
        importance=joined("importance", np.float64),
        kinds=kinds,
        kind_names=names,
        lexical=lexical,
        lexical_max=max((s.lexical_max for s in sets), default=0.0),
        previous=links("previous"),
        next=links("next"),
        exact=all(s.exact for s in sets),
    )
    return found, np.repeat(np.arange(len(sets), dtype=np.int64), sizes)[order]
