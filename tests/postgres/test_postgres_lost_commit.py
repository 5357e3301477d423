"""A write whose connection is lost as its commit is sent, while the server keeps its transaction
open (it has not noticed the loss yet: no FIN came, or its commit still runs): the outcome check
(``Pools.writing``) waits for that transaction to end before it reads whether it committed.

It read at once: "not committed", so the write ran again, and when the old transaction then
committed, a put or an enqueue failed on its own ids ("duplicate id?") though it was stored,
and a replace was stored twice over (its reflection counter counted twice).

The tests make the client's socket unusable just before the commit (another socket is put in
its place) while a duplicate of the original stays open here: the server's session waits, idle
in its transaction, holding its locks, until the test sends it a ``COMMIT`` or closes it.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.failures import (
    ConnectionLostError,
    WriteOutcomeUnknownError,
)
from langchain_reflective.backends.types import CounterUpdate, PendingMemory
from langchain_reflective.records import MemoryRecord, new_memory_id
from tests.postgres.sample_memories import T0, _fill, _records, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

GUARD = 15.0
"""Seconds the test waits for a session blocked by the lost transaction before it ends that
transaction anyway (so a broken check cannot hang the test)."""


def cut(conn: psycopg.Connection[Any], *, keep: bool = False) -> int:
    """Makes ``conn`` unusable on the client's side (another socket, closed at its other end,
    in place of its own), so its next statement or its commit finds the connection lost; the
    server's side is closed too, unless ``keep``: then a duplicate of the socket is returned,
    through which the server's session stays connected (-1 otherwise)."""
    fd = conn.pgconn.socket
    kept = os.dup(fd) if keep else -1
    dead, peer = socket.socketpair()
    peer.close()
    os.dup2(dead.fileno(), fd)
    dead.close()
    return kept


class _LostAtCommit:
    """Cuts a write's connection on the client's side after its statements, before its commit is
    sent, keeping the server's side open: the server's session stays idle in its transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pid = 0
        self.kept = -1
        self.runs = 0

    def wrap(self, write: Callable[..., Any], *, before_commit: bool = False) -> Callable[..., Any]:
        """``write`` (its connection among its arguments), cut after its first run's
        statements (``runs``: how many runs began); ``before_commit``: one more statement is
        sent after the cut, so the loss is found before the commit is sent."""

        def cut_after(*args: Any, **kwargs: Any) -> Any:
            self.runs += 1
            done = write(*args, **kwargs)
            if self.runs == 1:
                (conn,) = [a for a in args if isinstance(a, psycopg.Connection)]
                self.pid = conn.info.backend_pid
                self.kept = cut(conn, keep=True)  # (the commit is sent into a closed socket)
                if before_commit:
                    conn.execute("SELECT 1")  # (lost here: its commit is never sent)
            return done

        return cut_after

    def _rows(self, sql: str) -> list[Any]:
        with psycopg.connect(self.url, autocommit=True) as admin:
            return admin.execute(sql, (self.pid,)).fetchall()

    def waited_for(self) -> bool:
        """Until a session waits for a lock the lost transaction holds (``GUARD`` at most)."""
        deadline = time.monotonic() + GUARD
        while time.monotonic() < deadline:
            if self.pid and self._rows(
                "SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
            ):
                return True
            time.sleep(0.02)
        return False

    def commit(self) -> None:
        """The commit arrives late: sent on the session's own socket, and waited for."""
        query = b"COMMIT\0"
        os.write(self.kept, b"Q" + struct.pack("!i", 4 + len(query)) + query)
        for _ in range(500):
            if self._rows("SELECT 1 FROM pg_stat_activity WHERE pid = %s AND state = 'idle'"):
                break
            time.sleep(0.01)
        self.end()

    def end(self) -> None:
        """The server finds the connection gone: its session ends (its transaction, if still
        open, rolled back)."""
        if self.kept >= 0:
            os.close(self.kept)
            self.kept = -1
        for _ in range(500):
            if not self._rows("SELECT 1 FROM pg_stat_activity WHERE pid = %s"):
                return
            time.sleep(0.01)


