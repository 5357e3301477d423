"""``SQLiteBackend``: the seam over one SQLite file, its partitions and their caches.

Records, vectors, counters and the pending queue live in one SQLite file
(:class:`~langchain_reflective.backends.sqlite.store.SQLiteRecordStore`). Per namespace, a
:class:`~langchain_reflective.backends.sqlite.partition.Partition` mirrors the live rows for
scoring: the FAISS matrix (exact cosine), an IVF index for large namespaces, the BM25 index and
the neighbour table. They are caches: loaded and saved by
:class:`~langchain_reflective.backends.sqlite.caches.PartitionFiles` (``<file>.index/``, with a
digest checked on load; nothing executes code on load) and rebuilt from the file when missing
or stale. Candidate generation is :mod:`~langchain_reflective.backends.sqlite.candidates`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends._fork import ProcessLock
from langchain_reflective.backends.base import (
    BaseMemoryBackend,
    CandidateSet,
    CounterUpdate,
    PendingMemory,
    RecordBatch,
    ReflectionState,
    RetrievalFilter,
)
from langchain_reflective.backends.sqlite import candidates as cand
from langchain_reflective.backends.sqlite._errors import storage_error
from langchain_reflective.backends.sqlite.ann import maintain_ann
from langchain_reflective.backends.sqlite.caches import PartitionFiles
from langchain_reflective.backends.sqlite.candidates import (
    DEFAULT_ANN_CANDIDATES,
    DEFAULT_ANN_NPROBE,
    DEFAULT_EXACT_LIMIT,
)
from langchain_reflective.backends.sqlite.connection import memory_file
from langchain_reflective.backends.sqlite.lexical_rows import relink_context
from langchain_reflective.backends.sqlite.partition import Partition
from langchain_reflective.backends.sqlite.record_store import BaseRecordStore
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
from langchain_reflective.errors import DimensionMismatchError, StorageError
from langchain_reflective.records import MemoryRecord
from langchain_reflective.scoring import ScoringConfig

if TYPE_CHECKING:
    from langchain_reflective.backends.sqlite.lexical import BM25Index

__all__ = ["DEFAULT_EXACT_LIMIT", "SQLiteBackend"]

logger = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


def _positive_int(value: object) -> bool:
    """Whether ``value`` is an integer >= 1 (a bool is not one)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and bool(value >= 1)


