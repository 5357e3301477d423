"""The async API does no blocking I/O on the event loop.

LangGraph's API server (``langgraph dev``) runs graphs under blockbuster, which raises
``BlockingError`` when a coroutine's thread makes a blocking call (sqlite3, file reads,
``time.sleep``, sockets, ...); LangGraph tests its own code the same way. Each test runs a public
async path here under ``blockbuster_ctx`` scanning this package, so a blocking call made by our
code fails it. The objects are built outside (construction is sync), and each path runs once
before on other objects, so one-time imports are not what is measured; a first use of *these*
objects (e.g. the reflection graph compiled on the first ``areflect``) is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest
from blockbuster import blockbuster_ctx
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from langchain_reflective import (
    ContextMemory,
    InvalidMemoryError,
    MemoryConfig,
    MemoryStream,
    ReflectiveMemory,
    ReflectiveMemoryMiddleware,
    ReflectiveRetriever,
    ReflectiveStore,
)
from langchain_reflective.importance import RetryConfig
from langchain_reflective.reflection import ReflectionConfig
from tests.fakes import WordEmbeddings
from tests.unit.test_middleware import FakeChat, tool_call
from tests.unit.test_reflection_fakes import ScriptedChatModel

FAST = ReflectionConfig(min_relevance=-1.0, retry=RetryConfig(initial_wait=0.0, max_wait=0.0))
EVENTS = ["Klaus writes a paper on gentrification", "Klaus discussed the paper with Maria"]


async def never_blocks(
    build: Callable[[], Any],
    run: Callable[[Any], Awaitable[None]],
    close: Callable[[Any], Awaitable[None]] | None = None,
) -> Any:
    """Run ``run(build())`` once, then on new objects under blockbuster; return those.

    ``close`` closes the first objects when ``run`` leaves them open (the test reads the
    returned ones after it): a file store left to the garbage collector stops its checkpoint
    thread whenever a collection runs, under a later test's blockbuster too, which fails
    that stop as a blocking call (reported only as an unraisable exception)."""
    first = build()
    await run(first)
    if close is not None:
        await close(first)
    fresh = build()
    with blockbuster_ctx("langchain_reflective"):
        await run(fresh)
    return fresh


def memory(tmp_path: Path, **config: Any) -> ReflectiveMemory:
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / f"{len(list(tmp_path.iterdir()))}.db")
    return ReflectiveMemory(
        ScriptedChatModel(), stream, config=MemoryConfig(**config), reflection=FAST
    )


async def test_stream_add_retrieve_and_complete_pending(tmp_path: Path) -> None:
    def build() -> tuple[MemoryStream, list[Any]]:
        stream = MemoryStream(WordEmbeddings(), path=tmp_path / f"s{len(list(tmp_path.iterdir()))}")
        return stream, stream.enqueue(["queued for later"])

    async def run(state: tuple[MemoryStream, list[Any]]) -> None:
        stream, queued = state
        await stream.aadd(EVENTS)  # heuristic importance
        await stream.aretrieve("paper", k=2)
        await stream.acomplete_pending(queued)
        await stream.aclose()

    stream, _ = await never_blocks(build, run)
    assert stream._closed


async def test_stream_queue_files_and_table(tmp_path: Path) -> None:
    """``aenqueue``, ``apending``, ``ato_dataframe``, ``aexport_jsonl`` and ``aimport_jsonl``:
    the queue and the table await the backend's twins, the files are written and read in a
    worker thread."""

    def build() -> tuple[MemoryStream, MemoryStream, Path]:
        n = len(list(tmp_path.iterdir()))
        source = MemoryStream(WordEmbeddings(), path=tmp_path / f"t{n}.db")
        source.add(EVENTS, importances=0.5)
        return source, MemoryStream(WordEmbeddings(), path=tmp_path / f"u{n}.db"), tmp_path

    async def run(state: tuple[MemoryStream, MemoryStream, Path]) -> None:
        source, target, folder = state
        await source.aenqueue(["queued for later"])
        assert len(await source.apending()) == 1
        assert len(await source.ato_dataframe("paper")) == 2
        assert len(await source.ato_dataframe()) == 2
        export = folder / f"export-{id(source)}.jsonl"
        assert await source.aexport_jsonl(export) == 2
        assert await target.aimport_jsonl(export) == 2
        await source.aclose()
        await target.aclose()

    source, target, _ = await never_blocks(build, run)
    assert source._closed and target._closed


async def test_context_memory_reads_and_files(tmp_path: Path) -> None:
    """Every async twin of ``ContextMemory``: the reads await the stream's twins, the files
    are written and read in a worker thread."""

    def build() -> tuple[ContextMemory, ContextMemory, Path]:
        n = len(list(tmp_path.iterdir()))
        memory = ContextMemory(MemoryStream(WordEmbeddings(), path=tmp_path / f"c{n}.db"))
        memory.record_turn(1, "Files: main.ts", "Read the code, found the paper", ["3 modules"])
        copy = ContextMemory(MemoryStream(WordEmbeddings(), path=tmp_path / f"d{n}.db"))
        return memory, copy, tmp_path / f"turns-{n}.jsonl"

    async def run(state: tuple[ContextMemory, ContextMemory, Path]) -> None:
        memory, copy, export = state
        await memory.arecord_turn(2, "Files: utils.ts", "parseData is slow", ["O(n²)"])
        assert await memory.alast_turn() == 2 and await memory.anext_turn() == 3
        assert (await memory.acontext_by_turn(1)) is not None
        assert len(await memory.acontexts_by_turn([1, 2, 9])) == 2
        assert len(await memory.acontexts_by_id([memory.summary_id(2)])) == 1
        assert (await memory.asummary_by_turn(2)) is not None
        assert len(await memory.arecent_summaries(5)) == 2
        assert len(await memory.aaccumulated_summaries()) == 2
        assert [s.turn for s in await memory.asearch(["parseData"])] == [2]
        recalled = await memory.arecall(turn_numbers=[1, 7], keywords=["parseData"])
        assert [s.turn for s in recalled.snapshots] == [1, 2]
        assert await memory.aexport_jsonl(export) == 4
        assert await copy.aimport_jsonl(export) == 4
        await memory.stream.aclose()
        await copy.stream.aclose()

    memory, copy, _ = await never_blocks(build, run)
    assert memory.stream._closed and copy.stream._closed


@pytest.mark.parametrize("background", [True, False], ids=["background", "inline"])
async def test_reflective_memory_add_reads_its_counter_off_the_loop(
    tmp_path: Path, background: bool
) -> None:
    """``aadd`` reads the reflection counter to decide whether to reflect (it did so on the
    loop: sqlite3 there, a network round trip on Postgres), then reflects in the background or
    inline."""

    async def run(mem: ReflectiveMemory) -> None:
        await mem.aadd(EVENTS, importances=0.5)  # reflect_every=2: due
        await mem.aflush(30)

    mem = await never_blocks(
        lambda: memory(tmp_path, background=background, reflect_every=2),
        run,
        close=lambda first: first.aclose(),
    )
    assert mem.stream.recent(kinds=["reflection"]) and not mem.errors
    mem.close()


async def test_first_areflect_compiles_its_graph_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first reflection compiles the graph (0.4-0.6 s in a new process here: imports and
    LangChain reading the nodes' source files; about 4 ms after): not on the loop."""
    import langchain_reflective.reflection as reflection

    compiled_on_loop: list[bool] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            compiled_on_loop.append(True)
        except RuntimeError:
            compiled_on_loop.append(False)
        return create_reflection_graph(*args, **kwargs)

    create_reflection_graph = reflection.create_reflection_graph
    monkeypatch.setattr(reflection, "create_reflection_graph", spy)

    def build() -> ReflectiveMemory:
        mem = memory(tmp_path)
        mem.add(EVENTS, importances=0.5)
        return mem

    async def run(mem: ReflectiveMemory) -> None:
        await mem.areflect()
        await mem.abuild_context("paper")
        await mem.aenqueue("Klaus went home")
        await mem.aflush(30)
        assert await mem.aretry_quarantined() == 0  # (nothing was set aside)
        assert await mem.adiscard_quarantined() == 0
        await mem.apurge(namespace="nobody")

    mem = await never_blocks(build, run, close=lambda first: first.aclose())
    assert compiled_on_loop == [False, False]  # once per memory
    assert mem.stream.recent(kinds=["reflection"])
    mem.close()


