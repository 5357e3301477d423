"""Turn numbers under contention and after crashes: many writers of one namespace at once (the
graph and the agent middleware), a snapshot left without its summary, and what a refused turn
number says."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage

from langchain_reflective import ContextMemory, MemoryStream, RetryConfig, create_thinking_graph
from langchain_reflective.errors import DuplicateIdError
from langchain_reflective.thinking import TurnTakenError
from langchain_reflective.thinking.middleware import ThinkingMiddleware
from langchain_reflective.thinking.steps import _STALE_MOVES
from tests.fakes import WordEmbeddings
from tests.thinking_fakes import FlakyEmbeddings, Rounds, decide, is_summary_call, round_, summary
from tests.unit.test_middleware import FakeChat

NO_RETRY = RetryConfig(attempts=1)
MW_LOGGER = "langchain_reflective.thinking.middleware"


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[MemoryStream]:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "turns.db") as s:
        yield s


def one_turn(i: int) -> Rounds:
    return Rounds(
        script=[round_(f"thought {i}", decide(False, "ok", f"d{i}"))],
        summaries=[summary(f"summary {i}", [])],
    )


async def test_many_graph_runs_of_one_namespace_at_once_all_store_their_turn(
    stream: MemoryStream,
) -> None:
    """24 runs at once: each loser of a number moves on while another writer took it (the
    numbers were tried in lockstep, and the 9th loser raised TurnTakenError after paying for
    all its model calls)."""
    n = 24

    async def run(i: int) -> int:
        graph = create_thinking_graph(one_turn(i), stream, retry=NO_RETRY)
        out = await graph.ainvoke({"context": f"context {i}", "namespace": "ns"})
        return int(out["turn"])

    turns = await asyncio.gather(*(run(i) for i in range(n)))
    assert sorted(turns) == list(range(1, n + 1))
    memory = ContextMemory(stream)
    assert memory.last_turn(namespace="ns") == n
    assert len(memory.recent_summaries(namespace="ns")) == n


async def test_many_agent_turns_of_one_user_at_once_are_all_recorded(
    stream: MemoryStream, caplog: pytest.LogCaptureFixture
) -> None:
    n = 20
    agent: Any = create_agent(
        FakeChat(), middleware=[ThinkingMiddleware(Rounds(), stream, retry=NO_RETRY)]
    )
    with caplog.at_level(logging.ERROR, logger=MW_LOGGER):
        await asyncio.gather(
            *(
                agent.ainvoke({"messages": [{"role": "user", "content": f"request {i}"}]})
                for i in range(n)
            )
        )
    assert not caplog.records
    memory = ContextMemory(stream)
    assert memory.last_turn() == n
    assert sorted(s.turn for s in memory.recent_summaries()) == list(range(1, n + 1))


class StealsTheTurn(Rounds):
    """A thinker whose summary call lets another writer store the next turn first."""

    memory: Any = None

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        if is_summary_call(messages):
            turn = self.memory.next_turn()
            self.memory.record_turn(turn, "another writer's turn", "theirs")
        return super()._generate(messages, *args, **kwargs)


def test_a_lost_agent_turn_is_logged_under_the_number_it_was_stored_as(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Turn 1 is taken meanwhile, the turn moves to 2, whose snapshot's embedding fails: the
    ERROR names turn 2 (it named the first number tried)."""
    with MemoryStream(FlakyEmbeddings(fail_on="boom"), path=tmp_path / "lost.db") as stream:
        memory = ContextMemory(stream)
        thinker = StealsTheTurn(memory=memory)
        agent: Any = create_agent(
            FakeChat(), middleware=[ThinkingMiddleware(thinker, stream, retry=NO_RETRY)]
        )
        with caplog.at_level(logging.ERROR, logger=MW_LOGGER):
            agent.invoke({"messages": [{"role": "user", "content": "boom"}]})
        [error] = caplog.records
        assert "could not record turn 2 of namespace" in error.getMessage()
        assert memory.last_turn() == 1


# -- a snapshot left without its summary (a crash between the two writes) ----------------------


