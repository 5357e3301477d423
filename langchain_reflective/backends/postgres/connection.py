"""Connections of the Postgres backend: the pools, per-connection settings and health checks
(what a failed statement means is ``failures.py``; the connection string, ``conninfo.py``; the
users' timeouts and the package's own long work, ``timeouts.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import set_json_dumps
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout

from langchain_reflective._llm import Flow, Op, run_async, run_sync, threaded
from langchain_reflective.backends._fork import ProcessGuard
from langchain_reflective.backends.postgres import writes
from langchain_reflective.backends.postgres.conninfo import check_connection
from langchain_reflective.backends.postgres.failures import (
    MISSING,
    ConnectionLostError,
    TransactionStillOpenError,
    WriteOutcomeUnknownError,
    storage_error,
    typed_error,
    version_after,
)
from langchain_reflective.backends.postgres.failures import call as _call
from langchain_reflective.backends.postgres.pool_logs import (  # (_QUIET re-exported: moved)
    _QUIET,  # noqa: F401
    outage_over,
    quiet_reconnects,
)
from langchain_reflective.backends.postgres.pool_settings import async_pool_settings
from langchain_reflective.backends.postgres.rows import dump_json
from langchain_reflective.backends.postgres.timeouts import (  # (re-exported: moved from here)
    bound_lock_waits,
    session_setting,
    unbounded,
    unbounded_transaction,
)
from langchain_reflective.errors import StorageError

if TYPE_CHECKING:
    from psycopg.rows import TupleRow

T = TypeVar("T")
logger = logging.getLogger(__name__)

__all__ = [
    "Pools",
    "aconfigure_connection",
    "configure_connection",
    "open_pool",
    "quiet_reconnects",
    "session_setting",
    "unbounded",
    "unbounded_transaction",
]


IDLE_CHECK_SECONDS = 5.0
"""A pooled connection idle for longer is checked (one empty query) before it is handed out,
so one the server closed meanwhile (a restart, a failover, a proxy's idle timeout) is replaced
instead of failing the caller's statement. Connections in steady use skip the check."""
_LAST_USED: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
"""When each pooled connection was opened or last given back (absent: a connection of a pool
the backend did not open, not used yet: checked once)."""


def _idle(conn: Any) -> bool:
    used = _LAST_USED.get(conn)
    return used is None or time.monotonic() - used > IDLE_CHECK_SECONDS


_SETTINGS = (
    # the catch-up and touch statements send their text as UTF-8 bytes (``sent.py``): a
    # connection in another encoding (``client_encoding=LATIN1`` in the URL) read a namespace
    # "café" as "cafÃ©", so the local index never saw other processes' writes
    "SET client_encoding = 'UTF8'",
    "SET TIME ZONE 'UTC'",
    "SET jit = off",
    "SET random_page_cost = 1.1",
    "SET hnsw.ef_search = 200",
)
_IF_SUPPORTED = (  # pgvector >= 0.8: keep scanning the index until the namespace filter is met
    "SET hnsw.iterative_scan = relaxed_order",
    "SET ivfflat.iterative_scan = relaxed_order",
)


def _unlock(conn: psycopg.Connection[Any], key: tuple[int, str]) -> None:
    """Release the session advisory lock ``key`` held on ``conn``. If the connection was lost
    meanwhile (the server restarted or ended the session), the server released the lock with
    it: logged, not raised (the work done under it is done)."""
    try:
        conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", key)
    except psycopg.OperationalError as exc:
        if not conn.closed:
            raise
        logger.warning(
            "the connection holding the lock of %r was lost before its release (%s); the "
            "server released the lock with it, so another process may have taken it meanwhile",
            key[1],
            str(exc).strip(),
        )


def configure_connection(conn: psycopg.Connection[Any]) -> None:
    """Per-connection settings: UTC timestamps, no JIT, and the vector indexes' search breadth
    (the IVFFlat probes follow the current index: ``VectorIndex.prepare``); and on the client
    side, JSON written by ``rows.dump_json`` (metadata's large floats written out in full, so
    ``jsonb`` keeps them floats).

    JIT compilation is off: the backend's statements are short and index-driven, but the
    planner's cost of the candidate statement grows with the table (~17k at 10k memories,
    ~26-39k at 100k) towards ``jit_above_cost`` (100k), past which every retrieval would pay
    tens of milliseconds of compilation.

    ``random_page_cost`` is 1.1 (Postgres' default, 4, models a spinning disk). With 4, once a
    freshly analysed table held only ~1-2k memories, the planner read every row of
    ``reflective_terms`` and tested each against every query term instead of asking the GIN
    index (7 ms instead of 0.1 at 2k memories, a retrieval 15.7 ms instead of 8.5); 1.1, the
    usual setting for SSDs and cached tables, keeps the index. Measured neutral at 3k-100k.
    """
    run_sync(_configure(conn))


async def aconfigure_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """Async twin of :func:`configure_connection`."""
    await run_async(_configure(conn))


def _configure(conn: Any) -> Flow[None]:
    set_json_dumps(dump_json, conn)  # (metadata's floats read back from jsonb as floats)
    for statement in _SETTINGS:
        yield _call(conn, "execute", statement)
    for statement in _IF_SUPPORTED:
        with contextlib.suppress(psycopg.Error):
            yield _call(conn, "execute", statement)
    _LAST_USED[conn] = time.monotonic()  # (just opened: no check before its first use)
    outage_over()  # (a connection opened: a later outage warns again)


def _checkout(pool: Any, timeout: float | None = None) -> Flow[Any]:
    """A connection of ``pool`` (waiting at most ``timeout`` seconds for each, ``None``: the
    pool's own timeout); one idle for a while must answer an empty query first, and if it does
    not (the server dropped it), the pool's other idle ones are checked too."""
    conn = yield _call(pool, "getconn", timeout)
    if _idle(conn):
        try:
            yield _call(conn, "execute", "")
        except psycopg.Error:
            yield _call(pool, "putconn", conn)  # (the pool discards it)
            yield _call(pool, "check")  # and any other dead one, opening new ones
            conn = yield _call(pool, "getconn", timeout)
    return conn


PROBE_AFTER = 3.0
"""Seconds (at most the pool's timeout) a caller waits for a pooled connection before
:class:`Pools` asks the server itself (:func:`check_connection`) why none comes: down (the
caller gets the server's reason at once, not the pool's "couldn't get a connection"), or up
while the pool still waits out its reconnection backoff (the pool is replaced: the caller runs
on a new connection)."""


def _not_stored(error: object, why: str) -> ConnectionLostError:
    """The error of a write whose connection was lost before its commit was sent, and that was
    not stored when run again (``why``; ``error``: that run's)."""
    return ConnectionLostError(
        f"the connection to Postgres was lost before the write's commit was sent, so nothing "
        f"of it is stored; {why}: {error}"
    )


def _release(pool: Any, conn: Any) -> Flow[bool]:
    """Give ``conn`` back; whether the server dropped it in use (then the pool's other dead
    ones are dropped too)."""
    lost = bool(conn.broken)
    _LAST_USED[conn] = time.monotonic()
    yield _call(pool, "putconn", conn)
    if lost:
        yield _call(pool, "check")
    return lost


def open_pool(conninfo: str, settings: dict[str, Any]) -> ConnectionPool[Any]:
    """A new sync pool to ``conninfo``, open: autocommit connections, each configured
    (:func:`configure_connection`); ``settings``: its size and timing
    (``pool_settings.sync_pool_settings``)."""
    quiet_reconnects()
    return ConnectionPool(
        conninfo,
        kwargs={"autocommit": True},
        configure=configure_connection,
        open=True,
        name="langchain-reflective",
        **settings,
    )


class Pools:
    """The backend's connections: one sync pool, one async pool per event loop, typed errors.

    When the server is down a pool keeps reconnecting in the background, with a backoff that
    grows while the outage lasts, and its callers would wait its whole timeout (30 s by
    default) for a "couldn't get a connection" that does not say why, even after the server is
    back. So a caller given no connection within :data:`PROBE_AFTER` seconds (at most the
    pool's timeout) while the pool has connections not at work here asks the server directly
    (:func:`check_connection`): if it is down the caller gets a :class:`StorageError` with the
    server's reason at once (nothing ran: not a :class:`ConnectionLostError`); if it answers, a
    pool this object opened (the async ones, and the sync one of ``from_conn_string``) is
    replaced by a fresh one, so the caller and the next ones run on new connections at once
    (the fresh pool's whole timeout). A pool whose connections are all at work here is waited
    for as usual (its timeout).

    Args:
        pool: the sync ``psycopg_pool.ConnectionPool`` (autocommit connections).
        conninfo: the connection string, for the async pool opened on first async use in
            each event loop (``None``: async use raises :class:`StorageError`), and for the
            direct check of the server.
        new_pool: opens a pool like ``pool``, to replace it once the server is back (``None``:
            the pool is not replaced, a caller waits for its reconnection).
    """

    def __init__(
        self,
        pool: ConnectionPool[Any],
        conninfo: str | None,
        new_pool: Callable[[], ConnectionPool[Any]] | None = None,
    ) -> None:
        self.pool = pool
        self._conninfo = conninfo
        self.new_pool = new_pool
        self._apools: dict[int, tuple[asyncio.AbstractEventLoop, AsyncConnectionPool[Any]]] = {}
        self._busy: dict[int, int] = {}  # id(pool): its connections at work here
        self._lock = threading.Lock()
        self.closed = False
        self.process = ProcessGuard("this PostgresBackend")
        """The process that opened the pools (see ``backends/_fork.py``)."""

    @property
    def forked(self) -> bool:
        """Whether this is a forked child of the process that opened the pools."""
        return self.process.forked

    def check_process(self) -> None:
        """Raise in a forked child of the process that opened the pools, before anything
        takes a lock a parent thread may have held at the fork (``backends/_fork.py``)."""
        self.process.check()

    def _check_usable(self) -> None:
        if self.closed:
            raise StorageError("the Postgres backend is closed")
        self.check_process()

    @property
    def conninfo(self) -> str | None:
        """The connection string (``None`` when built from a pool only)."""
        return self._conninfo

    @property
    def name(self) -> str:
        return str(self.pool.name)

    def _count(self, pool: Any, delta: int) -> int:
        """Add ``delta`` to ``pool``'s connections at work here; how many are."""
        with self._lock:
            busy = self._busy.get(id(pool), 0) + delta
            if busy > 0:
                self._busy[id(pool)] = busy
            else:
                self._busy.pop(id(pool), None)
            return busy

    def _acquire(self, current: Callable[[], Any]) -> Flow[tuple[Any, Any]]:
        """A connection and the pool it came from (``current()``: the pool to ask now; see the
        class docstring for what happens when none comes within :data:`PROBE_AFTER` s)."""
        pool = current()
        while True:
            start = time.monotonic()
            try:
                try:
                    conn = yield from _checkout(pool, min(PROBE_AFTER, pool.timeout))
                except PoolTimeout:
                    conninfo = self._conninfo or pool.conninfo
                    busy = self._count(pool, 0) >= pool.max_size
                    probed = not busy and isinstance(conninfo, str)
                    if probed:  # (raises if the server is down, with its reason)
                        yield Op(check_connection, threaded(check_connection), (conninfo,))
                        pool = yield Op(self._renew, self._arenew, (pool,))
                        start = time.monotonic()  # (a fresh pool: its whole timeout)
                    wait = pool.timeout - (time.monotonic() - start)
                    try:
                        conn = yield from _checkout(pool, max(wait, 0.1))
                    except PoolTimeout as exc:
                        raise self._no_connection(pool, busy, probed) from exc
            except PoolClosed:  # replaced by another caller meanwhile: ask the new one
                if self.closed or current() is pool:
                    raise
                pool = current()
                continue
            self._count(pool, 1)
            return pool, conn

    def _no_connection(self, pool: Any, busy: bool, probed: bool) -> StorageError:
        """The error of a caller the pool gave no connection within its timeout (``busy``: all
        its connections were at work here; ``probed``: the server answered a direct connection
        meanwhile)."""
        waited = f"no pooled connection to Postgres came within {pool.timeout:g} s (the timeout)"
        if busy:
            return StorageError(
                f"{waited}: all {pool.max_size} connections of the pool are at work. Raise "
                "max_size or timeout (PostgresBackend.from_conn_string), or run fewer calls at "
                "once (a reflection holds one connection for its lock)."
            )
        if probed and self.new_pool is None and pool is self.pool:  # the user's pool
            return StorageError(
                f"{waited}, though the server answers: the pool passed to PostgresBackend is "
                "not replaced after an outage; it reconnects after a backoff that only its "
                "reconnect_timeout bounds (300 s by default: give it a short one, e.g. 10 s), "
                "unless its connections are at work elsewhere"
            )
        return StorageError(f"{waited}, though the server answers" if probed else waited)

    def _renew(self, old: ConnectionPool[Any]) -> ConnectionPool[Any]:
        """A fresh sync pool in place of ``old``, whose reconnection waits out its backoff
        while the server answers (``old`` itself if this object did not open it)."""
        with self._lock:
            if self.pool is not old or self.new_pool is None or self.closed:
                return self.pool
            self.pool = self.new_pool()
        old.close(timeout=1.0)  # (its connections at work are closed when given back)
        return self.pool

    async def _arenew(self, old: AsyncConnectionPool[Any]) -> AsyncConnectionPool[Any]:
        """Async twin of :meth:`_renew` (this event loop's pool)."""
        loop = asyncio.get_running_loop()
        entry = self._apools.get(id(loop))
        if self.closed or entry is None or entry[1] is not old:
            return await self._apool()
        pool = await self._open_apool()
        entry = self._apools.get(id(loop))
        if entry is None or entry[1] is not old:  # another task replaced it meanwhile
            await pool.close()
            return await self._apool()
        self._apools[id(loop)] = (loop, pool)
        await old.close(timeout=1.0)
        return pool

    @contextlib.contextmanager
    def conn(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; database errors leave as the package's typed errors.

        Raises:
            StorageError: the server is down (its reason, within seconds: see the class
                docstring), or a database error.
        """
        self._check_usable()
        lost = False
        try:
            pool, conn = run_sync(self._acquire(lambda: self.pool))
            try:
                with conn:  # (as pool.connection(): a pooled connection stays open)
                    try:
                        yield conn
                    except MISSING as exc:  # what to do depends on the version: read it
                        raise storage_error(exc, run_sync(version_after(conn))) from exc
            finally:
                self._count(pool, -1)
                lost = run_sync(_release(pool, conn))
        except (psycopg.Error, UnicodeEncodeError) as exc:
            raise typed_error(exc, lost) from exc

    def retrying(self, run: Callable[[psycopg.Connection[Any]], T]) -> T:
        """``run(conn)`` on a pooled connection, and once more on another if the server dropped
        the first while it ran: only for work that may run twice (reads, and updates that set
        values)."""
        try:
            with self.conn() as conn:
                return run(conn)
        except ConnectionLostError:
            with self.conn() as conn:
                return run(conn)

    def writing(
        self,
        write: Callable[[psycopg.Connection[Any]], T],
        outcome: Callable[[psycopg.Connection[Any]], T | None] | None,
        *,
        note: str | None = None,
    ) -> T:
        """``write(conn)`` in one transaction, exactly once even if the server drops the
        connection meanwhile. Lost before its commit was sent (in its statements, or before
        them), nothing of it is stored: it runs again at once, and if that run cannot run (the
        server unreachable) or is lost before its commit too, a :class:`ConnectionLostError`
        says nothing is stored; so does one that waited ``writes.OUTCOME_WAIT`` s for a lock
        (the lost transaction, which can only roll back, may hold its locks until the server
        notices the loss: when the user set no lock_timeout, that bounds the run's lock waits).
        Lost once its commit may have been sent, whether it committed is unknown (the
        connection may have gone after the commit, before its reply), so ``outcome(conn)``
        reads it on a new connection: what the write returned if it is stored, ``None`` if
        nothing of it is. It waits first for the lost transaction to end (the server may not
        have noticed the loss yet, and that transaction could still commit:
        ``writes.after_writers``). Only then does the write run again, once (and if that run's
        connection is lost too, its outcome is read the same way). ``outcome`` raises if the
        write is stored only in part (a :class:`StorageError` of its own, raised as it is);
        without one (a write that leaves nothing to read back: a ``put`` of a counter change
        alone) the loss is raised.
        When the outcome cannot be read (the server is down, the new connection is lost too,
        no connection comes, the statement fails, the lost transaction is still open after
        ``writes.OUTCOME_WAIT``), :class:`WriteOutcomeUnknownError` is raised, with ``note``
        (what was written, e.g. its ids) added to it."""
        sent: list[str] = []  # each run's progress: "ran" (it has a connection), "commit"
        try:
            return self._write_once(write, sent)
        except ConnectionLostError as lost:
            if "commit" in sent:
                if outcome is None:
                    raise
                done = self._outcome(outcome, lost, note)
                if done is not None:
                    return done
        bound = "commit" not in sent  # (lost before its commit: its locks may still be held)
        sent.clear()
        try:
            return self._write_once(write, sent, bound=bound)
        except ConnectionLostError as lost:
            if "commit" not in sent:
                raise _not_stored(lost, "run again, it was lost before its commit too") from lost
            done = None if outcome is None else self._outcome(outcome, lost, note)
            if done is None:  # (lost again before its commit: nothing is stored)
                raise
            return done
        except StorageError as failed:
            if "ran" not in sent:
                raise _not_stored(failed, "it could not run again") from failed
            waited = failed.__cause__
            if "bounded" not in sent or not isinstance(waited, pg_errors.LockNotAvailable):
                raise  # the write's own error (its statements ran)
            raise _not_stored(
                waited.diag.message_primary or waited,
                f"run again, it waited {writes.OUTCOME_WAIT:g} s in vain for a lock (most likely "
                "the lost transaction's, rolled back once the server finds its connection gone), "
                "so it can be retried",
            ) from failed

    def _write_once(
        self, write: Callable[[psycopg.Connection[Any]], T], sent: list[str], *, bound: bool = False
    ) -> T:
        """``write(conn)`` in one transaction, noting in ``sent`` that it got a connection,
        then that its statements all returned (its commit goes next); ``bound``: its lock waits
        last at most ``writes.OUTCOME_WAIT`` s unless the user set a lock_timeout ("bounded")."""
        with self.conn() as conn:
            sent.append("ran")
            with conn.transaction():
                if bound and bound_lock_waits(conn, writes.OUTCOME_WAIT):
                    sent.append("bounded")
                done = write(conn)
                sent.append("commit")
        return done

    def _outcome(
        self,
        outcome: Callable[[psycopg.Connection[Any]], T | None],
        lost: ConnectionLostError,
        note: str | None,
    ) -> T | None:
        """``outcome`` of a write whose connection was ``lost``, read on a new connection (see
        :meth:`writing`); :class:`WriteOutcomeUnknownError` when it cannot be read."""
        verdicts: list[BaseException] = []
        again: StorageError

        def read(conn: psycopg.Connection[Any]) -> T | None:
            try:
                return outcome(conn)
            except ConnectionLostError:
                raise
            except StorageError as exc:  # its own verdict (stored in part), not a failure to ask
                verdicts.append(exc)
                raise

        try:
            return self.retrying(read)
        except TransactionStillOpenError as still:  # (waited for it in vain)
            why, again = str(still), still
        except StorageError as failed:
            if any(failed is verdict for verdict in verdicts):
                raise
            why, again = f"the server could not be asked: {failed}", failed
        unknown = WriteOutcomeUnknownError(
            f"{lost}; whether the write committed is unknown ({why}): it may be stored, so look "
            "its memories up by id before writing them again"
        )
        if note:
            unknown.add_note(note)
        raise unknown from again

    def rows(self, sql: str, params: Any = None) -> list[TupleRow]:
        """All rows of one statement that may run twice (see :meth:`retrying`)."""
        return self.retrying(lambda conn: conn.execute(sql, params).fetchall())

    async def _apool(self) -> AsyncConnectionPool[Any]:
        """This event loop's async pool (opened on first use; one per loop)."""
        loop = asyncio.get_running_loop()
        entry = self._apools.get(id(loop))
        if entry is not None and entry[0] is loop:
            return entry[1]
        pool = await self._open_apool()
        entry = self._apools.get(id(loop))
        if entry is not None and entry[0] is loop:  # another task opened one meanwhile
            await pool.close()
            return entry[1]
        self._apools[id(loop)] = (loop, pool)
        return pool

    async def _open_apool(self) -> AsyncConnectionPool[Any]:
        """A new async pool, open."""
        if self._conninfo is None:
            raise StorageError("no connection string for the async pool (use from_conn_string)")
        quiet_reconnects()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self._conninfo,
            kwargs={"autocommit": True},
            configure=aconfigure_connection,
            open=False,
            name="langchain-reflective-async",
            **async_pool_settings(self.pool),
        )
        await pool.open()
        return pool

    @contextlib.asynccontextmanager
    async def aconn(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """Async twin of :meth:`conn` (this event loop's pool)."""
        self._check_usable()
        first = await self._apool()
        loop = asyncio.get_running_loop()

        def current() -> AsyncConnectionPool[Any]:
            entry = self._apools.get(id(loop))
            return entry[1] if entry is not None else first

        lost = False
        try:
            pool, conn = await run_async(self._acquire(current))
            try:
                async with conn:
                    try:
                        yield conn
                    except MISSING as exc:
                        raise storage_error(exc, await run_async(version_after(conn))) from exc
            finally:
                self._count(pool, -1)
                lost = await run_async(_release(pool, conn))
        except (psycopg.Error, UnicodeEncodeError) as exc:
            raise typed_error(exc, lost) from exc

    async def aretrying(self, run: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        """Async twin of :meth:`retrying` (this event loop's pool)."""
        try:
            async with self.aconn() as conn:
                return await run(conn)
        except ConnectionLostError:
            async with self.aconn() as conn:
                return await run(conn)

    @contextlib.contextmanager
    def advisory_lock(self, app: int, name: str, *, timeout: float | None = None) -> Iterator[None]:
        """Hold the session advisory lock ``(app, hashtext(name))`` on a dedicated pooled
        connection (released with the connection if the process dies).

        Raises:
            TimeoutError: not acquired within ``timeout`` seconds (``<= 0``: not at once).
        """
        key = (app, name)
        try_only = timeout is not None and timeout <= 0
        wait = "0" if timeout is None or try_only else str(max(1, math.ceil(timeout * 1000)))
        # only ``timeout`` bounds the wait; held idle (a reflection's model calls), the session
        # must outlive the connection's own timeouts
        with self.conn() as conn:
            settled = False  # known not to hold the lock: never taken, or released
            try:
                with unbounded(conn, lock_timeout=wait):
                    if try_only:
                        row = conn.execute(
                            "SELECT pg_try_advisory_lock(%s, hashtext(%s))", key
                        ).fetchone()
                        if not row or not row[0]:
                            settled = True
                            raise TimeoutError(f"the lock of {name!r} is held")
                    else:
                        try:
                            conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", key)
                        except pg_errors.LockNotAvailable as exc:
                            settled = True
                            raise TimeoutError(
                                f"the lock of {name!r} was not free within {timeout} s"
                            ) from exc
                    try:
                        yield
                    finally:
                        _unlock(conn, key)
                        settled = True
            finally:
                # interrupted while taking or releasing it (Ctrl-C, a cancelled task): the
                # session may hold the lock, and back in the pool it would keep every other
                # process from reflecting on the namespace; ending the session releases it
                if not settled and not conn.closed:
                    conn.close()

    def close(self) -> None:
        """Close every pool whose event loop can still run it. Idempotent. In a forked child
        the pools are only forgotten: closing them would end the parent's sessions."""
        if self.forked:
            self.closed = True
            self._apools = {}
            return
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self.pool.close()
        left: dict[int, tuple[asyncio.AbstractEventLoop, AsyncConnectionPool[Any]]] = {}
        for key, (loop, pool) in list(self._apools.items()):
            if loop.is_closed():
                continue
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is None and not loop.is_running():
                loop.run_until_complete(pool.close())
            elif running is loop:
                warnings.warn(
                    "PostgresBackend.close() ran inside the event loop whose async connections "
                    "it opened, and synchronous code cannot close them: they stay open (and "
                    "can hang the loop's shutdown). In async code use `await backend.aclose()`, "
                    "`await stream.aclose()`, `await memory.aclose()` or `async with`.",
                    RuntimeWarning,
                    stacklevel=4,
                )
                left[key] = (loop, pool)  # for a later aclose() in that loop
        self._apools = left

    def abandon(self) -> None:
        """Close the sync pool of a backend freed unclosed (``unclosed.py``) and forget the
        async ones: only their event loops may close them, and this may run in any thread
        (their connections close as they are freed). In a forked child it only forgets. A pool
        the user passed (no ``new_pool``: shared with other code, perhaps) is the user's to
        close; only :meth:`close`, asked for, closes it."""
        self._apools = {}
        if self.forked:  # (before the lock: a parent's thread may have held it at the fork)
            self.closed = True
            return
        with self._lock:
            if self.closed:
                return
            self.closed = True
        if self.new_pool is not None:
            self.pool.close()

    async def aclose(self) -> None:
        """Async twin of :meth:`close` (closes the running loop's pool in that loop)."""
        if self.forked:
            self.close()
            return
        pools = list(self._apools.values())
        self._apools.clear()
        loop = asyncio.get_running_loop()
        for owner, pool in pools:
            if owner is loop:
                await pool.close()
        await asyncio.to_thread(self.close)
