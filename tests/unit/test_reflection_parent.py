"""The reflection graph as a node of a parent graph (and the example that shows it)."""

from __future__ import annotations

import importlib.util
import logging
import operator
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from langchain_reflective import MemoryStream
from langchain_reflective.importance import ImportanceConfig, LLMImportanceScorer, RetryConfig
from langchain_reflective.records import MemoryRecord
from langchain_reflective.reflection import ReflectionConfig, create_reflection_graph
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

FAST = RetryConfig(initial_wait=0.0, max_wait=0.0, jitter=0.0)
EXAMPLE = Path(__file__).parents[2] / "examples" / "reflection_in_parent_graph.py"


class ParentState(TypedDict, total=False):
    user: str
    turns: int
    namespace: str | None
    force: bool
    now: datetime | None
    reflections: list[MemoryRecord]
    skipped: str | None


class IdsOnlyState(TypedDict, total=False):
    namespace: str | None
    force: bool
    reflection_ids: list[str]
    skipped: str | None


@pytest.fixture
def setup(now: datetime) -> Iterator[tuple[ScriptedChatModel, MemoryStream, Any]]:
    model = ScriptedChatModel()
    scorer = LLMImportanceScorer(model, config=ImportanceConfig(retry=FAST))
    with MemoryStream(WordEmbeddings(), importance_scorer=scorer) as stream:
        texts = [f"Klaus works on his research paper topic {i}" for i in range(5)]
        stream.add(texts, importances=0.5, namespace="klaus", now=now)
        graph = create_reflection_graph(
            model, stream, config=ReflectionConfig(threshold=2.5, retry=FAST)
        )
        yield model, stream, graph


def _count_turn(state: ParentState) -> dict[str, Any]:
    return {"turns": state.get("turns", 0) + 1}


def _parent(graph: Any, **compile_kwargs: Any) -> Any:
    builder = StateGraph(ParentState)
    builder.add_node("turn", _count_turn)
    builder.add_node("reflect", graph)
    builder.add_edge(START, "turn")
    builder.add_edge("turn", "reflect")
    builder.add_edge("reflect", END)
    return builder.compile(**compile_kwargs)


def _ids_only_parent(graph: Any) -> Any:
    """A checkpointed parent keeping only plain keys of the reflection graph."""
    builder = StateGraph(IdsOnlyState)
    builder.add_node("reflect", graph)
    builder.add_edge(START, "reflect")
    builder.add_edge("reflect", END)
    return builder.compile(checkpointer=InMemorySaver())


def test_runs_as_a_node_with_shared_keys(setup: Any, now: datetime) -> None:
    model, stream, graph = setup
    later = now + timedelta(hours=1)
    out = _parent(graph).invoke({"user": "klaus", "namespace": "klaus", "now": later})
    assert out["user"] == "klaus" and out["turns"] == 1  # parent keys untouched
    assert out["skipped"] is None
    assert out["reflections"] and {r.namespace for r in out["reflections"]} == {"klaus"}
    assert "questions" not in out  # subgraph keys the parent does not declare stay inside
    assert model.count() == 6
    assert len(stream.recent(namespace="klaus", kinds=["reflection"])) == len(out["reflections"])


async def test_runs_as_a_node_async(setup: Any, now: datetime) -> None:
    model, _, graph = setup
    out = await _parent(graph).ainvoke({"namespace": "klaus", "now": now + timedelta(hours=1)})
    assert out["reflections"] and model.count() == 6


def test_gate_inside_the_parent(setup: Any) -> None:
    model, _, graph = setup
    out = _parent(graph).invoke({"namespace": "somebody-else"})
    assert out["skipped"] == "below_threshold" and out["reflections"] == []
    assert model.count() == 0


def test_called_from_a_node_function(setup: Any) -> None:
    model, _, graph = setup

    def reflect(state: ParentState, config: RunnableConfig) -> dict[str, Any]:
        result = graph.invoke({"namespace": state["user"], "force": True}, config)
        return {"reflections": result["reflections"], "skipped": result["skipped"]}

    builder = StateGraph(ParentState)
    builder.add_node("reflect", reflect)
    builder.add_edge(START, "reflect")
    builder.add_edge("reflect", END)
    out = builder.compile().invoke({"user": "klaus"})
    assert out["reflections"] and out["skipped"] is None
    assert model.count() == 6


async def test_called_from_an_async_node_function(setup: Any) -> None:
    _, _, graph = setup

    async def areflect(state: ParentState, config: RunnableConfig) -> dict[str, Any]:
        result = await graph.ainvoke({"namespace": state["user"], "force": True}, config)
        return {"reflections": result["reflections"]}

    builder = StateGraph(ParentState)
    builder.add_node("reflect", areflect)
    builder.add_edge(START, "reflect")
    builder.add_edge("reflect", END)
    out = await builder.compile().ainvoke({"user": "klaus"})
    assert out["reflections"]


