"""Whose memories the memory tools use when an agent has them beside the memory middleware."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langchain_reflective import MemoryStream
from langchain_reflective.integrations.middleware import ReflectiveMemoryMiddleware
from langchain_reflective.integrations.tools import create_memory_tools
from langchain_reflective.memory import ReflectiveMemory
from tests.fakes import WordEmbeddings
from tests.unit.test_middleware import FakeChat, tool_call


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[ReflectiveMemory]:
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "owner.db")
    with ReflectiveMemory(FakeChat(), stream) as mem:
        yield mem


@tool
def send_email(to: str) -> str:
    """Send an email."""
    return "sent"


def _texts(memory: ReflectiveMemory, namespace: str) -> list[str]:
    memory.flush(timeout=30)
    return sorted(r.text for r in memory.stream.recent(None, namespace=namespace))


@pytest.mark.parametrize("asynchronous", [False, True])
def test_memory_tools_beside_the_middleware_act_for_the_turns_owner_after_a_resume(
    memory: ReflectiveMemory, asynchronous: bool
) -> None:
    """The README's agent (``tools=create_memory_tools(memory)`` beside
    ``ReflectiveMemoryMiddleware(memory)``), resumed after an interrupt without the
    ``context`` it started with: only the middleware's own tools (``include_tools=True``)
    acted for the turn's owner, so ``save_memory`` wrote alice's fact to the shared default
    namespace and ``recall_memories`` read that namespace's memories."""
    memory.add("Default: the clinic closes at noon", importances=0.5)
    model = FakeChat(
        script=[
            tool_call("send_email", {"to": "doctor"}),
            tool_call("save_memory", {"text": "Alice emailed her doctor"}, "c2"),
            tool_call("recall_memories", {"query": "clinic doctor"}, "c3"),
            "Done.",
        ]
    )
    agent = create_agent(
        model,
        tools=[send_email, *create_memory_tools(memory)],
        checkpointer=InMemorySaver(),
        middleware=[
            HumanInTheLoopMiddleware(interrupt_on={"send_email": True}),
            ReflectiveMemoryMiddleware(memory, record=False),
        ],
    )
    config: Any = {"configurable": {"thread_id": "t1"}}
    agent.invoke(
        {"messages": [HumanMessage("email my doctor")]}, config, context={"user_id": "alice"}
    )
    resume = Command(resume={"decisions": [{"type": "approve"}]})
    if asynchronous:
        out = asyncio.run(agent.ainvoke(resume, config))
    else:
        out = agent.invoke(resume, config)
    assert _texts(memory, "alice") == ["Alice emailed her doctor"]
    assert _texts(memory, memory.stream.namespace) == ["Default: the clinic closes at noon"]
    recalled = [m.text for m in out["messages"] if m.type == "tool" and m.name == "recall_memories"]
    assert recalled and "clinic" not in recalled[0]


def test_memory_tools_that_read_another_owner_are_left_alone(memory: ReflectiveMemory) -> None:
    """Tools with a fixed owner, another ``namespace_key``, or requiring an owner the
    middleware does not require, keep reading their own."""
    memory.add("Default: the clinic closes at noon", importances=0.5)
    tools = [
        *create_memory_tools(memory, namespace="shared")[:1],
        *create_memory_tools(memory, namespace_key="tenant")[1:2],
    ]
    strict = create_memory_tools(memory, require_namespace=True)[1]
    strict.name = "save_strict"
    model = FakeChat(
        script=[
            tool_call("recall_memories", {"query": "clinic"}, "c1"),
            tool_call("save_memory", {"text": "tenant fact"}, "c2"),
            tool_call("save_strict", {"text": "strict fact"}, "c3"),
            "Done.",
        ]
    )
    agent = create_agent(
        model, tools=[*tools, strict], middleware=[ReflectiveMemoryMiddleware(memory)]
    )
    out = agent.invoke({"messages": [HumanMessage("hi")]})  # (no owner: the default namespace)
    answers = {m.name: m for m in out["messages"] if m.type == "tool"}
    assert answers["recall_memories"].text == "No memories found."  # ("shared" is empty)
    assert "no memory owner" in answers["save_strict"].text
    assert "tenant fact" in _texts(memory, memory.stream.namespace)
