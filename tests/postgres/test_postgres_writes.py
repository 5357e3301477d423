"""PostgresBackend's writes against a real server: records round trip, touches, keys never
reused, the reflection counter under concurrent writers, the pending queue, and a failed batch
that writes nothing."""

from __future__ import annotations

import threading
from datetime import timedelta

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.base import CounterUpdate, PendingMemory, RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.errors import (
    PendingConflictError,
    StorageError,
)
from langchain_reflective.records import MemoryRecord, new_memory_id
from langchain_reflective.scoring import ScoringConfig
from tests.postgres.sample_memories import T0, _fill, _records, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def test_records_round_trip_exactly(backend: PostgresBackend) -> None:
    records, vectors = _fill(backend, 30)
    got = backend.get("default", [r.id for r in reversed(records)])
    assert got == list(reversed(records))
    batches = list(backend.iter_records("default", batch_size=7))
    assert [r for b in batches for r in b.records] == records
    stacked = np.concatenate([b.vectors for b in batches if b.vectors is not None])
    assert stacked.dtype == np.float32 and np.array_equal(stacked, vectors)


def test_touch_is_one_update_returning_the_records(backend: PostgresBackend) -> None:
    records, _ = _fill(backend, 5)
    keys = backend.candidates(
        "default", "x", _unit(np.random.default_rng(2), 1)[0], k=5, filter=RetrievalFilter(),
        config=ScoringConfig.paper(), exact=True,
    ).keys.tolist()  # fmt: skip
    when = T0 + timedelta(days=2)
    touched = backend.touch("default", keys[:2], when)
    assert sorted(touched) == sorted(keys[:2])
    assert all(r.last_accessed_at == when for r in touched.values())
    again = backend.fetch("default", keys)
    assert [again[k].last_accessed_at == when for k in keys] == [True, True, False, False, False]
    assert again[keys[2]] == records[2]


def test_touch_skips_the_wal_flush_for_its_own_transaction_only(
    backend: PostgresBackend, postgres_url: str
) -> None:
    """The touch statement turns ``synchronous_commit`` off for the transaction it runs in and
    never for the connection: memory writes later on the same pooled connection still wait
    for their flush (docs/architecture.md)."""
    from langchain_reflective.backends.postgres.queries import TOUCH

    _fill(backend, 3)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        args = {"when": T0, "ns": "default", "keys": [1, 2]}
        assert len(conn.execute(TOUCH, args).fetchall()) == 2  # its own transaction
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        with conn.transaction():
            conn.execute(TOUCH, args)
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    assert all(r.last_accessed_at == T0 for r in backend.fetch("default", [1, 2]).values())


def test_deleted_keys_are_never_reused(backend: PostgresBackend) -> None:
    records, _ = _fill(backend, 3)
    before = backend.candidates(
        "default", "x", _unit(np.random.default_rng(2), 1)[0], k=3, filter=RetrievalFilter(),
        config=ScoringConfig.paper(), exact=True,
    ).keys  # fmt: skip
    assert backend.delete("default", [records[-1].id]) == 1
    _fill(backend, 1, seed=4)
    after = backend.candidates(
        "default", "x", _unit(np.random.default_rng(2), 1)[0], k=3, filter=RetrievalFilter(),
        config=ScoringConfig.paper(), exact=True,
    ).keys  # fmt: skip
    assert after[-1] > before[-1]


def test_counter_is_exact_under_concurrent_writers(backend: PostgresBackend) -> None:
    rng = np.random.default_rng(0)

    def writer(w: int) -> None:
        for i in range(20):
            rec = MemoryRecord(id=new_memory_id(), text=f"w{w} m{i}", importance=0.25)
            backend.put([rec], _unit(rng, 1), counter=CounterUpdate("default", 0.25, 1))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    state = backend.reflection_state("default")
    assert (state.adds_since, state.importance_sum) == (120, 30.0)
    assert backend.count("default") == 120
    # a reset written with memories leaves them out of the new count
    late = MemoryRecord(id=new_memory_id(), text="the reflection", kind="reflection")
    backend.put([late], _unit(rng, 1), counter=CounterUpdate("default", reset_at=T0))
    state = backend.reflection_state("default")
    assert (state.adds_since, state.importance_sum, state.last_reflection_at) == (0, 0.0, T0)
    assert backend.recent("default", since_last_reflection=True) == []
    newer = MemoryRecord(id=new_memory_id(), text="after it")
    backend.put([newer], _unit(rng, 1), counter=CounterUpdate("default", 0.5, 1))
    assert backend.recent("default", since_last_reflection=True) == [newer]
    assert backend.reflection_state("other") == type(state)(generation=0)


def test_pending_queue_and_its_conflicts(backend: PostgresBackend) -> None:
    items = [
        PendingMemory(
            id=new_memory_id(), namespace="default", text=f"turn {i}", kind="observation",
            created_at=T0 + timedelta(seconds=i), importance=None if i else 0.4, metadata={"i": i},
        )
        for i in range(3)
    ]  # fmt: skip
    backend.enqueue(items)
    assert backend.pending() == items
    assert backend.pending(limit=1, newest=True) == items[-1:]
    assert backend.count_pending("default") == 3 and backend.count_pending("other") == 0
    with pytest.raises(StorageError):
        backend.enqueue(items[:1])  # already queued
    done = MemoryRecord(id=items[0].id, text=items[0].text, created_at=items[0].created_at)
    rng = np.random.default_rng(0)
    backend.put([done], _unit(rng, 1), pending=[items[0].id])
    assert backend.count_pending() == 2 and backend.get("default", [done.id]) == [done]
    # completing it again (another process did) writes nothing
    twice = MemoryRecord(id=new_memory_id(), text="other")
    with pytest.raises(PendingConflictError):
        backend.put([twice], _unit(rng, 1), pending=[items[0].id])
    assert backend.get("default", [twice.id]) == []
    with pytest.raises(StorageError):
        backend.enqueue(
            [PendingMemory(done.id, "default", "x", "observation", T0, None, {})]
        )  # already stored
    assert backend.purge("default") == 1 and backend.count_pending() == 0


def test_a_failed_batch_writes_nothing(backend: PostgresBackend) -> None:
    records, _ = _fill(backend, 3)
    fresh = _records(3, seed=11)
    rng = np.random.default_rng(0)
    with pytest.raises(StorageError, match="duplicate"):
        backend.put([*fresh, records[0]], _unit(rng, 4), counter=CounterUpdate("default", 1.0, 4))
    assert backend.count("default") == 3
    assert backend.reflection_state("default").adds_since == 0
