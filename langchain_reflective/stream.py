"""The memory stream: observations stored with embeddings, importance and timestamps.

Retrieval ranks memories of one namespace by relevance (dense + lexical), recency and importance
(see :mod:`langchain_reflective.scoring`). Records and vectors live in a durable store (SQLite by
default); the vector matrix, the BM25 index and (for large namespaces) an IVF index are in-memory
caches rebuilt from it.

Up to ``exact_limit`` live memories a namespace is scored exactly: every memory gets the full
formula. Above it, retrieval first gathers candidates -- the best rows of an approximate IVF
index over the embeddings, the best BM25 matches, the most recently accessed and the most
important memories, and any memory not yet in the IVF index -- and then scores exactly those
candidates with the same formula. With ``normalization="none"`` (the default scoring) a memory's
score does not depend on which other memories are candidates, so the approximate path returns
the exact ranking whenever the exact top ``k`` are among the candidates.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_reflective._arrays import GrowArray, TopRows
from langchain_reflective.errors import (
    EmbeddingError,
    InvalidFilterError,
    InvalidMemoryError,
    StorageError,
)
from langchain_reflective.importance import BaseImportanceScorer, HeuristicImportanceScorer
from langchain_reflective.index.faiss_flat import _BY_INDEX_MIN_DIM, FaissFlatIndex
from langchain_reflective.index.ivf import IVFCandidateIndex, default_nlist
from langchain_reflective.records import (
    OBSERVATION,
    REFLECTION,
    MemoryRecord,
    new_memory_ids,
    utc,
    validate_metadata,
    validate_text,
)
from langchain_reflective.scoring import ScoreComponents, ScoringConfig, combine, recency, top_k
from langchain_reflective.storage.base import (
    BaseRecordStore,
    CounterUpdate,
    PendingMemory,
    ReflectionState,
    trusted_record,
)
from langchain_reflective.storage.sqlite import SQLiteRecordStore

if TYPE_CHECKING:
    import pandas as pd

    from langchain_reflective.lexical import BM25Index, QueryScores

__all__ = ["MemoryStream", "RetrievalFilter", "ScoredMemory"]

logger = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
DEFAULT_EXACT_LIMIT = 20_000
"""Namespaces with more live memories than this use the approximate candidate path."""
_ANN_FLUSH = 256  # pending rows (not in the IVF index yet) a retrieval indexes first
_ANN_REGROW = 4  # retrain the IVF index when the partition grew this many times
_ANN_BACKGROUND_MIN = 16_384
"""IVF indexes for at least this many rows are built on a worker thread (smaller ones inline)."""
_FILL_CHUNK = 65_536  # rows added to an IVF index per call (slices of the matrix: no copy)
_TOP_CACHE = 256  # rows kept in the recency / importance candidate caches
_QUEUE_ROWS = 256  # one-per-call adds queued before they join a partition's arrays in a batch
_FLAT_CACHE_MAX = 200_000  # larger exact partitions reload their vectors from the file
_LOAD_CHUNK = 16_384  # rows per read when loading vectors from the file
_FILTER_KEYS = {
    "kind",
    "kinds",
    "created_after",
    "created_before",
    "min_relevance",
    "namespace",
}


# -- public value types ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetrievalFilter:
    """Restricts which memories a retrieval may return.

    A plain mapping with the same keys (``kind``/``kinds``, ``created_after``,
    ``created_before``, ``min_relevance``, ``namespace``) is accepted wherever a filter is.
    """

    kinds: frozenset[str] | None = None
    """Only these kinds (``None``: all)."""
    created_after: datetime | None = None
    """Only memories created at or after this time."""
    created_before: datetime | None = None
    """Only memories created before this time."""
    min_relevance: float | None = None
    """Only memories whose cosine similarity to the query is at least this."""
    namespace: str | None = None
    """Read this namespace instead of the stream's default."""

    def __post_init__(self) -> None:
        if self.kinds is not None:
            kinds = [self.kinds] if isinstance(self.kinds, str) else list(self.kinds)
            if not kinds or not all(isinstance(k, str) and k for k in kinds):
                raise InvalidFilterError("filter 'kinds' must be a non-empty list of strings")
            object.__setattr__(self, "kinds", frozenset(kinds))
        for name in ("created_after", "created_before"):
            value = getattr(self, name)
            if value is not None:
                try:
                    object.__setattr__(self, name, utc(value))
                except InvalidMemoryError as exc:
                    raise InvalidFilterError(f"filter {name!r}: {exc}") from exc
        if self.min_relevance is not None:
            if isinstance(self.min_relevance, bool) or not isinstance(
                self.min_relevance, int | float
            ):
                raise InvalidFilterError("filter 'min_relevance' must be a number")
            if not math.isfinite(self.min_relevance):
                raise InvalidFilterError("filter 'min_relevance' must be finite")
        if self.namespace is not None and (
            not isinstance(self.namespace, str) or not self.namespace
        ):
            raise InvalidFilterError("filter 'namespace' must be a non-empty string")

    @classmethod
    def coerce(cls, value: RetrievalFilter | Mapping[str, Any] | None) -> RetrievalFilter:
        """Build a filter from a mapping (or pass a filter through).

        Raises:
            InvalidFilterError: unknown keys or values of the wrong type.
        """
        if value is None:
            return cls()
        if isinstance(value, RetrievalFilter):
            return value
        if not isinstance(value, Mapping):
            raise InvalidFilterError(
                f"filter must be a RetrievalFilter or a mapping, got {type(value).__name__}"
            )
        unknown = set(value) - _FILTER_KEYS
        if unknown:
            raise InvalidFilterError(
                f"unknown filter key(s) {sorted(map(str, unknown))}; "
                f"allowed: {sorted(_FILTER_KEYS)}"
            )
        kinds = value.get("kinds", value.get("kind"))
        return cls(
            kinds=kinds,
            created_after=value.get("created_after"),
            created_before=value.get("created_before"),
            min_relevance=value.get("min_relevance"),
            namespace=value.get("namespace"),
        )


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    """A retrieved memory with every score component."""

    record: MemoryRecord
    """The memory (with ``last_accessed_at`` as stored after this retrieval)."""
    score: float
    """The weighted sum used for ranking."""
    relevance: float
    """Cosine similarity to the query (raw, before any normalisation)."""
    lexical: float
    """BM25 score relative to the best lexical match among the candidates, in [0, 1]."""
    recency: float
    """``decay ** hours since last access`` at retrieval time (before this access)."""
    importance: float
    """Importance in [0, 1]."""

    def to_document(self) -> Document:
        """A LangChain ``Document`` whose metadata carries the record fields and the scores."""
        r = self.record
        return Document(
            id=r.id,
            page_content=r.text,
            metadata={
                "id": r.id,
                "kind": r.kind,
                "namespace": r.namespace,
                "created_at": r.created_at.isoformat(),
                "last_accessed_at": r.accessed_at.isoformat(),
                "importance": r.importance,
                "importance_source": r.importance_source,
                "evidence": list(r.evidence),
                "depth": r.depth,
                "score": self.score,
                "relevance": self.relevance,
                "lexical": self.lexical,
                "recency": self.recency,
                **({"metadata": dict(r.metadata)} if r.metadata else {}),
            },
        )


# -- internals ---------------------------------------------------------------------------------


def embedding_identity(embeddings: Embeddings) -> str:
    """A stable description of an embeddings object: class plus model name when it has one."""
    cls = type(embeddings)
    name = f"{cls.__module__}.{cls.__qualname__}"
    for attr in ("model_name", "model", "model_id", "deployment"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, str) and value:
            path = Path(value)
            if path.is_absolute():  # a model loaded from disk: the install path is not its name
                value = f"{path.parent.name}/{path.name}"
            return f"{name}:{value}"
    size = getattr(embeddings, "size", None)
    if isinstance(size, int):
        return f"{name}:size={size}"
    return name


