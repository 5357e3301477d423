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
from langchain_reflective.thinking.middleware import ThinkingMiddleware
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
