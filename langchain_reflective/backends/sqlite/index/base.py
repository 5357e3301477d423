"""The vector index protocol: add / search / delete over rows 0..n-1, plus async twins."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod

import numpy as np
import numpy.typing as npt

__all__ = ["BaseVectorIndex", "inner_products"]

F32 = npt.NDArray[np.float32]


def inner_products(matrix: F32, query: F32) -> F32:
    """``matrix @ query`` for one query, on one thread.

    A matrix-vector product is memory-bound: extra threads do not make it faster, and
    OpenBLAS's threaded ``sgemv`` was up to 9x slower than one thread on a busy 2-core machine
    (threads wait for each other). FAISS's SIMD kernel runs on the calling thread; numpy is the
    fallback when FAISS is not installed or the matrix is not contiguous.
    """
    q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
    m = np.asarray(matrix)
    n = m.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.float32)
    if m.dtype != np.float32 or not m.flags.c_contiguous or m.shape[1] != q.shape[0]:
        fallback: F32 = np.asarray(m @ q, dtype=np.float32)
        return fallback
    try:
        import faiss
    except ImportError:  # pragma: no cover - FAISS is a core dependency
        plain: F32 = m @ q
        return plain
    out = np.empty(n, dtype=np.float32)
    kernel = faiss.fvec_inner_products_ny  # type: ignore[attr-defined]
    kernel(faiss.swig_ptr(out), faiss.swig_ptr(q), faiss.swig_ptr(m), q.shape[0], n)
    return out


class BaseVectorIndex(ABC):
    """An inner-product index over L2-normalised vectors.

    Rows are positions ``0..len-1`` in insertion order; the caller maps rows to record ids.
    Deleted rows never come back from :meth:`search`. Implement :meth:`add`, :meth:`search`,
    :meth:`delete` and :meth:`vectors`; the rest has defaults.
    """

    dimension: int

    @abstractmethod
    def add(self, vectors: F32) -> None:
        """Append vectors (shape ``(n, dimension)``, normalised) as the next rows."""

    @abstractmethod
    def search(self, query: F32, k: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """The ``k`` best live rows for ``query``: (scores, rows), best first."""

    @abstractmethod
    def delete(self, rows: npt.NDArray[np.int64]) -> None:
        """Mark rows as deleted."""

    @abstractmethod
    def vectors(self, rows: npt.NDArray[np.int64] | None = None) -> F32:
        """The stored vectors of ``rows`` (all rows when ``None``; may be a read-only view)."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of rows ever added (deleted rows included)."""

    @property
    def exact(self) -> bool:
        """Whether :meth:`search` is exact (brute force)."""
        return True

    def scores(
        self, query: F32, rows: npt.NDArray[np.int64] | None = None
    ) -> npt.NDArray[np.float32]:
        """Exact inner products of ``query`` with ``rows`` (all rows when ``None``)."""
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if rows is not None and 4 * len(rows) < len(self):
            return inner_products(self.vectors(rows), q)  # few rows: gather them
        full = inner_products(self.vectors(), q)  # a view: no copy of the matrix
        return full if rows is None else full[rows]

    async def aadd(self, vectors: F32) -> None:
        """Async twin of :meth:`add`."""
        await asyncio.to_thread(self.add, vectors)

    async def asearch(
        self, query: F32, k: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Async twin of :meth:`search`."""
        return await asyncio.to_thread(self.search, query, k)

    async def adelete(self, rows: npt.NDArray[np.int64]) -> None:
        """Async twin of :meth:`delete`."""
        await asyncio.to_thread(self.delete, rows)
