"""The local index: the namespaces a process retrieves from, held in memory and kept exact.

``PostgresBackend(local_index=True)`` keeps, for each namespace it retrieves from, what the
SQLite backend keeps per namespace -- the vectors in a FAISS matrix (with an IVF index once the
namespace is large), BM25 over the terms Postgres stores for each memory, and the columns
scoring reads (a :class:`~langchain_reflective.backends.sqlite.partition.Partition`) -- and
gathers a retrieval's candidates in the process, with the SQLite backend's code, instead of
by the server's candidate statement: retrievals of 2-7 ms at 10k-1M memories instead of
16-130 ms (docs/benchmarks.md), for the memory the namespace takes in each process (~2 KB a
memory at 384 dimensions) and a load per process and namespace (~4 s per 100k memories).

Postgres stays the only copy that counts. Every retrieval sends one statement that asks what
changed in the namespace since the index last looked (schema version 7; ``LOCAL_CHANGES``):
memories added (keys above the newest it holds: a namespace's writers take keys in commit
order), removed (``reflective_removed``) and touched (``reflective_access.touched``, stamped
with the namespace's touch clock). While the server answers, the index ranks on what it
holds (``sent.py``: the statement's round trip is spent during the ranking); if the answer
says nothing changed, that ranking is the retrieval's, else the index applies the changes and
ranks again. So a retrieval sees every write committed before it began, in any process, as
without the local index. Every other read and write goes to the server as always. The touch
after a retrieval does too, but when the index keeps the records of every memory it returns
(those this process touched lately, :data:`RECORDS_KEPT` per namespace), the retrieval takes
them from the index, which applies the new access times at once, and the statement is written
by the backend's writer thread after the retrieval returned (``touches.py``, :meth:`held`).
The index applies its own process's touches as they are made (``held``, ``own_touch``), so
that they do not count as changes at the next retrieval; a catch-up that reads back only
access times it holds already finds nothing changed.

A namespace is loaded on a background thread the first time it is retrieved from, in one
snapshot (``REPEATABLE READ``); until it is ready its retrievals are answered by the server's
statement. One too large for ``max_memories`` is never loaded, and the least recently used
namespaces are dropped when the loaded ones exceed it. A namespace whose removals the server no
longer lists (the process fell more than ``REMOVALS_KEPT`` removals behind), that was purged,
or that holds more deleted rows than live ones is dropped and loaded again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.postgres.connection import Pools
from langchain_reflective.backends.postgres.failures import ConnectionLostError
from langchain_reflective.backends.postgres.local_docs import DocumentIndex, read_documents
from langchain_reflective.backends.postgres.local_rows import applied as _applied
from langchain_reflective.backends.postgres.local_rows import never as _never
from langchain_reflective.backends.postgres.local_rows import private as _private
from langchain_reflective.backends.postgres.local_rows import read_rows as _read_rows
from langchain_reflective.backends.postgres.local_rows import rows_of as _rows_of
from langchain_reflective.backends.postgres.queries import (
    BM25_B,
    BM25_K1,
    LOCAL_CHANGES,
    LOCAL_HEAD,
)
from langchain_reflective.backends.postgres.rows import INT8_OID, TEXT_OID, int_from_binary
from langchain_reflective.backends.postgres.sent import receive_row, send_statement
from langchain_reflective.backends.postgres.timeouts import unbounded_transaction
from langchain_reflective.backends.sqlite.ann import maintain_ann
from langchain_reflective.backends.sqlite.candidates import (
    DEFAULT_ANN_CANDIDATES,
    DEFAULT_ANN_NPROBE,
    DEFAULT_EXACT_LIMIT,
    partition_candidates,
)
from langchain_reflective.backends.sqlite.lexical import BM25Index
from langchain_reflective.backends.sqlite.partition import Partition
from langchain_reflective.backends.types import F32, CandidateSet, RetrievalFilter
from langchain_reflective.records import MemoryRecord
from langchain_reflective.scoring import ScoringConfig

__all__ = ["LocalIndex"]

logger = logging.getLogger(__name__)

I64 = npt.NDArray[np.int64]

EXACT_LIMIT = 2_048
"""Namespaces with more live memories get an IVF index and the approximate candidate path.
Lower than the SQLite backend's default (20,000): measured beside the exact path on the scale
data at 3k, 6k and 10k memories (docs/benchmarks.md), the approximate path retrieved in
1.1-1.3 ms against 1.3-2.1 ms, its top 10 agreeing with exact scoring at 0.996-0.999. The
index of a namespace that grows past it is trained on a worker thread at any size (0.2-0.4 s
at 2k-8k memories; the SQLite backend trains small ones inline), so a retrieval never waits
for it: it scores exactly, or on the index before, until the new one is installed. (The load
builds it as the SQLite backend does, and waits.)"""
FILTERED_EXACT_LIMIT = DEFAULT_EXACT_LIMIT
"""A filtered retrieval whose filter matches at most this many memories is scored exactly, as
in the SQLite backend. Lowering it to :data:`EXACT_LIMIT` would trade exactness for ~0.3-0.7
ms on such filters (lab figures in docs/benchmarks.md, "Filtered retrievals on the approximate
path"); it was left where users may rely on it."""
_CHANGES_TYPES = (TEXT_OID, INT8_OID, INT8_OID)
"""The types of ``LOCAL_CHANGES``' parameters: the namespace, the touch clock and the removal
count applied."""
RECORDS_KEPT = 10_000
"""Records a namespace held keeps for touches answered in memory (``touches.py``): ~1 KB
each, so ~10 MB per namespace at most."""
RETRY_AFTER = 60.0
"""Seconds before a namespace found too large to load, or whose load failed, is tried again
(its retrievals are answered by the server meanwhile)."""


@dataclass(slots=True, eq=False)
class _Replica:
    """One namespace held in memory, and how far it has caught up with the server."""

    part: Partition
    lexical: BM25Index
    newest: int
    """The newest key it holds (every memory with a key up to it is in, or removed)."""
    removals: int
    """The namespace's removal count it has applied."""
    touches: int
    """The namespace's touch clock it has applied."""
    quiet: bool = True
    """Whether its last catch-up found nothing to apply: only then is the next ranking done
    while the catch-up statement runs (where other processes keep writing, it would be done
    again after applying their writes, each time)."""
    records: OrderedDict[int, MemoryRecord] = field(default_factory=OrderedDict)
    """The records of memories this process touched lately, by key (a memory's content never
    changes under its key), least recently returned first; at most :data:`RECORDS_KEPT`."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    used: float = 0.0
    """When it last served a retrieval (``time.monotonic``), for dropping the least used."""
    dropped: bool = False


@dataclass(frozen=True, slots=True)
class _Head:
    newest: int
    removals: int
    live: int
    touches: int

    @classmethod
    def of(cls, row: Any) -> _Head:
        return cls(*(0 if v is None else int(v) for v in row[:4]))


class LocalIndex:
    """The namespaces this process retrieves from, in memory (see the module docstring).

    Args:
        pools: the backend's connection pools.
        dimension: returns the database's vector dimension (``None`` before the first write).
        max_memories: most live memories held across namespaces.
        wait: load a namespace on its first retrieval and answer it locally, instead of
            answering from the server while a background thread loads it.
    """

    def __init__(
        self,
        pools: Pools,
        dimension: Callable[[], int | None],
        *,
        max_memories: int,
        wait: bool = False,
    ) -> None:
        if max_memories < 1:
            raise ValueError(f"local_index_max_memories must be positive, got {max_memories!r}")
        self._pools = pools
        self._dimension = dimension
        self.max_memories = int(max_memories)
        self.wait = wait
        self._lock = threading.Lock()
        self._replicas: dict[str, _Replica] = {}
        self._loading: dict[str, Future[None]] = {}
        self._not_before: dict[str, float] = {}
        """Namespaces not to load again before a time (too large, or their load failed)."""
        self._terms = "lex"
        self._closed = False
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="langchain-reflective-local")

    # -- the backend's calls -----------------------------------------------------------------

    def configure(self, lexical_context: bool) -> None:
        """Index BM25 over the terms with the previous observation's (``ctx``) or without."""
        terms = "ctx" if lexical_context else "lex"
        with self._lock:
            if terms != self._terms:
                self._terms = terms
                self._drop_all()

    def candidates(
        self,
        namespace: str,
        query: str,
        vector: F32,
        *,
        k: int,
        filter: RetrievalFilter,
        config: ScoringConfig,
        exact: bool,
    ) -> CandidateSet | None:
        """The candidate set, gathered in memory after catching up with the server; ``None``
        while the namespace is not loaded (it is being loaded, or is too large): ask the
        server."""
        rep = self._replica(namespace)
        if rep is None:
            return None
        with rep.lock:
            if rep.dropped:
                return None

            def rank() -> CandidateSet:
                part = rep.part
                if part.live == 0:
                    return CandidateSet.empty()
                maintain_ann(part, EXACT_LIMIT, background_min=0)
                return partition_candidates(
                    part,
                    rep.lexical,
                    query,
                    vector,
                    k=k,
                    filter=filter,
                    config=config,
                    exact=exact,
                    exact_limit=FILTERED_EXACT_LIMIT,
                    ann_candidates=DEFAULT_ANN_CANDIDATES,
                    ann_nprobe=DEFAULT_ANN_NPROBE,
                )

            try:
                found = self._catch_up(rep, rank)
            except ConnectionLostError:
                with self._lock:  # it may be half applied: load the namespace again
                    self._drop(namespace)
                return None  # the server's statement answers (and retries a lost connection)
            except BaseException:
                with self._lock:  # it may be half applied: load the namespace again
                    self._drop(namespace)
                raise
            if found is not None:
                rep.used = time.monotonic()
            return found

    def own_touch(self, namespace: str, clock: int, records: dict[int, MemoryRecord]) -> None:
        """Keep the records of a touch this process just made (the namespace's touch clock
        ``clock``; the records it stamped, by key), for :meth:`held`, and apply the touch to
        the namespace held when that has applied every touch before it: the next catch-up
        then finds nothing new, and the ranking done while it ran stands. Otherwise (another
        process touched in between) the next catch-up reads the touch back from the server.
        Nothing is done while the namespace is busy or not held: this never waits."""
        with self._idle(namespace) as rep:
            if rep is None:
                return
            kept = rep.records
            for seq, record in records.items():
                kept[seq] = _private(record, record.last_accessed_at)
                kept.move_to_end(seq)
            while len(kept) > RECORDS_KEPT:
                kept.popitem(last=False)
            if rep.touches != clock - 1:
                return
            # each as the server's date_part('epoch', ...): the microseconds over 10**6, rounded
            accessed = {
                seq: r.last_accessed_at.timestamp()
                for seq, r in records.items()
                if r.last_accessed_at is not None
            }
            seqs = np.fromiter(accessed, dtype=np.int64, count=len(accessed))
            stamps = np.fromiter(accessed.values(), dtype=np.float64, count=len(accessed))
            rows, known = _rows_of(rep.part, seqs)
            if rows.shape[0]:
                rep.part.set_accessed(rows, stamps[known])
            rep.touches = clock

    def own_clock(self, namespace: str, clock: int, stamps: dict[int, datetime]) -> None:
        """Count a touch of this process that :meth:`held` applied already (the namespace's
        touch clock ``clock``; the access times it wrote, by key), when it directly follows
        the touches applied: the next catch-up then does not read it back. Its access times
        are applied again, as the server now has them: a catch-up may have applied another
        process's touch of the same memories in between, which committed before this one and
        so was overwritten on the server. Never waits."""
        with self._idle(namespace) as rep:
            if rep is None or rep.touches != clock - 1:
                return
            if stamps:
                seqs = np.fromiter(stamps, dtype=np.int64, count=len(stamps))
                at = np.fromiter(
                    (w.timestamp() for w in stamps.values()), dtype=np.float64, count=len(stamps)
                )
                rows, known = _rows_of(rep.part, seqs)
                if rows.shape[0]:
                    rep.part.set_accessed(rows, at[known])
            rep.touches = clock

    def held(
        self, namespace: str, keys: Sequence[int], when: datetime
    ) -> dict[int, MemoryRecord] | None:
        """Touch ``keys`` in memory: their records with ``last_accessed_at = when``, the new
        access time applied to the namespace held (as the server will have it, to the bit); or
        ``None`` (nothing done) unless the namespace is held, not busy (this never waits) and
        keeps every one of these records, and ``when`` is aware (a naive one means the
        server's time zone, which this process does not know). The caller writes the touch to
        the server."""
        if when.tzinfo is None:
            return None
        with self._idle(namespace) as rep:
            if rep is None:
                return None
            kept = rep.records
            if not all(k in kept for k in keys):
                return None
            seqs = np.asarray(keys, dtype=np.int64)
            rows, _ = _rows_of(rep.part, seqs)
            if rows.shape[0] != seqs.shape[0]:  # (a key removed since: the server answers)
                return None
            stamp = when.timestamp()  # as the server's date_part('epoch', ...) of ``when``
            rep.part.set_accessed(rows, stamp)
            found = {}
            for k in keys:
                kept.move_to_end(k)
                found[k] = _private(kept[k], when)
            return found

    @contextmanager
    def _idle(self, namespace: str) -> Iterator[_Replica | None]:
        """The namespace held, locked for the block; ``None`` when it is not held, dropped or
        busy: this never waits (an event loop may be calling)."""
        with self._lock:
            rep = self._replicas.get(namespace)
        if rep is None or not rep.lock.acquire(blocking=False):
            yield None
            return
        try:
            yield None if rep.dropped else rep
        finally:
            rep.lock.release()

    def forget(self, namespace: str) -> None:
        """Drop ``namespace`` (it is loaded again at its next retrieval): what it holds may no
        longer be the server's (a touch applied here could not be written)."""
        with self._lock:
            self._drop(namespace)

    def load(self, namespace: str) -> bool:
        """Load ``namespace`` now, in this thread (unless it is loaded); whether it is held."""
        with self._lock:
            if namespace in self._replicas:
                return True
        self._load(namespace)
        with self._lock:
            return namespace in self._replicas

    def loaded(self) -> dict[str, int]:
        """The namespaces held, with their live memories."""
        with self._lock:
            return {ns: rep.part.live for ns, rep in self._replicas.items()}

    def close(self) -> None:
        """Stop loading and drop every namespace. Idempotent."""
        with self._lock:
            self._closed = True
            self._drop_all()
        self._loader.shutdown(wait=True, cancel_futures=True)

    # -- loading -----------------------------------------------------------------------------

    def _replica(self, namespace: str) -> _Replica | None:
        """The loaded namespace, or ``None`` (and a load started, unless it is too large)."""
        with self._lock:
            rep = self._replicas.get(namespace)
            if rep is not None or self._closed:
                return rep
            if time.monotonic() < self._not_before.get(namespace, 0.0):
                return None
            future = self._loading.get(namespace)
            mine = future is None
            if future is None:  # one load at a time per namespace, the others wait for it
                future = Future() if self.wait else self._loader.submit(self._load, namespace)
                self._loading[namespace] = future
        if not self.wait:
            if mine:  # (outside the lock: a load done already calls back at once)
                future.add_done_callback(lambda f: self._loaded(namespace, f))
            return None
        if mine:  # load in this thread; a failure is the server's to answer, as in the background
            try:
                self._load(namespace)
                future.set_result(None)
            except BaseException as exc:
                future.set_exception(exc)  # (the threads waiting for it must wake)
                if not isinstance(exc, Exception):
                    self._loaded(namespace, future)
                    raise
            self._loaded(namespace, future)
        else:
            wait_for([future])
        with self._lock:
            return self._replicas.get(namespace)

    def _loaded(self, namespace: str, future: Future[None]) -> None:
        failed = not future.cancelled() and future.exception() is not None
        with self._lock:
            self._loading.pop(namespace, None)
            if failed:
                self._not_before[namespace] = time.monotonic() + RETRY_AFTER
        if failed:
            logger.warning(
                "loading namespace %r into the local index failed; its retrievals are "
                "answered by the server, and the load is tried again in %.0f s: %r",
                namespace,
                RETRY_AFTER,
                future.exception(),
            )

    def _load(self, namespace: str) -> None:
        """Read the namespace in one snapshot and hold it (unless it is too large)."""
        dim = self._dimension()
        if dim is None:
            return  # nothing written yet: nothing to hold (the server answers: no memories)
        with self._pools.conn() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            unbounded_transaction(conn)  # (idle in it between chunks; 1M memories take ~20 s)
            head = _Head.of(conn.execute(LOCAL_HEAD, {"ns": namespace}, binary=True).fetchone())
            if head.live > self.max_memories:
                with self._lock:
                    self._not_before[namespace] = time.monotonic() + RETRY_AFTER
                logger.info(
                    "namespace %r holds %d memories, more than local_index_max_memories (%d): "
                    "its retrievals are answered by the server",
                    namespace,
                    head.live,
                    self.max_memories,
                )
                return
            part = Partition(namespace, dim, 0)
            # room to grow by an eighth before the matrix is first copied into a larger one
            # (0.7 s at 100k memories, at the first catch-up after the load)
            part.reserve(head.live + head.live // 8 + 1024)
            terms = self._terms
            # with the context, deletes say whose documents change (local_docs.py)
            part.lexical_context = terms == "ctx"
            lexical = (DocumentIndex if part.lexical_context else BM25Index)(k1=BM25_K1, b=BM25_B)
            part.lexical = lexical  # deletes reach it through the partition
            newest = _read_rows(conn, part, namespace, 0, terms, lambda: self._closed)
        if self._closed:
            return
        maintain_ann(part, EXACT_LIMIT)  # its IVF index: built (a large one started, then
        maintain_ann(part, EXACT_LIMIT, wait=True)  # waited for: no exact scans meanwhile)
        rep = _Replica(part, lexical, max(newest, head.newest), head.removals, head.touches)
        rep.used = time.monotonic()
        with self._lock:
            if self._closed or terms != self._terms or namespace in self._replicas:
                return
            self._not_before.pop(namespace, None)
            self._replicas[namespace] = rep
            self._evict(keep=namespace)

    def _evict(self, keep: str) -> None:
        """Drop the least recently used namespaces until the rest fit ``max_memories``."""
        total = sum(rep.part.live for rep in self._replicas.values())
        for ns, rep in sorted(self._replicas.items(), key=lambda item: item[1].used):
            if total <= self.max_memories:
                break
            if ns != keep:
                total -= rep.part.live
                self._drop(ns)

    def _drop(self, namespace: str) -> None:
        rep = self._replicas.pop(namespace, None)
        if rep is not None:
            rep.dropped = True  # a retrieval holding it asks the server instead

    def _drop_all(self) -> None:
        for ns in list(self._replicas):
            self._drop(ns)

    # -- catching up ---------------------------------------------------------------------------

    def _catch_up(self, rep: _Replica, rank: Callable[[], CandidateSet]) -> CandidateSet | None:
        """Rank on ``rep`` while the server says what changed in its namespace since it last
        looked (the caller holds its lock): the ranking if nothing did; else apply the changes
        and rank again. ``None`` if they cannot be applied (the namespace is dropped, to be
        loaded again). After a catch-up that applied changes, the next one waits for the
        server's answer before it ranks (``_Replica.quiet``): a namespace others keep writing
        would be ranked twice per retrieval.

        The catch-up statement is sent first and its row read after the ranking (``sent.py``),
        so its round trip is spent while the ranking runs. It is a read: on a connection lost
        under it, ``Pools.retrying`` sends it again on a fresh one (the ranking is kept)."""
        params = [
            rep.part.namespace.encode(),
            str(rep.touches).encode(),
            str(rep.removals).encode(),
        ]
        ranked: list[CandidateSet] = []
        speculate = rep.quiet

        def ask(conn: Any) -> list[bytes | None] | None:
            send_statement(conn, LOCAL_CHANGES, params, _CHANGES_TYPES)
            try:
                if speculate and not ranked:
                    ranked.append(rank())
            finally:  # (the row is read even if the ranking failed: the connection stays usable)
                row = receive_row(conn)
            return row

        packed = self._pools.retrying(ask)
        assert packed is not None  # (one row, always)
        touched, stamps = packed[4], packed[5]
        row = [int_from_binary(v) for v in packed[:4]] + packed[4:]
        head = _Head.of(row)
        rep.quiet = (
            head.newest <= rep.newest
            and head.removals <= rep.removals
            and (touched is None or _applied(rep.part, touched, stamps or b""))
        )
        if rep.quiet:
            rep.touches = max(rep.touches, head.touches)  # (nothing to apply)
            return ranked[0] if ranked else rank()
        if not self._apply(rep, head, row):
            return None
        return rank()

    def _apply(self, rep: _Replica, head: _Head, row: list[Any]) -> bool:
        """Apply the changes of a catch-up row to ``rep`` (the caller holds its lock);
        ``False`` if they cannot be (the namespace is dropped, to be loaded again)."""
        part = rep.part
        if head.removals > rep.removals and not self._remove(rep, head, row[6], row[7]):
            return False
        if row[4] is not None:  # touched since: their access times (for recency)
            seqs = np.frombuffer(row[4], dtype=">i8").astype(np.int64)
            stamps = np.frombuffer(row[5], dtype=">f8").astype(np.float64)
            rows, known = _rows_of(part, seqs)
            if rows.shape[0]:
                part.set_accessed(rows, stamps[known])
        rep.touches = max(rep.touches, head.touches)
        if head.newest > rep.newest:
            with self._pools.conn() as conn:
                rep.newest = max(
                    head.newest,
                    _read_rows(conn, part, part.namespace, rep.newest, self._terms, _never),
                )
            with self._lock:  # grown: still within max_memories?
                if part.live > self.max_memories:
                    self._drop(part.namespace)
                    self._not_before[part.namespace] = time.monotonic() + RETRY_AFTER
                    return False
                self._evict(keep=part.namespace)
        return True

    def _remove(self, rep: _Replica, head: _Head, removal: bytes | None, keys: bytes) -> bool:
        """Apply removals after ``rep.removals``; ``False`` when they cannot be (a purge, or
        removals the server no longer lists): the namespace is dropped to be loaded again."""
        numbers = np.frombuffer(removal or b"", dtype=">i8")
        seqs = np.frombuffer(keys or b"", dtype=">i8").astype(np.int64)
        part = rep.part
        if not numbers.shape[0] or int(numbers.min()) > rep.removals + 1 or (seqs == 0).any():
            with self._lock:
                self._drop(part.namespace)
            return False
        rows, _ = _rows_of(part, seqs)
        if rows.shape[0]:
            _, moved = part.delete_rows(rows)
            if moved.shape[0]:  # the server rewrote the documents of the observations after
                after = moved[:, 0]  # removed ones (queries.RECONTEXT): read them
                assert isinstance(rep.lexical, DocumentIndex)
                with self._pools.conn() as conn:
                    done = read_documents(conn, rep.lexical, after, part.seqs.view[after])
                if not done:  # not the document it held: load the namespace again
                    with self._lock:
                        self._drop(part.namespace)
                    return False
        for seq in seqs.tolist():
            rep.records.pop(seq, None)
        rep.removals = head.removals
        if part.index.n_deleted * 2 > len(part) and len(part) > 1024:
            with self._lock:  # mostly tombstones: load it again, compact
                self._drop(part.namespace)
        return True
