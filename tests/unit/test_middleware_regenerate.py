"""A "regenerate" (LangGraph time travel) does not record the user's message a second time.

Re-running a thread from the checkpoint before the model call processes the same
``HumanMessage`` (same id) again; the state forked from that checkpoint does not say it was
recorded, so the middleware commits it again with the new answer. The built-in strategies keep
each message of a namespace once (by its thread, id, part and text): the new answer (a new
message) is stored, the user's message is not; a new message with the same text (another id)
still is, and so is an edited message (LangGraph's edit: the same id with new text).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables.config import var_child_runnable_config
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
    WindowMemory,
)
from tests.fakes import WordEmbeddings
from tests.unit.strategy_fixtures import Make, strategy_fixture

BUILT_INS: dict[str, Make] = {
    "window": lambda _: WindowMemory(capacity=20),
    "importance": lambda _: ImportanceMemory(max_size=20),
    "hybrid": lambda _: HybridMemory(capacity=2, threshold=0.0),
    "semantic": lambda tmp: SemanticMemory(
        MemoryStream(WordEmbeddings(), path=tmp / "semantic.db"), k=20
    ),
}


strategy = strategy_fixture(BUILT_INS)


def kept(strategy: BaseMemoryStrategy, namespace: str = "ana") -> Counter[str]:
    """How often each remembered message (user's or answer) is in the namespace's memory."""
    return Counter(m.text for m in strategy.context([], namespace=namespace))


def agent_of(strategy: BaseMemoryStrategy, *answers: str) -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(a) for a in answers]))
    return create_agent(
        model, middleware=[MemoryMiddleware(strategy)], checkpointer=InMemorySaver()
    )


def config(thread: str = "t1") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "user_id": "ana"}}


def before_the_model(agent: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    """The config of the latest checkpoint about to call the model: what a UI's "regenerate"
    re-runs (``graph.invoke(None, that_config)``)."""
    return next(s for s in agent.get_state_history(cfg) if s.next == ("model",)).config


async def abefore_the_model(agent: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    async for snapshot in agent.aget_state_history(cfg):
        if snapshot.next == ("model",):
            return snapshot.config
    raise AssertionError("no checkpoint before the model call")


def test_a_regenerate_stores_the_new_answer_and_not_the_users_message_again(
    strategy: BaseMemoryStrategy,
) -> None:
    agent = agent_of(strategy, "Lisbon, noted.", "Noted: you live in Lisbon.", "Hello again.")
    out = agent.invoke({"messages": [HumanMessage("I live in Lisbon", id="m1")]}, config())
    assert out["messages"][-1].text == "Lisbon, noted."
    out = agent.invoke(None, before_the_model(agent, config()))  # regenerate
    assert [m.text for m in out["messages"]] == ["I live in Lisbon", "Noted: you live in Lisbon."]
    assert kept(strategy) == {
        "I live in Lisbon": 1,
        "Lisbon, noted.": 1,
        "Noted: you live in Lisbon.": 1,
    }
    # the user says it again: a new message (a new id), remembered again
    agent.invoke({"messages": [HumanMessage("I live in Lisbon", id="m2")]}, config())
    assert kept(strategy)["I live in Lisbon"] == 2
    assert kept(strategy)["Hello again."] == 1


def test_replaying_the_turns_end_stores_nothing_new(strategy: BaseMemoryStrategy) -> None:
    """From the checkpoint after the model call, the same question and the same answer (same
    ids) are committed again: both are kept already."""
    agent = agent_of(strategy, "Lisbon, noted.")
    agent.invoke({"messages": [HumanMessage("I live in Lisbon", id="m1")]}, config())
    (end,) = [
        s for s in agent.get_state_history(config()) if s.next == ("MemoryMiddleware.after_agent",)
    ]
    agent.invoke(None, end.config)
    assert kept(strategy) == {"I live in Lisbon": 1, "Lisbon, noted.": 1}


async def test_an_async_regenerate_stores_the_new_answer_only(
    strategy: BaseMemoryStrategy,
) -> None:
    agent = agent_of(strategy, "Lisbon, noted.", "Noted: you live in Lisbon.")
    await agent.ainvoke({"messages": [HumanMessage("I live in Lisbon", id="m1")]}, config())
    await agent.ainvoke(None, await abefore_the_model(agent, config()))
    assert kept(strategy) == {
        "I live in Lisbon": 1,
        "Lisbon, noted.": 1,
        "Noted: you live in Lisbon.": 1,
    }


def test_two_regenerates_at_once_store_both_answers_and_the_message_once(
    strategy: BaseMemoryStrategy,
) -> None:
    agent = agent_of(strategy, "A1", "A2", "A3")
    agent.invoke({"messages": [HumanMessage("I live in Lisbon", id="m1")]}, config())
    fork = before_the_model(agent, config())
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def regenerate() -> None:
        try:
            barrier.wait(timeout=30)
            agent.invoke(None, fork)
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=regenerate) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not errors
    assert kept(strategy) == {"I live in Lisbon": 1, "A1": 1, "A2": 1, "A3": 1}


def test_a_message_is_known_by_its_thread_and_namespace(strategy: BaseMemoryStrategy) -> None:
    """An application may number its messages per conversation: "1" of another thread, or of
    another user, is another message."""
    agent = agent_of(strategy, "A1", "A2", "A3")
    agent.invoke({"messages": [HumanMessage("hello", id="1")]}, config("t1"))
    agent.invoke({"messages": [HumanMessage("hello", id="1")]}, config("t2"))
    bob = {"configurable": {"thread_id": "t1", "user_id": "bob"}}  # (bob's agent, bob's t1)
    agent_of(strategy, "B1").invoke({"messages": [HumanMessage("hello", id="1")]}, bob)
    assert kept(strategy)["hello"] == 2
    assert kept(strategy, "bob")["hello"] == 1


def test_messages_without_ids_are_recorded_as_before(strategy: BaseMemoryStrategy) -> None:
    """No id, no identity: a turn whose messages have none is committed each time it ends (a
    state built by hand; LangGraph's ``add_messages`` gives every message an id)."""
    middleware = MemoryMiddleware(strategy)
    state: Any = {"messages": [HumanMessage("I live in Lisbon"), AIMessage("Noted.")]}
    for _ in range(2):
        run: Any = {"configurable": {"user_id": "ana"}}
        token = var_child_runnable_config.set(run)  # (the run's config, as in a graph)
        try:
            middleware.after_agent(state, None)  # type: ignore[arg-type]
        finally:
            var_child_runnable_config.reset(token)
    assert kept(strategy) == {"I live in Lisbon": 2, "Noted.": 2}


def _turn(query: str, reply: str, query_id: str | None, reply_id: str | None) -> Observation:
    metadata = {"source": "agent", "thread_id": "t1"}
    if query_id:
        metadata["query_message_id"] = query_id
    if reply_id:
        metadata["reply_message_id"] = reply_id
    return Observation(query, reply, namespace="ana", metadata=metadata, importance=0.9)


async def test_a_message_kept_already_is_left_out_of_a_commit(
    strategy: BaseMemoryStrategy,
) -> None:
    strategy.commit(_turn("I live in Lisbon", "A1", "m1", "r1"))
    strategy.commit(_turn("I live in Lisbon", "A2", "m1", "r2"))  # a regenerate
    await strategy.acommit(_turn("I live in Lisbon", "A3", "m1", "r3"))
    strategy.commit(_turn("I live in Lisbon", "A1", "m1", "r1"))  # the same turn, another id
    await strategy.acommit(_turn("", "A2", None, "r2"))  # an answer kept already
    strategy.commit(_turn("I live in Lisbon", "A4", None, "r4"))  # no id: a new message
    assert kept(strategy) == {"I live in Lisbon": 2, "A1": 1, "A2": 1, "A3": 1, "A4": 1}


def test_a_message_stored_meanwhile_is_left_out_on_the_next_try(tmp_path: Path) -> None:
    """Two runs record the same new user message at once: both find it missing, the stream
    refuses the second write, and the second run's answer is stored on its own."""
    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as stream:
        memory = SemanticMemory(stream, k=10)
        get = stream.get
        first = _turn("I live in Lisbon", "A1", "m1", "r1")
        raced: list[bool] = []

        def racing_get(*args: Any, **kwargs: Any) -> Any:
            found = get(*args, **kwargs)
            if not raced:
                raced.append(True)
                memory.commit(first)  # the other run's write lands after this lookup
            return found

        stream.get = racing_get  # type: ignore[method-assign]
        memory.commit(_turn("I live in Lisbon", "A2", "m1", "r2"))
        assert kept(memory) == {"I live in Lisbon": 1, "A1": 1, "A2": 1}
        assert stream.count(namespace="ana") == 2


async def test_an_async_retry_of_a_racing_write_stores_the_answer_once(tmp_path: Path) -> None:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as stream:
        memory = SemanticMemory(stream, k=10)
        turns = [_turn("I live in Lisbon", f"A{i}", "m1", f"r{i}") for i in range(4)]
        await asyncio.gather(*(memory.acommit(t) for t in turns))
        await asyncio.gather(
            *(memory.acommit(replace(t, id=f"again{i}")) for i, t in enumerate(turns))
        )
        assert kept(memory) == {"I live in Lisbon": 1, "A0": 1, "A1": 1, "A2": 1, "A3": 1}


def test_a_regenerate_with_a_reflective_memory_stores_the_users_message_once(
    tmp_path: Path,
) -> None:
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "reflective.db")
    with ReflectiveMemory(None, stream, config=MemoryConfig()) as memory:
        model = GenericFakeChatModel(messages=iter([AIMessage("A1"), AIMessage("A2")]))
        agent = create_agent(
            model, middleware=[MemoryMiddleware(memory)], checkpointer=InMemorySaver()
        )
        agent.invoke({"messages": [HumanMessage("I live in Lisbon", id="m1")]}, config())
        agent.invoke(None, before_the_model(agent, config()))
        assert memory.flush(timeout=30)
        texts = Counter(r.text for r in stream.recent(None, namespace="ana"))
        assert texts == {"User: I live in Lisbon": 1, "Assistant: A1": 1, "Assistant: A2": 1}


def edited(agent: Any, cfg: dict[str, Any], text: str) -> dict[str, Any]:
    """LangGraph's way to edit the user's message: the same message (same id) with new text,
    written over the checkpoint before the model call; the fork's config (``invoke(None, it)``
    re-runs the turn)."""
    snapshot = next(s for s in agent.get_state_history(cfg) if s.next == ("model",))
    human = [m for m in snapshot.values["messages"] if isinstance(m, HumanMessage)][-1]
    edit = {"messages": [HumanMessage(text, id=human.id)]}
    fork: dict[str, Any] = agent.update_state(snapshot.config, edit)
    return fork


async def aedited(agent: Any, cfg: dict[str, Any], text: str) -> dict[str, Any]:
    async for snapshot in agent.aget_state_history(cfg):
        if snapshot.next == ("model",):
            human = [m for m in snapshot.values["messages"] if isinstance(m, HumanMessage)][-1]
            edit = {"messages": [HumanMessage(text, id=human.id)]}
            fork: dict[str, Any] = await agent.aupdate_state(snapshot.config, edit)
            return fork
    raise AssertionError("no checkpoint before the model call")


EDITED = {"I like cats": 1, "Cats are great.": 1, "I like dogs": 1, "Dogs are great.": 1}
"""What memory holds after "I like cats" is answered, then edited to "I like dogs"."""


def test_an_edited_message_is_stored_with_its_new_answer(strategy: BaseMemoryStrategy) -> None:
    """An edit keeps the message's id but not its text: it is another message (the old one
    stays remembered, as said); a regenerate of the edited message stores its answer alone."""
    agent = agent_of(strategy, "Cats are great.", "Dogs are great.", "Dogs, indeed.")
    agent.invoke({"messages": [HumanMessage("I like cats", id="m1")]}, config())
    out = agent.invoke(None, edited(agent, config(), "I like dogs"))
    assert [m.text for m in out["messages"]] == ["I like dogs", "Dogs are great."]
    assert kept(strategy) == EDITED
    agent.invoke(None, before_the_model(agent, config()))  # regenerate the edited message
    assert kept(strategy) == {**EDITED, "Dogs, indeed.": 1}


async def test_an_async_edit_stores_the_edited_message_with_its_new_answer(
    strategy: BaseMemoryStrategy,
) -> None:
    agent = agent_of(strategy, "Cats are great.", "Dogs are great.", "Dogs, indeed.")
    await agent.ainvoke({"messages": [HumanMessage("I like cats", id="m1")]}, config())
    await agent.ainvoke(None, await aedited(agent, config(), "I like dogs"))
    assert kept(strategy) == EDITED
    await agent.ainvoke(None, await abefore_the_model(agent, config()))
    assert kept(strategy) == {**EDITED, "Dogs, indeed.": 1}


def reflective_agent(memory: ReflectiveMemory, *answers: str) -> Any:
    model = GenericFakeChatModel(messages=iter([AIMessage(a) for a in answers]))
    return create_agent(model, middleware=[MemoryMiddleware(memory)], checkpointer=InMemorySaver())


def stored(memory: ReflectiveMemory, namespace: str = "ana") -> Counter[str]:
    """How often each text is in the namespace's memories, once the queue is drained."""
    assert memory.flush(timeout=30)
    return Counter(r.text for r in memory.stream.recent(None, namespace=namespace))


REFLECTIVE_EDITED = {
    "User: I like cats": 1,
    "Assistant: Cats are great.": 1,
    "User: I like dogs": 1,
    "Assistant: Dogs are great.": 1,
}


def test_an_edited_message_with_a_reflective_memory_is_stored_with_its_answer(
    tmp_path: Path,
) -> None:
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "reflective.db")
    with ReflectiveMemory(None, stream, config=MemoryConfig()) as memory:
        agent = reflective_agent(memory, "Cats are great.", "Dogs are great.", "Dogs, indeed.")
        agent.invoke({"messages": [HumanMessage("I like cats", id="m1")]}, config())
        agent.invoke(None, edited(agent, config(), "I like dogs"))
        assert stored(memory) == REFLECTIVE_EDITED
        agent.invoke(None, before_the_model(agent, config()))
        assert stored(memory) == {**REFLECTIVE_EDITED, "Assistant: Dogs, indeed.": 1}