def orphan(memory: ContextMemory, turn: int, context: str, namespace: str = "default") -> None:
    """Store only a turn's snapshot, as a process killed between the turn's two adds leaves."""
    memory.stream.add(**memory._snapshot_args(turn, context, [], namespace, None))


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_recording_a_crashed_turn_again_stores_only_its_missing_summary(
    stream: MemoryStream, use_async: bool
) -> None:
    """The same turn with the same context completes it (it was refused as "already stored"
    forever, and the turn never reached the summaries)."""
    memory = ContextMemory(stream)
    orphan(memory, 1, "first context")
    assert memory.summary_by_turn(1) is None and memory.next_turn() == 2
    turn = (1, "first context", "read the first context", ["an insight"])
    if use_async:
        snap, summ = await memory.arecord_turn(*turn)
    else:
        snap, summ = memory.record_turn(*turn)
    assert (snap.id, summ.context_id) == (memory.context_id(1),) * 2
    assert stream.count() == 2 and [s.turn for s in memory.recent_summaries()] == [1]
    with pytest.raises(TurnTakenError, match="already stored"):
        memory.record_turn(*turn)  # now whole: taken


def test_a_crashed_turn_is_not_completed_with_another_context(stream: MemoryStream) -> None:
    memory = ContextMemory(stream)
    orphan(memory, 1, "first context")
    with pytest.raises(TurnTakenError, match=r"its snapshot.*other contents.*no summary"):
        memory.record_turn(1, "another context", "a summary")
    assert stream.count() == 1


def test_completing_a_crashed_turn_keeps_its_snapshot_when_the_summary_fails(
    tmp_path: Path,
) -> None:
    """The snapshot was not written by this call: a failed summary add does not delete it."""
    with MemoryStream(FlakyEmbeddings(fail_on="failing"), path=tmp_path / "c.db") as s:
        memory = ContextMemory(s)
        orphan(memory, 1, "first context")
        with pytest.raises(RuntimeError, match="embedding service down"):
            memory.record_turn(1, "first context", "failing summary")
        assert memory.context_by_turn(1) is not None and s.count() == 1


def test_the_next_turn_reports_a_crashed_one(
    stream: MemoryStream, caplog: pytest.LogCaptureFixture
) -> None:
    """Recording turn 2 (here by the graph, after a restart) warns that turn 1 has a snapshot
    and no summary, and how to complete it; a whole turn 1 is not reported."""
    memory = ContextMemory(stream)
    orphan(memory, 1, "first context")
    with caplog.at_level(logging.WARNING, logger="langchain_reflective.thinking"):
        out = create_thinking_graph(one_turn(2), stream, retry=NO_RETRY).invoke(
            {"context": "second context"}
        )
    assert out["turn"] == 2
    [warning] = [r for r in caplog.records if "no summary" in r.getMessage()]
    assert "turn 1 of namespace 'default'" in warning.getMessage()
    assert "record_turn(1" in warning.getMessage()
    caplog.clear()
    memory.record_turn(1, "first context", "completed")
    with caplog.at_level(logging.WARNING, logger="langchain_reflective.thinking"):
        memory.record_turn(3, "third context", "s")
    assert not caplog.records


