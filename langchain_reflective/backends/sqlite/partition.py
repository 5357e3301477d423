"""One namespace's in-memory scoring state in the SQLite backend: arrays, indexes, neighbours.

A :class:`Partition` mirrors a namespace's live rows in insertion order (row ``i`` is the
``i``-th memory loaded or added): its FAISS matrix, timestamps, importance, kinds, the lexical
index, the IVF index of large partitions and the caches derived from them (neighbour table,
most recent and most important rows). The backend rebuilds it from the file when needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.sqlite._arrays import GrowArray, TopRows
from langchain_reflective.backends.sqlite.index.faiss_flat import FaissFlatIndex
from langchain_reflective.records import OBSERVATION

if TYPE_CHECKING:
    from langchain_reflective.backends.sqlite.ann import AnnBuild
    from langchain_reflective.backends.sqlite.index.ivf import IVFCandidateIndex
    from langchain_reflective.backends.sqlite.lexical import BM25Index

__all__ = ["Partition", "context_document", "context_moves", "top_cache_rows", "unique_rows"]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
_TOP_CACHE = 256  # rows kept in the recency / importance candidate caches
_QUEUE_ROWS = 256  # one-per-call adds queued before they join a partition's arrays in a batch
_KEY_SPREAD = 8
"""A partition whose keys span at most this many keys per row (plus :data:`_KEY_SLACK`) finds
the rows of keys through a :class:`_KeyTable` (4 bytes per key spanned, grown by doubling: at
most ~64 bytes a row, against ~1.5 KB for its vector) instead of a binary search."""
_KEY_SLACK = 4096


class _KeyTable:
    """The row of each key of a partition, by the key's offset from the first (``-1``: none).

    A partition's keys ascend but have gaps wherever another namespace of the same database
    took keys in between (several users in one file, or in one Postgres database), so rows
    cannot be found by subtraction. A binary search per key was a quarter of a 100k-memory
    retrieval's ranking (the IVF index names its ~3,000 probed vectors by key); one ``take``
    here costs a few microseconds. Appends extend it; rows are never removed from a partition
    (deletes are tombstones), so it never has to forget one.
    """

    __slots__ = ("first", "table", "upto")

    def __init__(self, first: int) -> None:
        self.first = first
        self.upto = 0
        """Rows mapped so far (the partition's first ``upto`` rows)."""
        self.table: npt.NDArray[np.int32] = np.full(0, -1, dtype=np.int32)

    def extend(self, seqs: I64) -> bool:
        """Map the rows from :attr:`upto` to the end of ``seqs`` (the partition's keys);
        ``False`` if a key lies below the first one (then the table cannot hold it)."""
        offsets = seqs[self.upto :] - self.first
        if not offsets.shape[0]:
            return True
        if int(offsets.min()) < 0:
            return False
        span = int(offsets.max()) + 1
        if span > self.table.shape[0]:
            grown = np.full(max(span, 2 * self.table.shape[0]), -1, dtype=np.int32)
            grown[: self.table.shape[0]] = self.table
            self.table = grown
        self.table[offsets] = np.arange(self.upto, seqs.shape[0], dtype=np.int32)
        self.upto = seqs.shape[0]
        return True

    def rows(self, wanted: I64) -> I64:
        """The rows of the keys in ``wanted`` that the partition holds, in their order."""
        offsets = wanted - self.first
        table = self.table
        inside = (offsets >= 0) & (offsets < table.shape[0])
        found = table.take(offsets if bool(inside.all()) else offsets[inside])
        out: I64 = found[found >= 0].astype(np.int64)
        return out


class Partition:
    """In-memory scoring state of one namespace: vector index, lexical index, arrays."""

    def __init__(self, namespace: str, dimension: int, generation: int) -> None:
        self.namespace = namespace
        self.generation = generation
        self.index = FaissFlatIndex(dimension)
        self.seqs = GrowArray(np.int64)
        self.created = GrowArray(np.float64)
        self.accessed = GrowArray(np.float64)
        self.importance = GrowArray(np.float64)
        self.kind_codes = GrowArray(np.int32)
        self.kinds: dict[str, int] = {}
        self.kind_names: tuple[str, ...] = ()
        """``kinds`` in code order (refreshed by the candidate code when a kind was added)."""
        self.lexical: BM25Index | None = None
        self.vectors_generation: int | None = None
        """The generation the mapped vector file was loaded at or saved for (``None``: none)."""
        self.lexical_generation: int | None = None
        """The generation :attr:`lexical` was loaded from or saved at (``None``: unsaved)."""
        self.columns_generation: int | None = None
        """The generation the per-row columns were loaded from or saved at (``None``: not
        saved, or touched since)."""
        self._observations: GrowArray | None = None
        self._observations_upto = 0
        self.lexical_context = False
        """Index each observation for BM25 with the previous observation's text."""
        self.last_observation: str | None = None
        """Text of the newest observation (for the lexical context of the next one)."""
        self.dirty = False
        self.ann: IVFCandidateIndex | None = None
        """Approximate dense index over rows ``0 .. ann_upto - 1`` (large partitions only)."""
        self.ann_upto = 0
        self.ann_build: AnnBuild | None = None
        """An IVF index being built on a worker thread (installed by ``_maintain_ann``)."""
        self.important_top = TopRows(_TOP_CACHE)
        self.queue: list[tuple[int, F32, float, float, str, str]] = []
        """Rows stored but not yet in the arrays above (see :meth:`queue_one`)."""

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def live(self) -> int:
        return len(self.seqs) - self.index.n_deleted

    def reserve(self, rows: int) -> None:
        self.index.reserve(rows)
        for arr in (self.seqs, self.created, self.accessed, self.importance, self.kind_codes):
            arr.reserve(rows)

    def code(self, kind: str) -> int:
        return self.kinds.setdefault(kind, len(self.kinds))

    def lexical_documents(self, texts: Sequence[str], kinds: Sequence[str]) -> list[str]:
        """BM25 documents for new rows: observations carry the previous observation's text."""
        if not self.lexical_context:
            return list(texts)
        docs: list[str] = []
        for text, kind in zip(texts, kinds, strict=True):
            if kind == OBSERVATION:
                docs.append(context_document(self.last_observation, text))
                self.last_observation = text
            else:
                docs.append(text)
        return docs

    def queue_one(
        self, seq: int, vector: F32, stamp: float, importance: float, kind: str, text: str
    ) -> bool:
        """Queue one row (the one-memory-per-add path); return whether the queue is full.

        Queued rows join the arrays in one :meth:`append` at the next :meth:`flush_queue`
        (before any read: ``SQLiteBackend._partition`` flushes, and so does the add path when
        the queue is full), which costs a fraction of appending them one by one.
        """
        queue = self.queue
        queue.append((seq, vector, stamp, importance, kind, text))
        return len(queue) >= _QUEUE_ROWS

    def flush_queue(self) -> None:
        """Append the queued rows (see :meth:`queue_one`), in the order they were added."""
        queue = self.queue
        if not queue:
            return
        self.queue = []
        seqs, vectors, stamps, importance, kinds, texts = zip(*queue, strict=True)
        self.append(seqs, np.stack(vectors), stamps, stamps, importance, kinds, texts)

    def append(
        self,
        seqs: Sequence[int] | npt.NDArray[np.int64],
        vectors: F32 | None,
        created: npt.ArrayLike,
        accessed: npt.ArrayLike,
        importance: npt.ArrayLike,
        kinds: Sequence[str],
        texts: Sequence[str] | None,
    ) -> None:
        start = len(self.seqs)
        if vectors is not None:
            self.index.add(vectors)
        self.seqs.extend(seqs)
        self.created.extend(created)
        self.accessed.extend(accessed)
        self.importance.extend(importance)
        codes = {k: self.code(k) for k in dict.fromkeys(kinds)} if len(kinds) > 1 else None
        if codes is None:
            self.kind_codes.extend([self.code(k) for k in kinds])
        else:
            self.kind_codes.extend([codes[k] for k in kinds])
        if self.lexical is not None and texts is not None:
            self.lexical.add(self.lexical_documents(texts, kinds))
        rows = np.arange(start, len(self.seqs), dtype=np.int64)
        self.important_top.offer(rows, self.importance.view[start:])

    def append_columns(
        self,
        seqs: npt.NDArray[np.int64],
        created: npt.NDArray[np.float64],
        accessed: npt.NDArray[np.float64],
        importance: npt.NDArray[np.float64],
        kind_codes: npt.NDArray[np.int32],
        kind_names: Sequence[str],
    ) -> None:
        """Append rows whose vectors the index already holds, kinds given as codes into
        ``kind_names`` (a column snapshot; only into an empty partition)."""
        if len(self.seqs) or self.kinds:
            raise ValueError("column snapshots load into an empty partition only")
        for name in kind_names:
            self.code(name)
        self.seqs.extend(seqs)
        self.created.extend(created)
        self.accessed.extend(accessed)
        self.importance.extend(importance)
        self.kind_codes.extend(kind_codes)
        rows = np.arange(len(self.seqs), dtype=np.int64)
        self.important_top.offer(rows, self.importance.view)

    def rows_of(self, seqs: Sequence[int] | I64) -> I64:
        """The rows holding ``seqs`` (deleted ones too), in their order; keys the partition
        does not hold are dropped.

        By subtraction when the partition's keys are consecutive (one namespace in its
        database, nothing compacted away), else through a :class:`_KeyTable` when they are
        dense enough, else by binary search.
        """
        all_seqs = self.seqs.view
        wanted = np.asarray(seqs, dtype=np.int64)
        n = all_seqs.shape[0]
        if n and wanted.shape[0]:
            first = int(all_seqs[0])
            if int(all_seqs[n - 1]) - first == n - 1:
                rows: I64 = wanted - first
                if int(rows.min()) < 0 or int(rows.max()) >= n:
                    rows = rows[(rows >= 0) & (rows < n)]
                return rows
        table = self._key_table()
        if table is not None:
            return table.rows(wanted)
        pos = np.searchsorted(all_seqs, wanted)
        pos = np.clip(pos, 0, max(len(all_seqs) - 1, 0))
        ok = all_seqs[pos] == wanted if len(all_seqs) else np.zeros(len(wanted), bool)
        out: npt.NDArray[np.int64] = pos[ok].astype(np.int64)
        return out

    _keys: _KeyTable | None = None

    def _key_table(self) -> _KeyTable | None:
        """The :class:`_KeyTable` of this partition's keys, brought up to date; ``None`` when
        they spread too thinly for one (see :data:`_KEY_SPREAD`): search them instead."""
        n = len(self.seqs)
        if n == 0 or n >= 2**31:
            return None
        seqs = self.seqs.view
        first = int(seqs[0])
        if int(seqs[n - 1]) - first >= _KEY_SPREAD * n + _KEY_SLACK:
            self._keys = None
            return None
        table = self._keys
        if table is None or table.first != first or table.upto > n:
            table = self._keys = _KeyTable(first)
        if table.upto < n and not table.extend(seqs):
            self._keys = None
            return None
        return table

    def delete_rows(self, rows: npt.NDArray[np.int64]) -> tuple[int, I64]:
        """Delete ``rows``; returns what changes in the lexical context of the observations
        left (when the index holds one: :attr:`lexical_context`):

        - the row of the newest live observation when it was among them and the next one's
          context now comes from another (whose text the caller sets as
          :attr:`last_observation`; ``-1`` for none left), else ``-2``: nothing to do;
        - ``(n, 3)`` rows: each live observation whose previous observation was deleted, that
          previous observation (the deleted one its document holds) and the live observation
          before it now (``-1``: none), whose text the caller puts in its document instead
          (``lexical_rows.revise_text``): the document a rebuild gives it.
        """
        newest = -2
        moved: I64 = np.zeros((0, 3), dtype=np.int64)
        if self.lexical is not None and self.lexical_context:
            observations = self.observation_rows()
            gone = np.isin(observations, rows)
            if observations.shape[0] and bool(gone[-1]):
                newest = -1
            moved = context_moves(observations, gone)
        self.index.delete(rows)
        if self.lexical is not None:
            self.lexical.remove(rows.tolist())
        self._observations = None
        if newest == -1:
            left = self.observation_rows()
            newest = int(left[-1]) if left.shape[0] else -1
            if newest == -1:
                self.last_observation = None
        return newest, moved

    # retrieval caches derived from the arrays above, built lazily (see neighbor_table)
    _neighbor_buf: I64 | None = None
    _neighbor_upto = 0
    _top_arrays: dict[int, tuple[set[int], int, I64]] | None = None
    _top_results: dict[int, tuple[set[int], int, int, int, int, I64]] | None = None
    _recent: tuple[I64, int, int, int] | None = None
    """The most recently accessed live rows: (rows, how many, rows then, deletions then)."""
    _recent_touched: list[I64] | None = None
    """Rows whose ``accessed`` was raised in place since ``_recent`` was computed."""
    _recent_stale = False
    """Set when ``accessed`` changed in a way ``_recent`` cannot follow (a value lowered, or
    too many touches since): the next use recomputes it from every row."""

    def touched(self, rows: I64, stamp: float | npt.NDArray[np.float64]) -> None:
        """Record that ``accessed`` of ``rows`` is about to become ``stamp`` (one value, or
        one per row; call it before writing), for the recency candidates (see
        ``candidates.recent_rows``)."""
        if self._recent is None or self._recent_stale:
            return
        pending = self._recent_touched
        if pending is None:
            pending = self._recent_touched = []
        if len(pending) >= 64 or bool((self.accessed.view[rows] > stamp).any()):
            self._recent_stale = True  # lowered (a past ``now``) or long unused: recompute
            self._recent_touched = None
        else:
            pending.append(rows)

    def set_accessed(self, rows: I64, stamp: float | npt.NDArray[np.float64]) -> None:
        """Set ``accessed`` of ``rows`` to ``stamp`` (one value, or one per row), telling the
        recency candidates first (:meth:`touched`)."""
        self.touched(rows, stamp)
        self.accessed.view[rows] = stamp

    def observation_rows(self) -> I64:
        """Sorted rows of live observations, cached (appends extend it; deletes reset it)."""
        code = self.kinds.get(OBSERVATION)
        n = len(self.seqs)
        if code is None:
            return np.zeros(0, dtype=np.int64)
        cached = self._observations
        if cached is None:
            cached = GrowArray(np.int64, capacity=max(n, 64))
            cached.extend(np.flatnonzero(self.index.alive & (self.kind_codes.view == code)))
            self._observations = cached
            self._neighbor_upto = 0  # rows were deleted: the neighbour table is rebuilt too
        elif self._observations_upto < n:
            tail = self.kind_codes.view[self._observations_upto :] == code
            tail &= self.index.alive[self._observations_upto :]
            cached.extend(np.flatnonzero(tail) + self._observations_upto)
        self._observations_upto = n
        out: I64 = cached.view
        return out

    def neighbor_table(self) -> I64:
        """``(rows, 2)`` table of each row's previous and next live observation row.

        ``-1`` where there is none, and on both sides of rows that are not live observations
        (the neighbour context only links observations). Cached with :meth:`observation_rows`:
        appends fill in the new rows (and the old last observation's next), deletes rebuild it.
        """
        observations = self.observation_rows()  # first: it resets the table after deletes
        n = len(self.seqs)
        buf = self._neighbor_buf
        upto = self._neighbor_upto
        if buf is None or buf.shape[0] < n:
            grown = np.empty((max(n, 64, 0 if buf is None else 2 * buf.shape[0]), 2), np.int64)
            if buf is not None and upto:
                grown[:upto] = buf[:upto]
            buf = self._neighbor_buf = grown
        if upto < n:
            buf[upto:n] = -1
            # the observations from row ``upto`` on, and the one before them (its next changes)
            first = int(np.searchsorted(observations, upto))
            linked = observations[max(first - 1, 0) :]
            if linked.shape[0] > 1:
                buf[linked[1:], 0] = linked[:-1]
                buf[linked[:-1], 1] = linked[1:]
            self._neighbor_upto = n
        out: I64 = buf[:n]
        return out


def context_document(previous: str | None, text: str) -> str:
    """The BM25 document of an observation whose previous observation's text is ``previous``
    (``None``: it is the first), with the lexical context: at insert, at a rebuild from the file
    and when a delete gives it another previous observation."""
    return text if previous is None else previous + "\n" + text


def context_moves(observations: I64, gone: npt.NDArray[np.bool_]) -> I64:
    """``(n, 3)`` rows of (observation, its previous one, the one before it that is left) for
    each observation of ``observations`` (rows in order) not ``gone`` whose previous one is
    (the last column ``-1`` when none before it is left)."""
    after = np.flatnonzero(gone[:-1] & ~gone[1:]) + 1  # left, just after a gone one
    if not after.shape[0]:
        return np.zeros((0, 3), dtype=np.int64)
    at = np.arange(observations.shape[0])
    left_before = np.maximum.accumulate(np.where(gone, -1, at))  # the last left up to each
    before = after - 1
    kept = left_before[before]
    out = np.empty((after.shape[0], 3), dtype=np.int64)
    out[:, 0] = observations[after]
    out[:, 1] = observations[before]
    out[:, 2] = np.where(kept >= 0, observations[np.maximum(kept, 0)], -1)
    return out


def top_cache_rows(part: Partition, cache: TopRows) -> I64:
    """``cache.rows()``, converted from its set only when the set changed.

    The set only grows between rebuilds, and a rebuild replaces it, so the same set object with
    the same size holds the same rows (in the same iteration order).
    """
    current = cache._rows
    arrays = part._top_arrays
    if arrays is None:
        arrays = part._top_arrays = {}
    known = arrays.get(id(cache))
    if known is not None and known[0] is current and known[1] == len(current):
        return known[2]
    rows = cache.rows()
    arrays[id(cache)] = (current, len(current), rows)
    return rows


def unique_rows(values: npt.NDArray[Any]) -> I64:
    """Sorted distinct values (``np.unique`` via a sort; numpy 2's hash-based unique was ~50x
    slower on these row arrays). The default sort: equal integers are indistinguishable, so
    stability buys nothing, and numpy's SIMD quicksort took ~1/6 of the stable sort's time on
    the ~1,000 rows of a 100k retrieval."""
    arr = np.sort(np.asarray(values, dtype=np.int64))
    if arr.shape[0] < 2:
        return arr
    keep = np.empty(arr.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(arr[1:], arr[:-1], out=keep[1:])
    out: I64 = arr[keep]
    return out
