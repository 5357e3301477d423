"""A ``statement_timeout`` set for the role, the database or the connection (production
servers often have one): it bounds the calls users make, with a clear error and nothing stored,
and not the package's own long work (the vector index build, the reflection lock's wait).
The same for the timeouts that end a session (``idle_in_transaction_session_timeout``,
``transaction_timeout``, ``idle_session_timeout``): the local index's load, the index build
and a held reflection lock outlive them."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.postgres import PostgresBackend, local_rows
from langchain_reflective.backends.postgres.schema import APP_LOCK
from langchain_reflective.backends.sqlite.lexical import BM25Index
from langchain_reflective.errors import StorageError
from tests.postgres.sample_memories import DIM, _fill, _records, _unit
from tests.postgres.test_postgres_vector_index import _vector_indexes

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

TIMEOUT_MS = 300


def _with_timeout(url: str) -> str:
    """``url`` with a statement_timeout and a lock_timeout of ``TIMEOUT_MS`` for every
    connection."""
    options = f"-c%20statement_timeout%3D{TIMEOUT_MS}%20-c%20lock_timeout%3D{TIMEOUT_MS}"
    return f"{url}{'&' if '?' in url else '?'}options={options}"


@pytest.fixture
def timed(postgres_url: str) -> Iterator[PostgresBackend]:
    """A backend whose every connection has a statement_timeout and a lock_timeout of
    ``TIMEOUT_MS``."""
    b = PostgresBackend.from_conn_string(
        _with_timeout(postgres_url), max_size=4, ivf_min_rows=10**9
    )
    b.setup()
    b.bind_embeddings("test-model", DIM)
    yield b
    b.close()


def _holding(
    url: str, sql: str, params: tuple[object, ...], seconds: float, *, snapshot: bool = False
) -> threading.Thread:
    """A thread that runs ``sql`` in a transaction of its own and keeps the transaction open
    (its locks, and with ``snapshot`` its snapshot: repeatable read, as ``pg_dump`` holds one)
    for ``seconds``; returned once the statement has run."""
    ran = threading.Event()

    def hold() -> None:
        with psycopg.connect(url) as conn, conn.transaction():
            if snapshot:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            conn.execute(sql, params)
            ran.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold)
    thread.start()
    assert ran.wait(10)
    return thread


def _keeps_the_users_timeouts(backend: PostgresBackend) -> None:
    """The pool's connections have the URL's timeouts again."""
    with backend._pools.conn() as conn:
        row = conn.execute(
            "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
        ).fetchone()
    assert row == (f"{TIMEOUT_MS}ms", f"{TIMEOUT_MS}ms")


def test_a_call_cancelled_by_the_timeout_says_why_and_stores_nothing(
    timed: PostgresBackend, postgres_url: str
) -> None:
    rng = np.random.default_rng(1)
    timed.put(_records(5, "ana", seed=1), _unit(rng, 5))
    # another session locks the namespace's counter row, which every add updates
    holder = _holding(
        postgres_url,
        "SELECT 1 FROM reflective_counters WHERE namespace = %s FOR UPDATE",
        ("ana",),
        3 * TIMEOUT_MS / 1000,
    )
    try:
        with pytest.raises(StorageError, match="statement_timeout") as info:
            timed.put(_records(3, "ana", seed=2), _unit(rng, 3))
        assert "nothing of this call is stored" in str(info.value)
        assert timed.count("ana") == 5
    finally:
        holder.join()
    timed.put(_records(3, "ana", seed=2), _unit(rng, 3))  # the same call, retried: stored once
    assert timed.count("ana") == 8


def test_the_index_build_is_not_bounded_by_the_timeout(
    timed: PostgresBackend, postgres_url: str
) -> None:
    """``CREATE INDEX CONCURRENTLY`` waits for every transaction holding an older snapshot:
    one held open longer than the timeout would cancel the build, and the background rebuild
    would try again, and be cancelled again, every 10 s."""
    _fill(timed, 1200, seed=3)
    holder = _holding(
        postgres_url,
        "SELECT count(*) FROM reflective_memories",
        (),
        4 * TIMEOUT_MS / 1000,
        snapshot=True,
    )
    try:
        timed.reindex(kind="ivfflat")
    finally:
        holder.join()
    state = timed.index_state()
    assert state.kind == "ivfflat" and state.lists > 0
    assert _vector_indexes(postgres_url) == [(state.name, "ivfflat", True)]
    _keeps_the_users_timeouts(timed)


def test_the_reflection_lock_waits_as_long_as_its_own_timeout_says(
    timed: PostgresBackend,
) -> None:
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with timed.reflection_lock("ana"):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        with pytest.raises(TimeoutError), timed.reflection_lock("ana", timeout=0.8):
            pass  # pragma: no cover - not acquired
        assert time.monotonic() - started >= 0.7  # (its own timeout, not the statement's)
        threading.Timer(3 * TIMEOUT_MS / 1000, release.set).start()
        with timed.reflection_lock("ana"):  # no timeout: waits for the holder
            assert release.is_set()
    finally:
        release.set()
        thread.join()
    _keeps_the_users_timeouts(timed)


def test_setup_waits_for_another_processes_setup_past_the_timeout(postgres_url: str) -> None:
    """Migrations of a large table take their time, and a second process's ``setup()`` waits
    for the first's under the setup lock: neither is one of the calls the timeout bounds."""
    from langchain_reflective.backends.postgres.schema import SCHEMA_VERSION, SETUP_LOCK

    holder = _holding(
        postgres_url, "SELECT pg_advisory_xact_lock(%s, %s)", SETUP_LOCK, 3 * TIMEOUT_MS / 1000
    )
    b = PostgresBackend.from_conn_string(_with_timeout(postgres_url), max_size=2)
    try:
        b.setup()
        assert b.schema_version() == SCHEMA_VERSION
    finally:
        holder.join()
        b.close()