async def test_an_async_edit_with_a_reflective_memory_stores_the_edited_message(
    tmp_path: Path,
) -> None:
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "reflective.db")
    with ReflectiveMemory(None, stream, config=MemoryConfig()) as memory:
        agent = reflective_agent(memory, "Cats are great.", "Dogs are great.", "Dogs, indeed.")
        await agent.ainvoke({"messages": [HumanMessage("I like cats", id="m1")]}, config())
        await agent.ainvoke(None, await aedited(agent, config(), "I like dogs"))
        assert stored(memory) == REFLECTIVE_EDITED
        await agent.ainvoke(None, await abefore_the_model(agent, config()))
        assert stored(memory) == {**REFLECTIVE_EDITED, "Assistant: Dogs, indeed.": 1}


SHARED_IDS = [("ping", "pong", "m1"), ("echo", "echo", "m2")]
"""Turns whose question and answer carry the same message id (an application's own ids; the
second one's texts are the same too)."""


async def test_a_question_and_an_answer_with_one_id_are_both_stored(
    strategy: BaseMemoryStrategy,
) -> None:
    for query, reply, message_id in SHARED_IDS:
        strategy.commit(_turn(query, reply, message_id, message_id))
        await strategy.acommit(_turn(query, reply, message_id, message_id))  # a regenerate
    assert kept(strategy) == {"ping": 1, "pong": 1, "echo": 2}


async def test_a_question_and_an_answer_with_one_id_are_both_queued_by_a_reflective_memory(
    tmp_path: Path,
) -> None:
    """The two parts of a turn are queued in one batch under ids derived from their messages:
    the question's and the answer's never coincide (a batch with one id twice is refused
    whole, and the turn was lost)."""
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "reflective.db")
    with ReflectiveMemory(None, stream, config=MemoryConfig()) as memory:
        strategy = ReflectiveMemoryStrategy(memory)
        for query, reply, message_id in SHARED_IDS:
            strategy.commit(_turn(query, reply, message_id, message_id))
            await strategy.acommit(_turn(query, reply, message_id, message_id))
        assert stored(memory) == {
            "User: ping": 1,
            "Assistant: pong": 1,
            "User: echo": 1,
            "Assistant: echo": 1,
        }
