"""The approximate dense half of the SQLite backend: IVF indexes over large partitions.

Partitions with more live rows than the backend's ``exact_limit`` get an IVF index
(:class:`~langchain_reflective.backends.sqlite.index.ivf.IVFCandidateIndex`) for dense
candidates. Large ones are trained on a worker thread (:class:`AnnBuild`); rows added since are
indexed in batches by the next retrieval (:func:`maintain_ann`).
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.sqlite.index.ivf import IVFCandidateIndex, default_nlist
from langchain_reflective.backends.sqlite.partition import Partition

__all__ = ["AnnBuild", "build_ann", "flush_ann", "maintain_ann"]

logger = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
ANN_FLUSH = 256  # pending rows (not in the IVF index yet) a retrieval indexes first
_ANN_REGROW = 4  # retrain the IVF index when the partition grew this many times
_ANN_BACKGROUND_MIN = 16_384
"""IVF indexes for at least this many rows are built on a worker thread (smaller ones inline)."""
_FILL_CHUNK = 65_536  # rows added to an IVF index per call (slices of the matrix: no copy)


def _new_ann(part: Partition, live_rows: I64) -> tuple[IVFCandidateIndex, F32]:
    """An untrained IVF index sized for ``live_rows`` and its training sample (a copy)."""
    nlist = default_nlist(live_rows.shape[0])
    index = IVFCandidateIndex(part.index.dimension, min(nlist, 4096))
    rng = np.random.default_rng(len(part))
    sample_size = min(live_rows.shape[0], 32 * index.nlist)
    sample = np.sort(rng.choice(live_rows, size=sample_size, replace=False))
    return index, part.index.vectors(sample)


def _fill_ann(
    ann: IVFCandidateIndex,
    vectors: F32,
    seqs: I64,
    alive: npt.NDArray[np.bool_],
    start: int,
    end: int,
) -> None:
    """Index rows ``start .. end - 1`` that are alive (in chunks: no copy of the matrix)."""
    for lo in range(start, end, _FILL_CHUNK):
        hi = min(end, lo + _FILL_CHUNK)
        keep = alive[lo:hi]
        if keep.all():  # no deletions in the range: index the rows in place, no copy
            ann.add(vectors[lo:hi], seqs[lo:hi])
        else:
            ann.add(vectors[lo:hi][keep], seqs[lo:hi][keep])


class AnnBuild:
    """Train and fill an IVF index over a partition's first ``upto`` rows on a worker thread.

    Rows below ``upto`` never change, so it reads them from the partition's growing arrays while
    the caller appends: it takes fresh views for every chunk of rows, so a buffer the arrays
    outgrew is not kept alive (at 1M rows that would hold an extra ~800 MB). The live mask is a
    copy: rows deleted meanwhile stay in the lists, as after any delete, and the stream drops
    dead candidates. Until it is installed, retrieval uses the partition's previous IVF index
    (kept topped up) or scores exactly.
    """

    def __init__(self, part: Partition) -> None:
        alive = part.index.alive.copy()
        self.upto = len(part)
        self.index, self._sample = _new_ann(part, np.flatnonzero(alive))
        self._rows = int(alive.sum())
        self._flat = part.index
        self._seqs = part.seqs
        self._alive = alive
        self.error: BaseException | None = RuntimeError(
            "the IVF build thread stopped before it finished (in a forked process?)"
        )
        """Why the build failed; ``None`` once it has finished (set by the thread)."""
        self._thread = threading.Thread(
            target=self._run, name="langchain-reflective-ivf-build", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        import faiss

        try:
            faiss.omp_set_num_threads(1)  # this thread only: leave the other core to the caller
            self.index.train(self._sample, self._rows)
            self._sample = None  # type: ignore[assignment]
            for lo in range(0, self.upto, _FILL_CHUNK):
                hi = min(self.upto, lo + _FILL_CHUNK)
                vectors, seqs = self._flat.vectors(), self._seqs.view  # fresh views: see above
                _fill_ann(self.index, vectors, seqs, self._alive, lo, hi)
                del vectors, seqs
            self.error = None
        except BaseException as exc:  # reported by the stream when it installs the result
            self.error = exc
        finally:
            # drop the references (the sample copy, the partition's arrays) with the thread
            self._sample = self._flat = self._seqs = self._alive = None  # type: ignore[assignment]

    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self) -> None:
        self._thread.join()


def maintain_ann(
    part: Partition,
    exact_limit: int | None,
    *,
    wait: bool = False,
    flush: bool = True,
    background_min: int | None = None,
) -> None:
    """Build, retrain or top up the IVF index of a partition that outgrew ``exact_limit``.

    Indexes for ``background_min`` rows or more (default ``_ANN_BACKGROUND_MIN``) are built
    on a worker thread and installed by a later call (``wait`` joins a running build first);
    meanwhile retrievals use the index before it, or score exactly. Rows added since the
    last update are indexed by the first retrieval (``flush``) that finds ``ANN_FLUSH`` or
    more of them, not by the adds: a bulk load assigns its rows to IVF lists once, in big
    batches, instead of on every add; until then retrieval scans them exactly.
    """
    build = part.ann_build
    if (
        build is not None
        and flush
        and part.ann is not None
        and len(part) - part.ann_upto >= _FILL_CHUNK
    ):
        wait = True  # rather than fill the old index with rows the new one indexes anyway
    if build is not None and (wait or build.done()):
        build.join()  # (at once when done) its error is the outcome only once it ended
        if build.error is None:
            part.ann_build = None
            part.ann = build.index
            part.ann_upto = build.upto
            part.dirty = True
        elif flush or wait:  # not after an add: its memory is committed, it must not raise
            part.ann_build = None
            logger.warning("building the IVF index on a worker thread failed: %r", build.error)
            build_ann(part)  # again, inline: a persistent error reaches the caller
    limit = exact_limit
    live = part.live
    if limit is None or live <= limit:
        part.ann_build = None  # a running build finishes unseen
        if part.ann is not None and (limit is None or live <= limit // 2):
            part.ann = None  # shrank well below the limit: exact again
            part.ann_upto = 0
            part.dirty = True
        return
    if part.ann_build is None and (
        part.ann is None or len(part) > _ANN_REGROW * max(part.ann.trained_on, 1)
    ):
        if live >= (_ANN_BACKGROUND_MIN if background_min is None else background_min):
            part.ann_build = AnnBuild(part)
        else:
            build_ann(part)
    if flush and part.ann is not None and len(part) - part.ann_upto >= ANN_FLUSH:
        flush_ann(part)


def build_ann(part: Partition) -> None:
    index, sample = _new_ann(part, np.flatnonzero(part.index.alive))
    index.train(sample, part.live)
    part.ann = index
    part.ann_upto = 0
    flush_ann(part)


def flush_ann(part: Partition) -> None:
    """Index rows ``ann_upto ..`` in the IVF index."""
    ann = part.ann
    if ann is None:
        return
    n = len(part)
    _fill_ann(ann, part.index.vectors(), part.seqs.view, part.index.alive, part.ann_upto, n)
    part.ann_upto = n
    part.dirty = True
