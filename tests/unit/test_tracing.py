"""Run trees as LangSmith would record them: names, tags, metadata, ``ls_retriever_name``.

LangSmith's tracer is an *inheritable* callback handler configured from the environment or a
context variable, so it sees every nested run (graph nodes, model calls, retrievers).
``collect_runs`` registers its handler as non-inheritable, which detaches LangGraph node runs
from their graph; the :class:`CollectingTracer` below is registered like LangSmith's instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.context import register_configure_hook
from langchain_core.tracers.schemas import Run
from langgraph.config import get_store
from langgraph.graph import START, MessagesState, StateGraph

from langchain_reflective import MemoryStream, ReflectiveRetriever, ReflectiveStore
from langchain_reflective.importance import LLMImportanceScorer
from langchain_reflective.integrations.middleware import ReflectiveMemoryMiddleware
from langchain_reflective.memory import MemoryConfig, ReflectiveMemory
from tests.fakes import WordEmbeddings
from tests.unit.test_examples import EXAMPLES_DIR, load
from tests.unit.test_middleware import FakeChat


class CollectingTracer(BaseTracer):
    """Keeps finished root runs with their child runs, like LangSmith's tracer uploads them."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[Run] = []

    def _persist_run(self, run: Run) -> None:
        self.roots.append(run)


_TRACER: ContextVar[CollectingTracer | None] = ContextVar("reflective_test_tracer", default=None)
register_configure_hook(_TRACER, inheritable=True)


@contextlib.contextmanager
def traced() -> Iterator[CollectingTracer]:
    tracer = CollectingTracer()
    token = _TRACER.set(tracer)
    try:
        yield tracer
    finally:
        _TRACER.reset(token)


def walk(run: Run) -> Iterator[Run]:
    yield run
    for child in run.child_runs:
        yield from walk(child)


def metadata(run: Run) -> dict[str, Any]:
    return dict((run.extra or {}).get("metadata") or {})


def only_root(tracer: CollectingTracer, name: str) -> Run:
    roots = [r for r in tracer.roots if r.name == name]
    assert len(roots) == 1, [r.name for r in tracer.roots]
    return roots[0]


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[ReflectiveMemory]:
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "trace.db")
    with ReflectiveMemory(FakeChat(), stream, config=MemoryConfig(background=False)) as mem:
        yield mem


def test_reflection_run_tree(memory: ReflectiveMemory) -> None:
    memory.add(
        ["Alice likes green tea", "Alice likes green tea with honey", "Alice runs marathons"],
        namespace="alice",
    )
    with traced() as tracer:
        insights = memory.reflect(namespace="alice")
    assert insights
    root = only_root(tracer, "reflection")
    assert tracer.roots == [root]  # one trace, every node inside it
    assert {"langchain-reflective", "reflection"} <= set(root.tags or [])
    assert metadata(root)["namespace"] == "alice"

    nodes = [c.name for c in root.child_runs]
    assert nodes[0] == "gate" and nodes[-1] == "store"
    assert nodes.count("insights") == 2  # one branch per question (the fake asks two)
    assert {"questions", "condense"} <= set(nodes)

    llm_runs = [r for r in walk(root) if r.run_type == "llm"]
    stages = [metadata(r)["reflection_stage"] for r in llm_runs]
    assert sorted(stages) == ["condense", "insights", "insights", "questions"]
    for run in llm_runs:
        stage = metadata(run)["reflection_stage"]
        assert f"reflection.{stage}" in (run.tags or [])
        assert metadata(run)["namespace"] == "alice"


async def test_async_reflection_run_tree(memory: ReflectiveMemory) -> None:
    await memory.aadd(["Bob plays cello", "Bob plays cello in an orchestra"], namespace="bob")
    with traced() as tracer:
        await memory.areflect(namespace="bob")
    root = only_root(tracer, "reflection")
    assert metadata(root)["namespace"] == "bob"
    assert {c.name for c in root.child_runs} >= {"gate", "questions", "insights", "store"}


def test_retriever_run_carries_ls_retriever_name(memory: ReflectiveMemory) -> None:
    memory.add(["Carol keeps bees", "Carol sells honey"], namespace="carol")
    retriever = ReflectiveRetriever(memory_stream=memory.stream, namespace="carol", k=1)
    with traced() as tracer:
        retriever.invoke("bees", config={"tags": ["probe"], "metadata": {"experiment": "x"}})
    (run,) = tracer.roots
    assert run.run_type == "retriever" and run.name == "ReflectiveRetriever"
    meta = metadata(run)
    assert meta["ls_retriever_name"] == "reflective"
    assert meta["ls_vector_store_provider"] == "langchain-reflective"
    assert meta["ls_embedding_provider"] == "WordEmbeddings"
    assert meta["experiment"] == "x" and "probe" in (run.tags or [])
    assert [d.page_content for d in run.outputs["documents"]] == ["Carol keeps bees"]  # type: ignore[index]