def _as_unit_vectors(raw: Any, expected_rows: int, source: str) -> F32:
    if (
        expected_rows == 1
        and type(raw) is np.ndarray
        and raw.dtype == np.float32
        and raw.ndim == 2
        and raw.shape[0] == 1
        and raw.shape[1]
    ):  # one float32 row (numpy embeddings): its squares cannot overflow float64
        row = raw.astype(np.float64)  # a copy, divided in place
        square = float(np.dot(row[0], row[0]))
        if math.isfinite(square) and square > 1e-24:
            row /= math.sqrt(square)
            unit: F32 = row.astype(np.float32)
            return unit
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"{source} returned something that is not numeric: {exc}") from exc
    if arr.ndim != 2 or arr.shape[0] != expected_rows or arr.shape[1] == 0:
        raise EmbeddingError(
            f"{source} returned an array of shape {arr.shape}; expected ({expected_rows}, dim)"
        )
    if expected_rows == 1:  # one memory per add, or a query: scalar checks are cheaper
        with np.errstate(over="ignore", invalid="ignore"):  # huge values: handled below
            square = float(np.dot(arr[0], arr[0]))
        if math.isfinite(square) and square > 1e-24:
            one: F32 = (arr / math.sqrt(square)).astype(np.float32)
            return one
    squares = np.einsum("ij,ij->i", arr, arr)  # NaN/inf anywhere makes its row's sum NaN/inf
    if not np.isfinite(squares).all():
        if not np.isfinite(arr).all():
            raise EmbeddingError(f"{source} returned NaN or infinite values")
        arr = arr / np.abs(arr).max(axis=1, keepdims=True)  # huge but finite: rescale first
        squares = np.einsum("ij,ij->i", arr, arr)
    norms = np.sqrt(squares)
    if (norms <= 1e-12).any():
        raise EmbeddingError(f"{source} returned an all-zero vector; it cannot be normalised")
    out: F32 = (arr / norms[:, None]).astype(np.float32)
    return out