async def test_agent_with_memory_middleware_and_tools(tmp_path: Path) -> None:
    def build() -> tuple[Any, ReflectiveMemory]:
        mem = memory(tmp_path)
        mem.add("Carol plays chess", namespace="carol", importances=0.5)
        model = FakeChat(
            script=[
                tool_call("recall_memories", {"query": "chess"}),
                tool_call("save_memory", {"text": "Carol likes tea"}, "c2"),
                tool_call("reflect_now", {}, "c3"),
                "You play chess.",
            ]
        )
        agent = create_agent(
            model, middleware=[ReflectiveMemoryMiddleware(mem, include_tools=True)]
        )
        return agent, mem

    async def run(state: tuple[Any, ReflectiveMemory]) -> None:
        agent, mem = state
        cfg = {"configurable": {"user_id": "carol"}}
        await agent.ainvoke({"messages": [HumanMessage("What do I play?")]}, cfg)
        await mem.aflush(30)

    _, mem = await never_blocks(build, run, close=lambda first: first[1].aclose())
    assert mem.stream.recent(namespace="carol", kinds=["reflection"])
    mem.close()


class _State(TypedDict, total=False):
    found: list[str]


async def _store_node(state: _State, *, store: BaseStore) -> _State:
    await store.aput(("alice", "notes"), "tea", {"text": "Alice drinks green tea"})
    await store.aput(("alice", "notes"), "city", {"text": "Alice lives in Lisbon"})
    assert (await store.aget(("alice", "notes"), "tea")) is not None
    hits = await store.asearch(("alice",), query="what does Alice drink?", limit=1)
    assert ("alice", "notes") in await store.alist_namespaces()
    await store.adelete(("alice", "notes"), "city")
    return {"found": [h.key for h in hits]}