def test_a_turn_being_stored_by_another_writer_is_not_reported(
    stream: MemoryStream, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Turn 1's summary is missing when turn 2 checks its number, but stored by the time turn 2
    is: no warning (the report reads the previous turn again after its own writes)."""
    memory = ContextMemory(stream)
    orphan(memory, 1, "first context")
    add = stream.add

    def other_writer_finishes(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(stream, "add", add)
        stream.add(**memory._summary_args(1, "first", [], False, "default", None))
        return add(*args, **kwargs)

    monkeypatch.setattr(stream, "add", other_writer_finishes)
    with caplog.at_level(logging.WARNING, logger="langchain_reflective.thinking"):
        memory.record_turn(2, "second context", "s")
    assert not caplog.records and stream.count() == 4


def test_a_turn_completed_by_another_writer_between_its_writes_is_kept_whole(
    stream: MemoryStream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers of the same turn and context: the second completes the first's snapshot
    with its summary before the first's summary add, which then fails on the duplicate id;
    the first must not delete the snapshot the stored summary cites."""
    memory = ContextMemory(stream)
    add = stream.add
    calls: list[int] = []

    def racing_add(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the first writer's summary add: the other one completes first
            monkeypatch.setattr(stream, "add", add)
            ContextMemory(stream).record_turn(1, "same context", "the other summary")
        return add(*args, **kwargs)

    monkeypatch.setattr(stream, "add", racing_add)
    with pytest.raises(TurnTakenError, match="already stored"):
        memory.record_turn(1, "same context", "my summary")
    snap, summ = memory.context_by_turn(1), memory.summary_by_turn(1)
    assert snap is not None and summ is not None and summ.summary == "the other summary"


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_completing_a_snapshot_its_writer_then_completes_is_taken(
    stream: MemoryStream, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    """Two writers of the same turn and context: the first has stored its snapshot when the
    second checks the number (snapshot alone, same context: store only the summary), then the
    first stores its summary before the second does. The second's summary add failed with a
    raw DuplicateIdError (so the graph did not move on to the next number); it is taken, and
    nothing is deleted."""
    memory = ContextMemory(stream)
    orphan(memory, 1, "same context")  # the first writer, between its two adds
    check = memory._check_new

    def first_writer_finishes(turn: int, namespace: str, context: str) -> Any:
        out = check(turn, namespace, context)
        stream.add(**memory._summary_args(1, "the first summary", [], False, namespace, None))
        return out

    monkeypatch.setattr(memory, "_check_new", first_writer_finishes)
    with pytest.raises(TurnTakenError, match=r"turn 1 is already stored.*next turn is 2") as info:
        if use_async:
            await memory.arecord_turn(1, "same context", "the second summary")
        else:
            memory.record_turn(1, "same context", "the second summary")
    assert isinstance(info.value.__cause__, DuplicateIdError)
    snap, summ = memory.context_by_turn(1), memory.summary_by_turn(1)
    assert snap is not None and summ is not None and summ.summary == "the first summary"
    assert stream.count() == 2


def test_a_summary_kept_without_its_snapshot_holds_its_number(stream: MemoryStream) -> None:
    """A user deleted turn 2's snapshot and kept its summary: next_turn said 2, and recording
    it was refused with "turn 2 is already stored ...; the next turn is 2"."""
    memory = ContextMemory(stream)
    memory.record_turn(1, "a", "sa")
    memory.record_turn(2, "b", "sb")
    stream.delete(memory.context_id(2))
    assert memory.last_turn() == 2 and memory.next_turn() == 3
    with pytest.raises(TurnTakenError, match=r"its summary, without its snapshot.*next turn is 3"):
        memory.record_turn(2, "c", "sc")
    snap, _ = memory.record_turn(memory.next_turn(), "c", "sc")
    assert snap.turn == 3


@pytest.mark.parametrize(
    ("held", "outcome"),
    [(_STALE_MOVES - 1, _STALE_MOVES), (_STALE_MOVES, None)],
    ids=["moves", "bounded"],
)
def test_numbers_next_turn_does_not_count_move_on_a_bounded_number_of_times(
    stream: MemoryStream, held: int, outcome: int | None
) -> None:
    """Turn ids held by records of another kind: next_turn skips them (it stays 1) and
    record_turn refuses them, so no writer is seen making progress; the turn tries the numbers
    after them one by one, and gives up after _STALE_MOVES in a row."""
    memory = ContextMemory(stream)
    ids = [memory.context_id(t) for t in range(1, held + 1)]
    stream.add(texts=[f"note {t}" for t in range(1, held + 1)], ids=ids)
    assert memory.next_turn() == 1
    graph = create_thinking_graph(one_turn(1), stream, retry=NO_RETRY)
    if outcome is None:
        with pytest.raises(TurnTakenError, match=f"turn {held} is already stored"):
            graph.invoke({"context": "c"})
    else:
        assert graph.invoke({"context": "c"})["turn"] == outcome
