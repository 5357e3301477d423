"""Run trees as LangSmith would record them: names, tags, metadata, ``ls_retriever_name``.

LangSmith's tracer is an *inheritable* callback handler configured from the environment or a
context variable, so it sees every nested run (graph nodes, model calls, retrievers).
``collect_runs`` registers its handler as non-inheritable, which detaches LangGraph node runs
from their graph; the :class:`CollectingTracer` below is registered like LangSmith's instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.context import register_configure_hook
from langchain_core.tracers.schemas import Run
from langgraph.config import get_store
from langgraph.graph import START, MessagesState, StateGraph

from langchain_reflective import (
    MemoryStream,
    ReflectiveRetriever,
    ReflectiveStore,
    create_thinking_graph,
)
from langchain_reflective.errors import ImportanceError, InvalidMemoryError
from langchain_reflective.importance import ImportanceConfig, LLMImportanceScorer
from langchain_reflective.integrations.middleware import ReflectiveMemoryMiddleware
from langchain_reflective.memory import MemoryConfig, ReflectiveMemory
from langchain_reflective.reflexion import create_reflexion_graph, match_evaluator
from tests.fakes import WordEmbeddings
from tests.thinking_fakes import seed_script
from tests.unit.reflexion_fakes import ScriptedReflexionModel, good_reflection
from tests.unit.test_examples import EXAMPLES_DIR, load
from tests.unit.test_middleware import FakeChat, tool_call
from tests.unit.test_reflection_fakes import ScriptedChatModel


class CollectingTracer(BaseTracer):
    """Keeps finished root runs with their child runs, like LangSmith's tracer uploads them."""

    def __init__(self) -> None:
        super().__init__()
        self.roots: list[Run] = []
        self.finished: list[Run] = []
        """Every finished run, also those that end after their parent (background work)."""

    def _persist_run(self, run: Run) -> None:
        self.roots.append(run)

    def _on_run_update(self, run: Run) -> None:
        self.finished.append(run)


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


def assert_each_tag_once(root: Run) -> None:
    """No run of the tree carries a tag twice (LangGraph records a tag given by both a graph's
    ``with_config`` and the call's config twice)."""
    for run in walk(root):
        tags = run.tags or []
        assert len(tags) == len(set(tags)), (run.name, tags)


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
    assert_each_tag_once(root)
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
    # one run per step: LangGraph's node run, with no "reflection.<step>" run of the same step
    # nested in it; each stage's model call is one run named for it (not "RunnableSequence" or
    # the model's class name, which LangChain gives the structured-output and retry wrappers),
    # directly inside its step
    assert not [r for r in walk(root) if r.name in {f"reflection.{n}" for n in nodes}]
    for node in [r for r in root.child_runs if r.name in ("questions", "insights", "condense")]:
        ours = [c.name for c in node.child_runs if c.name.startswith("reflection.")]
        assert ours == [f"reflection.{node.name}.model"]


async def test_async_reflection_run_tree(memory: ReflectiveMemory) -> None:
    await memory.aadd(["Bob plays cello", "Bob plays cello in an orchestra"], namespace="bob")
    with traced() as tracer:
        await memory.areflect(namespace="bob")
    root = only_root(tracer, "reflection")
    assert metadata(root)["namespace"] == "bob"
    assert_each_tag_once(root)
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
    assert meta["namespace"] == "carol" and meta["k"] == 1
    assert meta["ls_embedding_model"] == memory.stream.embedding_model
    assert [d.page_content for d in run.outputs["documents"]] == ["Carol keeps bees"]  # type: ignore[index]


