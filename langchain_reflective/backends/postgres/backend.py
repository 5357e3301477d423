"""``PostgresBackend``: memories in Postgres with pgvector and BM25 computed in SQL.

Many processes and machines share one database: every write is one transaction; a write that
counts for reflection locks its namespace's counter row first and updates it before committing,
so the counter is exact under concurrency and such writes take their keys in commit order (the
memories "since the last reflection" are exactly the counted ones); and a namespace's
reflection lock is a Postgres advisory lock keyed by ``(APP_LOCK, hashtext(namespace))`` held
on a dedicated connection, so at most one reflection per namespace runs at a time across all
of them (a crashed holder's lock goes with its connection). Every statement names its
namespace; none reads across namespaces.

Retrieval is one round trip (``candidates.py``): one statement gathers the dense, lexical,
recent and important candidates, their neighbours and every value scoring needs (``queries.py``;
BM25 in SQL exactly as the SQLite backend computes it, so both rank alike). With
``local_index=True`` a process keeps the namespaces it retrieves from in memory and gathers
them there instead, caught up with the server before every retrieval (``local_index.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from langchain_reflective.backends.base import (
    BaseMemoryBackend,
    CandidateSet,
    CounterUpdate,
    PendingMemory,
    RecordBatch,
    ReflectionState,
    RetrievalFilter,
)
from langchain_reflective.backends.postgres.candidates import CandidateSource
from langchain_reflective.backends.postgres.connection import Pools, open_pool
from langchain_reflective.backends.postgres.conninfo import check_connection, with_keepalives
from langchain_reflective.backends.postgres.identity import VectorIdentity
from langchain_reflective.backends.postgres.local_index import LocalIndex
from langchain_reflective.backends.postgres.opening import opened_in_thread
from langchain_reflective.backends.postgres.pool_settings import sync_pool_settings
from langchain_reflective.backends.postgres.queries import (
    RECORD_COLUMNS,
    RECORDS,
    pending_sql,
    recent_sql,
)
from langchain_reflective.backends.postgres.rows import (
    pending_of,
    record_of,
    vectors_from_binary,
)
from langchain_reflective.backends.postgres.schema import APP_LOCK, migrate
from langchain_reflective.backends.postgres.touches import Touches
from langchain_reflective.backends.postgres.unclosed import finalizer, held_weakly
from langchain_reflective.backends.postgres.vector_index import (
    IndexKind,
    IndexState,
    VectorIndex,
    VectorIndexSettings,
)
from langchain_reflective.backends.postgres.writes import (
    Replacement,
    apply_counter,
    delete_memories,
    enqueue,
    ids_note,
    purge_memories,
    queued_outcome,
    stored_outcome,
    write_batch,
)
from langchain_reflective.backends.types import F32
from langchain_reflective.errors import StorageError
from langchain_reflective.records import MemoryRecord
from langchain_reflective.scoring import ScoringConfig

__all__ = ["PostgresBackend"]

logger = logging.getLogger(__name__)


class PostgresBackend(BaseMemoryBackend):
    """Memories in a Postgres database with pgvector, shared by many processes and machines.

    Build one with :meth:`from_conn_string`; call :meth:`setup` once per database (it is
    idempotent and safe to call from every process at start-up). In async code (a FastAPI
    lifespan, a LangGraph server) their twins :meth:`afrom_conn_string` and :meth:`asetup`
    never block the event loop.

    Args:
        pool: a ``psycopg_pool.ConnectionPool`` of your own (else use
            :meth:`from_conn_string`), built with ``kwargs={"autocommit": True}`` and
            ``configure=configure_connection`` (from
            ``langchain_reflective.backends.postgres.connection``: the session settings the
            statements rely on). It is used as it is: after an outage it is not replaced, as
            the backend's own pools are, but reconnects by itself after a backoff that only its
            ``reconnect_timeout`` bounds (300 s by default), so give it a short one (e.g. 10
            s). :meth:`close` closes it; a backend freed unclosed leaves it open (it is yours).
            The async pools copy its size and settings.
        conninfo: the connection string, for the async pools (one per event loop, opened on
            first use) and to ask the server directly why no connection comes.
        dense_candidates: nearest neighbours (vector index) gathered per retrieval on the
            approximate path (at least ``4 * k``). The default, 320, is what keeps the top 10
            within 0.98 of exact hybrid scoring at 100k memories (128: 0.96, 256: 0.98 at the
            edge; each doubling costs ~3-4 ms there; docs/benchmarks.md). How many are
            needed grows with how many memories crowd the query's nearest cosines, where
            recency and importance decide, so past 250,000 memories a namespace gathers
            ``dense_candidates * sqrt(memories / 250,000)`` (640 at 1M: agreement 0.835 ->
            0.987 in the benchmark's data, for ~12% more time; ``queries.DENSE_DEPTH_FROM``).
        lexical_candidates: best full-text matches gathered per retrieval (at least ``4 * k``).
        index: the vector index a new database gets: ``"ivfflat"`` (default: cheap inserts,
            retrained as the table grows) or ``"hnsw"`` (no retraining; every insert pays
            ~2-3 ms for the graph). A database keeps the kind it was bound with;
            :meth:`reindex` switches it. See ``vector_index.py`` and docs/benchmarks.md.
        ivf_min_rows: IVFFlat: no vector index below this many memories (exact scan).
        ivf_growth: IVFFlat: retrain once the table has grown this many times since the last
            training.
        ivf_probes: IVFFlat lists searched per query (``None``: ``sqrt(lists)``, at least 8).
        auto_reindex: rebuild the IVFFlat index in a background thread of the process whose
            add crossed the threshold (``False``: only :meth:`reindex` builds it).
        local_index: gather candidates in this process from the namespace held in memory
            (2-7 ms at 10k-1M memories here, not 16-130), caught up with every process's
            writes by one statement per retrieval; ~2 KB a memory in every process, loaded in
            the background at a namespace's first retrieval (:meth:`preload`: now). See
            ``local_index.py``.
        local_index_max_memories: most memories the local index holds; the least recently
            used namespaces are dropped beyond it, and a larger namespace is never loaded.
        local_index_wait: load a namespace on its first retrieval in the retrieving thread
            instead of in the background.

    Example:
        .. code-block:: python

            from langchain_reflective import MemoryStream, PostgresBackend

            backend = PostgresBackend.from_conn_string("postgresql://user:pw@db/memories")
            backend.setup()
            stream = MemoryStream(embeddings, backend=backend)
    """

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        conninfo: str | None = None,
        dense_candidates: int = 320,
        lexical_candidates: int = 128,
        index: IndexKind = "ivfflat",
        ivf_min_rows: int = 5_000,
        ivf_growth: float = 4.0,
        ivf_probes: int | None = None,
        auto_reindex: bool = True,
        local_index: bool = False,
        local_index_max_memories: int = 2_000_000,
        local_index_wait: bool = False,
    ) -> None:
        if dense_candidates < 1 or lexical_candidates < 1:
            raise ValueError("dense_candidates and lexical_candidates must be positive")
        settings = VectorIndexSettings(
            kind=index,
            min_rows=ivf_min_rows,
            growth=ivf_growth,
            probes=ivf_probes,
            auto=auto_reindex,
        )
        self._pools = Pools(pool, conninfo)
        self._index = VectorIndex(self._pools, settings)
        local = None
        if local_index:
            local = LocalIndex(
                self._pools,
                held_weakly(self, lambda backend: backend.dimension),
                max_memories=local_index_max_memories,
                wait=local_index_wait,
            )
        self._touches = Touches(self._pools, local)
        self._candidates = CandidateSource(
            self._pools,
            self._index,
            dense=int(dense_candidates),
            lexical=int(lexical_candidates),
            local=local,
        )
        self._identity = VectorIdentity(self._pools, self._index.bind)
        stops = [self._touches.close, self._index.close, *([local.close] if local else [])]
        self._unclosed = finalizer(self, self._pools, stops)  # (freed unclosed: closes them)

    @classmethod
    def from_conn_string(
        cls,
        conninfo: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 30.0,
        pool_kwargs: Mapping[str, float] | None = None,
        **kwargs: Any,
    ) -> PostgresBackend:
        """A backend over a new connection pool to ``conninfo`` (a libpq URL or DSN).

        Args:
            conninfo: e.g. ``"postgresql://user:password@host:5432/dbname"``. The connections
                get TCP keepalives unless it sets ``keepalives*`` itself or names a service
                (probed after 30 s of silence, then every 10 s, dropped after 3 unanswered
                probes: a host that stops answering fails a call within about a minute, while a
                live server's long statements are never cut; ``conninfo.KEEPALIVES``).
            min_size: connections the pool keeps open (each event loop's async pool keeps one).
            max_size: most connections the pool opens (per process, and per event loop for the
                async ones; a held reflection lock uses one, so at least 2).
            timeout: seconds a call waits for a pooled connection (psycopg_pool's ``timeout``,
                for the sync pool and each async one), e.g. while all are at work, before it
                fails with a :class:`StorageError`. A call given none within 3 s (at most
                ``timeout``) asks the server directly, and fails at once with the server's
                reason if it is down (that attempt takes up to ``connect_timeout`` from
                ``conninfo``, or 10 s).
            pool_kwargs: more psycopg_pool settings, for the sync pool and each async one:
                ``max_lifetime`` (seconds, 3600 by default: an older connection is replaced,
                e.g. to spread them again over the servers behind a load balancer),
                ``max_idle``, ``reconnect_timeout`` (seconds), ``max_waiting``, ``num_workers``.
            **kwargs: passed to :class:`PostgresBackend`.

        Raises:
            ValueError: ``max_size`` below 2 or below ``min_size``; ``timeout`` not a positive
                number; ``pool_kwargs`` sets anything else, or a value the setting does not
                take.
            StorageError: the server cannot be reached or refuses the connection (checked
                once, here, with the server's reason: a wrong URL fails at once rather than
                at the first use).
        """
        settings = sync_pool_settings(
            min_size=min_size, max_size=max_size, timeout=timeout, pool_kwargs=pool_kwargs
        )
        check_connection(conninfo)
        conninfo = with_keepalives(conninfo)
        new_pool = functools.partial(open_pool, conninfo, settings)
        pool = new_pool()
        try:
            backend = cls(pool, conninfo=conninfo, **kwargs)
        except BaseException:
            pool.close()  # a refused argument leaves no pool (and its threads) behind
            raise
        backend._pools.new_pool = new_pool  # (replaced by a fresh one after an outage)
        return backend

    @classmethod
    async def afrom_conn_string(
        cls,
        conninfo: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 30.0,
        pool_kwargs: Mapping[str, float] | None = None,
        **kwargs: Any,
    ) -> PostgresBackend:
        """Async twin of :meth:`from_conn_string`: the connection check and the pool's
        opening run in a worker thread, so the event loop keeps running while a server that
        does not answer is waited for (up to the connect timeout). Same arguments and errors;
        a caller cancelled meanwhile leaves no open pool behind (``opening.py``)."""
        return await opened_in_thread(
            functools.partial(
                cls.from_conn_string,
                conninfo,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                pool_kwargs=pool_kwargs,
                **kwargs,
            )
        )

    # -- schema --------------------------------------------------------------------------------

    def setup(self) -> None:
        """Create or upgrade the tables (forward-only migrations). Idempotent.

        Safe to call from several processes at once: migrations run under a transaction-level
        advisory lock, each exactly once.

        Raises:
            SchemaVersionError: the database was set up by a newer version of this package.
        """
        with self._pools.conn() as conn, conn.transaction():
            migrate(conn)

    async def asetup(self) -> None:
        """Async twin of :meth:`setup` (runs in a worker thread; cancelled, a migration
        still runs to its end there, in its transaction)."""
        await asyncio.to_thread(self.setup)

    def schema_version(self) -> int:
        """The database's schema version (0 before :meth:`setup`)."""
        return self._identity.schema_version()

    async def aschema_version(self) -> int:
        """Async twin of :meth:`schema_version` (runs in a worker thread)."""
        return await asyncio.to_thread(self.schema_version)

    # -- identity of the vectors (``identity.py``) ---------------------------------------------

    @property
    def dimension(self) -> int | None:
        self._identity.load()
        return self._identity.dimension

    @property
    def embedding_model(self) -> str | None:
        self._identity.load()
        return self._identity.model

    def bind_embeddings(self, model: str, dimension: int) -> None:
        self._pools.check_process()
        self._identity.bind(model, dimension)

    def configure(self, scoring: ScoringConfig) -> None:
        self._candidates.configure(bool(scoring.lexical_context))

    # -- writes --------------------------------------------------------------------------------

    def put(
        self,
        records: Sequence[MemoryRecord],
        vectors: F32,
        *,
        counter: CounterUpdate | None = None,
        pending: Sequence[str] = (),
    ) -> None:
        """Store memories in one transaction (binary ``COPY``, see ``writes``), with the
        counter change."""
        if len(records) != len(vectors):
            raise StorageError(f"{len(records)} records but {len(vectors)} vectors")

        def write(conn: psycopg.Connection[Any]) -> int:
            return write_batch(conn, records, vectors, counter, pending, self._vector_oid(conn))

        # a lost connection: the records tell whether it committed (a counter change alone
        # cannot tell: it fails)
        outcome = (lambda conn: stored_outcome(conn, records)) if records else None
        self._after_write(self._pools.writing(write, outcome, note=ids_note(records)))

    def replace(
        self,
        namespace: str,
        ids: Sequence[str],
        records: Sequence[MemoryRecord],
        vectors: F32,
        *,
        counter: CounterUpdate | None = None,
    ) -> int:
        """Delete and store in one transaction (see :meth:`BaseMemoryBackend.replace`)."""
        if len(records) != len(vectors):
            raise StorageError(f"{len(records)} records but {len(vectors)} vectors")
        run = Replacement(namespace, ids, records, vectors, counter, self._vector_oid)
        deleted, newest = self._pools.writing(run.write, run.outcome, note=ids_note(records))
        self._after_write(newest)
        return deleted

    def _after_write(self, newest: int) -> None:
        if newest:
            # keys are never reused: the newest is the rows ever written (an upper bound)
            self._index.after_put(newest)

    def _vector_oid(self, conn: psycopg.Connection[Any]) -> int:
        """The oid of pgvector's ``vector`` type in this database (read once)."""
        return self._identity.vector_oid(conn)

    def delete(self, namespace: str, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        with self._pools.conn() as conn, conn.transaction():
            return len(delete_memories(conn, namespace, ids))

    def purge(self, namespace: str) -> int:
        with self._pools.conn() as conn, conn.transaction():
            return purge_memories(conn, namespace)

    def touch(self, namespace: str, keys: Sequence[int], when: datetime) -> dict[int, MemoryRecord]:
        """One ``UPDATE ... RETURNING`` (one round trip): the new access time and the records;
        with the local index, records it keeps are returned at once and the statement is
        written after (``touches.py``: a memory another process deleted since the retrieval's
        catch-up may then be among them).

        Committed asynchronously (``synchronous_commit = off`` for this transaction only): a
        retrieval does not wait for the server to flush the access times to disk (~20 ms with
        fsync on). Access times are a recency signal, not data: a server crash can lose the
        last fraction of a second of them (never corrupt them); every memory write still waits
        for its flush, and flushing it flushes the touches before it.
        """
        self._pools.check_process()
        return self._touches.touch(namespace, keys, when)

    async def atouch(
        self, namespace: str, keys: Sequence[int], when: datetime
    ) -> dict[int, MemoryRecord]:
        self._pools.check_process()
        return await self._touches.atouch(namespace, keys, when)

    # -- the pending queue ---------------------------------------------------------------------

    def enqueue(self, items: Sequence[PendingMemory]) -> None:
        if not items:
            return

        def write(conn: psycopg.Connection[Any]) -> bool:
            enqueue(conn, items)
            return True

        self._pools.writing(write, lambda conn: queued_outcome(conn, items), note=ids_note(items))

    def pending(
        self, *, namespace: str | None = None, limit: int | None = None, newest: bool = False
    ) -> list[PendingMemory]:
        sql, params = pending_sql(namespace, limit=limit, newest=newest)
        rows = self._pools.rows(sql, params)
        if newest:
            rows.reverse()
        return [pending_of(r) for r in rows]

    def count_pending(self, namespace: str | None = None) -> int:
        if namespace is None:
            return int(self._pools.rows("SELECT count(*) FROM reflective_pending")[0][0])
        return int(
            self._pools.rows(
                "SELECT count(*) FROM reflective_pending WHERE namespace = %s", (namespace,)
            )[0][0]
        )

    def discard_pending(self, namespace: str, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        with self._pools.conn() as conn, conn.transaction():
            cur = conn.execute(
                "DELETE FROM reflective_pending WHERE namespace = %s AND id = ANY(%s)",
                (namespace, list(dict.fromkeys(ids))),
            )
            return cur.rowcount

    # -- reads ---------------------------------------------------------------------------------

    def get(self, namespace: str, ids: Sequence[str]) -> list[MemoryRecord]:
        if not ids:
            return []
        self._touches.settle()  # (this process reads its own touches)
        rows = self._pools.rows(
            f"SELECT {RECORD_COLUMNS} FROM {RECORDS} WHERE m.namespace = %s AND m.id = ANY(%s)",
            (namespace, list(ids)),
        )
        by_id = {rec.id: rec for _, rec in map(record_of, rows)}
        return [by_id[i] for i in ids if i in by_id]

    def fetch(self, namespace: str, keys: Sequence[int]) -> dict[int, MemoryRecord]:
        if not keys:
            return {}
        self._touches.settle()  # (this process reads its own touches)
        rows = self._pools.rows(
            f"SELECT {RECORD_COLUMNS} FROM {RECORDS} WHERE m.namespace = %s AND m.seq = ANY(%s)",
            (namespace, [int(k) for k in keys]),
        )
        return dict(record_of(r) for r in rows)

    def recent(
        self,
        namespace: str,
        *,
        n: int | None = None,
        kinds: Sequence[str] | None = None,
        since_last_reflection: bool = False,
        by_importance: bool = False,
    ) -> list[MemoryRecord]:
        self._touches.settle()
        sql, params = recent_sql(
            namespace,
            n=n,
            kinds=kinds,
            since_last_reflection=since_last_reflection,
            by_importance=by_importance,
        )
        records = [rec for _, rec in map(record_of, self._pools.rows(sql, params))]
        if not by_importance:
            records.reverse()
        return records

    def count(self, namespace: str | None = None) -> int:
        sql = "SELECT count(*) FROM reflective_memories"
        if namespace is None:
            return int(self._pools.rows(sql)[0][0])
        return int(self._pools.rows(sql + " WHERE namespace = %s", (namespace,))[0][0])

    def namespaces(self) -> list[str]:
        # in code point order, as SQLite and Python sort: the database's collation (e.g.
        # en_US.UTF-8, common on servers) would put "alice" before "Bob"
        return [
            r[0]
            for r in self._pools.rows(
                'SELECT DISTINCT namespace COLLATE "C" FROM reflective_memories ORDER BY 1'
            )
        ]

    def iter_records(
        self, namespace: str, *, with_vectors: bool = True, batch_size: int = 1024
    ) -> Iterator[RecordBatch]:
        self._touches.settle()
        after = 0
        vec = ", vector_send(m.embedding)" if with_vectors else ""
        while True:
            rows = self._pools.rows(
                f"SELECT {RECORD_COLUMNS}{vec} FROM {RECORDS} "
                "WHERE m.namespace = %s AND m.seq > %s ORDER BY m.seq LIMIT %s",
                (namespace, after, int(batch_size)),
            )
            if not rows:
                return
            after = int(rows[-1][0])
            records = [record_of(r[:12])[1] for r in rows]
            vectors = None
            if with_vectors:
                dim = self.dimension or 0
                vectors = vectors_from_binary([bytes(r[12]) for r in rows], dim)
            yield RecordBatch(records=records, vectors=vectors)

    # -- the reflection counter and lock -------------------------------------------------------

    def reflection_state(self, namespace: str) -> ReflectionState:
        rows = self._pools.rows(
            "SELECT importance_sum, adds, last_reflection_at, reflection_generation "
            "FROM reflective_counters WHERE namespace = %s",
            (namespace,),
        )
        if not rows:
            return ReflectionState(generation=0)
        imp, adds, last, generation = rows[0]
        return ReflectionState(
            importance_sum=float(imp),
            adds_since=int(adds),
            last_reflection_at=last,
            generation=int(generation),
        )

    def update_counter(self, update: CounterUpdate) -> None:
        with self._pools.conn() as conn, conn.transaction():
            apply_counter(conn, update)

    @contextlib.contextmanager
    def reflection_lock(self, namespace: str, *, timeout: float | None = None) -> Iterator[None]:
        """Hold ``namespace``'s reflection lock: a session advisory lock on a dedicated
        pooled connection, keyed ``(APP_LOCK, hashtext(namespace))``.

        Two namespaces whose hashes collide merely take turns. A process that dies while
        holding the lock loses its connection, and the server releases the lock with it.

        Raises:
            TimeoutError: not acquired within ``timeout`` seconds.
        """
        with self._pools.advisory_lock(APP_LOCK, namespace, timeout=timeout):
            yield

    # -- the vector index ----------------------------------------------------------------------

    def reindex(self, *, kind: IndexKind | None = None) -> None:
        """(Re)build the vector index now, in this thread: IVFFlat retrained on the current
        rows (``lists = sqrt(rows)``), or HNSW; ``kind`` switches the database's kind.

        Adds and retrievals in every process carry on meanwhile (``CREATE INDEX
        CONCURRENTLY``, then the old index is dropped). Waits if another process is building.
        """
        self._pools.check_process()
        self._index.rebuild(kind=kind)

    async def areindex(self, *, kind: IndexKind | None = None) -> None:
        """Async twin of :meth:`reindex` (runs in a worker thread)."""
        await asyncio.to_thread(self.reindex, kind=kind)

    def index_state(self) -> IndexState:
        """The database's vector index: kind, name, rows trained on, lists."""
        self._pools.check_process()
        return self._index.state()

    async def aindex_state(self) -> IndexState:
        """Async twin of :meth:`index_state` (runs in a worker thread)."""
        return await asyncio.to_thread(self.index_state)

    def wait_for_index(self, timeout: float | None = None) -> None:
        """Wait for this process's background index rebuild, if one is running."""
        self._pools.check_process()
        self._index.wait(timeout)

    async def await_for_index(self, timeout: float | None = None) -> None:
        """Async twin of :meth:`wait_for_index`: the wait runs in a worker thread (cancelled,
        the caller returns at once; the thread still waits for the build or ``timeout``)."""
        await asyncio.to_thread(self.wait_for_index, timeout)

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
        """From the local index when it holds the namespace, else one statement (one round
        trip; see the module docstring)."""
        return self._candidates.get(
            self.dimension, namespace, query, vector, k=k, filter=filter, config=config, exact=exact
        )

    async def acandidates(
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
        dim = self._identity.dimension
        if dim is None:  # (read from the server once)
            dim = await asyncio.to_thread(lambda: self.dimension)
        return await self._candidates.aget(
            dim, namespace, query, vector, k=k, filter=filter, config=config, exact=exact
        )

    def local_namespaces(self) -> dict[str, int]:
        """The namespaces this process's local index holds, with their live memories (empty
        without a local index)."""
        self._pools.check_process()
        local = self._candidates.local
        return {} if local is None else local.loaded()

    def preload(self, namespace: str) -> bool:
        """Load ``namespace`` into this process's local index now, in this thread (e.g. to
        warm a worker at start-up); whether the index holds it afterwards.

        Raises:
            ValueError: the backend keeps no local index (``local_index=False``).
        """
        self._pools.check_process()
        local = self._candidates.local
        if local is None:
            raise ValueError("this backend keeps no local index: build it with local_index=True")
        return local.load(namespace)

    async def apreload(self, namespace: str) -> bool:
        """Async twin of :meth:`preload`: the load runs in a worker thread."""
        return await asyncio.to_thread(self.preload, namespace)

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pools (cancelling a background index rebuild and dropping the
        local index). Idempotent. In a forked child it only forgets them (the parent's
        connections and threads are left alone; see ``backends/_fork.py``). A backend never
        closed is closed when it is freed, in any thread (not at interpreter exit:
        ``unclosed.py``)."""
        self._unclosed.detach()
        if not self._pools.forked:
            self._close_threads()
        self._pools.close()

    async def aclose(self) -> None:
        """Async twin of :meth:`close`."""
        self._unclosed.detach()
        if not self._pools.forked:
            await asyncio.to_thread(self._close_threads)
        await self._pools.aclose()

    def _close_threads(self) -> None:
        self._touches.close()  # (first: it writes the touches still pending)
        self._index.close()
        if self._candidates.local is not None:
            self._candidates.local.close()

    def __repr__(self) -> str:
        return f"PostgresBackend(pool={self._pools.name!r}, dimension={self._identity.dimension})"
