"""A PostgresBackend its user never closes, freed by the garbage collector in whatever thread
runs it: in one of the backend's own threads (a pool worker, the pool's scheduler, the touch
writer) it raises nothing (psycopg_pool's own finalizer raised "cannot join current thread"
there, reported as an unraisable exception) and still writes its pending touches, closes its
connections and stops its threads."""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.postgres import PostgresBackend, unclosed
from tests.postgres.sample_memories import _fill, _unit
from tests.postgres.test_postgres_local_index import NOW, _open, _ranking, _server_access_times

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


class _Unraisable:
    """What ``sys.unraisablehook`` receives: exceptions raised in finalizers (the project's
    pytest settings ignore the warning pytest makes of them, so a test must look itself)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[str] = []
        monkeypatch.setattr(sys, "unraisablehook", self._hook)

    def _hook(self, unraisable: Any) -> None:
        self.seen.append(f"{unraisable.err_msg or 'Exception ignored in'}: {unraisable.object!r}"
                         f": {unraisable.exc_type.__name__}: {unraisable.exc_value}")  # fmt: skip


@contextlib.contextmanager
def _collected_only_when_asked() -> Iterator[None]:
    """No automatic collection meanwhile: the cycle is freed where the test collects it."""
    gc.collect()  # (garbage of earlier tests, freed here)
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _connections(url: str) -> int:
    """The sessions open on ``url``'s database, other than the one asking."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def _eventually(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(0.05)


def _pool_threads(backend: PostgresBackend) -> list[threading.Thread]:
    pool: Any = backend._pools.pool
    return [*pool._workers, pool._sched_runner]


class _Collect:
    """Collects garbage in the pool thread that runs it, once told to (psycopg_pool calls a
    task's ``run`` in a worker, and ``tick`` in its scheduler when it is due)."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.done = threading.Event()
        self.thread = ""

    def run(self) -> None:
        self.thread = threading.current_thread().name
        try:
            self.go.wait(10)
            gc.collect()
        finally:
            self.done.set()

    tick = run


@pytest.mark.parametrize("where", ["worker", "scheduler"])
def test_an_unclosed_backend_collected_in_a_thread_of_its_pool_raises_nothing_and_closes(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The backend's last reference is a cycle, freed by a collection that runs in one of its
    own pool's threads (any allocation there may start one)."""
    unraisable = _Unraisable(monkeypatch)
    backend = PostgresBackend.from_conn_string(postgres_url, max_size=2)
    backend.setup()
    threads = _pool_threads(backend)
    collect = _Collect()
    with _collected_only_when_asked():
        backend.cycle = backend  # type: ignore[attr-defined]  # (only the collector frees it)
        if where == "worker":
            backend._pools.pool.run_task(collect)  # type: ignore[arg-type]
        else:
            backend._pools.pool.schedule_task(collect, 0)  # type: ignore[arg-type]
        freed = weakref.ref(backend)
        del backend
        collect.go.set()
        assert collect.done.wait(20)
    assert collect.thread.startswith(f"langchain-reflective-{where}")
    assert freed() is None
    _eventually(lambda: not any(t.is_alive() for t in threads), "the pool's threads stop")
    _eventually(lambda: _connections(postgres_url) == 0, "the pool's connections close")
    assert unraisable.seen == []


def test_an_unclosed_backend_collected_in_its_touch_writer_raises_nothing_and_closes(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Freed by a collection in the thread that writes its touches, after it wrote one (while
    it writes, the writer holds the backend: the local index's callbacks refer to it): the
    touch is written, the writer stops and the connections close."""
    unraisable = _Unraisable(monkeypatch)
    backend = _open(postgres_url, local_index=True, local_index_wait=True)
    _fill(backend, 40)
    keys, _ = _ranking(backend, _unit(np.random.default_rng(5), 1)[0])
    backend.touch("default", keys, NOW)  # (through the server: the records are kept now)
    later = NOW + timedelta(hours=2)
    collect = _Collect()
    with _collected_only_when_asked():
        backend.cycle = backend  # type: ignore[attr-defined]
        backend.touch("default", keys, later)  # (answered in memory; the writer writes it)
        writer = backend._touches._writer
        assert writer is not None
        writer.submit(collect.run)  # (after the touch's round)
        threads = [*_pool_threads(backend), *writer._threads]
        freed = weakref.ref(backend)
        del backend, writer
        collect.go.set()
        assert collect.done.wait(20)
    assert collect.thread.startswith("langchain-reflective-touch")
    assert freed() is None
    _eventually(lambda: not any(t.is_alive() for t in threads), "the backend's threads stop")
    _eventually(lambda: _connections(postgres_url) == 0, "the pool's connections close")
    assert _server_access_times(postgres_url, sorted(keys)) == [later.timestamp()] * len(keys)
    assert unraisable.seen == []


def test_an_unclosed_backend_dropped_on_the_main_thread_is_closed_off_it(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its last reference dropped (no cycle holds it: its local index asks it for its
    dimension through a weak reference), it is freed at once and closed on a thread of its
    own: not where the collection ran, which may be a running event loop, or hold a lock
    that one of the joined threads needs."""
    unraisable = _Unraisable(monkeypatch)
    backend = _open(postgres_url, local_index=True, local_index_wait=True)
    _fill(backend, 10)
    _ranking(backend, _unit(np.random.default_rng(5), 1)[0])  # (loads the namespace)
    threads = _pool_threads(backend)
    closers: list[str] = []
    real_close = unclosed._close

    def close(*args: Any) -> None:
        closers.append(threading.current_thread().name)
        real_close(*args)

    monkeypatch.setattr(unclosed, "_close", close)
    with _collected_only_when_asked():
        freed = weakref.ref(backend)
        del backend
        assert freed() is None
    _eventually(lambda: not any(t.is_alive() for t in threads), "the backend's threads stop")
    _eventually(lambda: _connections(postgres_url) == 0, "the pool's connections close")
    assert closers == [unclosed._THREAD]
    assert unraisable.seen == []


def test_a_closed_backend_is_not_closed_again_when_freed(postgres_url: str) -> None:
    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.close()
    assert not backend._unclosed.alive


def test_a_pool_of_the_users_outlives_a_backend_freed_unclosed(postgres_url: str) -> None:
    """A pool the user built and passed (to share it with other code) is the user's: the
    backend freed unclosed leaves it open (``close()``, asked for, still closes it)."""
    from psycopg_pool import ConnectionPool

    from langchain_reflective.backends.postgres.connection import configure_connection

    pool: ConnectionPool[Any] = ConnectionPool(
        postgres_url,
        min_size=1,
        max_size=2,
        kwargs={"autocommit": True},
        configure=configure_connection,
        open=True,
    )
    try:
        backend = PostgresBackend(pool, conninfo=postgres_url)
        backend.setup()
        with _collected_only_when_asked():
            del backend
            gc.collect()
        assert not pool.closed
        with pool.connection() as conn:  # (the other code's use of it goes on)
            assert conn.execute("SELECT 1").fetchone() == (1,)
        again = PostgresBackend(pool, conninfo=postgres_url)
        again.close()
        assert pool.closed
    finally:
        pool.close()