def test_retriever_run_names_the_namespace_and_k_it_used(memory: ReflectiveMemory) -> None:
    """A standalone retrieval's metadata says whose memories it read and how many it asked
    for: the run's owner, a per-call override, several namespaces."""
    memory.add("Carol keeps bees", namespace="carol")
    memory.add("Dan keeps goats", namespace="dan")
    retriever = ReflectiveRetriever(memory_stream=memory.stream, k=3)
    with traced() as tracer:
        retriever.invoke("bees", config={"configurable": {"user_id": "dan"}})
        retriever.invoke("bees", k=1, namespace="carol")
        retriever.invoke("bees", namespaces=["carol", "dan"])
        ReflectiveRetriever(memory_stream=memory.stream, k=3, filter={"namespace": "carol"}).invoke(
            "bees"
        )
    meta = [metadata(run) for run in tracer.roots]
    assert [(m.get("namespace"), m.get("namespaces"), m["k"]) for m in meta] == [
        ("dan", None, 3),
        ("carol", None, 1),
        (None, ["carol", "dan"], 3),
        ("carol", None, 3),
    ]
    outputs = [[d.page_content for d in run.outputs["documents"]] for run in tracer.roots]  # type: ignore[index]
    assert outputs[0] == ["Dan keeps goats"] and outputs[1] == ["Carol keeps bees"]
    # the metadata never fails a call the retrieval itself refuses with its own error
    with pytest.raises(InvalidMemoryError, match="namespaces"):
        retriever.invoke("bees", namespaces=5)


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


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_recall_tool_holds_a_retriever_run(
    memory: ReflectiveMemory, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    """``recall_memories`` searches through the package's retriever: LangSmith shows a
    ``retriever`` run (documents out, the namespace read in its metadata) inside the tool run,
    the same documents as the tool message's artifact, from one search of the stream."""
    memory.add(["Erin is learning Japanese", "Erin likes sushi"], namespace="erin")
    searches: list[str] = []
    for name in ("retrieve", "aretrieve"):
        original = getattr(memory.stream, name)

        def spy(query: str, *a: Any, _original: Any = original, **kw: Any) -> Any:
            searches.append(query)
            return _original(query, *a, **kw)

        monkeypatch.setattr(memory.stream, name, spy)
    model = FakeChat(script=[tool_call("recall_memories", {"query": "Japanese", "k": 1}), "ok"])
    middleware = ReflectiveMemoryMiddleware(memory, inject=False, include_tools=True)
    agent = create_agent(model, middleware=[middleware], name="memory_agent")
    request = {"messages": [HumanMessage("Japanese?")]}
    with traced() as tracer:
        if use_async:
            out = asyncio.run(agent.ainvoke(request, context={"user_id": "erin"}))
        else:
            out = agent.invoke(request, context={"user_id": "erin"})
    (tool_run,) = [r for r in walk(only_root(tracer, "memory_agent")) if r.run_type == "tool"]
    (retrieval,) = tool_run.child_runs
    assert retrieval.run_type == "retriever" and retrieval.inputs == {"query": "Japanese"}
    assert metadata(retrieval)["namespace"] == "erin"
    assert metadata(retrieval)["ls_retriever_name"] == "reflective"
    (message,) = [m for m in out["messages"] if m.type == "tool"]
    assert retrieval.outputs["documents"] == message.artifact  # type: ignore[index]
    assert [d.page_content for d in message.artifact] == ["Erin is learning Japanese"]
    assert "Erin is learning Japanese" in message.text and searches == ["Japanese"]


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


def _rated_in_a_node(tmp_path: Path, rater: Any, *, texts: list[str]) -> Run:
    scorer = LLMImportanceScorer(rater, config=ImportanceConfig(batch_size=1))
    with MemoryStream(WordEmbeddings(), path=tmp_path / "rated.db", importance_scorer=scorer) as s:
        node = RunnableLambda(lambda _: len(s.add(texts, namespace="u")), name="save")
        with traced() as tracer:
            node.invoke(None)
    return only_root(tracer, "save")


@pytest.mark.parametrize(
    "rater",
    [FakeChat(default='{"ratings": [{"index": 1, "rating": 6}]}'), ScriptedChatModel()],
    ids=["structured", "text"],
)
def test_importance_run_holds_its_model_call_inside_a_parent_run(
    tmp_path: Path, rater: Any
) -> None:
    """Each rating batch is one ``importance`` run with its model call inside it, under the
    run that stored the memories (a graph node, a tool): LangChain's ``RunnableRetry.batch``
    traced the model call beside the ``importance`` run instead."""
    root = _rated_in_a_node(tmp_path, rater, texts=["Alice adopted a cat", "Bob moved"])
    ratings = [c for c in root.child_runs if c.name == "importance"]
    assert len(ratings) == 2 and [c.name for c in root.child_runs] == ["importance"] * 2
    for run in ratings:
        calls = [r for r in walk(run) if r.run_type == "llm"]
        assert len(calls) == 1 and "nostream" in (calls[0].tags or [])


def test_failed_rating_is_an_error_inside_a_successful_parent(tmp_path: Path) -> None:
    """The model fails, the memory is stored with the heuristic rating: the trace shows the
    error on the model call, inside an ``importance`` run that succeeds with the fallback in
    its outputs, under a storing run that succeeds."""
    rater = ScriptedChatModel(fail_on={"importance": RuntimeError("rater down")})
    root = _rated_in_a_node(tmp_path, rater, texts=["Alice adopted a cat"])
    assert root.error is None and root.outputs == {"output": 1}
    (rating,) = root.child_runs
    _assert_fell_back(rating, "rater down")


def _assert_fell_back(rating: Run, reason: str) -> None:
    """``rating`` is a successful ``importance`` run whose model call failed with ``reason``."""
    assert rating.name == "importance" and rating.error is None
    (result,) = rating.outputs["output"]  # type: ignore[index]
    assert result.source == "heuristic" and reason in (result.error or "")
    (model_run,) = rating.child_runs
    assert model_run.name == "importance.model" and reason in (model_run.error or "")
    (call,) = [r for r in walk(rating) if r.run_type == "llm"]
    assert reason in (call.error or "") and "nostream" in (call.tags or [])


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_bare_add_that_fell_back_is_not_a_failed_trace(tmp_path: Path, use_async: bool) -> None:
    """A ``MemoryStream.add`` outside any run: its ``importance`` run is the trace's root. The
    add succeeds with the heuristic rating, so the root succeeds (the failed model call is red
    inside it); in strict mode the add fails, and so does the root."""
    rater = ScriptedChatModel(fail_on={"importance": RuntimeError("rater down")})
    for strict in (False, True):
        scorer = LLMImportanceScorer(rater, config=ImportanceConfig(strict=strict))
        path = tmp_path / f"bare-{strict}.db"
        with MemoryStream(WordEmbeddings(), path=path, importance_scorer=scorer) as stream:
            with traced() as tracer, contextlib.suppress(ImportanceError):
                if use_async:
                    asyncio.run(stream.aadd(["Alice adopted a cat"]))
                else:
                    stream.add(["Alice adopted a cat"])
            (rating,) = tracer.roots
            if not strict:
                assert len(stream) == 1
                _assert_fell_back(rating, "rater down")
            else:
                assert len(stream) == 0
                assert rating.name == "importance" and "could not be rated" in (rating.error or "")
                assert "rater down" in (rating.child_runs[0].error or "")


async def test_async_importance_run_holds_its_model_call(tmp_path: Path) -> None:
    rater = FakeChat(default='{"ratings": [{"index": 1, "rating": 6}]}')
    scorer = LLMImportanceScorer(rater, config=ImportanceConfig(batch_size=1))
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "rated.db", importance_scorer=scorer)

    async def save(_: Any) -> int:
        return len(await stream.aadd(["Alice adopted a cat", "Bob moved"], namespace="u"))

    with traced() as tracer:
        await RunnableLambda(save, name="save").ainvoke(None)
    await stream.aclose()
    root = only_root(tracer, "save")
    assert [c.name for c in root.child_runs] == ["importance"] * 2
    assert all(len([r for r in walk(c) if r.run_type == "llm"]) == 1 for c in root.child_runs)


