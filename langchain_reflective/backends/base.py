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
* a memory id is unique within its namespace, and only there: two namespaces may hold the same
  id, so one namespace's ids neither reveal nor block another's (a store item's id is
  computable from its namespace and key);
* keys (``int``) are the backend's own handles for stored memories, handed out by
  :meth:`BaseMemoryBackend.candidates` and accepted by :meth:`~BaseMemoryBackend.touch` and
  :meth:`~BaseMemoryBackend.fetch`. They increase with insertion order (a later insert has a
  larger key) and are never reused, even after a delete.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime

from langchain_reflective._closing import Closing
from langchain_reflective.backends._thread_hold import held_on_own_thread
from langchain_reflective.backends.types import (
    F32,
    CandidateSet,
    CounterUpdate,
    PendingMemory,
    RecordBatch,
    ReflectionState,
    RetrievalFilter,
    trusted_candidates,
    trusted_record,
    trusted_scored,
)  # the seam's vocabulary, re-exported
from langchain_reflective.records import MemoryRecord
from langchain_reflective.scoring import ScoringConfig

__all__ = [
    "BaseMemoryBackend",
    "CandidateSet",
    "CounterUpdate",
    "PendingMemory",
    "RecordBatch",
    "ReflectionState",
    "RetrievalFilter",
    "trusted_candidates",
    "trusted_record",
    "trusted_scored",
]

# -- the seam ----------------------------------------------------------------------------------


class BaseMemoryBackend(Closing, ABC):
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

    def configure(self, scoring: ScoringConfig) -> None:
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
            pending: ids of queued memories (see :meth:`enqueue`) that these records complete,
                each the id of one of ``records`` (or of several, in several namespaces),
                queued in the namespace of every record holding it: they leave the queue in
                the same transaction, so a memory is either pending or stored, never both and
                never neither.

        Raises:
            PendingConflictError: one of ``pending`` is no longer queued (another process
                completed or purged it), or not in its record's namespace; nothing was
                written.
            ReflectionConflictError: ``counter`` is a reset whose ``consumed.generation`` is
                no longer the namespace's (see :attr:`CounterUpdate.consumed`); nothing was
                written.
            DuplicateIdError: an id is already stored in its namespace (a ``StorageError``);
                nothing was written.
            StorageError: the write failed; nothing was written.
        """

    @abstractmethod
    def delete(self, namespace: str, ids: Sequence[str]) -> int:
        """Delete memories of ``namespace`` by id; return how many were deleted.

        Unknown ids and ids of other namespaces are ignored. The reflection counter may keep
        counting deleted memories (it counts adds).
        """

    def replace(
        self,
        namespace: str,
        ids: Sequence[str],
        records: Sequence[MemoryRecord],
        vectors: F32,
        *,
        counter: CounterUpdate | None = None,
    ) -> int:
        """Delete memories of ``namespace`` by id and store ``records`` (which may reuse those
        ids) as one write; return how many were deleted.

        This is how a memory is updated in place (``MemoryStream.add(..., replacing=ids)``,
        ``ReflectiveStore`` puts): the built-in backends do it in one transaction, so a failure
        or a crash leaves either the old memories or the new ones, never neither. This default
        is :meth:`delete` then :meth:`put` (not atomic); override it when the storage has
        transactions.

        Raises:
            StorageError: as :meth:`put` (``ReflectionConflictError`` included); the built-in
                backends then deleted nothing.
        """
        deleted = self.delete(namespace, ids)
        self.put(records, vectors, counter=counter)
        return deleted

    @abstractmethod
    def purge(self, namespace: str) -> int:
        """Delete every memory, queued memory and the reflection counter of ``namespace``;
        return how many memories were deleted. The counter's ``generation`` is kept (it never
        repeats, see :attr:`ReflectionState.generation`)."""

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

    def discard_pending(self, namespace: str, ids: Sequence[str]) -> int:
        """Remove queued memories of ``namespace`` by id without storing them; return how many
        were removed (unknown ids, stored ones and other namespaces' are ignored).

        For an operator dropping a memory that can never be completed (see
        ``ReflectiveMemory.quarantined``). The built-in backends implement it; the default
        raises ``NotImplementedError``.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot discard pending memories")

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
        the last reset (``CounterUpdate.reset_at``) or purge; ``generation`` counts the resets
        (an int, ``0`` before the first; a purge keeps it).
        """

    @abstractmethod
    def update_counter(self, update: CounterUpdate) -> None:
        """Apply a counter change on its own (one transaction).

        Every reset raises the namespace's ``generation`` by one, in the same transaction; a
        reset whose ``consumed.generation`` is set is applied only if that is still the
        namespace's generation (compare-and-set).

        Raises:
            ReflectionConflictError: the generation moved on; nothing was written.
        """

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

    async def areplace(
        self,
        namespace: str,
        ids: Sequence[str],
        records: Sequence[MemoryRecord],
        vectors: F32,
        *,
        counter: CounterUpdate | None = None,
    ) -> int:
        """Async twin of :meth:`replace`."""
        return await asyncio.to_thread(
            self.replace, namespace, ids, records, vectors, counter=counter
        )

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

    async def adiscard_pending(self, namespace: str, ids: Sequence[str]) -> int:
        """Async twin of :meth:`discard_pending`."""
        return await asyncio.to_thread(self.discard_pending, namespace, ids)

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
        """Async twin of :meth:`reflection_lock`: the lock is taken and released on one thread
        of its own (a file lock remembers the thread that took it), the wait off the loop."""
        manager = self.reflection_lock(namespace, timeout=timeout)
        async with held_on_own_thread(manager, name=f"reflection-lock:{namespace}"):
            yield

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

    async def aget_one(self, namespace: str, id: str) -> MemoryRecord | None:
        """Async twin of :meth:`get_one`."""
        found = await self.aget(namespace, [id])
        return found[0] if found else None

    def most_important(
        self, namespace: str, n: int, *, kinds: Sequence[str] | None = None
    ) -> list[MemoryRecord]:
        """The ``n`` most important memories, most important first (newer first among
        equals)."""
        return self.recent(namespace, n=n, kinds=kinds, by_importance=True)

    async def amost_important(
        self, namespace: str, n: int, *, kinds: Sequence[str] | None = None
    ) -> list[MemoryRecord]:
        """Async twin of :meth:`most_important`."""
        return await self.arecent(namespace, n=n, kinds=kinds, by_importance=True)

    def mark_reflected(
        self, namespace: str, when: datetime, consumed: ReflectionState | None = None
    ) -> None:
        """Reset the reflection counter of ``namespace`` (``last_reflection_at = when``), by
        ``consumed`` only when given, and only if its ``generation`` (when set) is still the
        namespace's (see :attr:`CounterUpdate.consumed`).

        Raises:
            ReflectionConflictError: another reset came first; nothing was written.
        """
        self.update_counter(CounterUpdate(namespace=namespace, reset_at=when, consumed=consumed))

    async def amark_reflected(
        self, namespace: str, when: datetime, consumed: ReflectionState | None = None
    ) -> None:
        """Async twin of :meth:`mark_reflected`."""
        update = CounterUpdate(namespace=namespace, reset_at=when, consumed=consumed)
        await self.aupdate_counter(update)
