"""LangMem's memory tools (``create_manage_memory_tool``, ``create_search_memory_tool``) on a
ReflectiveStore: a third-party consumer of LangGraph's ``BaseStore`` run unchanged, in a
``create_agent`` loop, sync and async. Their memories are stream memories, so they are
ranked by the hybrid score and reflected on like any other."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.warnings import LangGraphDeprecatedSinceV10

from langchain_reflective import MemoryStream, ReflectiveStore
from tests.fakes import WordEmbeddings
from tests.unit.test_middleware import FakeChat

with warnings.catch_warnings():  # LangMem's trustcall imports Send from langgraph.constants
    warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
    import langmem

NAMESPACE = ("memories", "{langgraph_user_id}")


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[MemoryStream]:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "langmem.db") as s:
        yield s


def _call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def _run(stream: MemoryStream, script: list[Any], user: str, *, use_async: bool) -> list[str]:
    """Run a scripted agent with LangMem's two tools; the tool messages' contents."""
    agent = create_agent(
        FakeChat(script=[*script, "done"]),
        tools=[
            langmem.create_manage_memory_tool(namespace=NAMESPACE),
            langmem.create_search_memory_tool(namespace=NAMESPACE),
        ],
        store=ReflectiveStore(stream),
    )
    request = {"messages": [{"role": "user", "content": "remember this"}]}
    config = {"configurable": {"langgraph_user_id": user}}
    if use_async:
        out = asyncio.run(agent.ainvoke(request, config=config))  # type: ignore[arg-type]
    else:
        out = agent.invoke(request, config=config)  # type: ignore[arg-type]
    return [str(m.content) for m in out["messages"] if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_langmem_tools_create_search_update_and_delete(
    stream: MemoryStream, use_async: bool
) -> None:
    manage = "manage_memory"
    created = _run(
        stream,
        [
            _call(manage, {"content": "Carol is allergic to peanuts", "action": "create"}, "1"),
            _call(manage, {"content": "Carol plays the cello", "action": "create"}, "2"),
        ],
        "carol",
        use_async=use_async,
    )
    allergy, cello = (m.removeprefix("created memory ") for m in created)
    _run(stream, [_call(manage, {"content": "Dave likes peanuts", "action": "create"}, "3")],
         "dave", use_async=use_async)  # fmt: skip
    (found,) = _run(
        stream,
        [_call("search_memory", {"query": "allergic to peanuts"}, "4")],
        "carol",
        use_async=use_async,
    )
    hits = json.loads(found)
    assert hits[0]["key"] == allergy and hits[0]["score"] is not None  # ranked, with a score
    assert {h["value"]["content"] for h in hits} == {
        "Carol is allergic to peanuts",
        "Carol plays the cello",
    }  # Dave's memory never leaks into Carol's namespace
    _run(
        stream,
        [
            _call(
                manage, {"content": "Carol plays the viola", "action": "update", "id": cello}, "5"
            ),
            _call(manage, {"action": "delete", "id": allergy}, "6"),
        ],
        "carol",
        use_async=use_async,
    )
    assert [r.text for r in stream.recent(namespace="memories/carol")] == ["Carol plays the viola"]
    assert [r.text for r in stream.recent(namespace="memories/dave")] == ["Dave likes peanuts"]
    item = ReflectiveStore(stream).get(("memories", "carol"), cello)
    assert item is not None and item.value == {"content": "Carol plays the viola"}
