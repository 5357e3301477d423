"""The reflection graph's runs name the namespace they reflect on, in their metadata: the
graph's run, every step's, and the calls inside them (model calls, the store step's rating),
run alone or as a node of a parent graph."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, TypedDict

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langgraph.graph import END, START, StateGraph

from langchain_reflective import MemoryStream
from langchain_reflective.importance import ImportanceConfig, LLMImportanceScorer, RetryConfig
from langchain_reflective.reflection import ReflectionConfig, create_reflection_graph
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

FAST = RetryConfig(initial_wait=0.0, max_wait=0.0, jitter=0.0)


class MetadataRecorder(BaseCallbackHandler):
    """Every run's name and metadata, as a tracer receives them when the run starts."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self.runs.append((str(kwargs.get("name")), dict(kwargs.get("metadata") or {})))

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.runs.append(("chat_model", dict(kwargs.get("metadata") or {})))

    def reflection_runs(self) -> list[tuple[str, dict[str, Any]]]:
        """The runs of the reflection graph and everything inside it."""
        return [r for r in self.runs if r[1].get("ls_component") == "reflection"] + [
            r for r in self.runs if r[0] == "chat_model"
        ]


@pytest.fixture
def graph(now: datetime) -> Iterator[Any]:
    model = ScriptedChatModel()
    scorer = LLMImportanceScorer(model, config=ImportanceConfig(retry=FAST))
    with MemoryStream(WordEmbeddings(), importance_scorer=scorer) as stream:
        for ns in ("alice", None):
            texts = [f"Klaus works on his research paper topic {i}" for i in range(5)]
            stream.add(texts, importances=0.5, now=now, namespace=ns)
        yield create_reflection_graph(model, stream, config=ReflectionConfig(retry=FAST))


class ParentState(TypedDict, total=False):
    namespace: str | None
    force: bool
    reflection_ids: list[str]


def _parent(graph: Any) -> Any:
    builder = StateGraph(ParentState)
    builder.add_node("reflect", graph)
    builder.add_edge(START, "reflect")
    builder.add_edge("reflect", END)
    return builder.compile(name="agent")


def _assert_every_run_names(recorder: MetadataRecorder, namespace: str) -> None:
    runs = recorder.reflection_runs()
    names = {name for name, _ in runs}
    assert {"reflection", "gate", "questions", "insights", "condense", "store"} <= names
    assert {"importance", "reflection.questions.model", "chat_model"} <= names
    wrong = [(name, md.get("namespace")) for name, md in runs if md.get("namespace") != namespace]
    assert not wrong
    assert not [name for name, md in recorder.runs if "default_namespace" in md]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("as_node", [False, True], ids=["alone", "node"])
async def test_every_run_names_the_namespace_reflected(
    graph: Any, use_async: bool, as_node: bool
) -> None:
    """Run with ``{"namespace": "alice"}``, the steps (``gate`` ... ``store``) and the store
    step's rating carried only the stream's ``default_namespace: "default"`` (the graph's
    compile-time metadata), which read as the namespace reflected; now each run names
    ``alice``, and no run has a ``default_namespace``."""
    runnable = _parent(graph) if as_node else graph
    recorder = MetadataRecorder()
    request = {"namespace": "alice", "force": True}
    if use_async:
        out = await runnable.ainvoke(request, {"callbacks": [recorder]})
    else:
        out = runnable.invoke(request, {"callbacks": [recorder]})
    assert out["reflection_ids"]
    _assert_every_run_names(recorder, "alice")


def test_without_a_namespace_the_runs_name_the_streams(graph: Any) -> None:
    """An input naming no namespace reflects on the stream's, and its runs say so; a copy of
    the graph made by ``with_config`` does the same."""
    recorder = MetadataRecorder()
    tagged = graph.with_config(tags=["mine"])
    assert tagged.invoke({"force": True}, {"callbacks": [recorder]})["reflection_ids"]
    _assert_every_run_names(recorder, "default")
