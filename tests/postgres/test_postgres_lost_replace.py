"""A replace (a store's put over an existing key, ``MemoryStream.add(..., replacing=ids)``) whose
connection the server drops is settled as a put is (``Pools.writing``): run again if it did not
commit, not run again if it did, and ``WriteOutcomeUnknownError`` naming its memories when
that cannot be read. It ran on a plain connection, so a drop midway failed the call with a
``ConnectionLostError`` that said nothing of its outcome (a retry after a lost commit reply
would count the counter change twice)."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.failures import (
    ConnectionLostError,
    WriteOutcomeUnknownError,
)
from langchain_reflective.backends.postgres.writes import Replacement
from langchain_reflective.backends.types import CounterUpdate
from langchain_reflective.errors import StorageError
from langchain_reflective.records import MemoryRecord
from tests.postgres.connection_faults import (
    _commits_wait_for_a_standby,
    _drop_connections,
    _terminated_while_waiting_for_the_standby,
)
from tests.postgres.sample_memories import _fill, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def _over(old: MemoryRecord, text: str) -> MemoryRecord:
    """A new memory under ``old``'s id (as a store's put over a key writes it)."""
    return MemoryRecord(id=old.id, text=text, namespace=old.namespace, metadata={"v": text})


def test_a_replace_whose_connection_was_lost_is_written_exactly_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropped in the middle of its transaction, a replace runs again; dropped while its commit
    waits for the reply, it is not run again, though its new memory has the old one's id (so
    the ids cannot tell whether it committed: the keys do). Either way the call returns what
    it deleted, and the memories and the reflection counter hold each replace once."""
    from langchain_reflective.backends.postgres import connection, writes

    monkeypatch.setattr(connection, "IDLE_CHECK_SECONDS", 3600.0)
    durable = postgres_url + "&options=-c%20synchronous_commit%3Don"  # (the server's is off)
    rng = np.random.default_rng(3)
    with PostgresBackend.from_conn_string(durable, min_size=2) as backend:
        backend.setup()
        old, _ = _fill(backend, 3)
        add_stats, drops = writes.add_lexical_stats, []

        def dropped_midway(*args: Any) -> None:
            if not drops:
                drops.append(_drop_connections(postgres_url))
            add_stats(*args)

        monkeypatch.setattr(writes, "add_lexical_stats", dropped_midway)
        first = _over(old[0], "first update")
        counter = CounterUpdate("default", 0.5, 1)
        assert backend.replace("default", [old[0].id], [first], _unit(rng, 1), counter=counter)
        assert drops and drops[0] >= 1  # (the replace's own connection among them)
        monkeypatch.setattr(writes, "add_lexical_stats", add_stats)

        second = _over(old[1], "second update")
        with (
            _commits_wait_for_a_standby(postgres_url),
            _terminated_while_waiting_for_the_standby(postgres_url),
        ):
            deleted = backend.replace(
                "default", [old[1].id], [second], _unit(rng, 1), counter=counter
            )
        assert deleted == 1
        stored = {r.id: r.text for r in backend.recent("default")}
        assert stored == {
            old[0].id: "first update",
            old[1].id: "second update",
            old[2].id: old[2].text,
        }
        state = backend.reflection_state("default")
        assert state.adds_since == 2 and state.importance_sum == pytest.approx(1.0)


def test_a_lost_replaces_outcome_is_read_from_its_keys(postgres_url: str) -> None:
    """What a replace's outcome check reads after a lost connection: lost before its statements
    all returned, nothing committed (run it again); its new key stored, committed; a key it
    deletes still there, or no new key where it wrote one, not committed; only keys gone that
    another process may have changed, a ``StorageError`` that says so rather than a guess."""
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        old, _ = _fill(backend, 3)
        vec = _unit(np.random.default_rng(4), 1)
        new = [_over(old[0], "new")]
        run = Replacement("default", [old[0].id], new, vec, None, backend._vector_oid)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            key_of = dict(conn.execute("SELECT id, seq FROM reflective_memories").fetchall())
            assert run.outcome(conn) is None  # (never ran)
            with conn.transaction():
                done = run.write(conn)
            assert done == (1, run.newest) and run.outcome(conn) == done  # committed
            never = done[1] + 1000  # a key never taken: its new memory not stored
            run.newest, run.deleted = never, [key_of[old[1].id]]  # and an old one still there
            assert run.outcome(conn) is None  # not committed
            run.deleted = []  # (it deleted none)
            assert run.outcome(conn) is None
            run.deleted = [never + 1]  # deleted and stored keys both gone: cannot tell
            with pytest.raises(StorageError, match="cannot be read back"):
                run.outcome(conn)
            run.newest = 0  # it only deleted, and they are gone: committed
            assert run.outcome(conn) == (1, 0)
            run.deleted = []  # it deleted and stored nothing: only its counter would tell
            with pytest.raises(StorageError, match="only its counter change"):
                run.outcome(conn)


def test_a_replace_whose_outcome_cannot_be_read_says_so_and_names_its_memories(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replace's connection is lost after its statements, and so is the connection of the
    check that follows: ``WriteOutcomeUnknownError`` with the memories' ids, not run again."""
    from langchain_reflective.backends.postgres import connection, writes

    monkeypatch.setattr(connection, "IDLE_CHECK_SECONDS", 3600.0)
    with PostgresBackend.from_conn_string(postgres_url, min_size=2) as backend:
        backend.setup()
        old, _ = _fill(backend, 3)
        runs: list[int] = []
        write = writes.Replacement.write

        def lost_after(self: Replacement, conn: psycopg.Connection[Any]) -> tuple[int, int]:
            runs.append(1)
            done = write(self, conn)
            _drop_connections(postgres_url)  # (before its commit: nothing is stored)
            return done

        def server_gone(self: Replacement, conn: Any) -> None:
            raise ConnectionLostError("the connection to Postgres failed: server gone")

        monkeypatch.setattr(writes.Replacement, "write", lost_after)
        monkeypatch.setattr(writes.Replacement, "outcome", server_gone)
        new = _over(old[0], "new")
        with pytest.raises(WriteOutcomeUnknownError, match="whether the write committed") as lost:
            backend.replace("default", [old[0].id], [new], _unit(np.random.default_rng(5), 1))
        assert old[0].id in " ".join(lost.value.__notes__)
        assert runs == [1]  # (not written again)
        assert [r.text for r in backend.get("default", [old[0].id])] == [old[0].text]