async def test_store_in_a_graph_and_the_retriever(tmp_path: Path) -> None:
    def build() -> tuple[Any, ReflectiveRetriever]:
        stream = MemoryStream(WordEmbeddings(), path=tmp_path / f"g{len(list(tmp_path.iterdir()))}")
        stream.add("Bob drinks green tea", importances=0.5)
        graph = StateGraph(_State)
        graph.add_node("remember", _store_node)
        graph.add_edge(START, "remember")
        graph.add_edge("remember", END)
        return graph.compile(store=ReflectiveStore(stream)), ReflectiveRetriever(
            memory_stream=stream, k=1
        )

    async def run(state: tuple[Any, ReflectiveRetriever]) -> None:
        graph, retriever = state
        assert (await graph.ainvoke({}))["found"] == ["tea"]
        assert len(await retriever.ainvoke("green tea")) == 1

    _, retriever = await never_blocks(
        build, run, close=lambda first: first[1].memory_stream.aclose()
    )
    retriever.memory_stream.close()


async def test_thinking_graph_turns_recalls_and_collisions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The thinking graph's async path: its rounds with a recall by number, id and keywords
    (some not stored), the extractive fallback, a given number already stored, runs of one
    namespace at once (the numbers they lose move on after an awaited wait), a turn left
    without its summary reported and completed, and a checkpointed thread."""
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_reflective import create_thinking_graph
    from tests.thinking_fakes import Rounds, decide, recall, round_

    no_retry = RetryConfig(attempts=1)

    def build() -> tuple[ContextMemory, Any, Any]:
        n = len(list(tmp_path.iterdir()))
        memory = ContextMemory(MemoryStream(WordEmbeddings(), path=tmp_path / f"th{n}.db"))
        memory.record_turn(1, "Files: utils.ts parseData", "parseData slow", ["O(n²)"])
        memory.stream.add(**memory._snapshot_args(2, "crashed turn", [], "default", None))
        thinker = Rounds(
            script=[
                round_(
                    "r1",
                    recall("a", turn_numbers=[1, 99], keywords=["parseData"], context_ids=["x"]),
                    decide(True, "go", "a"),
                ),
                round_("r2", decide(False, "done", "b")),
            ],
            summaries=[AIMessage("not json")],
        )
        graph = create_thinking_graph(thinker, memory.stream, retry=no_retry)
        threaded = create_thinking_graph(
            Rounds(), memory.stream, retry=no_retry, checkpointer=InMemorySaver()
        )
        return memory, graph, threaded

    async def run(state: tuple[ContextMemory, Any, Any]) -> None:
        memory, graph, threaded = state
        out = await graph.ainvoke({"context": "why is the import slow"})
        assert out["turn"] == 3 and out["fallback_counts"] == {"summary_malformed": 1}
        assert [r["turn"] for r in out["recalled"]] == [1]
        with pytest.raises(InvalidMemoryError, match="already stored"):
            await graph.ainvoke({"context": "again", "turn": 1})
        runs = [graph.ainvoke({"context": f"c{i}", "namespace": "ns"}) for i in range(4)]
        assert sorted(r["turn"] for r in await asyncio.gather(*runs)) == [1, 2, 3, 4]
        await memory.arecord_turn(2, "crashed turn", "completed")  # only its summary
        cfg: Any = {"configurable": {"thread_id": "t"}}
        await threaded.ainvoke({"context": "first", "record": False}, cfg)
        assert (await threaded.ainvoke({"context": "second"}, cfg))["context_id"] is not None
        await memory.stream.aclose()

    with caplog.at_level(logging.WARNING, logger="langchain_reflective.thinking"):
        memory, _, _ = await never_blocks(build, run)
    assert memory.stream._closed
    # (the report's read swallows its errors, a BlockingError too: it must have been made)
    assert sum("no summary" in r.getMessage() for r in caplog.records) == 2


async def test_thinking_middleware_in_an_agent(tmp_path: Path) -> None:
    """ThinkingMiddleware's async hooks in a checkpointed agent: thinking with a recall before
    the model call, the injected context, and the turn recorded after it."""
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_reflective.thinking.middleware import ThinkingMiddleware
    from tests.thinking_fakes import Rounds, decide, recall, round_

    def build() -> tuple[Any, ContextMemory]:
        n = len(list(tmp_path.iterdir()))
        memory = ContextMemory(MemoryStream(WordEmbeddings(), path=tmp_path / f"mw{n}.db"))
        memory.record_turn(1, "Files: utils.ts parseData", "parseData slow", [], namespace="ana")
        thinker = Rounds(
            script=[
                round_(
                    "r1",
                    recall("a", turn_numbers=[1], keywords=["parseData"]),
                    decide(False, "ok", "a"),
                )
            ]
        )
        middleware = ThinkingMiddleware(thinker, memory, retry=RetryConfig(attempts=1))
        agent = create_agent(
            FakeChat(script=["It is parseData."]),
            middleware=[middleware],
            checkpointer=InMemorySaver(),
        )
        return agent, memory

    async def run(state: tuple[Any, ContextMemory]) -> None:
        agent, memory = state
        cfg: Any = {"configurable": {"thread_id": "x", "user_id": "ana"}}
        out = await agent.ainvoke({"messages": [HumanMessage("why is it slow?")]}, cfg)
        assert out["messages"][-1].text == "It is parseData."
        assert await memory.alast_turn(namespace="ana") == 2
        await memory.stream.aclose()

    _, memory = await never_blocks(build, run)
    assert memory.stream._closed
