"""The durable record store behind a memory stream: a small protocol.

A store keeps records, their vectors and the per-namespace reflection counters. The stream keeps
in-memory scoring arrays and the vector index; the store is the source of truth they are rebuilt
from. Every write method is one transaction: it happens completely or not at all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.records import MemoryRecord

__all__ = [
    "BaseRecordStore",
    "CounterUpdate",
    "PartitionChunk",
    "PendingMemory",
    "ReflectionState",
    "trusted_record",
]

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
    """Build a :class:`MemoryRecord` from values that were already validated (internal).

    Skips ``__post_init__`` (which re-validates the text, re-serialises the metadata, converts
    the timestamps): the add path validates every value once before calling this, and stores
    read back what they wrote. The values must be exactly what validation would produce (UTC
    datetimes, a float importance, a tuple of str evidence, a plain dict of metadata). Falls
    back to the validating constructor if ``MemoryRecord`` gains or loses fields.
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
    importance: float = 0.0
    adds: int = 0
    reset_at: datetime | None = None
    """When set, the counter is reset (after adding nothing) and this becomes
    ``last_reflection_at``."""


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

    last_generation: int = 0
    """The namespace generation produced by this store's last write (insert/delete/purge), as
    of the store's last look at the file: if another writer changed it unseen, the next
    :meth:`changed_elsewhere` says so (callers check it before trusting their own state)."""

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

    @abstractmethod
    def get(self, ids: Sequence[str], *, namespace: str) -> list[MemoryRecord]:
        """Records of ``namespace`` with these ids, in the order given; unknown ids are skipped."""

    @abstractmethod
    def get_by_seq(self, seqs: Sequence[int]) -> dict[int, MemoryRecord]:
        """Records by sequence number."""

    @abstractmethod
    def delete(self, ids: Sequence[str], *, namespace: str) -> list[int]:
        """Delete records of ``namespace``; return the sequence numbers actually deleted."""

    @abstractmethod
    def purge(self, namespace: str) -> int:
        """Delete every record, queued memory and the counter of ``namespace``; return how many
        records were deleted."""

    @abstractmethod
    def touch(self, seqs: Sequence[int], when: datetime) -> None:
        """Set ``last_accessed_at`` of these records."""

    def touch_and_get(self, seqs: Sequence[int], when: datetime) -> dict[int, MemoryRecord]:
        """:meth:`touch` these records, then return them as :meth:`get_by_seq` does.

        The records come back with ``last_accessed_at == when``. Stores that can do both in one
        round trip override this (the SQLite store: one ``UPDATE ... RETURNING``).
        """
        self.touch(seqs, when)
        return self.get_by_seq(seqs)

    @abstractmethod
    def iter_partition(
        self, namespace: str, *, with_vectors: bool = True, chunk_size: int = 50_000
    ) -> Iterator[PartitionChunk]:
        """Live records of ``namespace`` in insertion order, in chunks."""

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
