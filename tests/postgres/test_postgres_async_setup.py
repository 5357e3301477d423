"""Opening and setting up a PostgresBackend from async code: ``afrom_conn_string`` and ``asetup``
take what the sync methods take, raise what they raise, and never block the event loop (a
FastAPI lifespan, a LangGraph server); every public method of the backend that does I/O has
an ``a`` twin."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from blockbuster import blockbuster_ctx
from psycopg_pool import ConnectionPool

from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres import backend as backend_module
from langchain_reflective.backends.postgres import vector_index as vector_index_module
from langchain_reflective.backends.postgres.connection import open_pool
from langchain_reflective.backends.postgres.conninfo import check_connection
from langchain_reflective.backends.postgres.schema import SCHEMA_VERSION
from langchain_reflective.errors import StorageError
from tests.postgres.conftest import create_database
from tests.postgres.sample_memories import DIM, _records, _unit
from tests.twins import assert_twins


def on_the_server(test: Any) -> Any:
    """Marks a test using the embedded server (the introspection and the silent port do not)."""
    return pytest.mark.postgres(pytest.mark.integration(test))


# -- the twins, by introspection ------------------------------------------------------------------

NO_TWIN = {
    "configure": "no I/O: remembers the stream's scoring",
    "local_namespaces": "no I/O: what this process's local index holds",
    "iter_records": "a sync iterator (exports run it in a worker thread: aexport_jsonl)",
}


def test_every_public_method_with_io_has_a_twin_taking_its_parameters() -> None:
    """A public sync method (or classmethod: ``from_conn_string``) that reads, writes or
    connects has an async ``a`` twin with its parameters; the exceptions are listed above."""
    twinned = assert_twins(PostgresBackend, NO_TWIN)
    assert {"setup", "from_conn_string"} <= twinned
    assert {"schema_version", "index_state", "wait_for_index", "get_one"} <= twinned


# -- against the server ------------------------------------------------------------------------


@on_the_server
async def test_afrom_conn_string_and_asetup_work_inside_a_running_loop(postgres_url: str) -> None:
    """The backend they open is the sync one's, set up (twice: idempotent) and usable; the
    keyword arguments reach the pool and the backend."""
    backend = await PostgresBackend.afrom_conn_string(
        postgres_url, max_size=3, timeout=7.0, pool_kwargs={"max_idle": 120}, local_index=True
    )
    try:
        assert isinstance(backend, PostgresBackend)
        assert await backend.aschema_version() == 0
        await backend.asetup()
        await backend.asetup()
        assert await backend.aschema_version() == SCHEMA_VERSION
        assert await backend.acount("default") == 0
        assert await backend.acount_pending() == 0
        pool = backend._pools.pool
        assert (pool.min_size, pool.max_size, pool.timeout, pool.max_idle) == (1, 3, 7.0, 120)
        assert backend.local_namespaces() == {}  # (local_index=True reached the backend)
    finally:
        await backend.aclose()
    assert backend._pools.closed
    with PostgresBackend.from_conn_string(postgres_url) as again:
        again.setup()  # (after asetup: nothing to do)
        assert again.schema_version() == SCHEMA_VERSION


def _error(fn: Any, *args: Any, **kwargs: Any) -> BaseException:
    try:
        fn(*args, **kwargs)
    except BaseException as error:
        return error
    raise AssertionError("no error")


async def _aerror(fn: Any, *args: Any, **kwargs: Any) -> BaseException:
    try:
        await fn(*args, **kwargs)
    except BaseException as error:
        return error
    raise AssertionError("no error")


@on_the_server
async def test_afrom_conn_string_raises_what_from_conn_string_raises(
    postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing database, a closed port, a malformed URL (password not shown), refused pool
    settings and a refused backend argument: the same error, the same message; a refused
    backend argument leaves no pool open."""
    head, sep, query = postgres_server.partition("?")
    missing = f"{head.rsplit('/', 1)[0]}/no_such_database{sep}{query}"
    opened: list[ConnectionPool[Any]] = []

    def recorded(*args: Any) -> ConnectionPool[Any]:
        opened.append(open_pool(*args))
        return opened[-1]

    monkeypatch.setattr(backend_module, "open_pool", recorded)
    cases: list[tuple[str, dict[str, Any]]] = [
        (missing, {}),
        ("postgresql://ana@127.0.0.1:1/memories", {}),
        ("postgresql://ana:s3cret@[db/memories", {}),
        (postgres_server, {"max_size": 1}),
        (postgres_server, {"timeout": 0}),
        (postgres_server, {"pool_kwargs": {"max_lifetime": -1}}),
        (postgres_server, {"pool_kwargs": {"nonsense": 1}}),
        (postgres_server, {"dense_candidates": 0}),
    ]
    for url, kwargs in cases:
        expected = _error(PostgresBackend.from_conn_string, url, **kwargs)
        got = await _aerror(PostgresBackend.afrom_conn_string, url, **kwargs)
        assert type(got) is type(expected) and str(got) == str(expected), (url, kwargs)
        assert isinstance(got, StorageError | ValueError), got
        assert "s3cret" not in str(got)
    assert len(opened) == 2 and all(pool.closed for pool in opened)  # (dense_candidates=0)
    missing_error = await _aerror(PostgresBackend.afrom_conn_string, missing)
    assert 'database "no_such_database" does not exist' in str(missing_error)


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A port that takes TCP connections and never answers them (a host that stopped
    answering): libpq waits for its reply up to ``connect_timeout``."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # (never accepted: the kernel completes the handshakes)
        yield listener.getsockname()[1]


