"""``SQLiteBackend``: the embedded default backend, one SQLite file plus in-memory indexes.

Records, vectors, counters and the pending queue live in one SQLite file
(:class:`~langchain_reflective.backends.sqlite.store.SQLiteRecordStore`). Per namespace, a
:class:`~langchain_reflective.backends.sqlite.partition.Partition` mirrors the live rows for
scoring: the FAISS matrix (exact cosine), an IVF index for large namespaces, the BM25 index and
the neighbour table. They are caches: rebuilt from the file when missing or stale, and the
vector indexes are saved next to the file (``<file>.index/``) on close, with a digest checked
on load (nothing executes code on load).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

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
from langchain_reflective.backends.sqlite.ann import flush_ann, maintain_ann
from langchain_reflective.backends.sqlite.index.faiss_flat import FaissFlatIndex
from langchain_reflective.backends.sqlite.index.ivf import IVFCandidateIndex
from langchain_reflective.backends.sqlite.partition import Partition, rows_of_seqs
from langchain_reflective.backends.sqlite.record_store import BaseRecordStore
from langchain_reflective.backends.sqlite.store import _GENERATION_STRIDE, SQLiteRecordStore
from langchain_reflective.errors import DimensionMismatchError, StorageError
from langchain_reflective.records import MemoryRecord
from langchain_reflective.scoring import ScoringConfig

if TYPE_CHECKING:
    from langchain_reflective.backends.sqlite.lexical import BM25Index

__all__ = ["DEFAULT_EXACT_LIMIT", "SQLiteBackend"]

logger = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
DEFAULT_EXACT_LIMIT = 20_000
"""Namespaces with more live memories than this use the approximate candidate path."""
_FLAT_CACHE_MAX = 200_000  # larger exact partitions reload their vectors from the file
_LOAD_CHUNK = 16_384  # rows per read when loading vectors from the file


class SQLiteBackend(BaseMemoryBackend):
    """Memories in one SQLite file (or in memory), scored with FAISS and BM25 in-process.

    Several processes may open the same file: writes are transactions, each process reloads
    what another changed, and the reflection lock is a lock file next to the memory file.

    Args:
        path: the memory file; ``None`` keeps everything in memory (nothing is written).
        store: a custom record layer (overrides ``path``; mostly for tests).
        exact_limit: namespaces with at most this many live memories are scored exactly;
            larger ones score exactly only a candidate set (approximate nearest neighbours
            from an IVF index, best BM25 matches, most recent and most important memories).
            ``None`` always scores exactly. Large IVF indexes are trained on a background
            thread; until one is ready, retrieval uses the previous index or scores exactly,
            and ``close()`` waits for it.
        ann_candidates: how many dense and lexical candidates the approximate path gathers
            (at least ``4 * k``). More candidates: closer to exact, slower.
        ann_nprobe: how many IVF lists the approximate path searches.
        synchronous: SQLite's ``synchronous`` pragma (see :class:`SQLiteRecordStore`).
        timeout: seconds to wait for another writer's lock.

    Raises:
        ForeignFileError: the file is not a langchain-reflective memory file.
        SchemaVersionError: the file was written by a newer version of the package.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        store: BaseRecordStore | None = None,
        exact_limit: int | None = DEFAULT_EXACT_LIMIT,
        ann_candidates: int = 128,
        ann_nprobe: int = 8,
        synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL",
        timeout: float = 30.0,
    ) -> None:
        if exact_limit is not None and (isinstance(exact_limit, bool) or exact_limit < 1):
            raise ValueError(f"exact_limit must be a positive integer or None, got {exact_limit!r}")
        if ann_candidates < 1 or ann_nprobe < 1:
            raise ValueError("ann_candidates and ann_nprobe must be positive")
        self.exact_limit = exact_limit
        self.ann_candidates = int(ann_candidates)
        self.ann_nprobe = int(ann_nprobe)
        self.path = Path(path) if path is not None and store is None else None
        self.store: BaseRecordStore = store or SQLiteRecordStore(
            path, synchronous=synchronous, timeout=timeout
        )
        """The durable record layer."""
        self._lock = threading.RLock()
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
                for part in self._partitions.values():
                    part.lexical = None  # rebuilt with the new documents on next use

    # -- lifecycle -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the memory backend is closed")

    def close(self) -> None:
        """Write the vector-index caches and close the file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            try:
                self._save_index_caches()
            finally:
                self._closed = True
                self._partitions.clear()
                self.store.close()

    # -- partitions ----------------------------------------------------------------------------

    def _cache_path(self, namespace: str) -> Path | None:
        if self.path is None:
            return None
        digest = hashlib.sha256(namespace.encode()).hexdigest()[:24]
        return self.path.with_name(self.path.name + ".index") / f"{digest}.faiss"

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
        part = self._load_partition(namespace, dim)
        self._partitions[namespace] = part
        return part

    def _load_partition(self, namespace: str, dim: int, *, mapped: bool = True) -> Partition:
        """Rebuild a namespace's scoring state from the file, streaming it in chunks.

        The vector-index cache (when valid) spares reading the vectors (exact partitions) or
        retraining and refilling the IVF index (large partitions); the mapped vector file of a
        large partition spares reading its vectors (only rows stored since are read).
        """
        generation = self.store.generation(namespace)
        part = Partition(namespace, dim, generation)
        info = self._cache_info(namespace, generation)
        kind = info.get("kind", "flat") if info else None
        flat = self._load_flat_cache(namespace, dim, info) if kind == "flat" else None
        matrix = None
        if flat is None and mapped:
            matrix = self._map_vector_cache(namespace, dim, generation)
        part.reserve(self.store.count(namespace))
        for chunk in self.store.iter_partition(
            namespace,
            with_vectors=flat is None and matrix is None,
            chunk_size=_LOAD_CHUNK,
            with_texts=False,
        ):
            part.append(
                chunk.seqs,
                chunk.vectors,
                chunk.created,
                chunk.accessed,
                chunk.importance,
                chunk.kinds,
                None,
            )
        if matrix is not None:
            index = self._mapped_index(part, matrix)
            if index is None:  # the file changed under us: read every vector instead
                return self._load_partition(namespace, dim, mapped=False)
            part.index = index
            part.vectors_generation = generation if len(index) == matrix[1] else None
            if len(index) == matrix[1]:  # (a grown index already copied the mapping)
                threading.Thread(
                    target=self._unmap,
                    args=(index, matrix[0]),
                    name="langchain-reflective-unmap",
                    daemon=True,
                ).start()
        if flat is not None:
            part.index = flat
        elif kind == "ivf" and info is not None:
            part.ann = self._load_ivf_cache(namespace, dim, info, len(part))
            part.ann_upto = len(part) if part.ann is not None else 0
        part.dirty = flat is None and (part.ann is None or kind != "ivf")
        return part

    def _map_vector_cache(
        self, namespace: str, dim: int, generation: int
    ) -> tuple[npt.NDArray[np.float32], int, int] | None:
        """The mapped vector file of a large partition and the rows and newest seq it covers,
        when it is still a prefix of the namespace (nothing deleted since, only appends)."""
        path = self._cache_path(namespace)
        raw = self.store.get_meta(f"vector_cache:{namespace}")
        if path is None or raw is None:
            return None
        try:
            info = json.loads(raw)
            rows, newest, saved = (
                int(info["rows"]),
                int(info["newest_seq"]),
                int(info["generation"]),
            )
            if int(info["dimension"]) != dim or rows < 1:
                return None
        except (ValueError, KeyError, TypeError):
            return None
        if saved != generation and not (
            isinstance(self.store, SQLiteRecordStore)
            and saved // _GENERATION_STRIDE == generation // _GENERATION_STRIDE
            and newest <= generation % _GENERATION_STRIDE
        ):
            return None
        file = path.with_suffix(".f32")
        try:
            if file.stat().st_size != rows * dim * 4:
                return None
            matrix = np.memmap(file, dtype="<f4", mode="c", shape=(rows, dim))
        except (OSError, ValueError):
            return None
        return np.asarray(matrix), rows, newest

    def _mapped_index(
        self, part: Partition, mapped: tuple[npt.NDArray[np.float32], int, int]
    ) -> FaissFlatIndex | None:
        """A flat index over the mapped rows plus the vectors of rows stored since."""
        matrix, rows, newest = mapped
        if len(part) < rows or int(part.seqs.view[rows - 1]) != newest:
            return None
        index = FaissFlatIndex.from_matrix(matrix)
        if len(part) > rows:
            tail = [
                chunk
                for chunk in self.store.iter_partition(
                    part.namespace, with_vectors=True, chunk_size=_LOAD_CHUNK, after_seq=newest
                )
            ]
            seqs = [s for c in tail for s in c.seqs.tolist()]
            if seqs != part.seqs.view[rows:].tolist():
                return None
            for chunk in tail:
                assert chunk.vectors is not None
                index.add(chunk.vectors)
        return index

    def _unmap(self, index: FaissFlatIndex, mapped: npt.NDArray[np.float32]) -> None:
        """Copy a mapped vector file into ordinary memory, then swap it in (worker thread).

        The mapping answers the first queries at once; scanning rows at random through it costs
        page-table work on every query (small pages of a file mapping), so warm retrieval runs
        on an anonymous copy, as it did when the vectors were read from the file.
        """
        try:
            copy = np.empty(mapped.shape, dtype=np.float32)
            for lo in range(0, mapped.shape[0], _LOAD_CHUNK):
                copy[lo : lo + _LOAD_CHUNK] = mapped[lo : lo + _LOAD_CHUNK]
        except (OSError, ValueError, MemoryError) as exc:  # keep using the mapping
            logger.warning("could not copy the mapped vectors into memory: %s", exc)
            return
        with self._lock:
            if index._matrix._buf is mapped:  # not grown (and so copied) meanwhile
                index._matrix._buf = copy

    def _save_vector_cache(self, ns: str, part: Partition) -> None:
        """Keep a large partition's live vectors in a raw file next to the memory file:
        appended to when only rows were added since it was written, rewritten otherwise."""
        path = self._cache_path(ns)
        if path is None or part.vectors_generation == part.generation or not part.live:
            return
        file = path.with_suffix(".f32")
        dim = part.index.dimension
        alive = part.index.alive
        live_seqs = part.seqs.view[alive]
        raw = self.store.get_meta(f"vector_cache:{ns}")
        start = 0
        try:
            info = json.loads(raw) if raw is not None else None
            if (
                info is not None
                and not part.index.n_deleted
                and int(info["dimension"]) == dim
                and 0 < int(info["rows"]) <= len(part)
                and int(part.seqs.view[int(info["rows"]) - 1]) == int(info["newest_seq"])
                and int(info["generation"]) // _GENERATION_STRIDE
                == part.generation // _GENERATION_STRIDE
                and file.stat().st_size == int(info["rows"]) * dim * 4
            ):
                start = int(info["rows"])  # a prefix of the live rows: append the rest
        except (ValueError, KeyError, TypeError, OSError):
            start = 0
        vectors = part.index.vectors()
        if start:
            with file.open("ab") as fh:
                fh.write(np.ascontiguousarray(vectors[start:], dtype="<f4").tobytes())
                fh.flush()
                os.fsync(fh.fileno())
        else:
            file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = file.with_name(file.name + ".tmp")
            fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
            with os.fdopen(fd, "wb") as fh:
                live = vectors[alive] if part.index.n_deleted else vectors
                for lo in range(0, live.shape[0], _LOAD_CHUNK):
                    fh.write(np.ascontiguousarray(live[lo : lo + _LOAD_CHUNK], "<f4").tobytes())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, file)
        info = {
            "generation": part.generation,
            "rows": int(live_seqs.shape[0]),
            "newest_seq": int(live_seqs[-1]),
            "dimension": dim,
        }
        self.store.set_meta(f"vector_cache:{ns}", json.dumps(info))
        part.vectors_generation = part.generation

    def _cache_info(self, namespace: str, generation: int) -> dict[str, Any] | None:
        if self._cache_path(namespace) is None:
            return None
        raw = self.store.get_meta(f"index_cache:{namespace}")
        if raw is None:
            return None
        try:
            info = json.loads(raw)
            if not isinstance(info, dict) or int(info["generation"]) != generation:
                logger.info("vector index cache for %r is stale; rebuilding", namespace)
                return None
        except (ValueError, KeyError, TypeError):
            return None
        return info

    def _load_flat_cache(
        self, namespace: str, dim: int, info: dict[str, Any] | None
    ) -> FaissFlatIndex | None:
        path = self._cache_path(namespace)
        loaded: FaissFlatIndex | None = None
        if path is not None and info is not None:
            try:
                loaded = FaissFlatIndex.load(
                    path,
                    dimension=dim,
                    expected_sha256=str(info["sha256"]),
                    count=int(info["count"]),
                )
            except (ValueError, KeyError, TypeError):
                loaded = None
        if loaded is None:
            logger.warning(
                "vector index cache %s is missing, stale or tampered; rebuilding from the "
                "memory file",
                path,
            )
        return loaded

    def _load_ivf_cache(
        self, namespace: str, dim: int, info: dict[str, Any], rows: int
    ) -> IVFCandidateIndex | None:
        path = self._cache_path(namespace)
        loaded: IVFCandidateIndex | None = None
        try:
            if path is not None and int(info["count"]) == rows:
                loaded = IVFCandidateIndex.load(
                    path,
                    dimension=dim,
                    expected_sha256=str(info["sha256"]),
                    trained_on=int(info["trained_on"]),
                )
        except (ValueError, KeyError, TypeError):
            loaded = None
        if loaded is None:
            logger.warning("IVF index cache %s is missing, stale or tampered; rebuilding it", path)
        return loaded

    def _save_index_caches(self) -> None:
        if self.store.changed_elsewhere():
            # another process wrote since we last looked (one-memory adds do not look): the
            # partitions may lack its rows, and a cache saved now could carry the generation of
            # different contents. Skip it; the next open loads from the file.
            logger.info("another process wrote %s: not saving the index caches", self.path)
            return
        for ns, part in self._partitions.items():
            part.flush_queue()
            try:
                self._save_lexical_cache(ns, part)
                if part.ann is not None or len(part) > _FLAT_CACHE_MAX:
                    self._save_vector_cache(ns, part)
            except (OSError, StorageError, ValueError) as exc:  # the caches are optional
                logger.warning("could not write the index caches of %r: %s", ns, exc)
            if part.ann_build is not None:
                try:
                    maintain_ann(part, self.exact_limit, wait=True)  # save the index being built
                except (MemoryError, RuntimeError) as exc:  # the cache is optional
                    logger.warning("could not finish the IVF index of %r: %s", ns, exc)
                    continue
            path = self._cache_path(ns)
            if path is None or not part.dirty:
                continue
            try:
                info: dict[str, Any]
                if part.ann is not None:
                    flush_ann(part)
                    digest = part.ann.save(path)
                    info = {"kind": "ivf", "trained_on": part.ann.trained_on}
                elif len(part) <= _FLAT_CACHE_MAX:
                    digest = part.index.save(path)
                    info = {"kind": "flat"}
                else:  # large exact partition: its vectors reload from the file
                    path.unlink(missing_ok=True)
                    self.store.set_meta(f"index_cache:{ns}", "{}")
                    part.dirty = False
                    continue
                info.update(generation=part.generation, sha256=digest, count=part.live)
                self.store.set_meta(f"index_cache:{ns}", json.dumps(info))
                part.dirty = False
            except (OSError, StorageError, RuntimeError) as exc:  # the cache is optional
                logger.warning("could not write the vector index cache %s: %s", path, exc)

    def _lexical_cache_path(self, namespace: str) -> Path | None:
        path = self._cache_path(namespace)
        return None if path is None else path.with_suffix(".bm25")

    def _save_lexical_cache(self, ns: str, part: Partition) -> None:
        """Snapshot the BM25 index of a partition (when it changed since loaded or saved)."""
        path = self._lexical_cache_path(ns)
        if path is None or part.lexical is None or part.lexical_generation == part.generation:
            return
        live_seqs = part.seqs.view[part.index.alive]
        if len(part.lexical) != len(part) or not live_seqs.shape[0]:
            return
        from langchain_reflective.backends.sqlite.lexical_cache import save_bm25

        digest, rows = save_bm25(part.lexical, path)
        info = {
            "generation": part.generation,
            "sha256": digest,
            "rows": rows,
            "newest_seq": int(live_seqs[-1]),
            "context": part.lexical_context,
            "last_observation": part.last_observation,
        }
        self.store.set_meta(f"lexical_cache:{ns}", json.dumps(info))
        part.lexical_generation = part.generation

    def _load_lexical_cache(self, part: Partition) -> BM25Index | None:
        """The partition's BM25 index from its snapshot, topped up with the rows stored since
        (only appends: same deletions, same first rows), or ``None`` to rebuild it."""
        path = self._lexical_cache_path(part.namespace)
        raw = self.store.get_meta(f"lexical_cache:{part.namespace}")
        if path is None or raw is None or part.index.n_deleted:
            return None
        try:
            info = json.loads(raw)
            rows, newest = int(info["rows"]), int(info["newest_seq"])
            generation, digest = int(info["generation"]), str(info["sha256"])
            context, last = bool(info["context"]), info["last_observation"]
        except (ValueError, KeyError, TypeError):
            return None
        if context != self._lexical_context or not 0 < rows <= len(part):
            return None
        if int(part.seqs.view[rows - 1]) != newest:
            return None
        if generation != part.generation and not (
            isinstance(self.store, SQLiteRecordStore)
            and generation // _GENERATION_STRIDE == part.generation // _GENERATION_STRIDE
        ):  # deleted or reset since: row numbers may differ
            return None
        from langchain_reflective.backends.sqlite.lexical import BM25Index
        from langchain_reflective.backends.sqlite.lexical_cache import load_bm25

        lexical = load_bm25(path, expected_sha256=digest, template=BM25Index())
        if lexical is None:
            logger.warning("lexical index cache %s is missing or tampered; rebuilding", path)
            return None
        part.lexical_context = context
        part.last_observation = last if isinstance(last, str) else None
        if rows < len(part):  # rows stored since the snapshot: index them now
            texts: list[str] = []
            kinds: list[str] = []
            seqs: list[int] = []
            for chunk in self.store.iter_partition(
                part.namespace, with_vectors=False, after_seq=newest
            ):
                seqs.extend(chunk.seqs.tolist())
                texts.extend(chunk.texts)
                kinds.extend(chunk.kinds)
            if seqs != part.seqs.view[rows:].tolist():
                return None  # another writer changed the file meanwhile: rebuild
            lexical.add(part.lexical_documents(texts, kinds))
        part.lexical_generation = generation if rows == len(part) else None
        return lexical

    def _lexical(self, part: Partition) -> BM25Index:
        if part.lexical is None:
            cached = self._load_lexical_cache(part)
            if cached is not None:
                part.lexical = cached
                return cached
            from langchain_reflective.backends.sqlite.lexical import BM25Index

            lexical = BM25Index()
            # rows must line up with the partition's, whose deleted rows are tombstones while
            # the file no longer holds them: place each stored text at its row
            docs = [""] * len(part)
            part.lexical_context = self._lexical_context
            part.last_observation = None
            for chunk in self.store.iter_partition(part.namespace, with_vectors=False):
                # another writer may have committed rows this partition has not loaded yet
                # (it reloads on its next access); only rows it has get a document here
                known = np.isin(chunk.seqs, part.seqs.view)
                keep = np.flatnonzero(known).tolist()
                rows = part.rows_of(chunk.seqs[known])
                contextual = part.lexical_documents(
                    [chunk.texts[i] for i in keep], [chunk.kinds[i] for i in keep]
                )
                for row, doc in zip(rows.tolist(), contextual, strict=True):
                    docs[row] = doc
            lexical.add(docs)
            dead = np.flatnonzero(~part.index.alive)
            if dead.size:
                lexical.remove(dead.tolist())
            part.lexical = lexical
        return part.lexical

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
            first_ns = records[0].namespace
            part = self._partitions.get(first_ns)
            seqs = self.store.insert(records, vectors, counter=counter, pending=pending)
            if self.store.consume_write_conflict():
                self._partitions.clear()  # another process wrote: reload from the file
                part = None
            if len(records) == 1 or all(r.namespace == first_ns for r in records):
                self._after_put(first_ns, part, records, vectors, seqs)
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
                part.delete_rows(part.rows_of(seqs))
                part.generation = self.store.last_generation
                part.dirty = True
                if part.index.n_deleted * 2 > len(part) and len(part) > 1024:
                    del self._partitions[namespace]  # compact: rebuilt from the file on next use
            return len(seqs)

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
                rows = rows_of_seqs(part, np.asarray(touched, dtype=np.int64))
                part.touched(rows, stamp)
                part.accessed.view[rows] = stamp
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
        folder.mkdir(mode=0o700, exist_ok=True)
        file_lock = FileLock(str(folder / f"{digest}.lock"), thread_local=False, is_singleton=False)
        try:
            file_lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout))
        except Timeout as exc:
            raise TimeoutError(
                f"the reflection lock of {namespace!r} is held by another process"
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
            if part is None or len(part) == 0:
                return CandidateSet.empty()
            if vector.shape[0] != part.index.dimension:
                raise DimensionMismatchError(
                    f"the query vector has {vector.shape[0]} dimensions but the memories have "
                    f"{part.index.dimension}; use the embedding model the memories were made with"
                )
            maintain_ann(part, self.exact_limit)
            mask = cand.filter_mask(part, filter) if filter.restricts_rows else None
            lex = self._lexical(part).query_scores(query) if config.uses_lexical else None
            try:
                rows: I64 | None = None
                if not exact and part.ann is not None and 4 * k < part.live:
                    rows = cand.gather(
                        part,
                        vector,
                        k,
                        mask,
                        lex,
                        config,
                        exact_limit=self.exact_limit,
                        ann_candidates=self.ann_candidates,
                        ann_nprobe=self.ann_nprobe,
                    )
                if (
                    rows is not None
                    and rows.size
                    and filter.min_relevance is None
                    and cand.fused(part, config)
                ):
                    return cand.triple_set(part, vector, rows, lex, exact=False)
                complete = rows is None
                if rows is None:  # exact: every (matching) live row is a candidate
                    rows = np.flatnonzero(part.index.alive if mask is None else mask)
                if rows.size == 0:
                    return CandidateSet.empty()
                relevance = part.index.scores(vector, rows).astype(np.float64)
                if filter.min_relevance is not None:
                    keep = relevance >= filter.min_relevance
                    rows, relevance = rows[keep], relevance[keep]
                    if rows.size == 0:
                        return CandidateSet.empty()
                return cand.row_set(part, vector, rows, relevance, lex, config, exact=complete)
            finally:
                if lex is not None:
                    lex.release()
