"""The reflection's error messages read well: a namespace of the wrong type names the value
received, and a failed step is said once by the ``reflect_now`` tool and the log."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from langchain_reflective import MemoryStream
from langchain_reflective.errors import ReflectionError
from langchain_reflective.importance import RetryConfig
from langchain_reflective.integrations.tools import create_memory_tools
from langchain_reflective.memory import MemoryConfig, ReflectiveMemory
from langchain_reflective.reflection import ReflectionConfig, create_reflection_graph
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

FAST = RetryConfig(initial_wait=0.0, max_wait=0.0, jitter=0.0)
EVENTS = [f"Klaus works on his research paper topic {i}" for i in range(5)]


class StoreNamespaceState(TypedDict, total=False):
    namespace: tuple[str, ...]  # a LangGraph store namespace, not a memory namespace


def test_a_namespace_that_is_not_a_string_is_named_in_the_error() -> None:
    """A tuple (a parent graph's LangGraph store namespace under the same key) or a number
    failed with "namespace must be a non-empty string", without the value received."""
    with MemoryStream(WordEmbeddings()) as stream:
        graph = create_reflection_graph(ScriptedChatModel(), stream)
        builder = StateGraph(StoreNamespaceState)
        builder.add_node("reflect", graph)
        builder.add_edge(START, "reflect")
        builder.add_edge("reflect", END)
        with pytest.raises(ReflectionError, match=r"got \('alice', 'memories'\) \(tuple\)") as info:
            builder.compile().invoke({"namespace": ("alice", "memories")})
        assert "parent graph's 'namespace' key" in str(info.value)
        with pytest.raises(ReflectionError, match=r"got 123 \(int\)"):
            graph.invoke({"namespace": 123, "force": True})


def test_a_failed_step_is_said_once(
    tmp_path: Path, now: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    """The ``reflect_now`` tool answered "reflection failed: reflection failed at the
    questions step (...)", and the log line said "nothing was written" twice."""
    model = ScriptedChatModel(fail_on={"questions": TimeoutError("read timed out")})
    memory = ReflectiveMemory(
        model,
        MemoryStream(WordEmbeddings(), path=tmp_path / "m.db"),
        config=MemoryConfig(reflect_threshold=2.5),
        reflection=ReflectionConfig(retry=FAST),
    )
    with memory:
        with caplog.at_level(logging.ERROR, "langchain_reflective.memory"):
            memory.add(EVENTS, importances=0.5, now=now)  # a background reflection, failing
            assert memory.flush(timeout=30)
        (line,) = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
        assert line.count("nothing was written") == 1 and line.count("failed") == 1
        (reflect_now,) = [t for t in create_memory_tools(memory) if t.name == "reflect_now"]
        answer: Any = reflect_now.invoke({})
        assert answer == (
            "reflection failed: the questions step raised TimeoutError: read timed out; "
            "nothing was written"
        )
