"""Exact FAISS inner-product index (``IndexFlatIP``) with tombstones and a no-pickle cache."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective._arrays import GrowArray
from langchain_reflective.index.base import F32, BaseVectorIndex

__all__ = ["FaissFlatIndex"]


def _faiss() -> Any:
    import faiss

    return faiss


class FaissFlatIndex(BaseVectorIndex):
    """Brute-force inner product over normalised vectors (= cosine), backed by FAISS.

    Deleted rows stay in the index as tombstones (masked out of results) so row numbers never
    shift; the stream compacts by rebuilding.

    Args:
        dimension: vector dimension.
    """

    def __init__(self, dimension: int) -> None:
        self.dimension = int(dimension)
        self._index = _faiss().IndexFlatIP(self.dimension)
        self._alive_buf = GrowArray(np.bool_)
        self._n_dead = 0

    @property
    def _alive(self) -> npt.NDArray[np.bool_]:
        return self._alive_buf.view

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def n_deleted(self) -> int:
        """How many rows are tombstones."""
        return self._n_dead

    def add(self, vectors: F32) -> None:
        arr = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dimension)
        if arr.shape[0] == 0:
            return
        self._index.add(arr)
        self._alive_buf.extend(np.ones(arr.shape[0], dtype=bool))

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
        n = len(self)
        if n == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        faiss = _faiss()
        view: F32 = faiss.rev_swig_ptr(self._index.get_xb(), n * self.dimension).reshape(
            n, self.dimension
        )
        if rows is None:
            view.flags.writeable = False
            return view
        out: F32 = view[np.asarray(rows, dtype=np.int64)]
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

    # -- cache file (FAISS's own binary format: no pickle, no code execution) ------------------

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the live vectors to ``path`` atomically; return the file's SHA-256."""
        faiss = _faiss()
        compact = faiss.IndexFlatIP(self.dimension)
        live = self.vectors()[self._alive] if self._n_dead else self.vectors()
        compact.add(np.ascontiguousarray(live))
        data = faiss.serialize_index(compact).tobytes()
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
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
        out._index = loaded  # keep the owning object: a downcast wrapper would not own it
        out._alive_buf.extend(np.ones(count, dtype=bool))
        return out