class SQLiteBackend(BaseMemoryBackend):
    """Memories in one SQLite file (or in memory), scored with FAISS and BM25 in-process.

    Several processes may open the same file: writes are transactions, each process reloads
    what another changed, and the reflection lock is a lock file next to the memory file.

    Args:
        path: the memory file; ``None`` (or ``":memory:"``) keeps everything in memory
            (nothing is written).
        store: a custom record layer (overrides ``path``; mostly for tests).
        exact_limit: namespaces with at most this many live memories are scored exactly;
            larger ones score exactly only a candidate set (approximate nearest neighbours
            from an IVF index, best BM25 matches, most recent and most important memories).
            ``None`` always scores exactly. Large IVF indexes are trained on a background
            thread; until one is ready, retrieval uses the previous index or scores exactly,
            and ``close()`` waits for it.
        ann_candidates: how many dense and lexical candidates the approximate path gathers
            (at least ``4 * k``; the dense ones grow past 100k memories: ``DENSE_DEPTH_FROM``
            in ``backends.sqlite.candidates``). More candidates: closer to exact, slower.
        ann_nprobe: how many IVF lists the approximate path searches (twice as many for a
            filter keeping less than a quarter of the namespace).
        synchronous: SQLite's ``synchronous`` pragma (see :class:`SQLiteRecordStore`).
        timeout: seconds to wait for another writer's lock.
        read_only: open ``path`` read-only (``SQLiteRecordStore(path, read_only=True)``: on
            read-only storage too; the file is never written nor upgraded, a missing one not
            created, and what SQLite may create beside it is in ``backends/sqlite/read_only.py``):
            its index caches are read, never written, and every write raises
            :class:`StorageError`.

    Raises:
        ValueError: ``exact_limit``, ``ann_candidates`` or ``ann_nprobe`` is not a positive
            integer.
        ForeignFileError: the file is not a langchain-reflective memory file.
        SchemaVersionError: the file was written by a newer version of the package.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        store: BaseRecordStore | None = None,
        exact_limit: int | None = DEFAULT_EXACT_LIMIT,
        ann_candidates: int = DEFAULT_ANN_CANDIDATES,
        ann_nprobe: int = DEFAULT_ANN_NPROBE,
        synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL",
        timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        if exact_limit is not None and not _positive_int(exact_limit):
            raise ValueError(f"exact_limit must be a positive integer or None, got {exact_limit!r}")
        for name, value in (("ann_candidates", ann_candidates), ("ann_nprobe", ann_nprobe)):
            if not _positive_int(value):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.exact_limit = exact_limit
        self.ann_candidates = int(ann_candidates)
        self.ann_nprobe = int(ann_nprobe)
        self.path = memory_file(path) if store is None else None
        self.store: BaseRecordStore = store or SQLiteRecordStore(
            path, synchronous=synchronous, timeout=timeout, read_only=read_only
        )
        """The durable record layer."""
        self.read_only = bool(getattr(self.store, "read_only", False))
        """Whether the file was opened read-only: :meth:`close` writes no index caches."""
        self._lock = ProcessLock(f"the memory file {self.path}", guard=self.path is not None)
        """Serialises partitions and writes; refuses a forked child (``backends/_fork.py``)."""
        self.files = PartitionFiles(self.store, self.path, self._lock)
        """Loads partitions from the store and keeps their caches next to the file."""
        self._partitions: dict[str, Partition] = {}
        self._bound: tuple[str, int] | None = None
        self._dimension: int | None = None
        self._lexical_context = False
        self._closed = False
        self._thread_locks: dict[str, threading.Lock] = {}

    @classmethod
    def in_memory(cls) -> SQLiteBackend:
        """A backend that keeps everything in memory (nothing is written to disk)."""
        return cls(None)

    # -- identity ------------------------------------------------------------------------------

    @property
    def dimension(self) -> int | None:
        if self._dimension is None:
            self._dimension = self.store.dimension  # fixed once set: cached
        return self._dimension

    @property
    def embedding_model(self) -> str | None:
        return self.store.embedding_model

    def bind_embeddings(self, model: str, dimension: int) -> None:
        if self._bound != (model, dimension):
            self.store.bind_embeddings(model, dimension)
            self._bound = (model, dimension)

    def configure(self, scoring: ScoringConfig) -> None:
        """Index observations with the previous one's text when ``scoring.lexical_context``."""
        with self._lock:
            if scoring.lexical_context != self._lexical_context:
                self._lexical_context = scoring.lexical_context
                self.files.lexical_context = scoring.lexical_context
                for part in self._partitions.values():
                    part.lexical = None  # rebuilt with the new documents on next use

    # -- lifecycle -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the memory backend is closed")

    def close(self) -> None:
        """Write the vector-index caches (not when read-only) and close the file. Idempotent.
        In a forked child of the process that opened the file it only forgets it
        (``backends/_fork.py``)."""
        if self._lock.process.forked or self.store.forked:  # (not waiting for the parent lock)
            self._closed = True
            self._partitions = {}
            self.store.close()
            return
        with self._lock:
            if self._closed:
                return
            try:
                if not self.read_only:
                    self.files.save_all(self._partitions, self.exact_limit)
            finally:
                self._closed = True
                self._partitions.clear()
                self.store.close()

    # -- partitions ----------------------------------------------------------------------------

    def _partition(self, namespace: str) -> Partition | None:
        """The loaded partition of ``namespace`` (``None`` before the first vector exists)."""
        if self.store.changed_elsewhere():
            self._partitions.clear()
        part = self._partitions.get(namespace)
        if part is not None:
            part.flush_queue()
            return part
        dim = self.dimension
        if dim is None:
            return None
        part = self.files.load_partition(namespace, dim)
        self._partitions[namespace] = part
        return part

    def _lexical(self, part: Partition) -> BM25Index:
        return self.files.lexical(part)

    # -- writes --------------------------------------------------------------------------------

    def put(
        self,
        records: Sequence[MemoryRecord],
        vectors: F32,
        *,
        counter: CounterUpdate | None = None,
        pending: Sequence[str] = (),
    ) -> None:
        if not records:
            return
        with self._lock:
            self._check_open()
            seqs = self.store.insert(records, vectors, counter=counter, pending=pending)
            if self.store.consume_write_conflict():
                self._partitions.clear()  # another process wrote: reload from the file
            try:
                self._after_put_all(records, vectors, seqs)
            except Exception as exc:  # the memories are stored: raising would invite a retry,
                for ns in {r.namespace for r in records}:  # which stores them twice; these
                    self._partitions.pop(ns, None)  # namespaces reload instead (only they)
                logger.warning(
                    "%d memories were stored in %s, but updating the in-memory index failed "
                    "(%r); their namespaces are loaded from the file again on next use",
                    len(records),
                    self.path or "memory",
                    exc,
                )

    def _after_put_all(
        self, records: Sequence[MemoryRecord], vectors: F32, seqs: Sequence[int]
    ) -> None:
        """:meth:`_after_put` for each namespace of ``records`` (rows just stored)."""
        first_ns = records[0].namespace
        if len(records) == 1 or all(r.namespace == first_ns for r in records):
            self._after_put(first_ns, self._partitions.get(first_ns), records, vectors, seqs)
            return
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(records):
            groups.setdefault(r.namespace, []).append(i)
        for ns, at in groups.items():
            self._after_put(
                ns,
                self._partitions.get(ns),
                [records[i] for i in at],
                vectors[at],
                [seqs[i] for i in at],
            )

    def _after_put(
        self,
        namespace: str,
        part: Partition | None,
        records: Sequence[MemoryRecord],
        vectors: F32,
        seqs: Sequence[int],
    ) -> None:
        """Bring the partition of ``namespace`` up to date with rows just stored."""
        grown = True  # rows joined the arrays (not only the queue)
        if part is None:
            part = self._partition(namespace)  # loads the rows just written too
            if part is None:
                return
        else:
            n = len(records)
            first = records[0]
            stamp = first.created_at.timestamp()
            if n == 1 and first.last_accessed_at == first.created_at:
                grown = part.queue_one(
                    seqs[0], vectors[0], stamp, first.importance, first.kind, first.text
                )
                if grown:  # the queue is full
                    part.flush_queue()
            else:
                part.flush_queue()
                stamps: dict[datetime, float] = {}  # records of one add share their times

                def seconds(when: datetime) -> float:
                    value = stamps.get(when)
                    if value is None:
                        value = stamps[when] = when.timestamp()
                    return value

                part.append(
                    seqs,
                    vectors,
                    [seconds(r.created_at) for r in records],
                    [seconds(r.accessed_at) for r in records],
                    [r.importance for r in records],
                    [r.kind for r in records],
                    [r.text for r in records],
                )
            part.generation = self.store.last_generation
        part.dirty = True
        if grown:  # (queued rows are looked after when the queue flushes)
            maintain_ann(part, self.exact_limit, flush=False)  # retrieval indexes the new rows

    def delete(self, namespace: str, ids: Sequence[str]) -> int:
        with self._lock:
            self._check_open()
            part = self._partition(namespace)
            seqs = self.store.delete(list(ids), namespace=namespace)
            if part is not None and seqs:
                self._drop_rows(namespace, part, seqs)
            return len(seqs)

    def _drop_rows(self, namespace: str, part: Partition, seqs: Sequence[int]) -> None:
        """Take rows just deleted from the file out of the loaded partition."""
        newest, moved = part.delete_rows(part.rows_of(seqs))
        if newest >= 0 or moved.shape[0]:
            relink_context(part, self.store, newest, moved)
        part.generation = self.store.last_generation
        part.dirty = True
        if part.index.n_deleted * 2 > len(part) and len(part) > 1024:
            del self._partitions[namespace]  # compact: rebuilt from the file on next use

    def replace(
        self,
        namespace: str,
        ids: Sequence[str],
        records: Sequence[MemoryRecord],
        vectors: F32,
        *,
        counter: CounterUpdate | None = None,
    ) -> int:
        """Delete and insert in one SQLite transaction (see
        :meth:`BaseMemoryBackend.replace`); the partition then drops the deleted rows and takes
        the new ones, as :meth:`delete` and :meth:`put` would."""
        if not ids:
            self.put(records, vectors, counter=counter)
            return 0
        with self._lock:
            self._check_open()
            part = self._partitions.get(namespace)
            seqs, gone = self.store.replace(namespace, ids, records, vectors, counter=counter)
            if self.store.consume_write_conflict():
                self._partitions.clear()  # another process wrote: reload from the file
                part = None
            if part is not None and gone:
                part.flush_queue()
                self._drop_rows(namespace, part, gone)
            if records:
                self._after_put_all(records, vectors, seqs)
            return len(gone)

    def purge(self, namespace: str) -> int:
        with self._lock:
            self._check_open()
            n = self.store.purge(namespace)
            self._partitions.pop(namespace, None)
            return n

    def touch(self, namespace: str, keys: Sequence[int], when: datetime) -> dict[int, MemoryRecord]:
        with self._lock:
            self._check_open()
            records = self.store.touch_and_get(keys, when, namespace=namespace)
            part = self._partitions.get(namespace)
            if part is not None and records:
                stamp = when.timestamp()
                touched = keys if len(records) == len(keys) else list(records)
                rows = part.rows_of(np.asarray(touched, dtype=np.int64))
                part.set_accessed(rows, stamp)
                part.columns_generation = None  # the column snapshot no longer holds
        return records

    # -- the pending queue ---------------------------------------------------------------------

    def enqueue(self, items: Sequence[PendingMemory]) -> None:
        self._check_open()
        self.store.enqueue(items)

    def pending(
        self, *, namespace: str | None = None, limit: int | None = None, newest: bool = False
    ) -> list[PendingMemory]:
        self._check_open()
        return self.store.pending(namespace=namespace, limit=limit, newest=newest)

    def count_pending(self, namespace: str | None = None) -> int:
        self._check_open()
        return self.store.count_pending(namespace)

    def discard_pending(self, namespace: str, ids: Sequence[str]) -> int:
        self._check_open()
        if not ids:
            return 0
        return self.store.discard_pending(list(ids), namespace=namespace)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, namespace: str, ids: Sequence[str]) -> list[MemoryRecord]:
        self._check_open()
        return self.store.get(list(ids), namespace=namespace)

    def fetch(self, namespace: str, keys: Sequence[int]) -> dict[int, MemoryRecord]:
        self._check_open()
        found = self.store.get_by_seq(keys)
        return {k: r for k, r in found.items() if r.namespace == namespace}

    def recent(
        self,
        namespace: str,
        *,
        n: int | None = None,
        kinds: Sequence[str] | None = None,
        since_last_reflection: bool = False,
        by_importance: bool = False,
    ) -> list[MemoryRecord]:
        self._check_open()
        after = self.store.last_reflection_seq(namespace) if since_last_reflection else None
        return self.store.recent(
            namespace, n=n, kinds=kinds, after_seq=after, by_importance=by_importance
        )

    def count(self, namespace: str | None = None) -> int:
        self._check_open()
        return self.store.count(namespace)

    def namespaces(self) -> list[str]:
        self._check_open()
        return self.store.namespaces()

    def iter_records(
        self, namespace: str, *, with_vectors: bool = True, batch_size: int = 1024
    ) -> Iterator[RecordBatch]:
        self._check_open()
        for chunk in self.store.iter_partition(
            namespace, with_vectors=with_vectors, chunk_size=batch_size
        ):
            found = self.store.get_by_seq(chunk.seqs.tolist())
            keep = [i for i, s in enumerate(chunk.seqs.tolist()) if s in found]
            records = [found[int(chunk.seqs[i])] for i in keep]
            vectors = chunk.vectors
            if vectors is not None and len(keep) != len(chunk.seqs):
                vectors = vectors[keep]  # deleted between the two reads
            yield RecordBatch(records=records, vectors=vectors)

    # -- the reflection counter ----------------------------------------------------------------

    def reflection_state(self, namespace: str) -> ReflectionState:
        self._check_open()
        return self.store.reflection_state(namespace)

    def update_counter(self, update: CounterUpdate) -> None:
        self._check_open()
        self.store.update_counter(update)

    @contextlib.contextmanager
    def reflection_lock(self, namespace: str, *, timeout: float | None = None) -> Iterator[None]:
        """A lock file per namespace next to the memory file (``<file>.locks/``), held with
        ``flock`` through :mod:`filelock` (released by the OS if the process dies); a
        process-local lock for an in-memory backend."""
        if self.path is None:
            with self._lock:
                lock = self._thread_locks.setdefault(namespace, threading.Lock())
            wait = -1.0 if timeout is None else max(0.0, timeout)
            if not lock.acquire(timeout=wait):
                raise TimeoutError(f"the reflection lock of {namespace!r} is held elsewhere")
            try:
                yield
            finally:
                lock.release()
            return
        from filelock import FileLock, Timeout

        digest = hashlib.sha256(namespace.encode()).hexdigest()[:24]
        folder = self.path.with_name(self.path.name + ".locks")
        file_lock = FileLock(str(folder / f"{digest}.lock"), thread_local=False, is_singleton=False)
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            file_lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout))
        except Timeout as exc:
            raise TimeoutError(
                f"the reflection lock of {namespace!r} is held by another process"
            ) from exc
        except OSError as exc:  # the folder is not writable, or a file holds its name
            raise storage_error(
                f"cannot take the reflection lock in {folder} (it must be a directory this "
                "process can write)",
                exc,
                self.path,
            ) from exc
        try:
            yield
        finally:
            file_lock.release()

    # -- candidates ----------------------------------------------------------------------------

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
        with self._lock:
            self._check_open()
            part = self._partition(namespace)
            held = part.index.dimension if part is not None and len(part) else self.dimension
            if held is not None and vector.shape[0] != held:  # (an empty namespace too)
                raise DimensionMismatchError(
                    f"the query vector has {vector.shape[0]} dimensions but the memories have "
                    f"{held}; use the embedding model the memories were made with"
                )
            if part is None or len(part) == 0:
                return CandidateSet.empty()
            maintain_ann(part, self.exact_limit)
            lexical = self._lexical(part) if config.uses_lexical else None
            return cand.partition_candidates(
                part,
                lexical,
                query,
                vector,
                k=k,
                filter=filter,
                config=config,
                exact=exact,
                exact_limit=self.exact_limit,
                ann_candidates=self.ann_candidates,
                ann_nprobe=self.ann_nprobe,
            )
