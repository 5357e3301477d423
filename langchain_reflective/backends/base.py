"""The backend seam: ``BaseMemoryBackend`` owns durable records and candidate generation.

A :class:`~langchain_reflective.stream.MemoryStream` is the orchestrator of one flow; a backend
is everything durable and everything that needs the data to be near:

* **records**: memories with their vectors, timestamps, importance, kind, evidence, depth,
  namespace and metadata; the pending queue (an outbox); the reflection counter per namespace;
* **candidates**: for a query (text and unit vector), the memories worth scoring -- dense
  neighbours, lexical matches, the most recent and most important ones, restricted by a
  filter -- with everything pure scoring (:mod:`langchain_reflective.scoring`) needs about
  them, as numpy arrays (:class:`CandidateSet`);
* **touch**: raising ``last_accessed_at`` of the memories a retrieval returned, in one write;
* **the reflection lock**: at most one reflection per namespace at a time, across processes.

The abstract surface is small, like LangGraph's ``BaseStore``: a backend implements the sync
methods marked abstract; the async twins (``a*``) default to running the sync method on a
worker thread (:func:`asyncio.to_thread`), and a backend with a native async driver overrides
them. Conveniences built from the abstract methods live here.

Contracts every backend keeps (the conformance suite in ``tests/backends`` checks them):

* a namespace never reads, touches, deletes or counts another's memories;
* every write method is one transaction: it happens completely or not at all;
* every method may be called from several threads at once;
* memory ids are unique across the whole backend (not only within a namespace);
* keys (``int``) are the backend's own handles for stored memories, handed out by
  :meth:`BaseMemoryBackend.candidates` and accepted by :meth:`~BaseMemoryBackend.touch` and
  :meth:`~BaseMemoryBackend.fetch`. They increase with insertion order (a later insert has a
  larger key) and are never reused, even after a delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.errors import InvalidFilterError, InvalidMemoryError
from langchain_reflective.records import MemoryRecord, utc
from langchain_reflective.scoring import ScoringConfig

__all__ = [
    "BaseMemoryBackend",
    "CandidateSet",
    "CounterUpdate",
    "PendingMemory",
    "RecordBatch",
    "ReflectionState",
    "RetrievalFilter",
    "trusted_record",
]

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

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
    record = object.__new__(MemoryRecord)
    setattr_ = object.__setattr__
    setattr_(record, "id", id)
    setattr_(record, "text", text)
    setattr_(record, "kind", kind)
    setattr_(record, "created_at", created_at)
    setattr_(record, "last_accessed_at", last_accessed_at)
    setattr_(record, "importance", importance)
    setattr_(record, "importance_source", importance_source)
    setattr_(record, "evidence", evidence)
    setattr_(record, "depth", depth)
    setattr_(record, "namespace", namespace)
    setattr_(record, "metadata", metadata)
    return record


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
    """Read this namespace instead of the stream's default."""

    def __post_init__(self) -> None:
        if self.kinds is not None:
            kinds = [self.kinds] if isinstance(self.kinds, str) else list(self.kinds)
            if not kinds or not all(isinstance(k, str) and k for k in kinds):
                raise InvalidFilterError("filter 'kinds' must be a non-empty list of strings")
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
            return cls()
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


# -- the seam ----------------------------------------------------------------------------------