def test_lcel_example_chain_run_tree(memory: ReflectiveMemory) -> None:
    for module in load(EXAMPLES_DIR / "lcel_chain.py"):
        memory.add(["Dan's dog is called Rex"], namespace="dan")
        retriever = ReflectiveRetriever(memory_stream=memory.stream, namespace="dan", k=2)
        chain = module.build_chain(retriever, FakeChat())
        with traced() as tracer:
            chain.invoke("What is Dan's dog called?")
        root = only_root(tracer, "memory_qa")
        meta = metadata(root)
        assert {"langchain-reflective", "lcel"} <= set(root.tags or [])
        assert meta["namespace"] == "dan" and meta["k"] == 2
        assert set(meta["weights"]) == {"relevance", "lexical", "recency", "importance"}
        (retrieval,) = [r for r in walk(root) if r.run_type == "retriever"]
        assert metadata(retrieval)["ls_retriever_name"] == "reflective"
        assert metadata(retrieval)["namespace"] == "dan"  # inherited from the chain
        assert [r.name for r in walk(root) if r.name == "format_memories"]


def test_agent_memory_context_run(memory: ReflectiveMemory) -> None:
    memory.add("Erin is learning Japanese", namespace="erin")
    agent = create_agent(
        FakeChat(), middleware=[ReflectiveMemoryMiddleware(memory)], name="memory_agent"
    )
    with traced() as tracer:
        agent.invoke({"messages": [HumanMessage("Japanese?")]}, context={"user_id": "erin"})
    root = only_root(tracer, "memory_agent")
    (context_run,) = [r for r in walk(root) if r.name == "reflective_memory_context"]
    meta = metadata(context_run)
    assert meta["namespace"] == "erin" and meta["k"] == memory.config.retrieve_k
    assert meta["scoring"] == memory.stream.scoring.name and "weights" in meta
    assert {"langchain-reflective", "memory-context"} <= set(context_run.tags or [])
    assert "Erin is learning Japanese" in context_run.outputs["output"]  # type: ignore[index]
    node_names = {r.name for r in root.child_runs}
    assert {"model", "ReflectiveMemoryMiddleware.after_agent"} <= node_names


async def test_memory_calls_stay_out_of_a_streamed_chat(tmp_path: Path) -> None:
    """Model calls that only write memory (importance ratings, reflection) are tagged
    ``nostream``: a node that stores and reflects streams its own answer and nothing else in
    ``stream_mode="messages"`` (what a chat UI shows), subgraphs included, while the calls
    still happen."""
    rater = FakeChat(default="7")
    stream = MemoryStream(WordEmbeddings(), importance_scorer=LLMImportanceScorer(rater))
    memory = ReflectiveMemory(FakeChat(), stream, config=MemoryConfig(background=False))
    answer = FakeChat(default="Noted: you adopted a cat.")

    def node(state: MessagesState) -> dict[str, Any]:
        key = f"cat-{len(state['messages'])}"
        get_store().put(("u",), key, {"text": "The user adopted a cat named Miso"})
        assert memory.reflect(namespace="u", force=True)
        return {"messages": [answer.invoke(state["messages"])]}

    graph = (
        StateGraph(MessagesState)
        .add_node("save", node)
        .add_edge(START, "save")
        .compile(store=ReflectiveStore(stream))
    )
    with memory:
        # subgraphs=True: the reflection graph runs nested in the node
        sync = [
            m
            for _, (m, _) in graph.stream(
                {"messages": [("user", "hi")]}, stream_mode="messages", subgraphs=True
            )
        ]
        request = {"messages": [("user", "hi"), ("ai", "hello"), ("user", "again")]}
        chunks = [
            m async for _, (m, _) in graph.astream(request, stream_mode="messages", subgraphs=True)
        ]
        for streamed in (sync, chunks):
            assert [m.text for m in streamed if m.type in ("ai", "AIMessageChunk")] == [
                "Noted: you adopted a cat."
            ]
        assert len(rater.calls) >= 2  # the puts were rated by the model, not streamed
        assert len(stream.recent(None, namespace="u", kinds=["reflection"])) >= 2
