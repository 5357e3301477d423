"""What stays in graph state between runs: the thinking graph on a checkpointed thread, and the
agent middleware's thinking subgraph and private key."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_reflective import ContextMemory, MemoryStream, RetryConfig, create_thinking_graph
from tests.fakes import WordEmbeddings
from tests.thinking_fakes import Rounds

NO_RETRY = RetryConfig(attempts=1)


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[MemoryStream]:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "state.db") as s:
        yield s


def test_a_runs_inputs_do_not_carry_into_the_next_run_on_the_thread(
    stream: MemoryStream,
) -> None:
    """``record=False``, ``tool_calls``, ``now``, ``messages`` and ``context`` stayed in the
    thread's state: the next run was silently not recorded, then recorded with the first run's
    tool calls and timestamp, and its model was shown the first run's conversation. The
    namespace stays: the thread's owner."""
    model = Rounds()
    graph = create_thinking_graph(model, stream, retry=NO_RETRY, checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    old = datetime(2020, 1, 1, tzinfo=UTC)
    graph.invoke(
        {
            "context": "first",
            "record": False,
            "tool_calls": ["grep"],
            "now": old,
            "namespace": "alice",
            "messages": [HumanMessage("secret conversation of run 1")],
        },
        cfg,
    )
    second = graph.invoke({"context": "second"}, cfg)
    assert second["turn"] == 1 and second["context_id"] is not None  # recorded
    assert "secret conversation of run 1" not in model.thinking_calls[-1][-1].text
    memory = ContextMemory(stream)
    snap = memory.context_by_turn(1, namespace="alice")  # (the thread's namespace)
    assert snap is not None and snap.context == "second" and snap.tool_calls == ()
    assert snap.created_at is not None
    assert datetime.now(UTC) - snap.created_at < timedelta(minutes=5)
    values = graph.get_state(cfg).values
    assert values["record"] is True and values["namespace"] == "alice"
    assert not values["tool_calls"] and values["now"] is None and not values["messages"]
    with pytest.raises(Exception, match="non-empty 'context'"):
        graph.invoke({}, cfg)  # the first run's context is not thought about again


def test_the_middlewares_thinking_keeps_no_checkpoints_and_no_recalled_contexts(
    stream: MemoryStream,
) -> None:
    """The thinking subgraph ran inside a node and inherited the agent's checkpointer (7 more
    checkpoints per turn, each holding the recalled contexts), and the private key kept every
    recalled context whole though only the rendered action context is used."""
    from langchain.agents import create_agent

    from langchain_reflective.thinking.middleware import ThinkingMiddleware
    from tests.thinking_fakes import decide, recall, round_
    from tests.unit.test_middleware import FakeChat

    memory = ContextMemory(stream)
    memory.record_turn(1, "parseData " + "x" * 150_000, "parseData slow", [], namespace="alice")
    thinker = Rounds(
        script=[
            round_(f"r{i}", recall(f"a{i}", turn_numbers=[1]), decide(True, "more", f"a{i}"))
            for i in range(3)
        ]
    )
    saver = InMemorySaver()
    middleware = ThinkingMiddleware(
        thinker, stream, retry=NO_RETRY, max_rounds=3, thinking_token_budget=10**6
    )
    agent: Any = create_agent(FakeChat(), middleware=[middleware], checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("hi")]}, cfg, context={"user_id": "alice"})
    namespaces = {ns for by_ns in saver.storage.values() for ns in by_ns}
    assert namespaces == {""}  # the agent's own checkpoints only
    kept = agent.get_state(cfg).values["reflective_thinking"]
    assert kept["recorded"] and "recalled" not in kept
    assert len(repr(kept)) < 20_000  # (the action context shows the recall cut to a line)
    assert "parseData" in kept["action_context"]
