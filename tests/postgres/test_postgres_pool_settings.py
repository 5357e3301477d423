"""The connection pools' settings for services: the timeout a call waits for a connection, and
psycopg_pool's other settings, reaching the sync pool and every event loop's async pool."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any

import pytest

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.errors import StorageError
from langchain_reflective.scoring import ScoringConfig
from tests.postgres.sample_memories import _fill

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

UNREACHABLE = "postgresql://ana@127.0.0.1:1/memories"
"""Nothing listens there: a setting refused before any connection raises ValueError, not the
StorageError of the connection check."""


@pytest.mark.parametrize("timeout", [0, -1.0, math.nan, math.inf, True, "5"])
def test_a_timeout_that_is_not_a_positive_number_is_refused_before_connecting(
    timeout: Any,
) -> None:
    with pytest.raises(ValueError, match=r"timeout must be a positive number of seconds"):
        PostgresBackend.from_conn_string(UNREACHABLE, timeout=timeout)


def test_the_timeout_is_the_sync_and_the_async_pools_wait_for_a_connection(
    postgres_url: str,
) -> None:
    """With every connection at work a call fails after the configured timeout, saying so and
    what to do, in the sync pool and in an event loop's async pool (before: the async pool
    always waited psycopg_pool's 30 s)."""
    with PostgresBackend.from_conn_string(postgres_url, max_size=2, timeout=1.5) as backend:
        backend.setup()
        _, vectors = _fill(backend, 3)
        pools = backend._pools
        assert pools.pool.timeout == 1.5
        with contextlib.ExitStack() as held:
            for _ in range(2):
                held.enter_context(pools.conn())
            with pytest.raises(StorageError) as exhausted:
                backend.count("default")
        message = str(exhausted.value)
        assert "within 1.5 s" in message and "all 2 connections of the pool are at work" in message
        assert "Raise max_size or timeout" in message

        assert backend.count("default") == 3  # (the connections are free again)

        async def run() -> str:
            async with contextlib.AsyncExitStack() as held:
                for _ in range(2):
                    await held.enter_async_context(pools.aconn())
                (_, apool), *_ = pools._apools.values()
                assert apool.timeout == 1.5
                with pytest.raises(StorageError) as exhausted:
                    await backend.acandidates(
                        "default", "tea", vectors[0], k=3, filter=RetrievalFilter(),
                        config=ScoringConfig.hybrid(),
                    )  # fmt: skip
            await backend.aclose()  # (the loop's pool, in the loop)
            return str(exhausted.value)

        assert "within 1.5 s" in asyncio.run(run())


@pytest.mark.parametrize(
    ("pool_kwargs", "says"),
    [
        ({"timeout": 5}, "cannot set 'timeout': pass timeout=... itself"),
        ({"max_size": 4}, "cannot set 'max_size': pass max_size=... itself"),
        ({"kwargs": {"autocommit": False}}, "cannot set 'kwargs': the backend passes on only"),
        ({"configure": print}, "cannot set 'configure'"),
        ({"open": False}, "cannot set 'open'"),
        ({"check": print}, "cannot set 'check'"),
        ({"max_lifetme": 60}, "cannot set 'max_lifetme'"),
        ({"max_lifetime": 0}, r"pool_kwargs\['max_lifetime'\] must be a positive number"),
        ({"max_idle": "600"}, r"pool_kwargs\['max_idle'\] must be a positive number"),
        ({"max_waiting": -1}, r"pool_kwargs\['max_waiting'\] must be a whole number, 0 or"),
        ({"num_workers": 1.5}, r"pool_kwargs\['num_workers'\] must be a whole number, 1 or"),
    ],
)
def test_pool_kwargs_that_the_backend_does_not_pass_on_are_refused_before_connecting(
    pool_kwargs: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        PostgresBackend.from_conn_string(UNREACHABLE, pool_kwargs=pool_kwargs)


def test_pool_kwargs_reach_the_sync_pool_and_every_async_pool(postgres_url: str) -> None:
    """psycopg_pool's settings reach both kinds of pool, and take effect: connections older than
    ``max_lifetime`` are replaced (as behind a load balancer, to spread them again)."""
    settings = {
        "max_lifetime": 1.0,
        "max_idle": 60.0,
        "reconnect_timeout": 10.0,
        "max_waiting": 5,
        "num_workers": 2,
    }
    with PostgresBackend.from_conn_string(postgres_url, pool_kwargs=settings) as backend:
        backend.setup()
        pools = backend._pools
        assert {key: getattr(pools.pool, key) for key in settings} == settings

        sql = "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        before = {pid for (pid,) in pools.rows(sql)}  # (the database is the test's own)
        time.sleep(1.5)  # past the connections' lifetime
        for _ in before:  # each is handed out once more, then closed when given back
            pools.rows("SELECT 1")
        assert pools.rows("SELECT pg_backend_pid()")[0][0] not in before

        async def run() -> dict[str, Any]:
            async with pools.aconn() as conn:
                await conn.execute("SELECT 1")
            (_, apool), *_ = pools._apools.values()
            await backend.aclose()
            return {key: getattr(apool, key) for key in settings}

        assert asyncio.run(run()) == settings