async def _ticks_while(call: Any) -> tuple[BaseException | None, list[float]]:
    """Run ``call()`` while a task ticks every 10 ms; what it raised and the gaps seen."""
    loop = asyncio.get_running_loop()
    gaps: list[float] = []

    async def tick() -> None:
        last = loop.time()
        while True:
            await asyncio.sleep(0.01)
            now = loop.time()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    try:
        await call()
        raised = None
    except BaseException as error:
        raised = error
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    return raised, gaps


async def test_a_server_that_does_not_answer_keeps_the_loop_running() -> None:
    """``from_conn_string`` waits ``connect_timeout`` (2 s here) for a silent server; its
    async twin waits as long but the loop keeps ticking meanwhile, and raises the same
    error."""
    with _silent_server() as port:
        url = f"postgresql://ana@127.0.0.1:{port}/memories?connect_timeout=2"
        start = time.monotonic()
        expected = _error(PostgresBackend.from_conn_string, url)
        sync_wait = time.monotonic() - start
        start = time.monotonic()
        got, gaps = await _ticks_while(functools.partial(PostgresBackend.afrom_conn_string, url))
        async_wait = time.monotonic() - start
    assert isinstance(expected, StorageError) and sync_wait > 1.5
    assert type(got) is StorageError and str(got) == str(expected)
    assert async_wait > 1.5
    assert len(gaps) > 50 and max(gaps) < 0.5, (len(gaps), max(gaps, default=None))


@on_the_server
async def test_afrom_conn_string_and_asetup_never_block_the_loop(postgres_server: str) -> None:
    """Under blockbuster (as tests/unit/test_event_loop.py runs the async API): opening,
    setting up a new database (its migrations), using it and closing it, once before on
    another database so one-time imports are not what is measured."""

    async def run(url: str) -> PostgresBackend:
        backend = await PostgresBackend.afrom_conn_string(url, max_size=3)
        await backend.asetup()
        await backend.asetup()
        assert await backend.acount() == 0
        await backend.aclose()
        return backend

    await run(create_database(postgres_server))
    fresh = create_database(postgres_server)
    with blockbuster_ctx("langchain_reflective"):
        backend = await run(fresh)
    assert backend._pools.closed
    with PostgresBackend.from_conn_string(fresh) as again:
        assert again.schema_version() == SCHEMA_VERSION


