"""A write whose connection the server drops, against a real server: stored exactly once whether
the drop came before or after its commit, an outcome that cannot be read said so (naming the
memories), and a write stored in part reported as such, never repeated."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.base import CounterUpdate, PendingMemory
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.failures import ConnectionLostError
from langchain_reflective.errors import (
    DuplicateIdError,
    StorageError,
)
from langchain_reflective.records import MemoryRecord, new_memory_id
from tests.postgres.connection_faults import (
    _commits_wait_for_a_standby,
    _drop_connections,
    _terminated_while_waiting_for_the_standby,
)
from tests.postgres.sample_memories import T0, _fill, _records, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def test_a_write_whose_connection_was_lost_is_stored_exactly_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server drops the connection of a put or an enqueue: in the middle of its
    transaction (nothing committed: the write runs again), or while its commit waits for a
    reply (committed: it is not run again). Either way the call succeeds, and the memories,
    the queue and the reflection counter hold each write once."""
    from langchain_reflective.backends.postgres import connection, writes

    monkeypatch.setattr(connection, "IDLE_CHECK_SECONDS", 3600.0)
    durable = postgres_url + "&options=-c%20synchronous_commit%3Don"  # (the server's is off)
    with PostgresBackend.from_conn_string(durable, min_size=2) as backend:
        backend.setup()
        rng = np.random.default_rng(5)
        first = _records(2, "default", seed=1)
        add_stats = writes.add_lexical_stats
        drops: list[int] = []

        def dropped_midway(*args: Any) -> None:
            if not drops:
                drops.append(_drop_connections(postgres_url))
            add_stats(*args)

        monkeypatch.setattr(writes, "add_lexical_stats", dropped_midway)
        backend.put(first, _unit(rng, 2), counter=CounterUpdate("default", 0.5, 2))
        assert drops and drops[0] >= 1  # (the put's own connection among them)
        monkeypatch.setattr(writes, "add_lexical_stats", add_stats)

        second = _records(3, "default", seed=2)
        items = [PendingMemory(new_memory_id(), "default", "queued", "observation", T0, None, {})]
        with _commits_wait_for_a_standby(postgres_url):
            with _terminated_while_waiting_for_the_standby(postgres_url):
                backend.put(second, _unit(rng, 3), counter=CounterUpdate("default", 0.25, 3))
            with _terminated_while_waiting_for_the_standby(postgres_url):
                backend.enqueue(items)
        assert backend.count("default") == 5
        assert {r.id for r in backend.recent("default")} == {r.id for r in first + second}
        state = backend.reflection_state("default")
        assert state.adds_since == 5 and state.importance_sum == pytest.approx(0.75)
        assert backend.pending() == items


def test_a_write_whose_outcome_cannot_be_read_says_so_and_names_its_memories(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write's connection is lost as its commit is sent, and so is the server for the
    check that follows: the error said only "the connection to Postgres failed", so a caller
    retrying the add stored it twice when the first had committed. It now says the outcome is
    unknown, names the memories, and the write is not run again."""
    from langchain_reflective.backends.postgres import backend as backend_module
    from langchain_reflective.backends.postgres import connection
    from langchain_reflective.backends.postgres.failures import WriteOutcomeUnknownError

    monkeypatch.setattr(connection, "IDLE_CHECK_SECONDS", 3600.0)
    with PostgresBackend.from_conn_string(postgres_url, min_size=2) as backend:
        backend.setup()
        write_batch, calls = backend_module.write_batch, []

        def dropped_after(*args: Any) -> int:
            newest = write_batch(*args)
            calls.append(_drop_connections(postgres_url))  # (then its commit is sent)
            return newest

        def server_gone(conn: Any, records: Any) -> None:
            raise ConnectionLostError("the connection to Postgres failed: server gone")

        monkeypatch.setattr(backend_module, "write_batch", dropped_after)
        monkeypatch.setattr(backend_module, "stored_outcome", server_gone)
        records = _records(7, "default", seed=4)
        with pytest.raises(WriteOutcomeUnknownError, match="whether the write committed") as lost:
            backend.put(records, _unit(np.random.default_rng(4), 7))
        assert isinstance(lost.value, StorageError)
        assert (
            records[0].id in " ".join(lost.value.__notes__) and "2 more" in lost.value.__notes__[0]
        )
        assert len(calls) == 1  # (not written again)
        monkeypatch.setattr(backend_module, "write_batch", write_batch)
        assert backend.count("default") == 0  # (dropped before its commit: nothing stored)


def test_a_lost_write_stored_in_part_is_reported_not_repeated(postgres_url: str) -> None:
    """What a write's outcome check reads: all of it stored (the newest key), none (run it
    again), or a part, which only another write holding some of the ids can cause: this one
    did not commit, and it is refused as a duplicate (``DuplicateIdError``, a StorageError), so
    a caller can write again without those ids, rather than a second write failing."""
    from langchain_reflective.backends.postgres.writes import queued_outcome, stored_outcome

    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        stored, _ = _fill(backend, 2)
        other = _records(1, seed=9)
        queued = [PendingMemory(new_memory_id(), "default", "q", "observation", T0, None, {})]
        backend.enqueue(queued)
        with psycopg.connect(postgres_url) as conn:
            newest = conn.execute("SELECT max(seq) FROM reflective_memories").fetchone()
            assert stored_outcome(conn, stored) == newest[0]  # type: ignore[index]
            assert stored_outcome(conn, other) is None
            assert stored_outcome(conn, [r.with_access(T0) for r in stored[:1]]) is not None
            moved = [MemoryRecord(id=stored[0].id, text="x", namespace="elsewhere")]
            assert stored_outcome(conn, moved) is None  # (that id is another namespace's)
            with pytest.raises(DuplicateIdError, match="1 of 2 of the ids are taken now"):
                stored_outcome(conn, [stored[0], *other])
            assert queued_outcome(conn, queued) is True
            fresh = [PendingMemory(new_memory_id(), "default", "n", "observation", T0, None, {})]
            assert queued_outcome(conn, fresh) is None
            with pytest.raises(DuplicateIdError, match="1 of 2 of the ids are taken now"):
                queued_outcome(conn, queued + fresh)
            elsewhere = [dataclasses.replace(queued[0], namespace="elsewhere")]
            assert queued_outcome(conn, elsewhere) is None  # (that id is another namespace's)
