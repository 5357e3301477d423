"""``MemoryMiddleware`` runs every built-in in a real ``create_agent`` agent (fake model).

The model call must receive exactly what the strategy's ``context`` returned, fenced as data,
and each finished turn must be committed once, to the run's namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_reflective import (
    BaseMemoryStrategy,
    HybridMemory,
    ImportanceMemory,
    MemoryConfig,
    MemoryMiddleware,
    MemoryStream,
    Observation,
    ReflectiveMemory,
    ReflectiveMemoryStrategy,
    SemanticMemory,
    VoidMemory,
    WindowMemory,
    create_memory_tools,
)
from langchain_reflective.memory import MEMORY_PREAMBLE
from langchain_reflective.strategies import count_tokens, format_context
from tests.fakes import WordEmbeddings
from tests.unit.strategy_fixtures import strategy_fixture
from tests.unit.test_middleware import FakeChat, fenced, system_text

SYSTEM = "You are a helpful assistant."
TURNS = [
    ("I love green tea every morning", "Noted: green tea."),
    ("My cat is called Miso", "Miso is a lovely name."),
    ("What do I drink in the morning?", "Green tea."),
    ("What is my cat called?", "Miso."),
]


class Spy:
    """Records what a strategy's ``context``/``acontext`` returned and what it was committed.

    Only the outermost call is recorded (a built-in's async twin may call its sync method).
    """

    def __init__(self, strategy: BaseMemoryStrategy, monkeypatch: pytest.MonkeyPatch) -> None:
        self.returned: list[list[BaseMessage]] = []
        self.commits: list[Observation] = []
        self._depth = 0
        context, acontext = strategy.context, strategy.acontext
        commit, acommit = strategy.commit, strategy.acommit

        def spy_context(*args: Any, **kwargs: Any) -> list[BaseMessage]:
            self._depth += 1
            try:
                out = context(*args, **kwargs)
            finally:
                self._depth -= 1
            if not self._depth:
                self.returned.append(list(out))
            return out

        async def spy_acontext(*args: Any, **kwargs: Any) -> list[BaseMessage]:
            self._depth += 1
            try:
                out = await acontext(*args, **kwargs)
            finally:
                self._depth -= 1
            self.returned.append(list(out))
            return out

        def spy_commit(observation: Observation) -> None:
            if not self._depth:
                self.commits.append(observation)
            commit(observation)

        async def spy_acommit(observation: Observation) -> None:
            self.commits.append(observation)
            self._depth += 1
            try:
                await acommit(observation)
            finally:
                self._depth -= 1

        monkeypatch.setattr(strategy, "context", spy_context)
        monkeypatch.setattr(strategy, "acontext", spy_acontext)
        monkeypatch.setattr(strategy, "commit", spy_commit)
        monkeypatch.setattr(strategy, "acommit", spy_acommit)


def _reflective(tmp: Path) -> ReflectiveMemoryStrategy:
    stream = MemoryStream(WordEmbeddings(), path=tmp / "reflective.db")
    return ReflectiveMemoryStrategy(ReflectiveMemory(None, stream, config=MemoryConfig()))


FACTORIES: dict[str, Callable[[Path], BaseMemoryStrategy]] = {
    "void": lambda tmp: VoidMemory(),
    "window": lambda tmp: WindowMemory(capacity=10),
    "importance": lambda tmp: ImportanceMemory(max_size=10),
    "hybrid": lambda tmp: HybridMemory(capacity=2, threshold=0.0),
    "semantic": lambda tmp: SemanticMemory(MemoryStream(WordEmbeddings()), k=4),
    "reflective": _reflective,
}


strategy = strategy_fixture(dict(sorted(FACTORIES.items())))


def expected_system(returned: list[BaseMessage]) -> str:
    context = format_context(returned)
    return f"{SYSTEM}\n\n{context}" if context else SYSTEM


def test_each_builtin_gets_exactly_its_context(
    strategy: BaseMemoryStrategy, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(strategy, monkeypatch)
    model = FakeChat(script=[reply for _, reply in TURNS])
    agent = create_agent(
        model, system_prompt=SYSTEM, middleware=[MemoryMiddleware(strategy, budget=2000)]
    )
    for query, _ in TURNS:
        agent.invoke({"messages": [HumanMessage(query)]}, context={"user_id": "alice"})

    calls = model.agent_calls
    assert len(calls) == len(spy.returned) == len(TURNS)
    for call, returned in zip(calls, spy.returned, strict=True):
        systems = [m for m in call if isinstance(m, SystemMessage)]
        assert len(systems) == 1  # the context joins the one system message
        assert systems[0].text == expected_system(returned)
    # every turn was committed once, to alice's namespace, as query + final answer
    assert [(o.query, o.reply, o.namespace) for o in spy.commits] == [
        (q, r, "alice") for q, r in TURNS
    ]
    if isinstance(strategy, VoidMemory):
        assert all(system_text(c) == SYSTEM for c in calls)
        return
    # remembered turns reach later calls, fenced as data after the preamble
    last = system_text(calls[-1])
    assert MEMORY_PREAMBLE in last
    assert "My cat is called Miso" in fenced(last)
    assert spy.returned[0] == [] or "(no memories to show)" in system_text(calls[0])


async def test_async_agent_with_each_builtin(
    strategy: BaseMemoryStrategy, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(strategy, monkeypatch)
    model = FakeChat(script=[reply for _, reply in TURNS[:3]])
    agent = create_agent(model, system_prompt=SYSTEM, middleware=[MemoryMiddleware(strategy)])
    cfg = {"configurable": {"user_id": "bob"}}
    for query, _ in TURNS[:3]:
        await agent.ainvoke({"messages": [HumanMessage(query)]}, cfg)
    for call, returned in zip(model.agent_calls, spy.returned, strict=True):
        assert system_text(call) == expected_system(returned)
    assert [o.namespace for o in spy.commits] == ["bob"] * 3
    remembered = format_context(strategy.context([HumanMessage("green tea")], namespace="bob"))
    assert ("green tea" in remembered) is not isinstance(strategy, VoidMemory)


def test_users_do_not_share_memories(strategy: BaseMemoryStrategy) -> None:
    model = FakeChat(script=["Noted.", "I don't know."])
    agent = create_agent(model, middleware=[MemoryMiddleware(strategy, require_namespace=True)])
    agent.invoke({"messages": [HumanMessage("My PIN is 4321")]}, context={"user_id": "alice"})
    agent.invoke({"messages": [HumanMessage("What is my PIN?")]}, context={"user_id": "bob"})
    assert "4321" not in system_text(model.agent_calls[-1])
    alice = format_context(strategy.context([HumanMessage("PIN")], namespace="alice"))
    assert ("4321" in alice) is not isinstance(strategy, VoidMemory)
    with pytest.raises(ValueError, match="no memory owner"):
        agent.invoke({"messages": [HumanMessage("hi")]})


def test_budget_reaches_the_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = WindowMemory(capacity=50)
    for n in range(20):
        memory.commit(Observation(f"fact number {n} " * 5, "ok", namespace="eve"))
    spy = Spy(memory, monkeypatch)
    model = FakeChat()
    agent = create_agent(model, middleware=[MemoryMiddleware(memory, budget=100)])
    agent.invoke({"messages": [HumanMessage("facts?")]}, context={"user_id": "eve"})
    (returned,) = spy.returned
    assert 0 < count_tokens(returned) <= 100
    assert "fact number 19" in fenced(system_text(model.agent_calls[0]))
    assert "fact number 0 " not in system_text(model.agent_calls[0])


def test_a_turn_is_committed_once_with_a_checkpointer(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = WindowMemory()
    spy = Spy(memory, monkeypatch)
    agent = create_agent(
        FakeChat(script=["First."]),
        middleware=[MemoryMiddleware(memory)],
        checkpointer=InMemorySaver(),
    )
    cfg = {"configurable": {"thread_id": "t", "user_id": "dan"}}
    agent.invoke({"messages": [HumanMessage("one")]}, cfg)
    agent.invoke({"messages": []}, cfg)  # no new user message: only the new answer
    assert [(o.query, o.reply) for o in spy.commits] == [("one", "First."), ("", "OK.")]
    assert spy.commits[0].metadata["thread_id"] == "t"
    assert spy.commits[0].metadata["query_message_id"]


def test_reflective_memory_is_wrapped_and_tools_are_passed_through(tmp_path: Path) -> None:
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "m.db")
    with ReflectiveMemory(None, stream) as memory:
        middleware = MemoryMiddleware(memory, user_prefix="Ana: ")
        assert isinstance(middleware.strategy, ReflectiveMemoryStrategy)
        assert middleware.strategy.user_prefix == "Ana: "
        tools = create_memory_tools(memory)
        assert MemoryMiddleware(WindowMemory(), tools=tools).tools == tools
    with pytest.raises(TypeError):
        MemoryMiddleware(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MemoryMiddleware(WindowMemory(), namespace_key="")
    with pytest.raises(ValueError):
        MemoryMiddleware(WindowMemory(), budget=-5)
