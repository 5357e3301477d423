"""Loading a namespace's partition from the memory file, and the index caches kept next to it.

The caches live in ``<file>.index/`` (private, 0700): the FAISS flat index of exact partitions
and the IVF index of large ones (parsed only after their SHA-256 matches the digest recorded in
the file), the BM25 snapshot, and for large partitions the live vectors as raw float32,
memory-mapped copy-on-write. All of them are caches: a missing, stale or tampered one is rebuilt
from the SQLite file, and the BM25 snapshot and the vector file are topped up when only rows
were appended since they were written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends._fork import ProcessLock
from langchain_reflective.backends.sqlite._files import atomic_file
from langchain_reflective.backends.sqlite.ann import flush_ann, maintain_ann
from langchain_reflective.backends.sqlite.counters import _GENERATION_STRIDE
from langchain_reflective.backends.sqlite.index.faiss_flat import FaissFlatIndex
from langchain_reflective.backends.sqlite.index.ivf import IVFCandidateIndex
from langchain_reflective.backends.sqlite.partition import Partition
from langchain_reflective.backends.sqlite.record_store import BaseRecordStore
from langchain_reflective.backends.sqlite.store import COLUMNS_KEY, SQLiteRecordStore
from langchain_reflective.errors import StorageError

if TYPE_CHECKING:
    from langchain_reflective.backends.sqlite.lexical import BM25Index

__all__ = ["PartitionFiles"]

logger = logging.getLogger(__name__)

_FLAT_CACHE_MAX = 200_000  # larger exact partitions reload their vectors from the file
_LOAD_CHUNK = 16_384  # rows per read when loading vectors from the file
_COLUMNS_MIN = 50_000  # partitions at least this large keep a snapshot of their per-row columns
_SAMPLED_ROWS = 16  # rows of a mapped vector file compared with the memory file on load


class PartitionFiles:
    """Builds partitions from a record store and keeps their caches next to the memory file.

    Args:
        store: the durable records (the source of truth).
        path: the memory file; ``None`` (in memory): no caches, partitions load from the store.
        lock: the backend's lock, taken to swap a copied vector matrix in.
    """

    def __init__(self, store: BaseRecordStore, path: Path | None, lock: ProcessLock) -> None:
        self.store = store
        self.path = path
        self._lock = lock
        self.lexical_context = False
        """Whether observations are indexed for BM25 with the previous observation's text."""

    def cache_path(self, namespace: str) -> Path | None:
        if self.path is None:
            return None
        digest = hashlib.sha256(namespace.encode()).hexdigest()[:24]
        return self.path.with_name(self.path.name + ".index") / f"{digest}.faiss"

    def load_partition(self, namespace: str, dim: int, *, mapped: bool = True) -> Partition:
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
        after = 0
        if flat is not None or matrix is not None:  # vectors need not come from the file
            after = self._load_columns_cache(part, generation)
        for chunk in self.store.iter_partition(
            namespace,
            with_vectors=flat is None and matrix is None,
            chunk_size=_LOAD_CHUNK,
            with_texts=False,
            after_seq=after,
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
                return self.load_partition(namespace, dim, mapped=False)
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
        path = self.cache_path(namespace)
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
        except (ValueError, KeyError, TypeError, RecursionError):
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

    def _columns_cache_path(self, namespace: str) -> Path | None:
        path = self.cache_path(namespace)
        return None if path is None else path.with_suffix(".cols")

    def _load_columns_cache(self, part: Partition, generation: int) -> int:
        """Fill an empty partition from its column snapshot when the snapshot is still a prefix
        of the namespace (nothing deleted, reset or touched since); return the newest ``seq``
        it covered (0: not used, read every row from the file)."""
        path = self._columns_cache_path(part.namespace)
        if path is None or not isinstance(self.store, SQLiteRecordStore):
            return 0
        raw = self.store.get_meta(COLUMNS_KEY + part.namespace)
        if raw is None:
            return 0
        try:
            info = json.loads(raw)
            rows, newest = int(info["rows"]), int(info["newest_seq"])
            saved = int(info["generation"])
            digest, kinds = str(info["sha256"]), [str(k) for k in info["kinds"]]
        except (ValueError, KeyError, TypeError, RecursionError):
            return 0
        if (
            rows < 1
            or saved // _GENERATION_STRIDE != generation // _GENERATION_STRIDE
            or not 0 < newest <= generation % _GENERATION_STRIDE
        ):  # empty, or deleted or reset since
            return 0
        from langchain_reflective.backends.sqlite.columns_cache import load_columns

        columns = load_columns(path, rows=rows, expected_sha256=digest)
        if (
            columns is None
            or int(columns.seqs[-1]) != newest
            or (columns.kind_codes.size and int(columns.kind_codes.max()) >= len(kinds))
        ):
            logger.warning("column snapshot %s is missing or tampered; reading the file", path)
            return 0
        part.append_columns(*columns, kinds)
        part.columns_generation = saved if saved == generation else None
        return newest

    def _save_columns_cache(self, ns: str, part: Partition) -> None:
        """Snapshot a large partition's per-row columns (when they changed since loaded or
        saved). The ``meta`` entry is written only if no other process wrote since this one
        last looked, so it never vouches for access times another process changed."""
        path = self._columns_cache_path(ns)
        if (
            path is None
            or not isinstance(self.store, SQLiteRecordStore)
            or part.columns_generation == part.generation
            or part.live < _COLUMNS_MIN
        ):
            return
        from langchain_reflective.backends.sqlite.columns_cache import Columns, save_columns

        alive = part.index.alive if part.index.n_deleted else slice(None)
        columns = Columns(
            part.seqs.view[alive],
            part.created.view[alive],
            part.accessed.view[alive],
            part.importance.view[alive],
            part.kind_codes.view[alive],
        )
        digest = save_columns(path, columns)
        info = {
            "generation": part.generation,
            "rows": int(columns.seqs.shape[0]),
            "newest_seq": int(columns.seqs[-1]),
            "sha256": digest,
            "kinds": sorted(part.kinds, key=part.kinds.__getitem__),
        }
        if self.store.set_meta_unless_changed(COLUMNS_KEY + ns, json.dumps(info)):
            part.columns_generation = part.generation

    def _mapped_index(
        self, part: Partition, mapped: tuple[npt.NDArray[np.float32], int, int]
    ) -> FaissFlatIndex | None:
        """A flat index over the mapped rows plus the vectors of rows stored since."""
        matrix, rows, newest = mapped
        if len(part) < rows or int(part.seqs.view[rows - 1]) != newest:
            return None
        if not self._matches_the_file(part, matrix, rows):
            logger.warning(
                "vector cache of namespace %r does not hold this file's vectors (copied from "
                "another memory file, or tampered); reading them from the file",
                part.namespace,
            )
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

    def _matches_the_file(
        self, part: Partition, matrix: npt.NDArray[np.float32], rows: int
    ) -> bool:
        """Whether sampled rows of a mapped vector file (the first, the last and evenly spaced
        ones: :data:`_SAMPLED_ROWS`) hold the vectors the memory file stores for those keys.

        Its size, dimension and generation can match another memory file's cache of as many
        rows, and hashing the whole file would cost the instant reopen it exists for (1.5 GB at
        1M memories); a cache copied from another file differs in every row.
        """
        if not isinstance(self.store, SQLiteRecordStore):
            return True
        picks = sorted({0, rows - 1, *np.linspace(0, rows - 1, _SAMPLED_ROWS, dtype=int).tolist()})
        seqs = [int(part.seqs.view[i]) for i in picks]
        stored = self.store.vectors_by_seq(seqs)
        return all(
            stored.get(seq) == np.ascontiguousarray(matrix[i], dtype="<f4").tobytes()
            for i, seq in zip(picks, seqs, strict=True)
        )

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
        path = self.cache_path(ns)
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
        except (ValueError, KeyError, TypeError, RecursionError, OSError):
            start = 0
        vectors = part.index.vectors()
        if start:
            with file.open("ab") as fh:
                fh.write(np.ascontiguousarray(vectors[start:], dtype="<f4").tobytes())
                fh.flush()
                os.fsync(fh.fileno())
        else:
            with atomic_file(file) as fh:
                live = vectors[alive] if part.index.n_deleted else vectors
                for lo in range(0, live.shape[0], _LOAD_CHUNK):
                    fh.write(np.ascontiguousarray(live[lo : lo + _LOAD_CHUNK], "<f4").tobytes())
        info = {
            "generation": part.generation,
            "rows": int(live_seqs.shape[0]),
            "newest_seq": int(live_seqs[-1]),
            "dimension": dim,
        }
        self.store.set_meta(f"vector_cache:{ns}", json.dumps(info))
        part.vectors_generation = part.generation

    def _cache_info(self, namespace: str, generation: int) -> dict[str, Any] | None:
        if self.cache_path(namespace) is None:
            return None
        raw = self.store.get_meta(f"index_cache:{namespace}")
        if raw is None:
            return None
        try:
            info = json.loads(raw)
            if not isinstance(info, dict) or int(info["generation"]) != generation:
                logger.info("vector index cache for %r is stale; rebuilding", namespace)
                return None
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
        return info

    def _load_flat_cache(
        self, namespace: str, dim: int, info: dict[str, Any] | None
    ) -> FaissFlatIndex | None:
        path = self.cache_path(namespace)
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
        path = self.cache_path(namespace)
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

    def save_all(self, partitions: Mapping[str, Partition], exact_limit: int | None) -> None:
        """Write the caches of every loaded partition that changed since they were written."""
        if self.store.changed_elsewhere():
            # another process wrote since we last looked (one-memory adds do not look): the
            # partitions may lack its rows, and a cache saved now could carry the generation of
            # different contents. Skip it; the next open loads from the file.
            logger.info("another process wrote %s: not saving the index caches", self.path)
            return
        for ns, part in partitions.items():
            part.flush_queue()
            try:
                self._save_lexical_cache(ns, part)
                if part.ann is not None or len(part) > _FLAT_CACHE_MAX:
                    self._save_vector_cache(ns, part)
                self._save_columns_cache(ns, part)
            except (OSError, StorageError, ValueError) as exc:  # the caches are optional
                logger.warning("could not write the index caches of %r: %s", ns, exc)
            if part.ann_build is not None:
                try:
                    maintain_ann(part, exact_limit, wait=True)  # save the index being built
                except (MemoryError, RuntimeError) as exc:  # the cache is optional
                    logger.warning("could not finish the IVF index of %r: %s", ns, exc)
                    continue
            path = self.cache_path(ns)
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
        path = self.cache_path(namespace)
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
            "relinked": True,  # deletes gave the next observations their context anew
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
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
        if context != self.lexical_context or not 0 < rows <= len(part):
            return None
        if context and generation >= _GENERATION_STRIDE and not info.get("relinked"):
            return None  # saved by a version whose deletes left the next observation's context
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

    def lexical(self, part: Partition) -> BM25Index:
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
            part.lexical_context = self.lexical_context
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