def _settled_meanwhile(lost: _LostAtCommit, how: str) -> tuple[threading.Thread, list[bool]]:
    """A thread that ends the lost transaction (``how``: "commits" or "aborts") once a session
    waits for it; whether one did."""
    seen: list[bool] = []

    def run() -> None:
        seen.append(lost.waited_for())
        lost.commit() if how == "commits" else lost.end()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, seen


@pytest.fixture
def backend(postgres_url: str) -> Iterator[PostgresBackend]:
    with PostgresBackend.from_conn_string(postgres_url, min_size=2) as opened:
        opened.setup()
        yield opened


def _over(old: MemoryRecord, text: str) -> MemoryRecord:
    return MemoryRecord(id=old.id, text=text, namespace=old.namespace, metadata={"v": text})


@pytest.mark.parametrize("how", ["commits", "aborts"])
@pytest.mark.parametrize("call", ["put", "replace", "enqueue"])
def test_the_outcome_check_waits_for_the_lost_transaction_to_end(
    backend: PostgresBackend,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    call: str,
    how: str,
) -> None:
    """The check waits until the lost transaction ends: committed late, the write is not run
    again (the call returns what it wrote, stored once); rolled back, it runs again, once. A
    put into a namespace's first memories included (its counter row is the transaction's own,
    not yet committed)."""
    from langchain_reflective.backends.postgres import backend as backend_module
    from langchain_reflective.backends.postgres import writes

    lost = _LostAtCommit(postgres_url)
    old, _ = _fill(backend, 3)
    rng = np.random.default_rng(7)
    counter = CounterUpdate("default", 0.5, 1)
    fresh = _records(2, "fresh", seed=8)
    queued = [PendingMemory(new_memory_id(), "default", "q", "observation", T0, None, {})]
    if call == "put":
        monkeypatch.setattr(backend_module, "write_batch", lost.wrap(backend_module.write_batch))
    elif call == "replace":
        monkeypatch.setattr(writes.Replacement, "write", lost.wrap(writes.Replacement.write))
    else:
        monkeypatch.setattr(backend_module, "enqueue", lost.wrap(backend_module.enqueue))
    thread, seen = _settled_meanwhile(lost, how)
    try:
        if call == "put":
            backend.put(fresh, _unit(rng, 2), counter=CounterUpdate("fresh", 0.5, 2))
        elif call == "replace":
            new = _over(old[0], "new")
            assert backend.replace("default", [old[0].id], [new], _unit(rng, 1), counter=counter)
        else:
            backend.enqueue(queued)
    finally:
        thread.join()
        lost.end()
    assert seen == [True], "no session waited for the lost transaction"
    assert lost.runs == (1 if how == "commits" else 2)
    if call == "put":
        assert {r.id for r in backend.recent("fresh")} == {r.id for r in fresh}
        state = backend.reflection_state("fresh")
        assert state.adds_since == 2 and state.importance_sum == pytest.approx(0.5)
    elif call == "replace":
        assert {r.id: r.text for r in backend.recent("default")}[old[0].id] == "new"
        assert backend.count("default") == 3
        state = backend.reflection_state("default")
        assert state.adds_since == 1 and state.importance_sum == pytest.approx(0.5)
    else:
        assert backend.pending() == queued


