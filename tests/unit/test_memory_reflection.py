"""How :class:`ReflectiveMemory` runs its reflection graph: inside a caller's checkpointed
graph, and with which threshold."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langchain_reflective import MemoryStream
from langchain_reflective.importance import RetryConfig
from langchain_reflective.memory import MemoryConfig, ReflectiveMemory
from langchain_reflective.reflection import ReflectionConfig
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

FAST = RetryConfig(initial_wait=0.0, max_wait=0.0, jitter=0.0)
SECRET = "Alice keeps her diary in the blue drawer"


def make(tmp_path: Path, **config: Any) -> ReflectiveMemory:
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "m.db")
    return ReflectiveMemory(
        ScriptedChatModel(),
        stream,
        config=MemoryConfig(**config),
        reflection=ReflectionConfig(retry=FAST, min_relevance=-1.0),
    )


class TurnState(TypedDict, total=False):
    insights: int


def _checkpointed_parent(memory: ReflectiveMemory, *, use_async: bool) -> Any:
    """A checkpointed graph whose node reflects (as an agent's ``reflect_now`` tool does)."""

    def reflect(state: TurnState) -> dict[str, Any]:
        return {"insights": len(memory.reflect(namespace="alice"))}

    async def areflect(state: TurnState) -> dict[str, Any]:
        return {"insights": len(await memory.areflect(namespace="alice"))}

    builder = StateGraph(TurnState)
    builder.add_node("turn", areflect if use_async else reflect)
    builder.add_edge(START, "turn")
    builder.add_edge("turn", END)
    return builder.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_reflect_inside_a_checkpointed_graph_leaves_no_memory_text_in_its_checkpoints(
    tmp_path: Path, now: datetime, use_async: bool
) -> None:
    """``reflect`` and ``areflect`` called from a checkpointed graph's node run the memory's
    reflection graph without the caller's checkpointer: its state (the recent memories' texts,
    the questions, the insights) used to be saved in the caller's checkpoints as a subgraph's,
    where ``purge`` cannot reach it."""
    with make(tmp_path) as memory:
        memory.add(
            [f"{SECRET} ({i})" for i in range(4)], importances=0.5, namespace="alice", now=now
        )
        parent = _checkpointed_parent(memory, use_async=use_async)
        config: Any = {"configurable": {"thread_id": "t1"}}
        if use_async:
            out = await parent.ainvoke({}, config)
        else:
            out = parent.invoke({}, config)
        assert out["insights"] > 0
        saved = list(parent.checkpointer.list(None))
        assert {c.config["configurable"]["checkpoint_ns"] for c in saved} == {""}
        held = repr([(c.checkpoint["channel_values"], c.pending_writes) for c in saved])
        assert "diary" not in held
        assert memory.purge(namespace="alice") > 0


def test_a_checkpointer_given_in_graph_kwargs_is_kept(tmp_path: Path) -> None:
    """``graph_kwargs`` may still give the reflection graph a checkpointer of its own."""
    saver = InMemorySaver()
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "m.db")
    with ReflectiveMemory(ScriptedChatModel(), stream, graph_kwargs={"checkpointer": saver}) as m:
        assert m.graph.checkpointer is saver


def _memory_with(tmp_path: Path, **kwargs: Any) -> None:
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "m.db")
    ReflectiveMemory(ScriptedChatModel(), stream, **kwargs).close()


def test_a_graph_threshold_the_memory_would_ignore_warns(tmp_path: Path) -> None:
    """``ReflectionConfig.threshold`` does not decide when a ``ReflectiveMemory`` reflects
    (its ``MemoryConfig.reflect_threshold`` does, and it runs the graph forced): one set to
    something else warns, naming the setting to use, instead of being silently ignored."""
    with pytest.warns(UserWarning, match=r"MemoryConfig\(reflect_threshold=2\.5\)") as caught:
        _memory_with(tmp_path, reflection=ReflectionConfig(threshold=2.5))
    assert caught[0].filename == __file__  # (the line that made the memory)
    with pytest.warns(UserWarning, match="reflect_threshold"):
        _memory_with(tmp_path, graph_kwargs={"config": ReflectionConfig(threshold=4.0)})


@pytest.mark.filterwarnings("error")
def test_a_graph_threshold_that_agrees_or_is_left_alone_does_not_warn(tmp_path: Path) -> None:
    _memory_with(tmp_path, reflection=ReflectionConfig(min_relevance=0.2))
    _memory_with(
        tmp_path,
        config=MemoryConfig(reflect_threshold=2.5),
        reflection=ReflectionConfig(threshold=2.5),
    )
    _memory_with(tmp_path)
