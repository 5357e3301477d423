"""Approximate dense candidates for large partitions: FAISS IVF with 4-bit product quantisation.

The exact vectors stay in one place (the partition's :class:`FaissFlatIndex`); this index keeps
only a coarse quantiser, a 4-bit product-quantisation code per vector (one sub-quantiser per 4
dimensions: 48 bytes per 384-dimensional vector, a 32nd of the float32 copy) scanned with
FAISS's SIMD "fast scan" kernels, and an id per vector. It proposes candidates; the stream
rescores every candidate exactly, so quantisation never changes a score. (Earlier versions
used 8- or 4-bit scalar quantisation, 4-8x larger and ~3.5x slower to scan; their caches still
load.)

Ids are the records' sequence numbers (stable across reloads and compaction), not row numbers.
Deleted records stay in the lists (the caller drops them when mapping ids to live rows); the
stream rebuilds the index when more than half of a partition is deleted.

The cache file is FAISS's own binary format (``write_index``); it is only parsed after its
SHA-256 matches the digest recorded in the memory file, and it is written and hashed as a stream
so saving a large index does not hold a second copy of it in memory.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.sqlite._files import atomic_file
from langchain_reflective.backends.sqlite.index.faiss_flat import one_faiss_thread

__all__ = ["IVFCandidateIndex", "default_nlist"]

F32 = npt.NDArray[np.float32]
_CHUNK = 1 << 20


def _faiss() -> Any:
    import faiss

    return faiss


def default_nlist(rows: int) -> int:
    """Number of IVF lists for ``rows`` vectors: about ``sqrt(rows)``, within [16, 4096]."""
    return int(min(4096, max(16, round(math.sqrt(max(rows, 1))))))


def _pq_subquantizers(dimension: int) -> int:
    """Sub-quantisers for ``dimension``: one per 4 dimensions (2 or 1 when 4 does not divide)."""
    for width in (4, 2):
        if dimension % width == 0:
            return dimension // width
    return dimension


class IVFCandidateIndex:
    """An IVF product-quantised inner-product index over record ids (sequence numbers).

    Args:
        dimension: vector dimension.
        nlist: number of inverted lists (see :func:`default_nlist`).
    """

    def __init__(self, dimension: int, nlist: int) -> None:
        faiss = _faiss()
        self.dimension = int(dimension)
        self.nlist = int(nlist)
        quantizer = faiss.IndexFlatIP(self.dimension)
        index = faiss.IndexIVFPQFastScan(
            quantizer,
            self.dimension,
            self.nlist,
            _pq_subquantizers(self.dimension),
            4,
            faiss.METRIC_INNER_PRODUCT,
        )
        index.by_residual = False  # encode vectors, not residuals: cheaper adds, same ranking
        index.cp.niter = 12
        index.cp.max_points_per_centroid = 64
        self._index = index
        self._quantizer = quantizer  # the IVF index points to it; keep it alive
        self.trained_on = 0
        """How many vectors the coarse quantiser was trained for (drives retraining)."""
        self._params: Any = None  # SearchParametersIVF of the last search, reused
        self._list_ids: list[npt.NDArray[np.int64]] | None = None  # see _copy_list_ids
        self._coarse: Any = None  # the quantiser's SWIG proxy, kept

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def is_trained(self) -> bool:
        """Whether :meth:`train` ran (or the index was loaded trained)."""
        return bool(self._index.is_trained)

    def train(self, sample: F32, rows: int) -> None:
        """Train the coarse quantiser and the product quantiser on ``sample``.

        Args:
            sample: training vectors (a random subset; ``40 * nlist`` is plenty).
            rows: how many vectors the index is trained for (recorded in :attr:`trained_on`).
        """
        arr = np.ascontiguousarray(sample, dtype=np.float32)
        self._list_ids = None
        self._index.train(arr)
        self.trained_on = int(rows)

    def add(self, vectors: F32, ids: npt.NDArray[np.int64]) -> None:
        """Add vectors under ``ids`` (sequence numbers)."""
        arr = np.ascontiguousarray(vectors, dtype=np.float32)
        if arr.shape[0] == 0:
            return
        self._list_ids = None
        self._index.add_with_ids(arr, np.ascontiguousarray(ids, dtype=np.int64))

    def search(self, query: F32, k: int, nprobe: int) -> npt.NDArray[np.int64]:
        """Ids of about the ``k`` best vectors (approximate), best first.

        Runs on the calling thread (one query: OpenMP threads only add scheduling delays on a
        busy machine) and reuses the search parameters across calls.
        """
        return self.search_lists(query, k, nprobe)[0]

    def search_lists(
        self, query: F32, k: int, nprobe: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """:meth:`search`, plus the ids of every vector in the lists it probed.

        Returns:
            ``(best, probed)``: the ids of about the ``k`` best vectors, best first (what
            :meth:`search` returns), and the ids stored in the ``nprobe`` probed lists, in list
            order (the vectors the search looked at: a caller can pick others among them).
        """
        faiss = _faiss()
        empty = np.zeros(0, dtype=np.int64)
        if len(self) == 0 or k <= 0:
            return empty, empty
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dimension:
            raise ValueError(f"query has dimension {q.shape[0]}, the index {self.dimension}")
        probes = int(min(max(nprobe, 1), self.nlist))
        params = self._params
        if params is None or params.nprobe != probes:
            params = faiss.SearchParametersIVF()
            params.nprobe = probes
            self._params = params
        lists = np.empty(probes, dtype=np.int64)
        list_scores = np.empty(probes, dtype=np.float32)
        distances = np.empty(k, dtype=np.float32)
        ids = np.empty(k, dtype=np.int64)
        index = self._index
        coarse = self._coarse
        if coarse is None:
            coarse = self._coarse = index.quantizer  # a new SWIG proxy on every access
        with one_faiss_thread(faiss):
            # what IndexIVF.search does, in two steps to keep the probed lists
            coarse.search_c(
                1, faiss.swig_ptr(q), probes, faiss.swig_ptr(list_scores), faiss.swig_ptr(lists)
            )
            index.search_preassigned_c(
                1,
                faiss.swig_ptr(q),
                int(k),
                faiss.swig_ptr(lists),
                faiss.swig_ptr(list_scores),
                faiss.swig_ptr(distances),
                faiss.swig_ptr(ids),
                False,
                params,
            )
        list_ids = self._list_ids
        if list_ids is None:
            list_ids = self._list_ids = self._copy_list_ids()
        probed = [list_ids[i] for i in lists.tolist() if i >= 0]
        best: npt.NDArray[np.int64] = ids[ids >= 0]
        return best, (np.concatenate(probed) if probed else empty)

    def _copy_list_ids(self) -> list[npt.NDArray[np.int64]]:
        """A numpy copy of every list's ids (kept until the next :meth:`add` or :meth:`train`:
        reading a few lists through FAISS per query costs more than the search)."""
        faiss = _faiss()
        invlists = self._index.invlists
        out: list[npt.NDArray[np.int64]] = []
        for list_no in range(self.nlist):
            size = invlists.list_size(list_no)
            if not size:
                out.append(np.zeros(0, dtype=np.int64))
                continue
            stored = invlists.get_ids(list_no)
            out.append(np.array(faiss.rev_swig_ptr(stored, size), dtype=np.int64))
            invlists.release_ids(list_no, stored)
        return out

    # -- cache file ----------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the index to ``path`` atomically (streamed); return the file's SHA-256."""
        faiss = _faiss()
        digest = hashlib.sha256()
        with atomic_file(Path(path)) as fh:

            def write(chunk: bytes) -> int:
                digest.update(chunk)
                fh.write(chunk)
                return len(chunk)

            writer = faiss.PyCallbackIOWriter(write, _CHUNK)
            faiss.write_index(self._index, writer)
            del writer  # flushes the last block
        return digest.hexdigest()

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        dimension: int,
        expected_sha256: str,
        trained_on: int,
    ) -> IVFCandidateIndex | None:
        """Load a cache written by :meth:`save`; ``None`` when missing, tampered or foreign.

        The file is hashed first and parsed from the same open file only when the digest
        matches, so a tampered or foreign cache is never deserialised.
        """
        faiss = _faiss()
        try:
            fh = Path(path).open("rb")  # noqa: SIM115 - closed by the with block below
        except OSError:
            return None
        with fh:
            digest = hashlib.sha256()
            while block := fh.read(_CHUNK):
                digest.update(block)
            if digest.hexdigest() != expected_sha256:
                return None
            fh.seek(0)
            try:
                reader = faiss.PyCallbackIOReader(fh.read, _CHUNK)
                loaded = faiss.read_index(reader)
                del reader
            except RuntimeError:
                return None
        if (
            not isinstance(loaded, faiss.IndexIVFPQFastScan | faiss.IndexIVFScalarQuantizer)
            or loaded.d != dimension
        ):  # (scalar-quantised: a cache written by an earlier version)
            return None
        out = cls.__new__(cls)
        out.dimension = int(dimension)
        out.nlist = int(loaded.nlist)
        out._index = loaded  # read_index owns its quantiser
        out._quantizer = None
        out.trained_on = int(trained_on)
        out._params = None
        out._list_ids = None
        out._coarse = None
        return out