@on_the_server
async def test_the_introspection_twins_and_aget_one_answer_as_the_sync_methods(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a running loop, under blockbuster: ``aschema_version``, ``aindex_state`` and
    ``aget_one`` return what their sync methods return; ``await_for_index`` returns after its
    ``timeout`` while the background build runs, and without one once the build is done, the
    loop ticking meanwhile (the build is held on an event until the loop releases it)."""
    building, release = threading.Event(), threading.Event()
    build_index = vector_index_module.build_index

    def held_build(*args: Any, **kwargs: Any) -> Any:
        building.set()
        release.wait(10)
        return build_index(*args, **kwargs)

    monkeypatch.setattr(vector_index_module, "build_index", held_build)
    backend = await PostgresBackend.afrom_conn_string(postgres_url, max_size=4, ivf_min_rows=200)
    try:
        await backend.asetup()
        await backend.abind_embeddings("test-model", DIM)
        records = _records(250)
        await backend.aput(records, _unit(np.random.default_rng(1), 250))  # due: a build starts
        assert await asyncio.to_thread(building.wait, 10)
        held = backend.index_state()  # (the sync one, on the loop: while the build is held)
        with blockbuster_ctx("langchain_reflective"):
            assert await backend.aschema_version() == SCHEMA_VERSION
            before = await backend.aindex_state()
            one = await backend.aget_one("default", records[3].id)
            missing = await backend.aget_one("default", "no-such-id")
            other = await backend.aget_one("elsewhere", records[3].id)
            start = time.monotonic()
            await backend.await_for_index(timeout=0.1)  # the build is still held
            assert time.monotonic() - start >= 0.09
            assert (await backend.aindex_state()).name is None
            asyncio.get_running_loop().call_later(0.3, release.set)
            raised, gaps = await _ticks_while(backend.await_for_index)
            after = await backend.aindex_state()
        assert raised is None and release.is_set()
        assert len(gaps) > 20 and max(gaps) < 0.25, (len(gaps), max(gaps))
        assert backend.schema_version() == SCHEMA_VERSION
        assert before == held and before.name is None
        assert after == backend.index_state() and after.name is not None and after.rows == 250
        assert one == backend.get_one("default", records[3].id) == records[3]
        assert missing is None is backend.get_one("default", "no-such-id")
        assert other is None is backend.get_one("elsewhere", records[3].id)
    finally:
        release.set()
        await backend.aclose()


@on_the_server
async def test_a_cancelled_afrom_conn_string_leaves_no_pool_open(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled while its thread connects, the caller gets ``CancelledError`` at once, and
    the backend the thread opens after all is closed (its pool with it) off the loop: left to
    the garbage collector, it was closed wherever it was freed, on the loop's thread here."""
    opened: list[ConnectionPool[Any]] = []
    closed_on: list[threading.Thread] = []
    checking = threading.Event()

    def slow_check(conninfo: str) -> None:
        checking.set()
        time.sleep(0.3)
        check_connection(conninfo)

    def recorded(*args: Any) -> ConnectionPool[Any]:
        pool = open_pool(*args)
        close = pool.close

        def recorded_close(timeout: float = 5.0) -> None:
            closed_on.append(threading.current_thread())
            close(timeout)

        pool.close = recorded_close  # type: ignore[method-assign]
        opened.append(pool)
        return pool

    monkeypatch.setattr(backend_module, "check_connection", slow_check)
    monkeypatch.setattr(backend_module, "open_pool", recorded)
    task = asyncio.ensure_future(PostgresBackend.afrom_conn_string(postgres_url))
    await asyncio.to_thread(checking.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(500):
        if opened and opened[0].closed:
            break
        await asyncio.sleep(0.01)
    assert len(opened) == 1 and opened[0].closed
    assert closed_on and threading.current_thread() not in closed_on