class BaseMemoryBackend(ABC):
    """Durable memories plus candidate generation for a :class:`MemoryStream`.

    Subclasses implement the abstract sync methods; the async twins run them on a worker
    thread unless overridden. Namespaces, texts, kinds and metadata reaching a backend were
    validated by the stream (non-empty strings that encode as UTF-8, JSON-serialisable
    metadata, unit vectors of the bound dimension), so backends need not validate again.
    """

    # -- identity of the vectors ---------------------------------------------------------------

    @property
    @abstractmethod
    def dimension(self) -> int | None:
        """The embedding dimension the backend holds (``None`` before the first write)."""

    @property
    @abstractmethod
    def embedding_model(self) -> str | None:
        """The identity of the embedding model the vectors came from (``None`` before the
        first write)."""

    @abstractmethod
    def bind_embeddings(self, model: str, dimension: int) -> None:
        """Record the embedding model and dimension (first write) or check that they match.

        Called before every write of vectors and before a query vector is compared; cheap
        after the first call with the same arguments.

        Raises:
            DimensionMismatchError: the backend holds vectors of another dimension.
            EmbeddingError: the backend was written with another embedding model
                (``model`` differs from :attr:`embedding_model`).
        """

    def configure(self, scoring: ScoringConfig) -> None:  # noqa: B027 - optional hook
        """Learn the stream's default scoring before its first call (optional hook).

        A backend whose indexes depend on the scoring -- e.g. a lexical index that holds each
        observation with the previous observation's text when ``scoring.lexical_context`` --
        builds them accordingly. Called once by the stream's constructor; the default does
        nothing.
        """

    # -- writes --------------------------------------------------------------------------------

    @abstractmethod
    def put(
        self,
        records: Sequence[MemoryRecord],
        vectors: F32,
        *,
        counter: CounterUpdate | None = None,
        pending: Sequence[str] = (),
    ) -> None:
        """Store new memories with their vectors, in one transaction.

        Args:
            records: new memories (ids not stored yet; any namespaces). Their timestamps,
                importance and fields are stored as given.
            vectors: ``(len(records), dimension)`` float32 unit vectors, row ``i`` for
                ``records[i]``.
            counter: the reflection-counter change written in the same transaction (``None``:
                the counter is left alone, as for an import).
            pending: ids of queued memories (see :meth:`enqueue`) that these records complete:
                they leave the queue in the same transaction, so a memory is either pending or
                stored, never both and never neither.

        Raises:
            PendingConflictError: one of ``pending`` is no longer queued (another process
                completed or purged it); nothing was written.
            StorageError: the write failed (e.g. an id is already stored); nothing was written.
        """

    @abstractmethod
    def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete memories of ``namespace`` by id; return how many were deleted.

        Unknown ids and ids of other namespaces are ignored. The reflection counter may keep
        counting deleted memories (it counts adds).
        """

    @abstractmethod
    def purge(self, namespace: str) -> int:
        """Delete every memory, queued memory and the reflection counter of ``namespace``;
        return how many memories were deleted."""

    @abstractmethod
    def touch(self, namespace: str, keys: Sequence[int], when: datetime) -> dict[int, MemoryRecord]:
        """Set ``last_accessed_at = when`` of these memories and return them, in one write.

        Args:
            namespace: whose memories; keys of other namespaces are ignored.
            keys: keys from :meth:`candidates`.
            when: the new access time (aware).

        Returns:
            ``key -> record`` (with ``last_accessed_at == when``) for the keys still stored;
            a memory deleted meanwhile is absent.
        """

    # -- the pending queue (an outbox) ---------------------------------------------------------

    @abstractmethod
    def enqueue(self, items: Sequence[PendingMemory]) -> None:
        """Queue memories durably for completion (one transaction, no vectors).

        Raises:
            StorageError: an id is already queued or stored; nothing was queued.
        """

    @abstractmethod
    def pending(
        self, *, namespace: str | None = None, limit: int | None = None, newest: bool = False
    ) -> list[PendingMemory]:
        """Queued memories in queue order, oldest first (of ``namespace``, or of all).

        Args:
            namespace: whose (``None``: every namespace's).
            limit: at most this many (the oldest ones; ``None``: all).
            newest: take the ``limit`` newest ones instead (still returned oldest first).
        """

    @abstractmethod
    def count_pending(self, namespace: str | None = None) -> int:
        """Number of queued memories (in ``namespace``, or in all namespaces)."""

    # -- reads ---------------------------------------------------------------------------------

    @abstractmethod
    def get(self, namespace: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """Memories of ``namespace`` with these ids, in the order given; unknown ids (and ids
        of other namespaces) are skipped."""

    @abstractmethod
    def fetch(self, namespace: str, keys: Sequence[int]) -> dict[int, MemoryRecord]:
        """``key -> record`` for these keys of ``namespace`` (missing ones absent); no write."""

    @abstractmethod
    def recent(
        self,
        namespace: str,
        *,
        n: int | None = None,
        kinds: Sequence[str] | None = None,
        since_last_reflection: bool = False,
        by_importance: bool = False,
    ) -> list[MemoryRecord]:
        """The newest ``n`` memories of ``namespace`` (all when ``None``), oldest first.

        Args:
            namespace: whose.
            n: how many.
            kinds: only these kinds.
            since_last_reflection: only memories stored after the namespace's counter was last
                reset (those the reset left out of the count are excluded too).
            by_importance: the ``n`` most important instead, most important first (newer first
                among equals).
        """

    @abstractmethod
    def count(self, namespace: str | None = None) -> int:
        """Number of stored memories (in ``namespace``, or in all namespaces)."""

    @abstractmethod
    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one stored memory, sorted."""

    @abstractmethod
    def iter_records(
        self, namespace: str, *, with_vectors: bool = True, batch_size: int = 1024
    ) -> Iterator[RecordBatch]:
        """Every memory of ``namespace`` in insertion order, in batches (for exports).

        With ``with_vectors`` each batch carries the stored unit vectors (exactly as stored,
        float32), so an export -> import round trip needs no embedding calls.
        """

    # -- the reflection counter ----------------------------------------------------------------

    @abstractmethod
    def reflection_state(self, namespace: str) -> ReflectionState:
        """The reflection counter of ``namespace``: exact, whichever process wrote.

        ``importance_sum`` and ``adds_since`` cover every :meth:`put` with a counter since
        the last reset (``CounterUpdate.reset_at``) or purge.
        """

    @abstractmethod
    def update_counter(self, update: CounterUpdate) -> None:
        """Apply a counter change on its own (one transaction)."""

    @abstractmethod
    def reflection_lock(
        self, namespace: str, *, timeout: float | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """A context manager holding ``namespace``'s reflection lock while it is open.

        At most one holder per namespace at a time across threads, processes and (for a
        server database) machines, so at most one reflection of a namespace runs at once.
        Other namespaces are not blocked. Not re-entrant. Released when the block exits, also
        on errors and when the holding process dies.

        Args:
            namespace: whose reflection.
            timeout: seconds to wait for another holder (``None``: wait as long as it takes;
                ``0``: try once).

        Raises:
            TimeoutError: the lock was not acquired within ``timeout`` (on entering).
        """

    # -- candidates ----------------------------------------------------------------------------

    @abstractmethod
    def candidates(
        self,
        namespace: str,
        query: str,
        vector: F32,
        *,
        k: int,
        filter: RetrievalFilter,
        config: ScoringConfig,
        exact: bool = False,
    ) -> CandidateSet:
        """The memories of ``namespace`` worth scoring for a query, with their components.

        Args:
            namespace: whose memories (``filter.namespace`` was already resolved into it).
            query: the query text (for the lexical half; validated, not empty).
            vector: the query's float32 unit vector (bound dimension).
            k: how many memories the caller will return; an approximate candidate set holds
                at least ``min(k, matching memories)`` candidates.
            filter: only memories of ``filter.kinds``, created in
                ``[created_after, created_before)``, with ``relevance >= min_relevance``
                are candidates (``filter.namespace`` is ignored here).
            config: the scoring that will rank them. ``config.uses_lexical`` asks for
                ``lexical``/``lexical_max``; ``config.neighbor_weight > 0`` asks for
                ``previous``/``next`` (and the neighbour rows they point at); the weights
                tell an approximate backend how many recent/important memories to add.
            exact: every matching live memory must be a candidate (for exact scoring and
                conformance tests). Otherwise a backend may return an approximate set for
                large namespaces -- the union of dense nearest neighbours, the best lexical
                matches, the most recently accessed and the most important memories -- and
                says so in ``CandidateSet.exact``.

        Returns:
            The candidate set (:meth:`CandidateSet.empty` when nothing matches). Neighbours
            (``previous``/``next``) and ``lexical_max`` are computed over *all* live memories
            of the namespace, never only over the candidates, so a memory's unnormalised
            score does not depend on which others are candidates.

        Raises:
            DimensionMismatchError: ``vector`` has another dimension than the stored vectors
                (nothing stored yet: an empty set, no error).
        """

    # -- lifecycle -----------------------------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Release connections, threads and caches (after writing caches). Idempotent."""

    def __enter__(self) -> BaseMemoryBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- async twins (worker thread by default) ------------------------------------------------

    async def abind_embeddings(self, model: str, dimension: int) -> None:
        """Async twin of :meth:`bind_embeddings`."""
        await asyncio.to_thread(self.bind_embeddings, model, dimension)

    async def aput(
        self,
        records: Sequence[MemoryRecord],
        vectors: F32,
        *,
        counter: CounterUpdate | None = None,
        pending: Sequence[str] = (),
    ) -> None:
        """Async twin of :meth:`put`."""
        await asyncio.to_thread(self.put, records, vectors, counter=counter, pending=pending)

    async def adelete(self, namespace: str, ids: Sequence[str]) -> int:
        """Async twin of :meth:`delete`."""
        return await asyncio.to_thread(self.delete, namespace, ids)

    async def apurge(self, namespace: str) -> int:
        """Async twin of :meth:`purge`."""
        return await asyncio.to_thread(self.purge, namespace)

    async def atouch(
        self, namespace: str, keys: Sequence[int], when: datetime
    ) -> dict[int, MemoryRecord]:
        """Async twin of :meth:`touch`."""
        return await asyncio.to_thread(self.touch, namespace, keys, when)

    async def aenqueue(self, items: Sequence[PendingMemory]) -> None:
        """Async twin of :meth:`enqueue`."""
        await asyncio.to_thread(self.enqueue, items)

    async def apending(
        self, *, namespace: str | None = None, limit: int | None = None, newest: bool = False
    ) -> list[PendingMemory]:
        """Async twin of :meth:`pending`."""
        return await asyncio.to_thread(
            self.pending, namespace=namespace, limit=limit, newest=newest
        )

    async def acount_pending(self, namespace: str | None = None) -> int:
        """Async twin of :meth:`count_pending`."""
        return await asyncio.to_thread(self.count_pending, namespace)

    async def aget(self, namespace: str, ids: Sequence[str]) -> list[MemoryRecord]:
        """Async twin of :meth:`get`."""
        return await asyncio.to_thread(self.get, namespace, ids)

    async def afetch(self, namespace: str, keys: Sequence[int]) -> dict[int, MemoryRecord]:
        """Async twin of :meth:`fetch`."""
        return await asyncio.to_thread(self.fetch, namespace, keys)

    async def arecent(
        self,
        namespace: str,
        *,
        n: int | None = None,
        kinds: Sequence[str] | None = None,
        since_last_reflection: bool = False,
        by_importance: bool = False,
    ) -> list[MemoryRecord]:
        """Async twin of :meth:`recent`."""
        return await asyncio.to_thread(
            self.recent,
            namespace,
            n=n,
            kinds=kinds,
            since_last_reflection=since_last_reflection,
            by_importance=by_importance,
        )

    async def acount(self, namespace: str | None = None) -> int:
        """Async twin of :meth:`count`."""
        return await asyncio.to_thread(self.count, namespace)

    async def anamespaces(self) -> list[str]:
        """Async twin of :meth:`namespaces`."""
        return await asyncio.to_thread(self.namespaces)

    async def areflection_state(self, namespace: str) -> ReflectionState:
        """Async twin of :meth:`reflection_state`."""
        return await asyncio.to_thread(self.reflection_state, namespace)

    async def aupdate_counter(self, update: CounterUpdate) -> None:
        """Async twin of :meth:`update_counter`."""
        await asyncio.to_thread(self.update_counter, update)

    @contextlib.asynccontextmanager
    async def areflection_lock(
        self, namespace: str, *, timeout: float | None = None
    ) -> AsyncIterator[None]:
        """Async twin of :meth:`reflection_lock` (waits on a worker thread by default)."""
        manager = self.reflection_lock(namespace, timeout=timeout)
        await asyncio.to_thread(manager.__enter__)
        try:
            yield
        except BaseException as exc:
            if not await asyncio.to_thread(manager.__exit__, type(exc), exc, exc.__traceback__):
                raise
        else:
            await asyncio.to_thread(manager.__exit__, None, None, None)

    async def acandidates(
        self,
        namespace: str,
        query: str,
        vector: F32,
        *,
        k: int,
        filter: RetrievalFilter,
        config: ScoringConfig,
        exact: bool = False,
    ) -> CandidateSet:
        """Async twin of :meth:`candidates`."""
        return await asyncio.to_thread(
            self.candidates,
            namespace,
            query,
            vector,
            k=k,
            filter=filter,
            config=config,
            exact=exact,
        )

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        await asyncio.to_thread(self.close)

    # -- conveniences built on the abstract methods --------------------------------------------

    def get_one(self, namespace: str, id: str) -> MemoryRecord | None:
        """The memory ``id`` of ``namespace``, or ``None``."""
        found = self.get(namespace, [id])
        return found[0] if found else None

    def most_important(
        self, namespace: str, n: int, *, kinds: Sequence[str] | None = None
    ) -> list[MemoryRecord]:
        """The ``n`` most important memories, most important first (newer first among
        equals)."""
        return self.recent(namespace, n=n, kinds=kinds, by_importance=True)

    def mark_reflected(self, namespace: str, when: datetime) -> None:
        """Reset the reflection counter of ``namespace`` (``last_reflection_at = when``)."""
        self.update_counter(CounterUpdate(namespace=namespace, reset_at=when))