def test_reflexion_self_reflection_is_named_and_not_streamed(tmp_path: Path) -> None:
    """The self-reflection writes memory: its call is named for its step and tagged
    ``nostream``, so ``stream_mode="messages"`` shows the actor's attempts and nothing else."""
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "reflexion.db")
    model = ScriptedReflexionModel(actor_script=["Sydney", "Canberra"])
    graph = create_reflexion_graph(model, match_evaluator("Canberra"), stream=stream)
    with stream:
        with traced() as tracer:
            graph.invoke({"task": "What is the capital of Australia?"})
        model._n_actor = 0  # replay the same two attempts, streamed
        streamed = [
            m.text
            for m, _ in graph.stream({"task": "Capital of Australia?"}, stream_mode="messages")
        ]
    root = only_root(tracer, "reflexion")
    (node,) = [r for r in root.child_runs if r.name == "self_reflect"]
    (call,) = node.child_runs  # the step's one run holds its model call, no nested step run
    assert call.name == "reflexion.self_reflect.model" and "nostream" in (call.tags or [])
    assert [r.run_type for r in walk(call)].count("llm") == 1
    actor_calls = [r for r in walk(root) if r.run_type == "llm" and r not in list(walk(call))]
    assert actor_calls and all("nostream" not in (r.tags or []) for r in actor_calls)
    assert streamed == ["Sydney", "Canberra"]
    assert good_reflection(2)[:20] not in " ".join(streamed)