SESSION_TIMEOUT_MS = 300
"""``idle_in_transaction_session_timeout`` and ``idle_session_timeout`` of :func:`_ending`;
its ``transaction_timeout`` is three times as long (Postgres 17+ has one)."""


def _ending(url: str) -> str:
    """``url`` with the timeouts that end a session, short, for every connection."""
    options = "%20".join(
        f"-c%20{name}%3D{ms}"
        for name, ms in (
            ("idle_in_transaction_session_timeout", SESSION_TIMEOUT_MS),
            ("idle_session_timeout", SESSION_TIMEOUT_MS),
            ("transaction_timeout", 3 * SESSION_TIMEOUT_MS),
        )
    )
    return f"{url}{'&' if '?' in url else '?'}options={options}"


def test_the_local_index_load_outlives_the_timeouts_that_end_a_session(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load reads one snapshot a chunk at a time and indexes each chunk in between: idle
    in its transaction for a while, and in it for long (~20 s at 1M memories)."""
    with PostgresBackend.from_conn_string(postgres_url, max_size=2) as writer:
        writer.setup()
        writer.bind_embeddings("test-model", DIM)
        _fill(writer, 90, seed=4)
    monkeypatch.setattr(local_rows, "LOAD_CHUNK", 30)  # (read by local_rows.read_rows)
    real = BM25Index.add_flat_terms

    def slow(self: BM25Index, *args: Any, **kwargs: Any) -> Any:
        time.sleep(1.5 * SESSION_TIMEOUT_MS / 1000)  # (idle in the transaction meanwhile)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(BM25Index, "add_flat_terms", slow)
    with PostgresBackend.from_conn_string(
        _ending(postgres_url), max_size=2, local_index=True
    ) as backend:
        backend.bind_embeddings("test-model", DIM)
        started = time.monotonic()
        assert backend.preload("default")
        assert time.monotonic() - started > 3 * SESSION_TIMEOUT_MS / 1000  # (past them all)
        held = backend._candidates.local
        assert held is not None and held.loaded() == {"default": 90}


def test_the_index_build_outlives_a_transaction_timeout(postgres_url: str) -> None:
    with PostgresBackend.from_conn_string(postgres_url, max_size=2, ivf_min_rows=10**9) as b:
        b.setup()
        b.bind_embeddings("test-model", DIM)
        _fill(b, 1200, seed=3)
    holder = _holding(  # (the build waits for it longer than the transaction_timeout)
        postgres_url,
        "SELECT count(*) FROM reflective_memories",
        (),
        5 * SESSION_TIMEOUT_MS / 1000,
        snapshot=True,
    )
    try:
        with PostgresBackend.from_conn_string(
            _ending(postgres_url), max_size=2, ivf_min_rows=10**9
        ) as backend:
            backend.bind_embeddings("test-model", DIM)
            backend.reindex(kind="ivfflat")
            state = backend.index_state()
    finally:
        holder.join()
    assert state.kind == "ivfflat" and state.lists > 0
    assert _vector_indexes(postgres_url) == [(state.name, "ivfflat", True)]


def _lock_free(url: str, namespace: str) -> bool:
    """Whether another session could take ``namespace``'s reflection lock now (it is given
    back at once)."""
    with psycopg.connect(url, autocommit=True) as conn:
        key = (APP_LOCK, namespace)
        row = conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", key).fetchone()
        if row and row[0]:
            conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", key)
        return bool(row and row[0])


def test_a_held_reflection_lock_outlives_an_idle_session_timeout(postgres_url: str) -> None:
    """A reflection holds the lock for as long as its model calls take, its connection idle
    meanwhile: ended by the server, it would give the lock to another process."""
    with PostgresBackend.from_conn_string(_ending(postgres_url), max_size=2) as backend:
        backend.setup()
        with backend.reflection_lock("ana"):
            time.sleep(3 * SESSION_TIMEOUT_MS / 1000)
            assert not _lock_free(postgres_url, "ana")
        assert _lock_free(postgres_url, "ana")
        rows = backend._pools.rows("SELECT current_setting('idle_session_timeout')")
        assert rows == [(f"{SESSION_TIMEOUT_MS}ms",)]  # (given back with the URL's setting)


def test_a_reflection_lock_whose_connection_was_lost_ends_without_error(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server releases a session's locks with it: the work done under the lock stands,
    the loss is logged, and the lock can be taken again."""
    with PostgresBackend.from_conn_string(postgres_url, max_size=2) as backend:
        backend.setup()
        with caplog.at_level(logging.WARNING), backend.reflection_lock("ana"):
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                ended = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks "
                    "WHERE locktype = 'advisory' AND classid::bigint = %s AND granted",
                    (APP_LOCK,),
                ).fetchall()
            assert ended == [(True,)]
        lost = [r.getMessage() for r in caplog.records if "was lost" in r.getMessage()]
        assert len(lost) == 1 and "'ana'" in lost[0]
        with backend.reflection_lock("ana", timeout=2):
            assert not _lock_free(postgres_url, "ana")
        assert _lock_free(postgres_url, "ana")
