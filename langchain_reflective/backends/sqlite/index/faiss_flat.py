"""Exact inner-product index with tombstones and a cache file in FAISS's own format.

The vectors live in one growable numpy matrix (amortised O(1) appends; FAISS 1.15's
``IndexFlat.add`` copies its whole storage on every call, which made one-at-a-time adds
quadratic). Search is a BLAS matrix-vector product over that matrix; the cache file is a FAISS
``IndexFlatIP`` so it stays readable by FAISS tools.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.sqlite._arrays import GrowArray, GrowMatrix
from langchain_reflective.backends.sqlite._files import atomic_file
from langchain_reflective.backends.sqlite.index.base import F32, BaseVectorIndex

__all__ = ["FaissFlatIndex"]


_BY_INDEX_MIN_DIM = 12
"""FAISS has special kernels for dimensions up to 12 whose sums differ in the last bit from the
per-row kernel; those small dimensions keep the gather path."""


def _faiss() -> Any:
    import faiss

    return faiss


class one_faiss_thread:
    """Run FAISS calls inside on the calling thread only, then restore the thread count.

    Some FAISS kernels open an OpenMP parallel region even for one query; on a busy machine the
    team's other threads can take milliseconds to be scheduled while the work is microseconds.
    The OpenMP thread count is a per-thread setting: this changes the calling thread's only.
    A class, not a generator-based context manager (this runs on every query); lower-case
    because it reads like a function: ``with one_faiss_thread(faiss):``.
    """

    __slots__ = ("_before", "_faiss")

    def __init__(self, faiss: Any) -> None:
        self._faiss = faiss
        self._before = 1

    def __enter__(self) -> None:
        self._before = self._faiss.omp_get_max_threads()
        if self._before != 1:
            self._faiss.omp_set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self._before != 1:
            self._faiss.omp_set_num_threads(self._before)


class FaissFlatIndex(BaseVectorIndex):
    """Brute-force inner product over normalised vectors (= cosine).

    Deleted rows stay in the index as tombstones (masked out of results) so row numbers never
    shift; the stream compacts by rebuilding.

    Args:
        dimension: vector dimension.
    """

    def __init__(self, dimension: int) -> None:
        self.dimension = int(dimension)
        self._matrix = GrowMatrix(self.dimension)
        self._alive_buf = GrowArray(np.bool_)
        self._n_dead = 0

    @classmethod
    def from_matrix(cls, matrix: F32) -> FaissFlatIndex:
        """An index over ``matrix`` (``(n, dim)`` float32, e.g. a copy-on-write file mapping)
        used in place: no copy until a row is added beyond it."""
        index = cls(matrix.shape[1])
        index._matrix._buf = matrix
        index._matrix._n = matrix.shape[0]
        index._alive_buf.extend(np.ones(matrix.shape[0], dtype=bool))
        return index

    @property
    def _alive(self) -> npt.NDArray[np.bool_]:
        return self._alive_buf.view

    def __len__(self) -> int:
        return len(self._matrix)

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows in total (avoids regrowth when the size is known)."""
        self._matrix.reserve(rows)
        self._alive_buf.reserve(rows)

    @property
    def n_deleted(self) -> int:
        """How many rows are tombstones."""
        return self._n_dead

    def add(self, vectors: F32) -> None:
        arr = np.asarray(vectors, dtype=np.float32)
        if arr.ndim != 2 or arr.shape[1] != self.dimension:
            arr = arr.reshape(-1, self.dimension)
        m = arr.shape[0]
        if m == 0:
            return
        self._matrix.extend(arr)
        if m == 1:
            self._alive_buf.append(True)
        else:
            self._alive_buf.extend(np.ones(m, dtype=bool))

    def delete(self, rows: npt.NDArray[np.int64]) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        newly = int(self._alive[rows].sum())
        self._alive[rows] = False
        self._n_dead += newly

    @property
    def alive(self) -> npt.NDArray[np.bool_]:
        """Boolean mask of live rows (read-only view)."""
        view = self._alive.view()
        view.flags.writeable = False
        return view

    def vectors(self, rows: npt.NDArray[np.int64] | None = None) -> F32:
        view: F32 = self._matrix.view
        if rows is None:
            view.flags.writeable = False
            return view
        out: F32 = view[np.asarray(rows, dtype=np.int64)]
        return out

    def scores(
        self, query: F32, rows: npt.NDArray[np.int64] | None = None
    ) -> npt.NDArray[np.float32]:
        """Exact inner products of ``query`` with ``rows`` (all rows when ``None``).

        A few rows are read in place by FAISS's by-index kernel (on one thread): copying them out
        of the matrix into a fresh array first cost more than the products themselves. Same
        values as the matrix kernel: both run FAISS's ``fvec_inner_product`` per row.
        """
        n = len(self)
        if rows is None or self.dimension <= _BY_INDEX_MIN_DIM or 4 * len(rows) >= n:
            return super().scores(query, rows)
        ids = np.ascontiguousarray(rows, dtype=np.int64)
        out = np.empty(ids.shape[0], dtype=np.float32)
        if ids.shape[0] == 0:
            return out
        if int(ids.min()) < 0 or int(ids.max()) >= n:
            raise IndexError(f"rows out of range for an index of {n} rows")
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        faiss = _faiss()
        matrix = self._matrix.view
        with one_faiss_thread(faiss):
            faiss.fvec_inner_products_by_idx(
                faiss.swig_ptr(out),
                faiss.swig_ptr(q),
                faiss.swig_ptr(matrix),
                faiss.swig_ptr(ids),
                self.dimension,
                1,
                ids.shape[0],
            )
        return out

    def search(self, query: F32, k: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        n = len(self)
        if n == 0 or k <= 0:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        scores = self.scores(query)
        scores = np.where(self._alive, scores, -np.inf).astype(np.float32)
        k = min(k, n - self._n_dead)
        if k <= 0:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        part = np.argpartition(-scores, k - 1)[:k]
        order = part[np.argsort(-scores[part], kind="stable")]
        return scores[order], order.astype(np.int64)

    # -- cache file (FAISS's own binary format: loading it never executes code) ------------------

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the live vectors to ``path`` atomically; return the file's SHA-256."""
        faiss = _faiss()
        compact = faiss.IndexFlatIP(self.dimension)
        live = self.vectors()[self._alive] if self._n_dead else self.vectors()
        compact.add(np.ascontiguousarray(live))
        data = faiss.serialize_index(compact).tobytes()
        del compact
        with atomic_file(Path(path)) as fh:
            fh.write(data)
        return hashlib.sha256(data).hexdigest()

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, dimension: int, expected_sha256: str, count: int
    ) -> FaissFlatIndex | None:
        """Load a cache written by :meth:`save`; ``None`` when missing, stale or tampered.

        The file is only parsed after its SHA-256 matches the digest recorded in the memory file
        when it was written, so a tampered or foreign cache is never deserialised.
        """
        try:
            data = Path(path).read_bytes()
        except OSError:
            return None
        if hashlib.sha256(data).hexdigest() != expected_sha256:
            return None
        faiss = _faiss()
        try:
            loaded = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        except RuntimeError:
            return None
        if loaded.d != dimension or loaded.ntotal != count:
            return None
        if not isinstance(loaded, faiss.IndexFlatIP):
            return None
        out = cls(dimension)
        out.reserve(count)
        if count:
            stored = faiss.rev_swig_ptr(loaded.get_xb(), count * dimension)
            out.add(stored.reshape(count, dimension))
            del stored
        del loaded
        return out