def _graph_runs(tmp_path: Path, kind: str, *, use_async: bool) -> Run:
    """The root run of one reflexion or thinking graph run (two turns of thinking, the second
    one recalling the first)."""
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / f"{kind}.db")
    graph: Any
    if kind == "reflexion":
        model = ScriptedReflexionModel(actor_script=["Sydney", "Canberra"])
        graph = create_reflexion_graph(model, match_evaluator("Canberra"), stream=stream)
        requests = [{"task": "What is the capital of Australia?"}]
    else:
        graph = create_thinking_graph(FakeChat(script=seed_script()), stream)
        requests = [{"context": "Files: [main.ts]"}, {"context": "Files: [main.ts, bench.ts]"}]
    with stream, traced() as tracer:
        for request in requests:
            if use_async:
                asyncio.run(graph.ainvoke(request))
            else:
                graph.invoke(request)
    return tracer.roots[-1]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", ["reflexion", "thinking"])
def test_each_graph_step_is_one_run(tmp_path: Path, kind: str, use_async: bool) -> None:
    """A step of the reflexion or thinking graph is one run, LangGraph's run of the node, with
    the step's model calls (and thinking's recall) directly inside it (the step wrapper used to
    start a second run of the same step inside it: ``actor`` > ``reflexion.actor``)."""
    root = _graph_runs(tmp_path, kind, use_async=use_async)
    assert root.name == kind
    steps = [r.name for r in root.child_runs]
    assert not [r for r in walk(root) if r.name in {f"{kind}.{step}" for step in steps}]
    # our named runs (model calls, thinking's recall) sit directly in their step's run
    step_ids = {r.id for r in root.child_runs}
    ours = [r for r in walk(root) if r.name.startswith(f"{kind}.")]
    assert ours and all(r.parent_run_id in step_ids for r in ours), [r.name for r in ours]
    if kind == "thinking":
        assert {"prepare", "think", "summarize", "store"} <= set(steps)
        assert {"thinking.round", "thinking.recall_context", "thinking.summary"} <= {
            r.name for r in ours
        }
    else:
        assert {"load", "actor", "evaluate", "self_reflect"} <= set(steps)
        actor_calls = [r for r in walk(root) if r.run_type == "llm" and r.parent_run_id in step_ids]
        assert len(actor_calls) == 2 and "reflexion.self_reflect.model" in {r.name for r in ours}


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_thinking_middleware_run_names_the_users_namespace(tmp_path: Path, use_async: bool) -> None:
    """The ``thinking`` run a ``ThinkingMiddleware`` starts names the namespace it thinks
    about; its only namespace metadata was the stream's ``default_namespace``."""
    from tests.unit.test_thinking_middleware import Context, build, scripts

    with MemoryStream(WordEmbeddings(), path=tmp_path / "thinking-agent.db") as stream:
        agent: Any = build(stream, *scripts())
        request = {"messages": [HumanMessage("Why is it slow?")]}
        config: Any = {"configurable": {"thread_id": "alice-1"}, "tags": ["user-tag"]}
        with traced() as tracer:
            if use_async:
                asyncio.run(agent.ainvoke(request, config, context=Context("alice")))
            else:
                agent.invoke(request, config, context=Context("alice"))
    (root,) = tracer.roots
    (thinking,) = [r for r in walk(root) if r.name == "thinking"]
    assert metadata(thinking)["namespace"] == "alice"
    assert all(metadata(r)["namespace"] == "alice" for r in thinking.child_runs)
    assert_each_tag_once(root)


def _background_memory(tmp_path: Path) -> ReflectiveMemory:
    rater = FakeChat(default='{"ratings": [{"index": 1, "rating": 6}]}')
    scorer = LLMImportanceScorer(rater, config=ImportanceConfig(batch_size=1))
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "bg.db", importance_scorer=scorer)
    stream.add(["Erin is learning Japanese", "Erin likes sushi"], namespace="erin")
    return ReflectiveMemory(FakeChat(), stream, config=MemoryConfig(reflect_every=1))


def _run_agent(memory: ReflectiveMemory, model: FakeChat, *, tools: bool) -> CollectingTracer:
    middleware = ReflectiveMemoryMiddleware(memory, include_tools=tools)
    agent = create_agent(model, middleware=[middleware], name="memory_agent")
    request = {"messages": [HumanMessage("Japanese?")]}
    config: Any = {"tags": ["user-tag"], "metadata": {"session": "s1"}}
    with traced() as tracer:
        agent.invoke(request, context={"user_id": "erin"}, config=config)
        assert memory.flush(timeout=30)
    return tracer


def _in_trace_of(run: Run, root: Run, tracer: CollectingTracer, parent_name: str) -> None:
    """``run`` (finished after ``root``) belongs to ``root``'s trace, under ``parent_name``."""
    parents = {r.id: r.name for r in tracer.finished}
    assert run.trace_id == root.id and parents[run.parent_run_id] == parent_name  # type: ignore[index]
    assert "user-tag" in (run.tags or []) and metadata(run)["session"] == "s1"
    assert not [k for k in metadata(run) if k.startswith("langgraph_")]


