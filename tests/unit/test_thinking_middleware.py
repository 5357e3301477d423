"""ThinkingMiddleware inside a real ``create_agent`` agent (scripted fake models)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

import langchain_reflective
from langchain_reflective import ContextMemory, MemoryStream, RetryConfig
from langchain_reflective.memory import MEMORY_PREAMBLE
from langchain_reflective.thinking.middleware import ThinkingMiddleware, turn_context
from tests.fakes import WordEmbeddings
from tests.thinking_fakes import FlakyEmbeddings, Rounds, decide, recall, round_, summary
from tests.unit.test_middleware import FakeChat, fenced, system_text, tool_call


@dataclass
class Context:
    user_id: str


@tool
def read_file(path: str) -> str:
    """Read a file of the workspace."""
    return f"{path}: function parseData(rows) {{ for (a of rows) for (b of rows) ... }}"


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[MemoryStream]:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "agent.db") as s:
        yield s


def build(stream: MemoryStream, thinker: Rounds, actor: FakeChat) -> object:
    middleware = ThinkingMiddleware(thinker, stream, retry=RetryConfig(attempts=1))
    return create_agent(
        actor,
        tools=[read_file],
        system_prompt="You are a coding agent.",
        middleware=[middleware],
        context_schema=Context,
        checkpointer=InMemorySaver(),
    )


def scripts() -> tuple[Rounds, FakeChat]:
    thinker = Rounds(
        script=[
            round_("Need to look at utils.ts first.", decide(False, "Read the file", "a1")),
            round_(
                "What did I find last time?",
                recall("a2", keywords=["parseData", "quadratic"]),
                decide(False, "I know what was slow", "a2"),
            ),
            round_("New user, nothing to recall.", recall("b1", turn_numbers=[1])),
            round_("Still nothing.", decide(False, "answer", "b2")),
        ],
        summaries=[
            summary("Found that parseData in utils.ts is quadratic", ["parseData is O(n²)"]),
            summary("Told the user parseData was the slow part", []),
        ],
    )
    actor = FakeChat(
        script=[
            tool_call("read_file", {"path": "utils.ts"}),
            "parseData is quadratic: it loops over the rows twice.",
            "Last time parseData was the slow part.",
            "Hello Bob.",
        ]
    )
    return thinker, actor


def test_agent_thinks_injects_and_records_per_user(stream: MemoryStream) -> None:
    thinker, actor = scripts()
    agent = build(stream, thinker, actor)
    alice = {"configurable": {"thread_id": "alice-1"}}
    agent.invoke({"messages": [HumanMessage("Why is it slow?")]}, alice, context=Context("alice"))  # type: ignore[attr-defined]

    # thinking ran once for the turn although the agent called the model twice (tool call)
    assert len(thinker.thinking_calls) == 1 and len(actor.calls) == 2
    # both agent calls got the turn's thought, fenced as data
    for call in actor.calls:
        system = system_text(call)
        assert system.startswith("You are a coding agent.") and MEMORY_PREAMBLE in system
        assert "Need to look at utils.ts first." in fenced(system)
    # the turn's snapshot: user, tool call, tool result and answer; summary cites it
    memory = ContextMemory(stream)
    snap = memory.context_by_turn(1, namespace="alice")
    assert snap is not None and snap.tool_calls == ("read_file",)
    assert snap.context.splitlines()[0] == "User: Why is it slow?"
    assert "Tool call: read_file" in snap.context and "Tool result (read_file)" in snap.context
    assert snap.context.endswith("Assistant: parseData is quadratic: it loops over the rows twice.")
    summ = memory.summary_by_turn(1, namespace="alice")
    assert summ is not None and summ.context_id == snap.id and not summ.fallback
    assert stream.count(namespace="default") == 0

    # turn 2: the summary of turn 1 is in the thinking prompt and in the agent's prompt; the
    # keyword recall found turn 1's snapshot
    agent.invoke(
        {"messages": [HumanMessage("What was slow last time?")]}, alice, context=Context("alice")
    )  # type: ignore[attr-defined]
    second_thinking = "\n".join(m.text for m in thinker.thinking_calls[1])
    assert "[Turn 1] Found that parseData in utils.ts is quadratic" in second_thinking
    system = fenced(system_text(actor.calls[2]))
    assert "Summary: [Turn 1] Found that parseData in utils.ts is quadratic" in system
    assert "Recalled: [Turn 1 |" in system and "Tool result (read_file)" in system
    assert memory.next_turn(namespace="alice") == 3
    # the thinking context is not persisted in the conversation
    state = agent.get_state(alice).values  # type: ignore[attr-defined]
    assert not any(isinstance(m, SystemMessage) for m in state["messages"])

    # bob: his own namespace, his recall of turn 1 finds nothing of alice's
    bob = {"configurable": {"thread_id": "bob-1"}}
    agent.invoke({"messages": [HumanMessage("Hi")]}, bob, context=Context("bob"))  # type: ignore[attr-defined]
    bob_prompts = "\n".join(m.text for c in thinker.thinking_calls[2:] for m in c)
    assert "parseData" not in bob_prompts
    assert "parseData" not in system_text(actor.calls[3])
    assert memory.next_turn(namespace="bob") == 2


async def test_agent_async_twins(stream: MemoryStream) -> None:
    thinker, actor = scripts()
    agent = build(stream, thinker, actor)
    cfg = {"configurable": {"thread_id": "a"}}
    await agent.ainvoke(
        {"messages": [HumanMessage("Why is it slow?")]}, cfg, context=Context("alice")
    )  # type: ignore[attr-defined]
    assert len(thinker.thinking_calls) == 1
    summ = ContextMemory(stream).summary_by_turn(1, namespace="alice")
    assert summ is not None and summ.summary.startswith("Found that parseData")


def test_require_namespace(stream: MemoryStream) -> None:
    middleware = ThinkingMiddleware(FakeChat(), stream, require_namespace=True)
    agent = create_agent(FakeChat(), middleware=[middleware])
    with pytest.raises(ValueError, match="no memory owner"):
        agent.invoke({"messages": [HumanMessage("hi")]})
    assert stream.count() == 0


def test_turn_context_and_lazy_root_import() -> None:
    from langchain_core.messages import AIMessage, ToolMessage

    text, tools = turn_context(
        [
            HumanMessage("q"),
            AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "1"}]),
            ToolMessage("r", tool_call_id="1", name="t"),
            AIMessage("a"),
        ]
    )
    assert text.splitlines() == [
        "User: q",
        "Tool call: t({})",
        "Tool result (t): r",
        "Assistant: a",
    ]
    assert tools == ["t"]
    assert langchain_reflective.ThinkingMiddleware is ThinkingMiddleware


def _racing(middleware: ThinkingMiddleware, stream: MemoryStream) -> list[int]:
    """Make another writer record the number the middleware is about to store under (as a
    second turn of the same user, recorded at the same moment, would)."""
    other = ContextMemory(stream)
    taken: list[int] = []
    store = middleware._thinker.store

    def racing_store(state: Any, config: Any, **kwargs: Any) -> Any:
        if not taken:
            taken.append(state["turn"])
            ns = state["namespace"]
            other.record_turn(state["turn"], "User: other turn", "the other turn", namespace=ns)
        return store(state, config, **kwargs)

    middleware._thinker.store = racing_store  # type: ignore[method-assign]
    return taken


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_turn_number_taken_meanwhile_moves_to_the_next_one(
    stream: MemoryStream, use_async: bool
) -> None:
    thinker, actor = scripts()
    middleware = ThinkingMiddleware(thinker, stream, retry=RetryConfig(attempts=1))
    taken = _racing(middleware, stream)
    agent = create_agent(actor, tools=[read_file], middleware=[middleware], context_schema=Context)
    request = {"messages": [HumanMessage("Why is it slow?")]}
    if use_async:
        await agent.ainvoke(request, context=Context("alice"))  # type: ignore[arg-type]
    else:
        agent.invoke(request, context=Context("alice"))  # type: ignore[arg-type]
    memory = ContextMemory(stream)
    assert taken == [1]
    first, second = (memory.summary_by_turn(t, namespace="alice") for t in (1, 2))
    assert first is not None and first.summary == "the other turn"  # the other writer's turn
    assert second is not None and second.summary.startswith("Found that parseData")
    snap = memory.context_by_turn(2, namespace="alice")
    assert snap is not None and snap.context.startswith("User: Why is it slow?")
    assert memory.next_turn(namespace="alice") == 3


def test_an_unstorable_summary_is_recorded_as_the_extractive_fallback(
    stream: MemoryStream,
) -> None:
    """A 300,000-character summary used to raise out of the agent run after the answer and
    leave snapshots of turns 1..8 with no summary."""
    thinker = Rounds(
        script=[round_("t", decide(False, "ready"))], summaries=[summary("word " * 60_000, [])]
    )
    middleware = ThinkingMiddleware(thinker, stream, retry=RetryConfig(attempts=1))
    agent = create_agent(FakeChat(script=["The answer."]), middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage("hi")]}, context={"user_id": "ana"})  # type: ignore[arg-type]
    assert out["messages"][-1].text == "The answer."
    memory = ContextMemory(stream)
    stored = memory.summary_by_turn(1, namespace="ana")
    assert stored is not None and stored.fallback and stored.summary.startswith("User: hi")
    assert stream.count(namespace="ana") == 2 and memory.next_turn(namespace="ana") == 2


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_storage_failure_while_recording_is_logged_and_the_answer_returned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, use_async: bool
) -> None:
    """The run keeps its answer (it raised after answering, so a caller without a checkpointer
    lost it); the failure is logged once, nothing of the turn is stored, and the user's next
    message is recorded as turn 1."""
    embeddings = FlakyEmbeddings(fail_on="summary of the turn")
    with MemoryStream(embeddings, path=tmp_path / "flaky.db") as s:
        thinker = Rounds(
            script=[round_("t", decide(False, "ready"))] * 2,
            summaries=[summary("summary of the turn", []), summary("the next turn", [])],
        )
        actor = FakeChat(script=["The answer.", "Another answer."])
        agent: Any = create_agent(
            actor, middleware=[ThinkingMiddleware(thinker, s, retry=RetryConfig(attempts=1))]
        )
        run = agent.ainvoke if use_async else agent.invoke

        async def ask(text: str) -> Any:
            out = run({"messages": [HumanMessage(text)]}, context={"user_id": "ana"})
            return await out if use_async else out

        with caplog.at_level(logging.ERROR, logger="langchain_reflective.thinking.middleware"):
            out = await ask("hi")
        assert out["messages"][-1].text == "The answer."  # was: RuntimeError, no answer
        [record] = caplog.records
        assert "could not record turn 1 of namespace 'ana'" in record.getMessage()
        assert "RuntimeError: embedding service down" in record.getMessage()
        assert "were not stored; the agent's answer is returned" in record.getMessage()
        assert s.count(namespace="ana") == 0
        await ask("again")
        memory = ContextMemory(s)
        stored = memory.summary_by_turn(1, namespace="ana")
        assert stored is not None and stored.summary == "the next turn"
        assert s.count(namespace="ana") == 2


def test_a_turn_that_failed_to_record_is_recorded_when_it_ends_again(tmp_path: Path) -> None:
    """A resumed run of the thread (no new user message) ends the same turn again: it is
    recorded then, with its first answer and the new one."""
    embeddings = FlakyEmbeddings(fail_on="summary of the turn")
    with MemoryStream(embeddings, path=tmp_path / "flaky.db") as s:
        thinker = Rounds(
            script=[round_("t", decide(False, "ready"))],
            summaries=[summary("summary of the turn", []), summary("summary of the turn", [])],
        )
        agent: Any = create_agent(
            FakeChat(script=["The answer.", "More."]),
            middleware=[ThinkingMiddleware(thinker, s, retry=RetryConfig(attempts=1))],
            checkpointer=InMemorySaver(),
        )
        config: Any = {"configurable": {"thread_id": "t"}}
        out = agent.invoke({"messages": [HumanMessage("hi")]}, config, context={"user_id": "ana"})
        assert out["messages"][-1].text == "The answer." and s.count(namespace="ana") == 0
        kept = agent.get_state(config).values["reflective_thinking"]
        assert not kept["recorded"] and "embedding service down" in kept["record_error"]
        embeddings.fail_on = ""  # the service is back
        agent.invoke({"messages": []}, config, context={"user_id": "ana"})
        snap = ContextMemory(s).context_by_turn(1, namespace="ana")
        assert snap is not None and "Assistant: The answer." in snap.context
        kept = agent.get_state(config).values["reflective_thinking"]
        assert kept["recorded"] and "record_error" not in kept
        assert len(thinker.thinking_calls) == 1  # the turn was thought about once


def test_a_user_message_longer_than_a_snapshot_is_thought_about_and_answered(
    stream: MemoryStream,
) -> None:
    """A 234,000-character message (~58k tokens) used to fail the run before any model call
    (the graph's snapshot-size check, though thinking records nothing)."""
    message = "Why does this log fail?\n" + "log line\n" * 26_000
    thinker = Rounds(
        script=[round_("a long log", decide(False, "ready"))],
        summaries=[summary("The user pasted a log", [])],
    )
    actor = FakeChat(script=["The answer."])
    middleware = ThinkingMiddleware(
        thinker, stream, retry=RetryConfig(attempts=1), thinking_token_budget=10**9
    )
    agent = create_agent(actor, middleware=[middleware])
    out = agent.invoke({"messages": [HumanMessage(message)]}, context={"user_id": "ana"})  # type: ignore[arg-type]
    assert out["messages"][-1].text == "The answer." and len(actor.calls) == 1
    assert len(thinker.thinking_calls) == 1
    assert "a long log" in fenced(system_text(actor.calls[0]))
    snap = ContextMemory(stream).context_by_turn(1, namespace="ana")
    assert snap is not None and len(snap.context) == 200_000  # recorded, cut to a snapshot
    assert snap.context.endswith("[... cut: the turn was longer than a snapshot holds]")


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_conversation_summary_is_not_a_new_user_message(
    stream: MemoryStream, use_async: bool
) -> None:
    """LangChain's SummarizationMiddleware replaces the turn's first messages with a summary
    (a HumanMessage) mid-turn: thinking ran again on it (3 runs instead of 1) and the turn was
    recorded as "User: Here is a summary of the conversation to date", the user's message and
    first tool calls lost."""
    from langchain.agents.middleware import SummarizationMiddleware

    from langchain_reflective.thinking.middleware import SUMMARISED_MARKER

    @tool
    def lookup(x: int) -> str:
        """Look a value up."""
        return str(x)

    thinker = Rounds(
        script=[round_("add them up", decide(False, "ready")), round_("t2", decide(False, "ok"))],
        summaries=[summary("Added the values 1..3", []), summary("Said hello", [])],
    )
    actor = FakeChat(
        script=[
            tool_call("lookup", {"x": 1}, "c1"),
            tool_call("lookup", {"x": 2}, "c2"),
            tool_call("lookup", {"x": 3}, "c3"),
            "Final answer: 6",
            "Hello.",
        ]
    )
    summarise = SummarizationMiddleware(
        FakeChat(default="SUMMARY-TEXT"), trigger=("messages", 4), keep=("messages", 2)
    )
    thinking = ThinkingMiddleware(thinker, stream, retry=RetryConfig(attempts=1))
    agent: Any = create_agent(
        actor, tools=[lookup], middleware=[summarise, thinking], checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": "jo-1"}}

    async def ask(text: str) -> Any:
        request = {"messages": [HumanMessage(text)]}
        if use_async:
            return await agent.ainvoke(request, config, context={"user_id": "jo"})
        return agent.invoke(request, config, context={"user_id": "jo"})

    out = await ask("add the values 1..3")
    assert any("SUMMARY-TEXT" in m.text for m in out["messages"])  # (the summary did happen)
    assert not any(m.text == "add the values 1..3" for m in out["messages"])
    assert len(thinker.thinking_calls) == 1  # was 3: twice more on the summary
    assert "User: add the values 1..3" in "\n".join(m.text for m in thinker.thinking_calls[0])
    memory = ContextMemory(stream)
    snap = memory.context_by_turn(1, namespace="jo")
    assert snap is not None
    assert snap.context.splitlines() == [
        "User: add the values 1..3",
        SUMMARISED_MARKER,
        "Tool call: lookup({'x': 3})",
        "Tool result (lookup): 3",
        "Assistant: Final answer: 6",
    ]
    assert snap.tool_calls == ("lookup",)
    summ = memory.summary_by_turn(1, namespace="jo")
    assert summ is not None and summ.summary == "Added the values 1..3"
    summary_prompt = "\n".join(m.text for m in thinker.calls[-1])
    assert "User: add the values 1..3" in summary_prompt
    assert "Here is a summary of the conversation" not in summary_prompt

    # the user's next message (after the summary in the thread) is a new turn, thought about
    await ask("hi")
    assert len(thinker.thinking_calls) == 2
    second = "\n".join(m.text for m in thinker.thinking_calls[1])
    assert "summary: Here is a summary of the conversation to date:" in second
    assert "human: Here is a summary" not in second  # (not shown as the user's words)
    snap = memory.context_by_turn(2, namespace="jo")
    assert snap is not None and snap.context.splitlines() == ["User: hi", "Assistant: Hello."]
