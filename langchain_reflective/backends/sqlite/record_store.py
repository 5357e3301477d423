"""The record layer under the SQLite backend: a small protocol for the durable rows.

A store keeps records, their vectors and the per-namespace reflection counters.
:class:`~langchain_reflective.backends.sqlite.SQLiteBackend` keeps in-memory scoring arrays,
the vector index and the lexical index over it; the store is the source of truth they are
rebuilt from. Every write method is one transaction: it happens completely or not at all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.base import (
    CounterUpdate,
    PendingMemory,
    ReflectionState,
    trusted_record,
)
from langchain_reflective.records import MemoryRecord

__all__ = [
    "BaseRecordStore",
    "CounterUpdate",
    "PartitionChunk",
    "PendingMemory",
    "ReflectionState",
    "trusted_record",
]


@dataclass(frozen=True, slots=True)
class PartitionChunk:
    """A slice of one namespace's live records in insertion order, for rebuilding indexes."""

    seqs: npt.NDArray[np.int64]
    ids: list[str]
    texts: list[str]
    kinds: list[str]
    created: npt.NDArray[np.float64]
    accessed: npt.NDArray[np.float64]
    importance: npt.NDArray[np.float64]
    vectors: npt.NDArray[np.float32] | None


class BaseRecordStore(ABC):
    """Durable storage of memory records and vectors."""

    deleted_texts: dict[int, str] | None = None
    """The texts of the observations this store's last delete (or replace) removed, by
    sequence number, for the lexical context of the observations after them (``None``: the
    store does not keep them; the backend then rebuilds its BM25 index from the store)."""

    last_generation: int = 0
    """The namespace generation produced by this store's last write (insert/delete/purge), as
    of the store's last look at the file: if another writer changed it unseen, the next
    :meth:`changed_elsewhere` says so (callers check it before trusting their own state)."""

    @property
    def forked(self) -> bool:
        """Whether this process is a fork of the one that opened the store: then every use
        raises and :meth:`close` only forgets it (``backends/_fork.py``). ``False`` unless a
        store says otherwise."""
        return False

    @property
    @abstractmethod
    def dimension(self) -> int | None:
        """The embedding dimension the store was created with (``None`` until the first write)."""

    @property
    @abstractmethod
    def embedding_model(self) -> str | None:
        """The identity of the embedding model the vectors came from."""

    @abstractmethod
    def bind_embeddings(self, model: str, dimension: int) -> None:
        """Record the embedding model and dimension (first write) or check they match.

        Raises:
            DimensionMismatchError: the store holds vectors of another dimension.
            EmbeddingError: the store was written with another embedding model.
        """

    @abstractmethod
    def insert(
        self,
        records: Sequence[MemoryRecord],
        vectors: npt.NDArray[np.float32],
        *,
        counter: CounterUpdate | None = None,
        pending: Sequence[str] = (),
    ) -> list[int]:
        """Insert records with their vectors in one transaction; return their sequence numbers.

        Args:
            records: the records.
            vectors: one row per record.
            counter: the reflection-counter change written in the same transaction.
            pending: ids of pending memories (see :meth:`enqueue`) this insert completes: they
                leave the pending queue in the same transaction, so a memory is either pending
                or stored, never both and never neither.

        Raises:
            PendingConflictError: one of ``pending`` is no longer queued (another process
                completed or purged it); nothing was written.
        """

    @abstractmethod
    def enqueue(self, items: Sequence[PendingMemory]) -> None:
        """Queue memories durably for completion (one transaction, no vectors)."""

    @abstractmethod
    def pending(
        self, *, namespace: str | None = None, limit: int | None = None, newest: bool = False
    ) -> list[PendingMemory]:
        """Queued memories, oldest first (of ``namespace``, or of every namespace).

        With ``newest`` the ``limit`` newest ones instead (still oldest first).
        """

    @abstractmethod
    def count_pending(self, namespace: str | None = None) -> int:
        """Number of queued memories (in ``namespace``, or in all namespaces)."""

    def discard_pending(self, ids: Sequence[str], *, namespace: str) -> int:
        """Remove queued memories of ``namespace`` without storing them; return how many."""
        raise NotImplementedError(f"{type(self).__name__} cannot discard pending memories")

    @abstractmethod
    def get(self, ids: Sequence[str], *, namespace: str) -> list[MemoryRecord]:
        """Records of ``namespace`` with these ids, in the order given; unknown ids are skipped."""

    @abstractmethod
    def get_by_seq(self, seqs: Sequence[int]) -> dict[int, MemoryRecord]:
        """Records by sequence number."""

    @abstractmethod
    def delete(self, ids: Sequence[str], *, namespace: str) -> list[int]:
        """Delete records of ``namespace``; return the sequence numbers actually deleted."""

    def replace(
        self,
        namespace: str,
        ids: Sequence[str],
        records: Sequence[MemoryRecord],
        vectors: npt.NDArray[np.float32],
        *,
        counter: CounterUpdate | None = None,
    ) -> tuple[list[int], list[int]]:
        """Delete ``ids`` of ``namespace`` and insert ``records``; return the new sequence
        numbers and the deleted ones. ``SQLiteRecordStore`` does both in one transaction; this
        default is :meth:`delete` then :meth:`insert` (not atomic)."""
        deleted = self.delete(ids, namespace=namespace)
        return self.insert(records, vectors, counter=counter), deleted

    @abstractmethod
    def purge(self, namespace: str) -> int:
        """Delete every record, queued memory and the counter of ``namespace``; return how many
        records were deleted."""

    @abstractmethod
    def touch(self, seqs: Sequence[int], when: datetime) -> None:
        """Set ``last_accessed_at`` of these records."""

    def touch_and_get(
        self, seqs: Sequence[int], when: datetime, *, namespace: str | None = None
    ) -> dict[int, MemoryRecord]:
        """:meth:`touch` these records, then return them as :meth:`get_by_seq` does.

        With ``namespace``, records of other namespaces are neither touched nor returned.

        The records come back with ``last_accessed_at == when``. Stores that can do both in one
        round trip override this (the SQLite store: one ``UPDATE ... RETURNING``).
        """
        if namespace is not None:
            seqs = [s for s, r in self.get_by_seq(seqs).items() if r.namespace == namespace]
        self.touch(seqs, when)
        return self.get_by_seq(seqs)

    @abstractmethod
    def iter_partition(
        self,
        namespace: str,
        *,
        with_vectors: bool = True,
        chunk_size: int = 50_000,
        after_seq: int = 0,
        with_texts: bool = True,
    ) -> Iterator[PartitionChunk]:
        """Live records of ``namespace`` with a sequence number above ``after_seq``, in
        insertion order, in chunks (``ids`` and ``texts`` empty when not ``with_texts``)."""

    @abstractmethod
    def count(self, namespace: str | None = None) -> int:
        """Number of records (in ``namespace``, or in all namespaces)."""

    @abstractmethod
    def namespaces(self) -> list[str]:
        """Namespaces that hold at least one record."""

    @abstractmethod
    def recent(
        self,
        namespace: str,
        *,
        n: int | None,
        kinds: Sequence[str] | None,
        after_seq: int | None,
        by_importance: bool = False,
    ) -> list[MemoryRecord]:
        """The newest ``n`` records (oldest first), optionally only after a sequence number.

        With ``by_importance`` the ``n`` most important records instead, most important first
        (newer first among equals).
        """

    @abstractmethod
    def reflection_state(self, namespace: str) -> ReflectionState:
        """The reflection counter of ``namespace``."""

    @abstractmethod
    def last_reflection_seq(self, namespace: str) -> int:
        """Sequence number of the newest record of ``namespace`` when its counter was reset."""

    @abstractmethod
    def update_counter(self, update: CounterUpdate) -> None:
        """Apply a counter change on its own (one transaction)."""

    @abstractmethod
    def generation(self, namespace: str) -> int:
        """A number that changes whenever ``namespace``'s records change (for cache checks)."""

    @abstractmethod
    def changed_elsewhere(self) -> bool:
        """Whether another connection/process wrote since the last call."""

    def consume_write_conflict(self) -> bool:
        """After a write: whether another writer had written since this store last looked.

        Stores that learn this while writing (SQLite reads its data version inside every write
        transaction) answer without another query; the default asks :meth:`changed_elsewhere`.
        A store may also leave it to the next :meth:`changed_elsewhere` (SQLite's one-memory
        insert does not look), so this is no substitute for that check before a read.
        """
        return self.changed_elsewhere()

    @abstractmethod
    def get_meta(self, key: str) -> str | None:
        """Read a metadata value."""

    @abstractmethod
    def set_meta(self, key: str, value: str) -> None:
        """Write a metadata value."""

    @abstractmethod
    def close(self) -> None:
        """Release resources. Idempotent."""
