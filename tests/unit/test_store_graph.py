"""ReflectiveStore where LangGraph users meet it: ``compile(store=...)`` + ``get_store()`` in a
node, and ``create_agent(..., store=...)`` tools reaching it through ``ToolRuntime`` (sync and
async)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph

from langchain_reflective import MemoryStream, ReflectiveStore
from tests.fakes import WordEmbeddings
from tests.unit.test_middleware import FakeChat


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[MemoryStream]:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "graph.db") as s:
        yield s


class State(TypedDict, total=False):
    user: str
    said: str
    recalled: list[str]


def remember(state: State) -> State:
    store = get_store()
    key = f"turn-{len(store.search((state['user'], 'memories'), limit=100))}"
    store.put((state["user"], "memories"), key, {"text": state["said"]})
    return {}


def recall(state: State) -> State:
    hits = get_store().search((state["user"],), query=state["said"], limit=3)
    return {"recalled": [h.value["text"] for h in hits]}


async def aremember(state: State) -> State:
    store = get_store()
    existing = await store.asearch((state["user"], "memories"), limit=100)
    await store.aput((state["user"], "memories"), f"turn-{len(existing)}", {"text": state["said"]})
    return {}


async def arecall(state: State) -> State:
    hits = await get_store().asearch((state["user"],), query=state["said"], limit=3)
    return {"recalled": [h.value["text"] for h in hits]}


def _graph(stream: MemoryStream, *, use_async: bool) -> object:
    builder = StateGraph(State)
    builder.add_node("remember", aremember if use_async else remember)
    builder.add_node("recall", arecall if use_async else recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder.compile(store=ReflectiveStore(stream))


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_graph_reads_and_writes_memories_through_get_store(
    stream: MemoryStream, use_async: bool
) -> None:
    graph = _graph(stream, use_async=use_async)
    turns = [
        ("alice", "I adopted a cat named Miso"),
        ("bob", "My cat is called Pixel"),
        ("alice", "I live in Lisbon"),
        ("alice", "what was the name of the cat I adopted"),
    ]
    out: State = {}
    for user, said in turns:
        run = graph.ainvoke if use_async else graph.invoke  # type: ignore[attr-defined]
        result = run({"user": user, "said": said})
        out = asyncio.run(result) if use_async else result
    # the memories are in the stream, one namespace per user
    assert sorted(stream.namespaces()) == ["alice/memories", "bob/memories"]
    assert stream.count(namespace="alice/memories") == 3
    assert [r.text for r in stream.recent(namespace="bob/memories")] == ["My cat is called Pixel"]
    # the node's search ranked alice's own memories, exactly as the stream ranks them
    question = turns[-1][1]
    ranked = stream.retrieve(question, k=3, namespace="alice/memories", touch=False)
    assert out["recalled"] == [h.record.text for h in ranked]
    assert set(out["recalled"]) == {text for user, text in turns if user == "alice"}


@dataclass
class Context:
    user_id: str


@tool
def save_note(text: str, runtime: ToolRuntime[Context]) -> str:
    """Save a note to long-term memory."""
    assert runtime.store is not None
    ns = (runtime.context.user_id, "notes")
    runtime.store.put(ns, f"note-{len(runtime.store.search(ns, limit=100))}", {"text": text})
    return "saved"


@tool
def find_notes(query: str, runtime: ToolRuntime[Context]) -> str:
    """Search long-term memory."""
    assert runtime.store is not None
    hits = runtime.store.search((runtime.context.user_id,), query=query, limit=2)
    return " | ".join(f"{h.value['text']} ({h.score:.2f})" for h in hits)


@tool
async def asave_note(text: str, runtime: ToolRuntime[Context]) -> str:
    """Save a note to long-term memory (async)."""
    assert runtime.store is not None
    ns = (runtime.context.user_id, "notes")
    existing = await runtime.store.asearch(ns, limit=100)
    await runtime.store.aput(ns, f"note-{len(existing)}", {"text": text})
    return "saved"


@tool
async def afind_notes(query: str, runtime: ToolRuntime[Context]) -> str:
    """Search long-term memory (async)."""
    assert runtime.store is not None
    hits = await runtime.store.asearch((runtime.context.user_id,), query=query, limit=2)
    return " | ".join(f"{h.value['text']} ({h.score:.2f})" for h in hits)


def _call(name: str, args: dict[str, str], call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_create_agent_tool_reaches_the_store_through_its_runtime(
    stream: MemoryStream, use_async: bool
) -> None:
    save, find = ("asave_note", "afind_notes") if use_async else ("save_note", "find_notes")
    model = FakeChat(
        script=[
            _call(save, {"text": "Carol is allergic to peanuts"}, "c1"),
            _call(save, {"text": "Carol plays the cello"}, "c2"),
            _call(find, {"query": "what is Carol allergic to"}, "c3"),
            "Carol is allergic to peanuts.",
        ]
    )
    stream.add("Dave is allergic to peanuts too", namespace="dave/notes")
    agent = create_agent(
        model,
        tools=[asave_note, afind_notes] if use_async else [save_note, find_notes],
        context_schema=Context,
        store=ReflectiveStore(stream),
    )
    request = {"messages": [{"role": "user", "content": "Remember my allergy and hobby"}]}
    if use_async:
        out = asyncio.run(agent.ainvoke(request, context=Context(user_id="carol")))
    else:
        out = agent.invoke(request, context=Context(user_id="carol"))
    tool_messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.content for m in tool_messages[:2]] == ["saved", "saved"]
    found = tool_messages[2].content
    assert found.startswith("Carol is allergic to peanuts (")  # ranked first, with its score
    assert "Dave" not in found  # another user's memory never leaks
    assert [r.text for r in stream.recent(namespace="carol/notes")] == [
        "Carol is allergic to peanuts",
        "Carol plays the cello",
    ]


def test_items_put_through_the_store_are_reflected_on(stream: MemoryStream) -> None:
    """The point of a reflective store: insights about stored items come back as items."""
    from langchain_reflective import create_reflection_graph

    store = ReflectiveStore(stream)
    facts = {
        "paper": "Klaus is writing a research paper about gentrification",
        "library": "Klaus spent the whole night in the library on his paper",
        "maria": "Klaus discussed his paper on gentrification with Maria",
    }
    for key, text in facts.items():
        store.put(("klaus",), key, {"text": text})
    out = create_reflection_graph(FakeChat(), stream).invoke({"force": True, "namespace": "klaus"})
    assert out["reflections"]
    insights = store.search(("klaus",), filter={"kind": "reflection"})
    assert {i.key for i in insights} == set(out["reflection_ids"])
    ids = {ReflectiveStore.memory_id("klaus", key): key for key in facts}
    cited = {ids[e] for i in insights for e in i.value["evidence"]}
    assert cited and cited <= set(facts)  # the insights cite the store's items
    # updating a cited item keeps its memory id: every insight's evidence still resolves
    store.put(("klaus",), sorted(cited)[0], {"text": "Klaus finished his paper"})
    for item in insights:
        evidence = item.value["evidence"]
        assert len(stream.get(evidence, namespace="klaus")) == len(evidence)