def test_background_reflection_is_traced_under_the_turn_that_started_it(tmp_path: Path) -> None:
    """A background reflection runs on its own thread: it is part of the agent run's trace
    (under the step that recorded the turn, through the drain pass that stored it), with the
    run's tags and metadata and a ``background`` tag; not a separate trace (LANGSMITH_TRACING
    set) or no trace at all (tracing switched on by a context manager, like this collector)."""
    with _background_memory(tmp_path) as memory:
        tracer = _run_agent(memory, FakeChat(), tools=False)
    root = only_root(tracer, "memory_agent")
    assert tracer.roots == [root]
    # the turn is queued, its drain pass stores it and starts the reflection
    (reflection,) = [r for r in tracer.finished if r.name == "reflection"]
    _in_trace_of(reflection, root, tracer, "pending_drain")
    (drain,) = [r for r in tracer.finished if r.id == reflection.parent_run_id]
    _in_trace_of(drain, root, tracer, "ReflectiveMemoryMiddleware.after_agent")
    assert "background" in (reflection.tags or []) and metadata(reflection)["namespace"] == "erin"
    # the reflection starts on the drain's (background) thread: still one background tag
    for run in tracer.finished:
        assert len(run.tags or []) == len(set(run.tags or [])), (run.name, run.tags)
    calls = [r for r in tracer.finished if r.run_type == "llm" and r.trace_id == root.id]
    staged = [r for r in calls if "reflection_stage" in metadata(r)]
    assert staged and all(str(reflection.id) in r.dotted_order for r in staged)  # type: ignore[operator]


def test_pending_drain_is_traced_under_the_tool_call_that_saved(tmp_path: Path) -> None:
    """``save_memory`` queues the memory; the drain thread rates it: the pass is one
    ``pending_drain`` run of the agent run's trace, under the tool call, with the ratings
    inside it (the turn recorded meanwhile is drained by the same pass)."""
    model = FakeChat(script=[tool_call("save_memory", {"text": "Erin visits Kyoto"}), "Noted."])
    with _background_memory(tmp_path) as memory:
        tracer = _run_agent(memory, model, tools=True)
    root = only_root(tracer, "memory_agent")
    assert tracer.roots == [root]
    drains = [r for r in tracer.finished if r.name == "pending_drain"]
    assert drains and all(r.trace_id == root.id for r in drains)
    _in_trace_of(drains[0], root, tracer, "save_memory")
    assert {"background", "pending"} <= set(drains[0].tags or [])
    ratings = [r for r in tracer.finished if r.name == "importance" and r.trace_id == root.id]
    parents = {r.id: r.name for r in tracer.finished}
    assert ratings and {parents[r.parent_run_id] for r in ratings} <= {  # type: ignore[index]
        "pending_drain",
        "store",  # the reflection graph's store step
    }


def test_background_context_keeps_only_the_tracing_of_the_callers_run() -> None:
    """Work handed to a thread keeps the tracers (under the current run) and nothing else of
    the caller's graph run: not its checkpointer, store or configurable, not the handlers
    that feed its ``stream_mode`` (finished by the time the work runs)."""
    from langchain_core.runnables.config import var_child_runnable_config

    from langchain_reflective._background import background_context

    seen: list[Any] = []

    def node(state: MessagesState) -> dict[str, Any]:
        seen.append(background_context().get(var_child_runnable_config))
        return {"messages": [("ai", "ok")]}

    graph = StateGraph(MessagesState).add_node("n", node).add_edge(START, "n").compile()
    request: Any = {"messages": [("user", "hi")]}
    list(graph.stream(request, stream_mode="messages"))  # no tracer: nothing to keep
    with traced() as tracer:
        list(graph.stream(request, {"metadata": {"session": "s1"}}, stream_mode="messages"))
    untraced, kept = seen
    assert untraced["tags"] == ["background"] and "callbacks" not in untraced
    assert set(kept) == {"callbacks"}
    manager = kept["callbacks"]
    assert manager.handlers == [tracer] and manager.inheritable_handlers == [tracer]
    (node_run,) = [r for r in tracer.roots[0].child_runs if r.name == "n"]
    assert manager.parent_run_id == node_run.id
    assert manager.inheritable_metadata["session"] == "s1"
    assert not [k for k in manager.inheritable_metadata if k.startswith("langgraph_")]