class _Partition:
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
        self.lexical: BM25Index | None = None
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
        self.ann_build: _AnnBuild | None = None
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
                prev = self.last_observation
                docs.append(text if prev is None else prev + "\n" + text)
                self.last_observation = text
            else:
                docs.append(text)
        return docs

    def queue_one(
        self, seq: int, vector: F32, stamp: float, importance: float, kind: str, text: str
    ) -> bool:
        """Queue one row (the one-memory-per-add path); return whether the queue is full.

        Queued rows join the arrays in one :meth:`append` at the next :meth:`flush_queue`
        (before any read: ``MemoryStream._partition`` flushes, and so does the add path when
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
        self.kind_codes.extend([self.code(k) for k in kinds])
        if self.lexical is not None and texts is not None:
            self.lexical.add(self.lexical_documents(texts, kinds))
        rows = np.arange(start, len(self.seqs), dtype=np.int64)
        self.important_top.offer(rows, self.importance.view[start:])

    def rows_of(self, seqs: Sequence[int] | I64) -> I64:
        all_seqs = self.seqs.view
        wanted = np.asarray(seqs, dtype=np.int64)
        pos = np.searchsorted(all_seqs, wanted)
        pos = np.clip(pos, 0, max(len(all_seqs) - 1, 0))
        ok = all_seqs[pos] == wanted if len(all_seqs) else np.zeros(len(wanted), bool)
        out: npt.NDArray[np.int64] = pos[ok].astype(np.int64)
        return out

    def delete_rows(self, rows: npt.NDArray[np.int64]) -> None:
        self.index.delete(rows)
        if self.lexical is not None:
            self.lexical.remove(rows.tolist())
        self._observations = None

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

    def touched(self, rows: I64, stamp: float) -> None:
        """Record that ``accessed`` of ``rows`` is about to become ``stamp`` (call it before
        writing), for the recency candidates (see ``MemoryStream._recent_rows``)."""
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


def _new_ann(part: _Partition, live_rows: I64) -> tuple[IVFCandidateIndex, F32]:
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


class _AnnBuild:
    """Train and fill an IVF index over a partition's first ``upto`` rows on a worker thread.

    Rows below ``upto`` never change, so it reads them from the partition's growing arrays while
    the caller appends: it takes fresh views for every chunk of rows, so a buffer the arrays
    outgrew is not kept alive (at 1M rows that would hold an extra ~800 MB). The live mask is a
    copy: rows deleted meanwhile stay in the lists, as after any delete, and the stream drops
    dead candidates. Until it is installed, retrieval uses the partition's previous IVF index
    (kept topped up) or scores exactly.
    """

    def __init__(self, part: _Partition) -> None:
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


@dataclass
class _AddPlan:
    texts: list[str]
    kinds: list[str]
    importances: list[float | None]
    metadatas: list[dict[str, Any]]
    evidence: list[tuple[str, ...]]
    ids: list[str]
    namespace: str
    now: datetime
    reset_counter: bool
    to_rate: list[int] = field(default_factory=list)
    times: list[datetime] | None = None
    """Per-memory creation times (pending memories); ``None``: every memory was made ``now``."""
    pending: bool = False
    """The memories complete queued ones (same ids): the insert dequeues them."""


def _top_cache_rows(part: _Partition, cache: TopRows) -> I64:
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


def _rows_of_seqs(part: _Partition, seqs: I64) -> I64:
    """``part.rows_of(seqs)`` (order kept, unknown sequence numbers dropped), by subtraction
    when the partition's sequence numbers are consecutive (one namespace per file, no deletes
    compacted away): no binary search."""
    all_seqs = part.seqs.view
    n = all_seqs.shape[0]
    if n and seqs.shape[0]:
        first = int(all_seqs[0])
        if int(all_seqs[n - 1]) - first == n - 1:
            rows: I64 = seqs - first
            if int(rows.min()) >= 0 and int(rows.max()) < n:
                return rows
    return part.rows_of(seqs)


def _unique(values: npt.NDArray[Any]) -> I64:
    """Sorted distinct values (``np.unique`` via a sort; numpy 2's hash-based unique was ~50x
    slower on these row arrays)."""
    arr = np.sort(np.asarray(values, dtype=np.int64), kind="stable")
    if arr.shape[0] < 2:
        return arr
    keep = np.empty(arr.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(arr[1:], arr[:-1], out=keep[1:])
    out: I64 = arr[keep]
    return out


def _broadcast(value: Any, n: int, name: str, *, scalar_types: tuple[type, ...]) -> list[Any]:
    if value is None or isinstance(value, scalar_types):
        return [value] * n
    if isinstance(value, Mapping):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise InvalidMemoryError(f"{name} has {len(values)} items for {n} texts")
    return values


# -- the stream --------------------------------------------------------------------------------


class MemoryStream:
    """A durable memory stream with Generative-Agents retrieval.

    Args:
        embeddings: the embedding model (any LangChain ``Embeddings``).
        path: the memory file (SQLite). ``None`` keeps everything in memory.
        namespace: the default namespace (user/agent) for reads and writes. A namespace never
            sees another's memories.
        scoring: how retrieval ranks memories; defaults to :meth:`ScoringConfig.hybrid`.
        importance_scorer: rates memories added without an importance; defaults to the
            heuristic (pass ``LLMImportanceScorer(model)`` for LLM ratings).
        embedding_model: the identity stored with the file; derived from ``embeddings`` when
            omitted. Reopening a file with another model or dimension is an error.
        store: a custom :class:`BaseRecordStore` (overrides ``path``).
        exact_limit: namespaces with at most this many live memories are scored exactly; larger
            ones score exactly only a candidate set (approximate nearest neighbours from an
            IVF index, best BM25 matches, most recent and most important memories). ``None``
            always scores exactly (retrieval time then grows linearly with the namespace).
            Large IVF indexes are trained on a background thread; until one is ready,
            retrieval uses the previous index or scores exactly, and ``close()`` waits for it.
        ann_candidates: how many dense and lexical candidates the approximate path gathers
            (at least ``4 * k``). More candidates: closer to exact, slower.
        ann_nprobe: how many IVF lists the approximate path searches.

    Example:
        .. code-block:: python

            from langchain_core.embeddings import DeterministicFakeEmbedding
            from langchain_reflective import MemoryStream

            with MemoryStream(DeterministicFakeEmbedding(size=64), path="memory.db") as stream:
                stream.add(["Alice likes tea", "Bob moved to Paris"], importances=[0.3, 0.8])
                for hit in stream.retrieve("Where does Bob live?", k=1):
                    print(hit.record.text, hit.score)
    """

    def __init__(
        self,
        embeddings: Embeddings,
        *,
        path: str | os.PathLike[str] | None = None,
        namespace: str = "default",
        scoring: ScoringConfig | None = None,
        importance_scorer: BaseImportanceScorer | None = None,
        embedding_model: str | None = None,
        store: BaseRecordStore | None = None,
        exact_limit: int | None = DEFAULT_EXACT_LIMIT,
        ann_candidates: int = 128,
        ann_nprobe: int = 8,
    ) -> None:
        if exact_limit is not None and (isinstance(exact_limit, bool) or exact_limit < 1):
            raise ValueError(f"exact_limit must be a positive integer or None, got {exact_limit!r}")
        if ann_candidates < 1 or ann_nprobe < 1:
            raise ValueError("ann_candidates and ann_nprobe must be positive")
        self.exact_limit = exact_limit
        self.ann_candidates = int(ann_candidates)
        self.ann_nprobe = int(ann_nprobe)
        if not isinstance(embeddings, Embeddings):
            raise TypeError(
                f"embeddings must be a langchain_core Embeddings, got {type(embeddings).__name__}"
            )
        if not isinstance(namespace, str) or not namespace:
            raise InvalidMemoryError("namespace must be a non-empty string")
        self.embeddings = embeddings
        self.namespace = namespace
        self.scoring = scoring or ScoringConfig.hybrid()
        self.importance_scorer: BaseImportanceScorer = (
            importance_scorer or HeuristicImportanceScorer()
        )
        self.embedding_model = embedding_model or embedding_identity(embeddings)
        self.path = Path(path) if path is not None and store is None else None
        self._store: BaseRecordStore = store or SQLiteRecordStore(path)
        stored_model = self._store.embedding_model
        if stored_model and embedding_model is None and stored_model != self.embedding_model:
            self._store.close()
            raise EmbeddingError(
                f"{path} was written with embedding model {stored_model!r}, not "
                f"{self.embedding_model!r}; vectors from different models are not comparable. "
                f"Use the same model, or pass embedding_model={stored_model!r} if it is the same "
                "model under another name"
            )
        self._lock = threading.RLock()
        self._partitions: dict[str, _Partition] = {}
        self._bound_dimension: int | None = None
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> MemoryStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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
                self._store.close()

    @property
    def store(self) -> BaseRecordStore:
        """The durable record store."""
        return self._store

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the memory stream is closed")

    # -- partitions ----------------------------------------------------------------------------

    def resolve_namespace(self, namespace: str | None = None) -> str:
        """The namespace a call with ``namespace`` reads or writes (default: the stream's).

        Raises:
            InvalidMemoryError: an empty or non-string namespace.
        """
        return self._ns(namespace)

    def _ns(self, namespace: str | None) -> str:
        ns = self.namespace if namespace is None else namespace
        if not isinstance(ns, str) or not ns:
            raise InvalidMemoryError("namespace must be a non-empty string")
        return ns

    def _cache_path(self, namespace: str) -> Path | None:
        if self.path is None:
            return None
        digest = hashlib.sha256(namespace.encode()).hexdigest()[:24]
        return self.path.with_name(self.path.name + ".index") / f"{digest}.faiss"

    def _partition(self, namespace: str) -> _Partition | None:
        """The loaded partition of ``namespace`` (``None`` before the first vector exists)."""
        if self._store.changed_elsewhere():
            self._partitions.clear()
        part = self._partitions.get(namespace)
        if part is not None:
            part.flush_queue()
            return part
        dim = self._store.dimension
        if dim is None:
            return None
        part = self._load_partition(namespace, dim)
        self._partitions[namespace] = part
        return part

    def _load_partition(self, namespace: str, dim: int) -> _Partition:
        """Rebuild a namespace's scoring state from the file, streaming it in chunks.

        The vector-index cache (when valid) spares reading the vectors (exact partitions) or
        retraining and refilling the IVF index (large partitions).
        """
        generation = self._store.generation(namespace)
        part = _Partition(namespace, dim, generation)
        info = self._cache_info(namespace, generation)
        kind = info.get("kind", "flat") if info else None
        flat = self._load_flat_cache(namespace, dim, info) if kind == "flat" else None
        total = self._store.count(namespace)
        part.reserve(total)
        for chunk in self._store.iter_partition(
            namespace, with_vectors=flat is None, chunk_size=_LOAD_CHUNK
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
        if flat is not None:
            part.index = flat
        elif kind == "ivf" and info is not None:
            part.ann = self._load_ivf_cache(namespace, dim, info, len(part))
            part.ann_upto = len(part) if part.ann is not None else 0
        part.dirty = flat is None and (part.ann is None or kind != "ivf")
        return part

    def _cache_info(self, namespace: str, generation: int) -> dict[str, Any] | None:
        if self._cache_path(namespace) is None:
            return None
        raw = self._store.get_meta(f"index_cache:{namespace}")
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
        if self._store.changed_elsewhere():
            # another process wrote since we last looked (one-memory adds do not look): the
            # partitions may lack its rows, and a cache saved now could carry the generation of
            # different contents. Skip it; the next open loads from the file.
            logger.info("another process wrote %s: not saving the index caches", self.path)
            return
        for ns, part in self._partitions.items():
            part.flush_queue()
            if part.ann_build is not None:
                try:
                    self._maintain_ann(part, wait=True)  # save the index being built
                except (MemoryError, RuntimeError) as exc:  # the cache is optional
                    logger.warning("could not finish the IVF index of %r: %s", ns, exc)
                    continue
            path = self._cache_path(ns)
            if path is None or not part.dirty:
                continue
            try:
                info: dict[str, Any]
                if part.ann is not None:
                    self._flush_ann(part)
                    digest = part.ann.save(path)
                    info = {"kind": "ivf", "trained_on": part.ann.trained_on}
                elif len(part) <= _FLAT_CACHE_MAX:
                    digest = part.index.save(path)
                    info = {"kind": "flat"}
                else:  # large exact partition: its vectors reload from the file
                    path.unlink(missing_ok=True)
                    self._store.set_meta(f"index_cache:{ns}", "{}")
                    part.dirty = False
                    continue
                info.update(generation=part.generation, sha256=digest, count=part.live)
                self._store.set_meta(f"index_cache:{ns}", json.dumps(info))
                part.dirty = False
            except (OSError, StorageError, RuntimeError) as exc:  # the cache is optional
                logger.warning("could not write the vector index cache %s: %s", path, exc)

    # -- approximate candidates ----------------------------------------------------------------

    def _maintain_ann(self, part: _Partition, *, wait: bool = False, flush: bool = True) -> None:
        """Build, retrain or top up the IVF index of a partition that outgrew ``exact_limit``.

        Indexes for ``_ANN_BACKGROUND_MIN`` rows or more are built on a worker thread and
        installed by a later call (``wait`` joins a running build first). Rows added since the
        last update are indexed by the first retrieval (``flush``) that finds ``_ANN_FLUSH`` or
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
                self._build_ann(part)  # again, inline: a persistent error reaches the caller
        limit = self.exact_limit
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
            if live >= _ANN_BACKGROUND_MIN:
                part.ann_build = _AnnBuild(part)
            else:
                self._build_ann(part)
        if flush and part.ann is not None and len(part) - part.ann_upto >= _ANN_FLUSH:
            self._flush_ann(part)

    def _build_ann(self, part: _Partition) -> None:
        index, sample = _new_ann(part, np.flatnonzero(part.index.alive))
        index.train(sample, part.live)
        part.ann = index
        part.ann_upto = 0
        self._flush_ann(part)

    def _flush_ann(self, part: _Partition) -> None:
        """Index rows ``ann_upto ..`` in the IVF index."""
        ann = part.ann
        if ann is None:
            return
        n = len(part)
        _fill_ann(ann, part.index.vectors(), part.seqs.view, part.index.alive, part.ann_upto, n)
        part.ann_upto = n
        part.dirty = True

    def _top_rows(
        self,
        part: _Partition,
        cache: TopRows,
        values: npt.NDArray[np.float64],
        alive: npt.NDArray[np.bool_],
        n: int,
        version: int,
    ) -> I64:
        """The ``n`` live rows with the largest ``values`` (from a cache kept across calls).

        ``version`` changes whenever ``values`` change in place; the answer is reused while the
        cached set, the deletions, the values and ``n`` are all unchanged.
        """
        results = part._top_results
        if results is None:
            results = part._top_results = {}
        deleted = part.index.n_deleted
        known = results.get(id(cache))
        if (
            known is not None
            and cache.valid
            and known[0] is cache._rows
            and known[1:5] == (len(cache._rows), deleted, version, n)
        ):
            return known[5]
        rows = _top_cache_rows(part, cache) if cache.valid else None
        if rows is not None:
            usable = alive[rows] & (values[rows] >= cache.floor)
            if int(usable.sum()) < min(n, cache.size):
                rows = None
        if rows is None:
            cache.rebuild(values, alive)
            rows = _top_cache_rows(part, cache)
        rows = rows[alive[rows]]
        if rows.shape[0] > n:
            rows = rows[np.argpartition(-values[rows], n - 1)[:n]]
        results[id(cache)] = (cache._rows, len(cache._rows), deleted, version, n, rows)
        return rows

    @staticmethod
    def _recent_rows(part: _Partition, alive: npt.NDArray[np.bool_], n: int) -> I64:
        """The ``n`` most recently accessed live rows (ties in any order).

        Kept across calls and updated from what changed since: rows appended and rows touched
        (whose access time only went up) can displace the previous answer, nothing else can.
        Deletions, a lowered access time or a different ``n`` recompute it from every row.
        """
        values = part.accessed.view
        size = len(part)
        deleted = part.index.n_deleted
        known = part._recent
        rows: I64
        if (
            known is not None
            and not part._recent_stale
            and known[1] == n
            and known[3] == deleted
            and known[2] <= size
        ):
            rows, _, upto, _ = known
            pending = part._recent_touched or []
            if upto == size and not pending:
                return rows
            pool = [rows, *pending]
            if upto < size:
                pool.append(upto + np.flatnonzero(alive[upto:]))
            rows = _unique(np.concatenate(pool))
        else:
            rows = np.flatnonzero(alive)
        if rows.shape[0] > n:
            rows = rows[np.argpartition(-values[rows], n - 1)[:n]]
        part._recent = (rows, n, size, deleted)
        part._recent_touched = None
        part._recent_stale = False
        return rows

    def _lexical(self, part: _Partition) -> BM25Index:
        if part.lexical is None:
            from langchain_reflective.lexical import BM25Index

            lexical = BM25Index()
            # rows must line up with the partition's, whose deleted rows are tombstones while
            # the file no longer holds them: place each stored text at its row
            docs = [""] * len(part)
            part.lexical_context = self.scoring.lexical_context
            part.last_observation = None
            for chunk in self._store.iter_partition(part.namespace, with_vectors=False):
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

    # -- add -----------------------------------------------------------------------------------

    def _plan_add(
        self,
        texts: str | Sequence[str],
        *,
        importances: float | Sequence[float | None] | None,
        kinds: str | Sequence[str],
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None,
        evidence: Sequence[Sequence[str]] | None,
        ids: Sequence[str] | None,
        namespace: str | None,
        now: datetime | None,
        reset_reflection_counter: bool,
    ) -> _AddPlan:
        self._check_open()
        one = texts if type(texts) is str else None
        if one is None and type(texts) is list and len(texts) == 1:
            one = texts[0]
        if (
            one is not None
            and type(kinds) is str
            and metadatas is None
            and evidence is None
            and ids is None
        ):  # one memory with defaults: the common per-turn add, planned without the loops
            imp = importances
            if type(imp) is list and len(imp) == 1:
                imp = imp[0]
            if kinds and (imp is None or (type(imp) is float and 0.0 <= imp <= 1.0)):
                return _AddPlan(
                    texts=[validate_text(one)],
                    kinds=[kinds],
                    importances=[imp],
                    metadatas=[{}],
                    evidence=[()],
                    ids=new_memory_ids(1),
                    namespace=self._ns(namespace),
                    now=utc(now) if now is not None else datetime.now(UTC),
                    reset_counter=reset_reflection_counter,
                    to_rate=[0] if imp is None else [],
                )
        if isinstance(texts, str):
            texts = [texts]
        if type(texts) is not list and not isinstance(texts, Sequence):
            raise InvalidMemoryError(
                f"texts must be a string or a sequence of strings, got {type(texts).__name__}"
            )
        text_list = [validate_text(t) for t in texts]
        n = len(text_list)
        kind_list = _broadcast(kinds, n, "kinds", scalar_types=(str,))
        for kind in kind_list:
            if not isinstance(kind, str) or not kind:
                raise InvalidMemoryError(f"kind must be a non-empty string, got {kind!r}")
        imp_list = _broadcast(importances, n, "importances", scalar_types=(int, float))
        for imp in imp_list:
            if imp is not None and (
                isinstance(imp, bool)
                or not isinstance(imp, int | float)
                or not math.isfinite(imp)
                or not 0.0 <= imp <= 1.0
            ):
                raise InvalidMemoryError(f"importance must be a number in [0, 1], got {imp!r}")
        if metadatas is None:
            meta_list: list[dict[str, Any]] = [{} for _ in range(n)]
        else:
            meta_list = [
                validate_metadata(m) for m in _broadcast(metadatas, n, "metadatas", scalar_types=())
            ]
        if evidence is None:
            ev_list: list[tuple[str, ...]] = [()] * n
        else:
            ev_raw = list(evidence)
            if len(ev_raw) != n:
                raise InvalidMemoryError(f"evidence has {len(ev_raw)} items for {n} texts")
            ev_list = [tuple(str(e) for e in (ev or ())) for ev in ev_raw]
        if ids is None:
            id_list = new_memory_ids(n)
        else:
            id_list = [str(i) for i in ids]
            if len(id_list) != n or len(set(id_list)) != n or not all(id_list):
                raise InvalidMemoryError("ids must be unique non-empty strings, one per text")
        when = utc(now) if now is not None else datetime.now(UTC)
        return _AddPlan(
            texts=text_list,
            kinds=kind_list,
            importances=imp_list,
            metadatas=meta_list,
            evidence=ev_list,
            ids=id_list,
            namespace=self._ns(namespace),
            now=when,
            reset_counter=reset_reflection_counter,
            to_rate=[i for i, v in enumerate(imp_list) if v is None],
        )

    def _commit_add(
        self,
        plan: _AddPlan,
        raw_vectors: Any,
        rated: Sequence[Any],
    ) -> list[MemoryRecord]:
        n = len(plan.texts)
        vectors = _as_unit_vectors(raw_vectors, n, type(self.embeddings).__name__)
        importance: list[float] = [0.0] * n
        sources: list[str] = ["given"] * n
        for i, v in enumerate(plan.importances):
            if v is not None:
                importance[i] = float(v)
        if len(rated) != len(plan.to_rate):
            raise InvalidMemoryError("importance scorer returned the wrong number of results")
        for i, result in zip(plan.to_rate, rated, strict=True):
            importance[i] = float(min(1.0, max(0.0, result.value)))
            sources[i] = result.source
        times = plan.times or [plan.now] * n
        with self._lock:
            self._check_open()
            self._bind(vectors.shape[1])
            depths = self._depths(plan)
            # every value was validated by _plan_add: build the records without re-validating
            records = [
                trusted_record(
                    id=plan.ids[i],
                    text=plan.texts[i],
                    kind=plan.kinds[i],
                    created_at=times[i],
                    last_accessed_at=times[i],
                    importance=importance[i],
                    importance_source=sources[i],
                    evidence=plan.evidence[i],
                    depth=depths[i],
                    namespace=plan.namespace,
                    metadata=plan.metadatas[i],
                )
                for i in range(n)
            ]
            counter = CounterUpdate(
                namespace=plan.namespace,
                importance=sum(r.importance for r in records if r.kind != REFLECTION),
                adds=n,
                reset_at=plan.now if plan.reset_counter else None,
            )
            part = self._partitions.get(plan.namespace)
            seqs = self._store.insert(
                records, vectors, counter=counter, pending=plan.ids if plan.pending else ()
            )
            if self._store.consume_write_conflict():
                self._partitions.clear()  # another process wrote: reload from the file
                part = None
            grown = True  # rows joined the arrays (not only the queue)
            if part is None:
                part = self._partition(plan.namespace)  # loads the rows just written too
                if part is None:
                    return records
            else:
                stamp = times[0].timestamp()
                stamps = [stamp] * n if plan.times is None else [t.timestamp() for t in times]
                if n == 1:
                    grown = part.queue_one(
                        seqs[0], vectors[0], stamp, importance[0], plan.kinds[0], plan.texts[0]
                    )
                    if grown:  # the queue is full
                        part.flush_queue()
                else:
                    part.flush_queue()
                    part.append(
                        seqs,
                        vectors,
                        stamps,
                        stamps,
                        importance,
                        plan.kinds,
                        plan.texts,
                    )
                part.generation = self._store.last_generation
            part.dirty = True
            if grown:  # (queued rows are looked after when the queue flushes)
                self._maintain_ann(part, flush=False)  # retrieval indexes the new rows
            return records

    def _bind(self, dimension: int) -> None:
        """Check (once per dimension) that vectors fit the file; record them on first write."""
        if self._bound_dimension != dimension:
            self._store.bind_embeddings(self.embedding_model, dimension)
            self._bound_dimension = dimension

    def _depths(self, plan: _AddPlan) -> list[int]:
        if not any(plan.evidence):
            return [0] * len(plan.texts)
        wanted = sorted({e for ev in plan.evidence for e in ev})
        found = {r.id: r.depth for r in self._store.get(wanted, namespace=plan.namespace)}
        missing = [e for e in wanted if e not in found]
        if missing:
            raise InvalidMemoryError(
                f"evidence ids not found in namespace {plan.namespace!r}: {missing[:5]}"
            )
        return [1 + max(found[e] for e in ev) if ev else 0 for ev in plan.evidence]

    def add(
        self,
        texts: str | Sequence[str],
        *,
        importances: float | Sequence[float | None] | None = None,
        kinds: str | Sequence[str] = "observation",
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        evidence: Sequence[Sequence[str]] | None = None,
        ids: Sequence[str] | None = None,
        namespace: str | None = None,
        now: datetime | None = None,
        reset_reflection_counter: bool = False,
    ) -> list[MemoryRecord]:
        """Add memories: one embedding call and at most one importance batch per call.

        Args:
            texts: one text or many.
            importances: importance in [0, 1] per text (or one for all); ``None`` entries are
                rated by :attr:`importance_scorer`.
            kinds: the kind per text (or one for all).
            metadatas: JSON-serialisable metadata per text (or one for all).
            evidence: ids of cited records per text; the depth becomes
                ``1 + max(depth of evidence)``. The ids must exist in the same namespace.
            ids: explicit ids (default: new time-ordered UUIDv7s, see :func:`new_memory_id`).
            namespace: write to this namespace instead of the stream's default.
            now: creation time (timezone-aware; default: the current time).
            reset_reflection_counter: reset the namespace's reflection counter in the same
                transaction (used to store reflections atomically).

        Returns:
            The stored records, in order.

        Raises:
            InvalidMemoryError: bad text, kind, importance, metadata or evidence.
            EmbeddingError: the embeddings returned unusable vectors (nothing is stored).
            DimensionMismatchError: the vectors' dimension differs from the file's.
        """
        plan = self._plan_add(
            texts,
            importances=importances,
            kinds=kinds,
            metadatas=metadatas,
            evidence=evidence,
            ids=ids,
            namespace=namespace,
            now=now,
            reset_reflection_counter=reset_reflection_counter,
        )
        if not plan.texts:
            return []
        vectors = self.embeddings.embed_documents(plan.texts)
        rated = (
            self.importance_scorer.score([plan.texts[i] for i in plan.to_rate])
            if plan.to_rate
            else []
        )
        return self._commit_add(plan, vectors, rated)

    async def aadd(
        self,
        texts: str | Sequence[str],
        *,
        importances: float | Sequence[float | None] | None = None,
        kinds: str | Sequence[str] = "observation",
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        evidence: Sequence[Sequence[str]] | None = None,
        ids: Sequence[str] | None = None,
        namespace: str | None = None,
        now: datetime | None = None,
        reset_reflection_counter: bool = False,
    ) -> list[MemoryRecord]:
        """Async twin of :meth:`add` (embedding and importance calls are awaited)."""
        plan = self._plan_add(
            texts,
            importances=importances,
            kinds=kinds,
            metadatas=metadatas,
            evidence=evidence,
            ids=ids,
            namespace=namespace,
            now=now,
            reset_reflection_counter=reset_reflection_counter,
        )
        if not plan.texts:
            return []
        vectors = await self.embeddings.aembed_documents(plan.texts)
        rated = (
            await self.importance_scorer.ascore([plan.texts[i] for i in plan.to_rate])
            if plan.to_rate
            else []
        )
        return await asyncio.to_thread(self._commit_add, plan, vectors, rated)

    # -- pending memories (the outbox) ----------------------------------------------------------

    def enqueue(
        self,
        texts: str | Sequence[str],
        *,
        importances: float | Sequence[float | None] | None = None,
        kinds: str | Sequence[str] = "observation",
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        namespace: str | None = None,
        now: datetime | None = None,
    ) -> list[PendingMemory]:
        """Write memories durably as *pending*: one commit, no embedding, no importance call.

        They are not retrievable until :meth:`complete_pending` embeds and rates them and
        stores them under the same ids (:class:`~langchain_reflective.memory.ReflectiveMemory`
        does that in the background). The arguments are validated like :meth:`add`'s.

        Returns:
            The queued memories, in order.

        Raises:
            InvalidMemoryError: bad text, kind, importance or metadata (nothing is queued).
        """
        plan = self._plan_add(
            texts,
            importances=importances,
            kinds=kinds,
            metadatas=metadatas,
            evidence=None,
            ids=None,
            namespace=namespace,
            now=now,
            reset_reflection_counter=False,
        )
        items = [
            PendingMemory(
                id=plan.ids[i],
                namespace=plan.namespace,
                text=plan.texts[i],
                kind=plan.kinds[i],
                created_at=plan.now,
                importance=None if (imp := plan.importances[i]) is None else float(imp),
                metadata=plan.metadatas[i],
            )
            for i in range(len(plan.texts))
        ]
        with self._lock:
            self._check_open()
            self._store.enqueue(items)
        return items

    def pending(
        self, n: int | None = None, *, namespace: str | None = None, all_namespaces: bool = False
    ) -> list[PendingMemory]:
        """Queued memories not yet completed, oldest first.

        Args:
            n: the oldest ``n`` (all when ``None``); with a ``namespace`` the newest ``n``.
            namespace: whose (default: the stream's); ignored with ``all_namespaces``.
            all_namespaces: every namespace's, in queue order (what a drain completes first).
        """
        self._check_open()
        if all_namespaces:
            return self._store.pending(limit=n)
        return self._store.pending(namespace=self._ns(namespace), limit=n, newest=n is not None)

    def _plan_pending(self, items: Sequence[PendingMemory]) -> list[_AddPlan]:
        groups: dict[str, list[PendingMemory]] = {}
        for item in items:
            groups.setdefault(item.namespace, []).append(item)
        return [
            _AddPlan(
                texts=[p.text for p in group],
                kinds=[p.kind for p in group],
                importances=[p.importance for p in group],
                metadatas=[dict(p.metadata) for p in group],
                evidence=[()] * len(group),
                ids=[p.id for p in group],
                namespace=ns,
                now=group[-1].created_at,
                reset_counter=False,
                to_rate=[i for i, p in enumerate(group) if p.importance is None],
                times=[p.created_at for p in group],
                pending=True,
            )
            for ns, group in groups.items()
        ]

    def _commit_pending(
        self, plans: Sequence[_AddPlan], raw_vectors: Any, rated: Sequence[Any]
    ) -> list[MemoryRecord]:
        total = sum(len(p.texts) for p in plans)
        vectors = _as_unit_vectors(raw_vectors, total, type(self.embeddings).__name__)
        if len(rated) != sum(len(p.to_rate) for p in plans):
            raise InvalidMemoryError("importance scorer returned the wrong number of results")
        out: list[MemoryRecord] = []
        row = done = 0
        for plan in plans:  # one transaction per namespace
            n, k = len(plan.texts), len(plan.to_rate)
            out.extend(self._commit_add(plan, vectors[row : row + n], rated[done : done + k]))
            row += n
            done += k
        return out

    def _pending_calls(self, plans: Sequence[_AddPlan]) -> tuple[list[str], list[str]]:
        texts = [t for p in plans for t in p.texts]
        return texts, [p.texts[i] for p in plans for i in p.to_rate]

    def complete_pending(self, items: Sequence[PendingMemory]) -> list[MemoryRecord]:
        """Embed and rate queued memories and store them under their ids.

        One embedding call and at most one importance batch for all of ``items``; then one
        transaction per namespace stores its memories and removes them from the queue, so a
        memory is never stored twice nor lost (a crash before the commit leaves it queued).

        Raises:
            PendingConflictError: some of ``items`` were completed meanwhile (by another
                process); that namespace's memories were not stored by this call.
            EmbeddingError: unusable vectors (nothing is stored; the items stay queued).
        """
        plans = self._plan_pending(items)
        if not plans:
            return []
        texts, to_rate = self._pending_calls(plans)
        vectors = self.embeddings.embed_documents(texts)
        rated = self.importance_scorer.score(to_rate) if to_rate else []
        return self._commit_pending(plans, vectors, rated)

    async def acomplete_pending(self, items: Sequence[PendingMemory]) -> list[MemoryRecord]:
        """Async twin of :meth:`complete_pending`."""
        plans = self._plan_pending(items)
        if not plans:
            return []
        texts, to_rate = self._pending_calls(plans)
        vectors = await self.embeddings.aembed_documents(texts)
        rated = await self.importance_scorer.ascore(to_rate) if to_rate else []
        return await asyncio.to_thread(self._commit_pending, plans, vectors, rated)

    # -- retrieve ------------------------------------------------------------------------------

    def _check_query(self, query: object, k: object) -> str:
        self._check_open()
        if not isinstance(query, str):
            raise InvalidMemoryError(f"query must be a str, got {type(query).__name__}")
        if not query.strip():
            raise InvalidMemoryError("query is empty or whitespace")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidMemoryError(f"k must be a positive integer, got {k!r}")
        return query

    def _rank(
        self,
        query: str,
        raw_vector: Any,
        *,
        k: int,
        now: datetime | None,
        filter: RetrievalFilter,
        touch: bool,
        namespace: str | None,
        scoring: ScoringConfig | None,
    ) -> list[ScoredMemory]:
        qvec = _as_unit_vectors([raw_vector], 1, type(self.embeddings).__name__)[0]
        config = scoring or self.scoring
        ns = self._ns(filter.namespace or namespace)
        when = utc(now) if now is not None else datetime.now(UTC)
        with self._lock:
            self._check_open()
            part = self._partition(ns)
            if part is None or len(part) == 0:
                return []
            if qvec.shape[0] != part.index.dimension:
                self._bind(qvec.shape[0])
            self._maintain_ann(part)
            filtered = (
                filter.kinds is not None
                or filter.created_after is not None
                or filter.created_before is not None
            )
            mask = self._filter_mask(part, filter) if filtered else None
            lex = self._lexical(part).query_scores(query) if config.uses_lexical else None
            try:
                rows: I64 | None = None
                if part.ann is not None and 4 * k < part.live:
                    rows = self._candidates(part, qvec, k, mask, lex, config)
                if (
                    rows is not None
                    and rows.size
                    and filter.min_relevance is None
                    and self._fused(part, config)
                ):
                    relevance, rec, comps = self._score_candidates(
                        part, qvec, rows, lex, config, when.timestamp()
                    )
                else:
                    if rows is None:  # exact: every (matching) live row is a candidate
                        rows = np.flatnonzero(part.index.alive if mask is None else mask)
                    if rows.size == 0:
                        return []
                    relevance = part.index.scores(qvec, rows).astype(np.float64)
                    if filter.min_relevance is not None:
                        keep = relevance >= filter.min_relevance
                        rows, relevance = rows[keep], relevance[keep]
                        if rows.size == 0:
                            return []
                    relevance, rec, comps = self._score_rows(
                        part, qvec, rows, relevance, lex, config, when.timestamp()
                    )
            finally:
                if lex is not None:
                    lex.release()
            best = top_k(comps.score, k)
            best_rows = rows[best]
            seqs = part.seqs.view[best_rows].tolist()
            if touch:  # one durable write that also reads the hits back
                records = self._store.touch_and_get(seqs, when)
                stamp = when.timestamp()
                part.touched(best_rows, stamp)
                part.accessed.view[best_rows] = stamp
            else:
                records = self._store.get_by_seq(seqs)
            out: list[ScoredMemory] = []
            for seq, score, rel, lexical, recent, importance in zip(
                seqs,
                comps.score[best].tolist(),
                relevance[best].tolist(),
                comps.lexical[best].tolist(),
                rec[best].tolist(),
                comps.importance[best].tolist(),
                strict=True,
            ):
                record = records.get(seq)
                if record is None:  # deleted by another process in between
                    continue
                out.append(
                    ScoredMemory(
                        record=record,
                        score=score,
                        relevance=rel,
                        lexical=lexical,
                        recency=recent,
                        importance=importance,
                    )
                )
            return out

    @staticmethod
    def _neighbors(part: _Partition, rows: I64) -> tuple[I64, I64]:
        """The previous and next live observation rows of each row (-1: none or not one)."""
        if rows.size == 0 or part.kinds.get(OBSERVATION) is None:
            none = np.full(rows.shape[0], -1, dtype=np.int64)
            return none, none.copy()
        pairs = part.neighbor_table()[rows]
        return pairs[:, 0], pairs[:, 1]

    def _score_rows(
        self,
        part: _Partition,
        qvec: F32,
        rows: I64,
        relevance: npt.NDArray[np.float64],
        lex: QueryScores | None,
        config: ScoringConfig,
        now: float,
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], ScoreComponents]:
        """Score candidate ``rows`` (ascending, distinct; raw cosine ``relevance``).

        With ``config.neighbor_weight`` the neighbours of the candidates are scored too (they
        need not be candidates themselves), so a memory's score depends only on itself and its
        neighbours, never on which other memories are candidates. ``lex`` holds the query's
        BM25 scores.
        """
        m = rows.shape[0]
        neighbors: tuple[I64, I64] | None = None
        scored = rows
        if config.neighbor_weight > 0 and part.kinds.get(OBSERVATION) is None:
            none = np.full(m, -1, dtype=np.int64)
            neighbors = (none, none)  # no observations: no neighbours (as _neighbors says)
        elif config.neighbor_weight > 0 and m:
            # previous then next neighbour of every candidate; -1 for none
            linked = part.neighbor_table()[rows].T.ravel()
            n = len(part)
            if m == n:  # every row (rows is 0..n-1): a neighbour's row is its position
                index = linked.copy()
                extra_at = np.zeros(0, dtype=np.int64)
            else:
                if 4 * m >= n:  # most rows (the exact path): a row -> position table
                    position = np.full(n, -1, dtype=np.int64)
                    position[rows] = np.arange(m)
                    index = np.where(linked >= 0, position[linked], -1)
                    known = index >= 0
                else:  # a few candidates: binary search among them
                    pos = np.searchsorted(rows, linked)
                    np.minimum(pos, m - 1, out=pos)
                    known = rows[pos] == linked  # -1 never matches a row
                    index = np.where(known, pos, -1)
                extra_at = np.flatnonzero(linked >= 0)
                extra_at = extra_at[~known[extra_at]]
                # neighbours that are not candidates are appended after them (repeats are
                # harmless: only the candidates' scores are used)
                index[extra_at] = np.arange(m, m + extra_at.shape[0])
            neighbors = (index[:m], index[m:])
            if extra_at.shape[0]:
                scored = np.concatenate((rows, linked[extra_at]))
        rel = relevance
        if scored is not rows:
            rel = np.concatenate((relevance, part.index.scores(qvec, scored[m:])))
        lexical = lex.lookup(scored) if lex is not None else None
        rec = np.asarray(recency(part.accessed.view[scored], now, config.decay), dtype=np.float64)
        if neighbors is not None and scored is not rows:
            pad = np.full(scored.shape[0] - m, -1, dtype=np.int64)
            neighbors = (np.concatenate((neighbors[0], pad)), np.concatenate((neighbors[1], pad)))
        comps = combine(
            config,
            relevance=rel,
            recency=rec,
            importance=part.importance.view[scored],
            lexical=lexical,
            lexical_max=lex.max() if lex is not None else None,
            neighbors=neighbors,
        )
        if scored is rows:
            return rel, rec, comps
        picked = ScoreComponents(
            relevance=comps.relevance[:m],
            lexical=comps.lexical[:m],
            recency=comps.recency[:m],
            importance=comps.importance[:m],
            score=comps.score[:m],
        )
        return rel[:m], rec[:m], picked

    @staticmethod
    def _fused(part: _Partition, config: ScoringConfig) -> bool:
        """Whether :meth:`_score_candidates` applies (it computes what :meth:`_score_rows`
        does for the default kind of scoring, in one pass)."""
        return (
            config.normalization == "none"
            and config.neighbor_weight > 0
            and config.uses_lexical
            and part.index.dimension > _BY_INDEX_MIN_DIM
            and part.kinds.get(OBSERVATION) is not None
        )

    def _score_candidates(
        self,
        part: _Partition,
        qvec: F32,
        rows: I64,
        lex: QueryScores | None,
        config: ScoringConfig,
        now: float,
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], ScoreComponents]:
        """:meth:`_score_rows` for a candidate set, with unnormalised scores and neighbours.

        Each candidate is laid out with its neighbours as a (previous, row, next) triple, so one
        pass computes every cosine and BM25 lookup (adjacent rows are adjacent in memory) and no
        neighbour has to be found among the candidates. The arithmetic is ``combine``'s, term
        for term, so the scores are the same bits (``_fused`` says when it applies; FAISS's
        small-dimension kernels round differently by position, hence the dimension check there).
        """
        m = rows.shape[0]
        triples = np.empty((m, 3), dtype=np.int64)
        triples[:, 1] = rows
        triples[:, ::2] = part.neighbor_table()[rows]
        has = triples[:, ::2] >= 0  # (m, 2): has a previous / next neighbour
        ids = np.maximum(triples, 0).reshape(-1)  # a missing neighbour reads row 0, masked below
        rel = part.index.scores(qvec, ids).astype(np.float64).reshape(m, 3)
        top = lex.max() if lex is not None else 0.0
        if lex is not None and top > 0:
            lexical = lex.lookup(ids).reshape(m, 3) / top
        else:
            lexical = np.zeros((m, 3), dtype=np.float64)
        hybrid = config.relevance_weight * rel + config.lexical_weight * lexical
        side = np.where(has, hybrid[:, ::2], 0.0)
        boosted = hybrid[:, 1] + config.neighbor_weight * np.maximum(
            0.0, np.maximum(side[:, 0], side[:, 1])
        )
        rec = np.asarray(recency(part.accessed.view[rows], now, config.decay), dtype=np.float64)
        importance = np.asarray(part.importance.view[rows], dtype=np.float64)
        score = boosted + config.recency_weight * rec + config.importance_weight * importance
        relevance = rel[:, 1]
        comps = ScoreComponents(
            relevance=relevance,
            lexical=lexical[:, 1],
            recency=rec,
            importance=importance,
            score=score,
        )
        return relevance, rec, comps

    @staticmethod
    def _filter_mask(part: _Partition, filter: RetrievalFilter) -> npt.NDArray[np.bool_]:
        mask = np.array(part.index.alive, copy=True)
        if filter.kinds is not None:
            codes = [part.kinds[k] for k in filter.kinds if k in part.kinds]
            mask &= np.isin(part.kind_codes.view, codes)
        if filter.created_after is not None:
            mask &= part.created.view >= filter.created_after.timestamp()
        if filter.created_before is not None:
            mask &= part.created.view < filter.created_before.timestamp()
        return mask

    def _candidates(
        self,
        part: _Partition,
        qvec: F32,
        k: int,
        mask: npt.NDArray[np.bool_] | None,
        lex: QueryScores | None,
        config: ScoringConfig,
    ) -> I64 | None:
        """Rows to score exactly on a large partition, or ``None`` to score every row.

        The union of: the IVF index's best rows, the rows of the probed IVF lists that match the
        query lexically, rows not yet in the IVF index, the best BM25 rows, the neighbours of
        the best dense and BM25 rows, the most recently accessed and the most important rows --
        restricted to live rows matching the filter. A selective filter (few matching rows) is
        scored exactly instead. Sorted ascending.
        """
        assert part.ann is not None
        want = max(self.ann_candidates, 4 * k)
        dense_want = want
        alive = part.index.alive
        if mask is not None:
            matched = int(np.count_nonzero(mask))
            if self.exact_limit is None or matched <= self.exact_limit or 4 * k >= matched:
                return None
            dense_want = int(min(part.live, want * min(16, math.ceil(part.live / matched))))
        best_seqs, probed = part.ann.search_lists(qvec, dense_want, self.ann_nprobe)
        dense = _rows_of_seqs(part, best_seqs)  # best first
        pieces: list[I64] = [dense]
        if lex is not None and probed.shape[0]:
            # every row of the probed IVF lists that also matches the query lexically: fairly
            # close in meaning and sharing a word scores like the dense and BM25 leaders (0.6 *
            # cosine + 0.4 * BM25) without being in either top list
            looked_at = _rows_of_seqs(part, probed)
            pieces.append(looked_at[lex.matched(looked_at)])
        pending: I64 | None = None
        if part.ann_upto < len(part):
            pending = part.ann_upto + np.flatnonzero(alive[part.ann_upto :])
            if pending.shape[0]:  # rows not in the IVF index yet: exact search over them
                sims = part.index.scores(qvec, pending)
                pending = pending[np.argsort(-sims, kind="stable")[:dense_want]]
                pieces.append(pending)
        lexical: I64 | None = None
        if lex is not None:
            lexical = lex.top(want)  # best first
            pieces.append(lexical)
        if config.neighbor_weight > 0 and part.kinds.get(OBSERVATION) is not None:
            # a memory also scores through its neighbours' relevance: the neighbours of the most
            # relevant candidates are candidates too (-1 for none, dropped below)
            near = max(4 * k, want // 4)
            best = [dense[:near]]
            if pending is not None:
                best.append(pending[:near])
            if lexical is not None:
                best.append(lexical[:near])
            top = np.concatenate(best) if len(best) > 1 else best[0]
            pieces.append(part.neighbor_table()[top].ravel())
        # the most recent / most important rows, as many as their weight can matter: a component
        # weighted 0.05 against relevance's 0.6 cannot lift a row past many relevant ones
        top_weight = max(config.relevance_weight, config.lexical_weight, 1e-12)
        if config.recency_weight > 0:
            count = max(4 * k, min(want, math.ceil(want * config.recency_weight / top_weight)))
            pieces.append(self._recent_rows(part, alive, count))
        if config.importance_weight > 0:
            count = max(4 * k, min(want, math.ceil(want * config.importance_weight / top_weight)))
            important = part.important_top
            pieces.append(self._top_rows(part, important, part.importance.view, alive, count, 0))
        rows = _unique(np.concatenate(pieces))
        if rows.shape[0] and rows[0] < 0:
            rows = rows[int(np.searchsorted(rows, 0)) :]
        keep = alive[rows] if mask is None else mask[rows]
        out: I64 = rows[keep]
        if out.shape[0] < k and mask is not None:
            return None  # the filter removed too many candidates: score exactly
        return out

    def retrieve(
        self,
        query: str,
        *,
        k: int = 4,
        now: datetime | None = None,
        filter: RetrievalFilter | Mapping[str, Any] | None = None,
        touch: bool = True,
        namespace: str | None = None,
        scoring: ScoringConfig | None = None,
    ) -> list[ScoredMemory]:
        """The ``k`` best memories for ``query``, best first.

        Args:
            query: what to look for.
            k: how many memories to return.
            now: the time used for recency and as the new access time (default: now).
            filter: restrict kinds, creation time, minimum relevance or namespace.
            touch: update ``last_accessed_at`` of the returned memories (durably).
            namespace: read this namespace instead of the stream's default.
            scoring: override the stream's scoring for this call.

        Raises:
            InvalidMemoryError: empty query or bad ``k``.
            InvalidFilterError: unknown filter keys or bad values.
            EmbeddingError: the query embedding is unusable.
        """
        query = self._check_query(query, k)
        flt = RetrievalFilter.coerce(filter)
        vector = self.embeddings.embed_query(query)
        return self._rank(
            query,
            vector,
            k=k,
            now=now,
            filter=flt,
            touch=touch,
            namespace=namespace,
            scoring=scoring,
        )

    async def aretrieve(
        self,
        query: str,
        *,
        k: int = 4,
        now: datetime | None = None,
        filter: RetrievalFilter | Mapping[str, Any] | None = None,
        touch: bool = True,
        namespace: str | None = None,
        scoring: ScoringConfig | None = None,
    ) -> list[ScoredMemory]:
        """Async twin of :meth:`retrieve`."""
        query = self._check_query(query, k)
        flt = RetrievalFilter.coerce(filter)
        vector = await self.embeddings.aembed_query(query)
        return await asyncio.to_thread(
            self._rank,
            query,
            vector,
            k=k,
            now=now,
            filter=flt,
            touch=touch,
            namespace=namespace,
            scoring=scoring,
        )

    # -- reads and deletes ---------------------------------------------------------------------

    @staticmethod
    def _ids(ids: object) -> list[str]:
        """One id or a sequence of ids, as a list of strings.

        Raises:
            InvalidMemoryError: anything else (numbers, ``None``, mappings, ...).
        """
        if isinstance(ids, str):
            return [ids]
        if isinstance(ids, Sequence | set | frozenset) and all(isinstance(i, str) for i in ids):
            return list(ids)
        raise InvalidMemoryError(
            f"ids must be a string or a sequence of strings, got {type(ids).__name__}"
        )

    def get(self, ids: str | Sequence[str], *, namespace: str | None = None) -> list[MemoryRecord]:
        """Records with these ids in the namespace, in the order given (unknown ids skipped)."""
        self._check_open()
        return self._store.get(self._ids(ids), namespace=self._ns(namespace))

    def recent(
        self,
        n: int | None = None,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        since_last_reflection: bool = False,
    ) -> list[MemoryRecord]:
        """The newest ``n`` records (all when ``None``), oldest first.

        Args:
            n: how many.
            namespace: which namespace (default: the stream's).
            kinds: only these kinds.
            since_last_reflection: only records added after the last reflection.
        """
        self._check_open()
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise InvalidMemoryError(f"n must be a non-negative integer or None, got {n!r}")
        if kinds is not None:
            kinds = [kinds] if isinstance(kinds, str) else list(kinds)
            if not all(isinstance(k, str) and k for k in kinds):
                raise InvalidMemoryError("kinds must be non-empty strings")
        ns = self._ns(namespace)
        after = self._store.last_reflection_seq(ns) if since_last_reflection else None
        return self._store.recent(ns, n=n, kinds=kinds, after_seq=after)

    def most_important(
        self,
        n: int,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[MemoryRecord]:
        """The ``n`` most important records (most important first; newer first among equals).

        One indexed query, however many records the namespace holds (the working context asks
        for the top insights before every model call).
        """
        self._check_open()
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidMemoryError(f"n must be a non-negative integer, got {n!r}")
        if kinds is not None:
            kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        ns = self._ns(namespace)
        return self._store.recent(ns, n=n, kinds=kinds, after_seq=None, by_importance=True)

    def delete(self, ids: str | Sequence[str], *, namespace: str | None = None) -> int:
        """Delete records by id; return how many were deleted."""
        self._check_open()
        id_list = self._ids(ids)
        ns = self._ns(namespace)
        with self._lock:
            part = self._partition(ns)
            seqs = self._store.delete(id_list, namespace=ns)
            if part is not None and seqs:
                part.delete_rows(part.rows_of(seqs))
                part.generation = self._store.last_generation
                part.dirty = True
                if part.index.n_deleted * 2 > len(part) and len(part) > 1024:
                    del self._partitions[ns]  # compact: rebuilt from the file on next use
            return len(seqs)

    def purge(self, *, namespace: str | None = None) -> int:
        """Delete every memory of a namespace and reset its reflection counter."""
        self._check_open()
        ns = self._ns(namespace)
        with self._lock:
            n = self._store.purge(ns)
            self._partitions.pop(ns, None)
            return n

    def count(self, *, namespace: str | None = None) -> int:
        """Number of memories in a namespace (default: the stream's)."""
        self._check_open()
        return self._store.count(self._ns(namespace))

    def __len__(self) -> int:
        return self.count()

    def namespaces(self) -> list[str]:
        """Namespaces that hold memories (for administration; reads stay per namespace)."""
        self._check_open()
        return self._store.namespaces()

    # -- reflection counter --------------------------------------------------------------------

    def reflection_state(self, namespace: str | None = None) -> ReflectionState:
        """The persisted importance sum / add count since the last reflection."""
        self._check_open()
        return self._store.reflection_state(self._ns(namespace))

    def mark_reflected(self, *, namespace: str | None = None, now: datetime | None = None) -> None:
        """Reset the reflection counter of a namespace."""
        self._check_open()
        when = utc(now) if now is not None else datetime.now(UTC)
        self._store.update_counter(CounterUpdate(namespace=self._ns(namespace), reset_at=when))

    # -- tables and files ----------------------------------------------------------------------

    def to_dataframe(
        self,
        query: str | None = None,
        *,
        namespace: str | None = None,
        now: datetime | None = None,
    ) -> pd.DataFrame:
        """The memory table of Generative Agents as a pandas DataFrame (extra ``pandas``).

        Columns: ``id, description, kind, importance, recency, relevance, lexical, score,
        created_at, last_accessed_at, evidence, depth``. Without a query, ``relevance``,
        ``lexical`` and ``score`` are NaN. Nothing is touched.
        """
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                'to_dataframe needs pandas: pip install "langchain-reflective[pandas]"'
            ) from exc
        ns = self._ns(namespace)
        records = self.recent(None, namespace=ns)
        when = utc(now) if now is not None else datetime.now(UTC)
        scored: dict[str, ScoredMemory] = {}
        if query is not None and records:
            hits = self.retrieve(query, k=len(records), now=when, touch=False, namespace=ns)
            scored = {h.record.id: h for h in hits}
        rec = recency(
            np.array([r.accessed_at.timestamp() for r in records], dtype=np.float64),
            when.timestamp(),
            self.scoring.decay,
        )
        rows = []
        for i, r in enumerate(records):
            hit = scored.get(r.id)
            rows.append(
                {
                    "id": r.id,
                    "description": r.text,
                    "kind": r.kind,
                    "importance": r.importance,
                    "recency": float(rec[i]),
                    "relevance": hit.relevance if hit else float("nan"),
                    "lexical": hit.lexical if hit else float("nan"),
                    "score": hit.score if hit else float("nan"),
                    "created_at": r.created_at,
                    "last_accessed_at": r.accessed_at,
                    "evidence": list(r.evidence),
                    "depth": r.depth,
                }
            )
        frame = pd.DataFrame(
            rows,
            columns=[
                "id",
                "description",
                "kind",
                "importance",
                "recency",
                "relevance",
                "lexical",
                "score",
                "created_at",
                "last_accessed_at",
                "evidence",
                "depth",
            ],
        )
        if query is not None:
            frame = frame.sort_values("score", ascending=False, kind="stable")
        return frame

    def export_jsonl(
        self,
        path: str | os.PathLike[str],
        *,
        namespaces: Iterable[str] | Literal["all"] | None = None,
        include_vectors: bool = True,
    ) -> int:
        """Write memories as JSON lines (a header line, then one record per line).

        Args:
            path: the output file.
            namespaces: which namespaces (default: the stream's; ``"all"`` for every one).
            include_vectors: include embeddings so import needs no embedding calls.

        Returns:
            The number of records written.
        """
        self._check_open()
        if namespaces is None:
            ns_list = [self.namespace]
        elif namespaces == "all":
            ns_list = self._store.namespaces()
        else:
            ns_list = [self._ns(n) for n in namespaces]
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        count = 0
        fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            header = {
                "format": "langchain-reflective/jsonl",
                "version": 1,
                "embedding_model": self._store.embedding_model,
                "dimension": self._store.dimension,
            }
            fh.write(json.dumps(header) + "\n")
            for ns in ns_list:
                records = self._store.recent(ns, n=None, kinds=None, after_seq=None)
                vectors: dict[str, list[float]] = {}
                if include_vectors:
                    for chunk in self._store.iter_partition(ns, with_vectors=True):
                        assert chunk.vectors is not None
                        for rid, vec in zip(chunk.ids, chunk.vectors, strict=True):
                            vectors[rid] = [float(x) for x in vec]
                for r in records:
                    line = r.to_dict()
                    if include_vectors and r.id in vectors:
                        line["vector"] = vectors[r.id]
                    fh.write(json.dumps(line, ensure_ascii=False) + "\n")
                    count += 1
        os.replace(tmp, target)
        return count

    def import_jsonl(
        self,
        path: str | os.PathLike[str],
        *,
        namespace: str | None = None,
        batch_size: int = 256,
    ) -> int:
        """Import a file written by :meth:`export_jsonl`; existing ids are skipped.

        Vectors in the file are used when they come from the same embedding model and
        dimension; otherwise the texts are embedded again.

        Args:
            path: the JSONL file.
            namespace: put every record into this namespace (default: keep each record's).
            batch_size: records per transaction.

        Returns:
            The number of records imported.

        Raises:
            InvalidMemoryError: the file is not a langchain-reflective export or a line is
                malformed (nothing from the failing batch is written).
        """
        self._check_open()
        source = Path(path)
        try:
            fh = source.open(encoding="utf-8")
        except OSError as exc:
            raise InvalidMemoryError(f"cannot read {source}: {exc}") from exc
        imported = 0
        with fh:
            try:
                header = json.loads(fh.readline() or "null")
            except json.JSONDecodeError as exc:
                raise InvalidMemoryError(f"{source} is not a langchain-reflective export") from exc
            if not isinstance(header, dict) or header.get("format") != "langchain-reflective/jsonl":
                raise InvalidMemoryError(f"{source} is not a langchain-reflective export")
            reuse = header.get("embedding_model") == self.embedding_model
            batch: list[tuple[MemoryRecord, list[float] | None]] = []
            for lineno, line in enumerate(fh, start=2):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                    record = MemoryRecord.from_dict(
                        {**data, **({"namespace": namespace} if namespace else {})}
                    )
                except (json.JSONDecodeError, InvalidMemoryError, TypeError) as exc:
                    raise InvalidMemoryError(f"{source}:{lineno}: {exc}") from exc
                vec = data.get("vector") if reuse else None
                batch.append((record, vec))
                if len(batch) >= batch_size:
                    imported += self._import_batch(batch)
                    batch = []
            if batch:
                imported += self._import_batch(batch)
        return imported

    def _import_batch(self, batch: list[tuple[MemoryRecord, list[float] | None]]) -> int:
        by_ns: dict[str, list[tuple[MemoryRecord, list[float] | None]]] = {}
        for item in batch:
            by_ns.setdefault(item[0].namespace, []).append(item)
        total = 0
        for ns, items in by_ns.items():
            existing = {r.id for r in self._store.get([r.id for r, _ in items], namespace=ns)}
            fresh = [(r, v) for r, v in items if r.id not in existing]
            if not fresh:
                continue
            need = [i for i, (_, v) in enumerate(fresh) if v is None]
            vectors: list[Any] = [v for _, v in fresh]
            if need:
                embedded = self.embeddings.embed_documents([fresh[i][0].text for i in need])
                for i, vec in zip(need, embedded, strict=True):
                    vectors[i] = vec
            unit = _as_unit_vectors(vectors, len(fresh), type(self.embeddings).__name__)
            records = [r for r, _ in fresh]
            with self._lock:
                self._bind(unit.shape[1])
                part = self._partition(ns)
                seqs = self._store.insert(records, unit)
                if part is not None:
                    part.append(
                        seqs,
                        unit,
                        [r.created_at.timestamp() for r in records],
                        [r.accessed_at.timestamp() for r in records],
                        [r.importance for r in records],
                        [r.kind for r in records],
                        [r.text for r in records],
                    )
                    part.generation = self._store.last_generation
                    part.dirty = True
            total += len(records)
        return total
