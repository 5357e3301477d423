"""A memory is queued or stored, never both, also when an enqueue of an id races the
completion of that id's earlier queue entry (as a strategy queueing a message under an id
derived from it does when a thread is re-run while the first copy is being completed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from langchain_reflective import DuplicateIdError, PostgresBackend
from langchain_reflective.backends.base import PendingMemory
from langchain_reflective.backends.postgres import writes
from langchain_reflective.records import MemoryRecord
from tests.postgres.sample_memories import DIM, T0, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def _open(url: str) -> PostgresBackend:
    backend = PostgresBackend.from_conn_string(url, max_size=2)
    backend.setup()
    backend.bind_embeddings("test-model", DIM)
    return backend


@pytest.fixture
def two(postgres_url: str) -> Iterator[tuple[PostgresBackend, PostgresBackend]]:
    """Two backends on one database: two processes."""
    first, second = _open(postgres_url), _open(postgres_url)
    yield first, second
    first.close()
    second.close()


def _queued(id: str) -> PendingMemory:
    return PendingMemory(id, "default", f"turn {id}", "observation", T0, 0.5, {})


def test_an_enqueue_racing_the_completion_of_its_id_is_refused(
    two: tuple[PostgresBackend, PostgresBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    drainer, other = two
    drainer.enqueue([_queued("m1")])
    dequeued, release = threading.Event(), threading.Event()
    dequeue = writes.dequeue

    def held_open(conn: Any, ids: Any, records: Any) -> None:
        dequeue(conn, ids, records)  # the queue row deleted, the memory inserted: uncommitted
        if threading.current_thread().name == "completion":
            dequeued.set()
            release.wait(30)

    monkeypatch.setattr(writes, "dequeue", held_open)
    done = MemoryRecord(id="m1", text="turn m1", created_at=T0, importance=0.5)
    vector = _unit(np.random.default_rng(1), 1)
    completion = threading.Thread(
        target=lambda: drainer.put([done], vector, pending=["m1"]), name="completion"
    )
    completion.start()
    assert dequeued.wait(30)
    failed: list[BaseException] = []

    def enqueue_again() -> None:
        try:
            other.enqueue([_queued("m1")])
        except BaseException as exc:
            failed.append(exc)

    again = threading.Thread(target=enqueue_again)
    again.start()
    time.sleep(0.5)  # (its statements reach the server while the completion is open)
    release.set()
    completion.join(30)
    again.join(30)
    assert [type(e) for e in failed] == [DuplicateIdError]
    assert other.pending() == []  # not queued again: stored only
    assert [r.id for r in other.get("default", ["m1"])] == ["m1"]