def test_a_lost_transaction_still_open_after_the_wait_is_an_unknown_outcome(
    backend: PostgresBackend, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lost transaction stays open (the server never notices; no timeout ends it): the
    check waits ``OUTCOME_WAIT`` seconds, then the put raises ``WriteOutcomeUnknownError``
    naming its memories and saying why, without running again (it ran again, and waited for
    the lost transaction's locks as long as that was open)."""
    from langchain_reflective.backends.postgres import backend as backend_module
    from langchain_reflective.backends.postgres import writes

    monkeypatch.setattr(writes, "OUTCOME_WAIT", 0.5, raising=False)  # (absent before the fix)
    lost = _LostAtCommit(postgres_url)
    _fill(backend, 3)
    monkeypatch.setattr(backend_module, "write_batch", lost.wrap(backend_module.write_batch))
    records = _records(2, seed=9)
    guard = threading.Timer(GUARD, lost.end)  # (before the fix: the rerun waited on it)
    guard.start()
    try:
        with pytest.raises(WriteOutcomeUnknownError, match="still open on the server") as raised:
            backend.put(records, _unit(np.random.default_rng(9), 2))
    finally:
        guard.cancel()
        lost.end()
    assert records[0].id in " ".join(raised.value.__notes__)
    assert lost.runs == 1
    assert backend.count("default") == 3  # (never committed: ended by closing its socket)


def test_a_write_lost_before_its_commit_runs_again_without_an_outcome_check(
    backend: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write whose connection is lost before its commit was sent stored nothing: it runs
    again at once, without an outcome check (it asked the server first, and during an outage
    raised ``WriteOutcomeUnknownError``, "it may be stored", where nothing could be); a write
    with no outcome to read (a counter change alone) runs again too. Lost again before its
    commit: a ``ConnectionLostError`` saying nothing is stored."""
    from langchain_reflective.backends.postgres import backend as backend_module

    pools = backend._pools
    runs: list[int] = []

    def lost_first(conn: psycopg.Connection[Any]) -> int:
        runs.append(1)
        if len(runs) == 1:  # (the server ends the session in the middle of the transaction)
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return len(runs)

    def lost_always(conn: psycopg.Connection[Any]) -> int:
        runs.append(1)
        conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return 0

    def never(conn: psycopg.Connection[Any]) -> int | None:
        raise AssertionError("the outcome was checked")

    assert pools.writing(lost_first, never) == 2
    runs.clear()
    assert pools.writing(lost_first, None) == 2
    runs.clear()
    with pytest.raises(ConnectionLostError, match="nothing of it is stored") as raised:
        pools.writing(lost_always, never)
    assert not isinstance(raised.value, WriteOutcomeUnknownError)
    assert "lost before its commit too" in str(raised.value) and len(runs) == 2

    write_batch, puts = backend_module.write_batch, []

    def put_lost_first(conn: psycopg.Connection[Any], *args: Any) -> int:
        puts.append(1)
        if len(puts) == 1:
            cut(conn)
        return write_batch(conn, *args)

    monkeypatch.setattr(backend_module, "write_batch", put_lost_first)
    monkeypatch.setattr(backend_module, "stored_outcome", never)
    records = _records(3, seed=11)
    backend.put(records, _unit(np.random.default_rng(11), 3), counter=CounterUpdate("x", 0.5, 3))
    assert len(puts) == 2 and backend.count("default") == 3
    assert backend.reflection_state("x").adds_since == 3  # (counted once)


@pytest.mark.parametrize("how", ["stays open", "aborts"])
@pytest.mark.parametrize("call", ["put", "replace", "enqueue"])
def test_a_rerun_after_a_loss_before_the_commit_waits_at_most_outcome_wait(
    backend: PostgresBackend,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    call: str,
    how: str,
) -> None:
    """A write whose connection is lost before its commit was sent, while the server keeps its
    transaction open (it has not noticed the loss: its locks stay held), runs again at once,
    and that run waits for the lost transaction's locks (its namespaces' counter rows, an
    enqueue's queue entries) at most ``OUTCOME_WAIT`` seconds when the user set no
    lock_timeout: then a ``ConnectionLostError`` says nothing of it is stored (the lost
    transaction never got its commit: it can only roll back), and the call can be retried. It
    waited as long as the lost transaction stayed open (no lock_timeout by default: unbounded).
    Ended meanwhile, the rerun stores the write once."""
    from langchain_reflective.backends.postgres import backend as backend_module
    from langchain_reflective.backends.postgres import writes

    lost = _LostAtCommit(postgres_url)
    old, _ = _fill(backend, 3)
    rng = np.random.default_rng(17)
    fresh = _records(2, "fresh", seed=18)
    queued = [PendingMemory(new_memory_id(), "default", "q", "observation", T0, None, {})]
    new = _over(old[0], "new")
    if call == "put":
        target, name = backend_module, "write_batch"
    elif call == "replace":
        target, name = writes.Replacement, "write"
    else:
        target, name = backend_module, "enqueue"
    monkeypatch.setattr(target, name, lost.wrap(getattr(target, name), before_commit=True))

    def write() -> None:
        if call == "put":
            backend.put(fresh, _unit(rng, 2), counter=CounterUpdate("fresh", 0.5, 2))
        elif call == "replace":
            assert backend.replace("default", [old[0].id], [new], _unit(rng, 1))
        else:
            backend.enqueue(queued)

    def stored() -> bool:
        if call == "put":
            return {r.id for r in backend.recent("fresh")} == {r.id for r in fresh}
        if call == "replace":
            return {r.id: r.text for r in backend.recent("default")}[old[0].id] == "new"
        return backend.pending() == queued

    guard = 5.0  # (before the fix: the rerun waited until this ended the lost transaction)
    if how == "stays open":
        monkeypatch.setattr(writes, "OUTCOME_WAIT", 0.5)
        ender: threading.Thread | threading.Timer = threading.Timer(guard, lost.end)
        ender.start()
        seen = [True]
    else:
        ender, seen = _settled_meanwhile(lost, "aborts")
    start = time.monotonic()
    try:
        if how == "stays open":
            with pytest.raises(ConnectionLostError, match="nothing of it is stored") as raised:
                write()
            assert not isinstance(raised.value, WriteOutcomeUnknownError)
            assert "waited 0.5 s" in str(raised.value) and "retried" in str(raised.value)
        else:
            write()
        took = time.monotonic() - start
    finally:
        if isinstance(ender, threading.Timer):
            ender.cancel()
        ender.join()
        lost.end()
    assert seen == [True], "no session waited for the lost transaction"
    assert lost.runs == 2 and took < guard, (lost.runs, took)
    if how == "stays open":
        assert not stored()  # (the lost transaction rolled back once its session ended)
        write()  # (retried: it runs once more, on a connection of its own)
        assert lost.runs == 3
    assert stored()
    assert backend.count("default") == 3
    if call == "put":
        assert backend.reflection_state("fresh").adds_since == 2  # (counted once)


@pytest.mark.parametrize("first", ["at its commit", "before its commit"])
def test_a_counter_change_alone_lost_at_its_commit_is_raised_not_checked(
    backend: PostgresBackend, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """A put of a counter change alone (no records) leaves nothing to read back, so it passes
    ``Pools.writing`` no outcome check (``None``): lost once its commit may have been sent, on
    its first run or on the rerun after a loss before its commit, the loss is raised, a
    ``ConnectionLostError``, not run again (it could count twice) and not a check that cannot
    be made (a ``TypeError`` calling ``None``)."""
    from langchain_reflective.backends.postgres import backend as backend_module

    write_batch, runs = backend_module.write_batch, []
    _fill(backend, 3)

    def lost(conn: psycopg.Connection[Any], *args: Any) -> int:
        runs.append(1)
        done = write_batch(conn, *args)
        cut(conn)  # (its commit goes into a closed socket: it never reaches the server)
        if first == "before its commit" and len(runs) == 1:
            conn.execute("SELECT 1")  # (lost before its commit: run again)
        return done

    monkeypatch.setattr(backend_module, "write_batch", lost)
    empty = _unit(np.random.default_rng(3), 0)
    with pytest.raises(ConnectionLostError) as raised:
        backend.put([], empty, counter=CounterUpdate("default", 0.5, 1))
    assert not isinstance(raised.value, WriteOutcomeUnknownError)
    assert len(runs) == (1 if first == "at its commit" else 2)
    assert backend.reflection_state("default").adds_since == 0  # (never committed)