def test_checkpointed_parent_stores_plain_state(
    setup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Internal state is plain JSON: a checkpointer needs no type registration."""
    _, stream, graph = setup
    parent = _ids_only_parent(graph)
    config: RunnableConfig = {"configurable": {"thread_id": "t1"}}
    with caplog.at_level(logging.WARNING):
        out = parent.invoke({"namespace": "klaus", "force": True}, config)
        again = parent.invoke({"namespace": "klaus", "force": True}, config)
        snapshot = parent.get_state(config)
    assert out["reflection_ids"] and again["reflection_ids"]
    assert snapshot.values["reflection_ids"] == again["reflection_ids"]
    assert stream.get(again["reflection_ids"], namespace="klaus")
    assert "unregistered type" not in caplog.text


def test_a_checkpointed_parents_next_run_is_not_forced(setup: Any) -> None:
    """The gate set ``force`` back inside the graph, but ``force`` was not an output key, so a
    checkpointed parent sharing it kept ``True`` and forced every later run."""
    model, stream, graph = setup
    stream.add(["one more"], importances=0.1, namespace="klaus")  # below the threshold after
    parent = _ids_only_parent(graph)
    config: RunnableConfig = {"configurable": {"thread_id": "t2"}}
    assert parent.invoke({"namespace": "klaus", "force": True}, config)["reflection_ids"]
    assert parent.get_state(config).values["force"] is False
    asked = model.count("questions")
    assert parent.invoke({}, config)["skipped"] == "below_threshold"
    assert model.count("questions") == asked


def test_subgraph_drawing(setup: Any) -> None:
    _, _, graph = setup
    drawing = _parent(graph).get_graph(xray=1).draw_mermaid()
    for node in ("gate", "questions", "insights", "condense", "store"):
        assert f"reflect\\3a{node}({node})" in drawing


def test_example_runs_offline(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("reflection_in_parent_graph", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # typing.get_type_hints resolves the state through it
    try:
        spec.loader.exec_module(module)
        result = module.main(model=ScriptedChatModel(), embeddings=WordEmbeddings())
    finally:
        del sys.modules[spec.name]
    stored = result["reflections"]
    assert len(result["answers"]) == len(module.TURNS)
    assert stored and all(r.kind == "reflection" and r.evidence for r in stored)
    assert {r.namespace for r in stored} == {"alice"}
    printed = capsys.readouterr().out
    assert "reflection (depth 1)" in printed and "no reflection: below_threshold" in printed


_STRICT_CHILD = """
from datetime import UTC, datetime
from langgraph.checkpoint.memory import InMemorySaver
from langchain_reflective import MemoryStream, ReflectionConfig, create_reflection_graph
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

with MemoryStream(WordEmbeddings()) as stream:
    texts = [f"Klaus works on his research paper topic {i}" for i in range(5)]
    stream.add(texts, importances=0.5, namespace="klaus", now=datetime(2025, 6, 1, tzinfo=UTC))
    graph = create_reflection_graph(
        ScriptedChatModel(), stream, config=ReflectionConfig(threshold=2.5),
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t1"}}
    out = graph.invoke({"force": True, "namespace": "klaus"}, config)
    kept = graph.get_state(config).values["reflections"]
    assert out["reflections"] and kept == out["reflections"], (out, kept)
    print("KEPT", len(kept), type(kept[0]).__name__)
"""


def test_a_checkpointed_graph_reads_its_reflections_back_under_strict_msgpack() -> None:
    """LangGraph is moving to refuse unregistered types in checkpoints
    (``LANGGRAPH_STRICT_MSGPACK=true`` does now): the graph's own checkpointer still reads the
    ``MemoryRecord`` values back, because the state schema names the type."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _STRICT_CHILD],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "KEPT" in done.stdout and "MemoryRecord" in done.stdout
    assert "Blocked" not in done.stderr and "unregistered" not in done.stderr


WRITTEN_BACK = {"reflections", "reflection_ids", "questions", "skipped", "importance_sum", "force"}
"""The keys the reflection graph writes back to a parent that declares them (the README's
reflection section and the example list them)."""


class EveryKeyState(TypedDict, total=False):
    namespace: str | None
    force: bool
    now: datetime | None
    reflections: list[MemoryRecord]
    reflection_ids: list[str]
    questions: list[str]
    skipped: str | None
    importance_sum: float
    insights: list[str]  # the parent's own


def test_a_parent_gets_back_exactly_the_documented_keys(setup: Any) -> None:
    """A parent declaring every key the graph knows (and one of its own) gets back the
    documented output keys, ``force`` reset, and its own key untouched."""
    _, _, graph = setup
    builder = StateGraph(EveryKeyState)
    builder.add_node("reflect", graph)
    builder.add_edge(START, "reflect")
    builder.add_edge("reflect", END)
    request = {"namespace": "klaus", "force": True, "insights": ["mine"]}
    (update,) = builder.compile().stream(request, stream_mode="updates")
    written = update["reflect"]
    assert set(written) == WRITTEN_BACK
    assert written["force"] is False and written["reflection_ids"]


class FanOutState(TypedDict, total=False):
    users: list[str]
    reflections: Annotated[list[MemoryRecord], operator.add]


def test_a_send_fan_out_with_the_documented_state_reflects_for_each(
    setup: Any, now: datetime
) -> None:
    """One reflection per user in one step (``Send``), as documented: the written-back keys
    the state declares have reducers, ``force`` travels in the payload."""
    _, stream, graph = setup
    stream.add(
        [f"Maria paints landscape {i}" for i in range(5)], importances=0.5, namespace="maria"
    )

    def fan_out(state: FanOutState) -> list[Send]:
        return [Send("reflect", {"namespace": u, "force": True}) for u in state["users"]]

    builder = StateGraph(FanOutState)
    builder.add_node("start", lambda state: {})
    builder.add_node("reflect", graph)
    builder.add_edge(START, "start")
    builder.add_conditional_edges("start", fan_out, ["reflect"])
    builder.add_edge("reflect", END)
    parent = builder.compile(checkpointer=InMemorySaver())
    out = parent.invoke({"users": ["klaus", "maria"]}, {"configurable": {"thread_id": "t"}})
    assert {r.namespace for r in out["reflections"]} == {"klaus", "maria"}
