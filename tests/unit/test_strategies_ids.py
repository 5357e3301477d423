"""An observation's id is its identity: a turn committed again (a retry) is stored once."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import (
    BaseMemoryStrategy,
    HybridMemory,
    ImportanceMemory,
    MemoryStream,
    Observation,
    SemanticMemory,
    WindowMemory,
)
from tests.fakes import WordEmbeddings
from tests.unit.strategy_fixtures import Make, strategy_fixture

BUILT_INS: dict[str, Make] = {
    "window": lambda _: WindowMemory(),
    "importance": lambda _: ImportanceMemory(),
    "hybrid": lambda _: HybridMemory(capacity=2, threshold=0.5),
    "semantic": lambda _: SemanticMemory(MemoryStream(WordEmbeddings()), k=10),
    "semantic-file": lambda path: SemanticMemory(
        MemoryStream(WordEmbeddings(), path=path / "semantic.db"), k=10
    ),
}


strategy = strategy_fixture(BUILT_INS)


def questions(strategy: BaseMemoryStrategy, namespace: str) -> list[str]:
    return [m.text for m in strategy.context([], namespace=namespace) if m.type == "human"]


async def test_a_turn_committed_again_is_kept_once(strategy: BaseMemoryStrategy) -> None:
    """Every built-in stored the same observation (same id) as many times as it was
    committed, so a retried commit showed the turn twice."""
    turn = Observation("I live in Lisbon", "Noted, Lisbon.", namespace="ana", importance=0.9)
    other = Observation("I have a cat", "Lovely.", namespace="ana", importance=0.9)
    strategy.commit(turn)
    strategy.commit(turn)
    await strategy.acommit(turn)
    await asyncio.gather(strategy.acommit(other), strategy.acommit(other))
    strategy.commit(replace(turn, importance=0.8))  # the same turn, whatever it carries
    assert questions(strategy, "ana") == ["I live in Lisbon", "I have a cat"]
    strategy.commit(replace(turn, namespace="bob"))  # per namespace: bob's is another turn
    assert questions(strategy, "bob") == ["I live in Lisbon"]
    strategy.purge(namespace="ana")  # purged, it can be committed again
    strategy.commit(turn)
    assert questions(strategy, "ana") == ["I live in Lisbon"]


def test_a_repeat_from_many_threads_is_kept_once(strategy: BaseMemoryStrategy) -> None:
    turns = [Observation(f"question {i}", "ok", namespace="ana", importance=0.9) for i in range(3)]
    barrier = threading.Barrier(6)

    def commit_all() -> None:
        barrier.wait(timeout=30)
        for turn in turns:
            strategy.commit(turn)

    workers = [threading.Thread(target=commit_all) for _ in range(6)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=60)
    assert sorted(questions(strategy, "ana")) == [f"question {i}" for i in range(3)]


def test_a_repeat_is_not_rated_again() -> None:
    calls: list[str] = []

    def scorer(observation: Observation) -> float:
        calls.append(observation.id)
        return 0.5

    memory = ImportanceMemory(scorer=scorer)
    turn = Observation("q", "r")
    memory.commit(turn)
    memory.commit(turn)
    assert calls == [turn.id]


def test_a_turn_the_policy_evicted_is_a_new_turn_when_committed_again() -> None:
    """Ids are remembered while their turn is kept (no unbounded id list)."""
    memory = WindowMemory(capacity=1)
    first, second = Observation("first", "a"), Observation("second", "b")
    for turn in (first, second, first):
        memory.commit(turn)
    assert [m.text for m in memory.context([])] == ["first", "a"]


async def test_a_retry_after_a_cancelled_acommit_stores_once(tmp_path: Path) -> None:
    """A cancelled ``acommit`` whose write had started still stores the turn (the write runs
    on in its worker thread); the caller's retry stored it a second time."""
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "m.db")
    memory = SemanticMemory(stream, k=10)
    started = threading.Event()
    put = stream._backend.put

    def slow_put(*args: Any, **kwargs: Any) -> None:
        started.set()
        time.sleep(0.2)
        put(*args, **kwargs)

    stream._backend.put = slow_put  # type: ignore[method-assign]
    turn = Observation("I live in Lisbon", "Noted.", namespace="ana")
    task = asyncio.create_task(memory.acommit(turn))
    while not started.is_set():
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await memory.acommit(turn)  # the retry
    assert questions(memory, "ana") == ["I live in Lisbon"]
    assert stream.count(namespace="ana") == 1
    stream.close()


def test_an_id_the_stream_cannot_store_still_stores_the_turn() -> None:
    """An id of the caller's own that no backend can index (too long) is not used as the
    memory's id: the turn is stored under a new one, as before."""
    with MemoryStream(WordEmbeddings()) as stream:
        memory = SemanticMemory(stream, k=10)
        memory.commit(Observation("long id", "ok", namespace="ana", id="x" * 5000))
        assert questions(memory, "ana") == ["long id"]
