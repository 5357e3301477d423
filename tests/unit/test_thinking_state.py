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
