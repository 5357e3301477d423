from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core._api import LangChainDeprecationWarning
from langchain_core.messages import SystemMessage

from langchain_reflective import MemoryStream
from langchain_reflective.integrations.legacy import ReflectiveChatMemory
from langchain_reflective.memory import MEMORY_PREAMBLE, ReflectiveMemory
from tests.fakes import WordEmbeddings
from tests.unit.test_middleware import FakeChat, fenced


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[ReflectiveMemory]:
    with ReflectiveMemory(FakeChat(), MemoryStream(WordEmbeddings(), path=tmp_path / "l.db")) as m:
        yield m


def chat_memory(memory: ReflectiveMemory, **kwargs: object) -> ReflectiveChatMemory:
    with pytest.warns(LangChainDeprecationWarning, match="ReflectiveMemoryMiddleware"):
        return ReflectiveChatMemory(memory=memory, **kwargs)


def test_every_instance_warns(memory: ReflectiveMemory) -> None:
    chat_memory(memory)
    chat_memory(memory)  # not only the first one


def test_save_load_clear(memory: ReflectiveMemory) -> None:
    legacy = chat_memory(memory, namespace="alice")
    assert legacy.memory_variables == ["history"]
    legacy.save_context({"input": "I adopted a cat named Miso"}, {"response": "Congratulations!"})
    texts = [r.text for r in memory.stream.recent(None, namespace="alice")]
    assert texts == ["User: I adopted a cat named Miso", "Assistant: Congratulations!"]
    loaded = legacy.load_memory_variables({"input": "What is my cat called?"})
    assert loaded["history"].startswith(MEMORY_PREAMBLE)
    assert "cat named Miso" in fenced(loaded["history"])
    legacy.clear()
    assert memory.stream.count(namespace="alice") == 0


async def test_async_and_messages(memory: ReflectiveMemory) -> None:
    legacy = chat_memory(memory, return_messages=True, memory_key="memories")
    with pytest.raises(ValueError, match="One input key expected"):  # two inputs: set input_key
        await legacy.asave_context({"question": "I live in Oslo", "lang": "en"}, {"text": "Nice"})
    legacy = chat_memory(memory, return_messages=True, memory_key="memories", input_key="question")
    await legacy.asave_context({"question": "I live in Oslo", "lang": "en"}, {"text": "Nice"})
    (message,) = (await legacy.aload_memory_variables({"question": "Where?", "lang": "en"}))[
        "memories"
    ]
    assert isinstance(message, SystemMessage) and "I live in Oslo" in fenced(message.text)
    await legacy.aclear()
    assert memory.stream.count() == 0


def test_output_key_required_for_several_outputs(memory: ReflectiveMemory) -> None:
    legacy = chat_memory(memory)
    with pytest.raises(ValueError, match="output_key"):
        legacy.save_context({"input": "x"}, {"a": "1", "b": "2"})
    chat_memory(memory, output_key="b").save_context({"input": "x"}, {"a": "1", "b": "2"})
    assert [r.text for r in memory.stream.recent(None)] == ["User: x", "Assistant: 2"]


def test_in_a_classic_conversation_chain(memory: ReflectiveMemory) -> None:
    from langchain_classic.chains import ConversationChain

    model = FakeChat(script=["Hello Ana!", "You told me your name is Ana."])
    legacy = chat_memory(memory, namespace="ana")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LangChainDeprecationWarning)  # ConversationChain's own
        chain = ConversationChain(llm=model, memory=legacy)
        chain.invoke({"input": "Hi, my name is Ana"})
        out = chain.invoke({"input": "What is my name?"})
    assert out["response"] == "You told me your name is Ana."
    prompt = model.calls[-1][0].text
    assert "my name is Ana" in fenced(prompt)
    assert memory.stream.count(namespace="ana") == 4


def test_an_agent_executors_outputs_and_message_outputs(memory: ReflectiveMemory) -> None:
    """An AgentExecutor returns ``output`` beside ``intermediate_steps`` (classic memories
    store ``output``); an output that is a message is stored as its text, not its repr."""
    from langchain_core.messages import AIMessage

    legacy = chat_memory(memory)
    legacy.save_context({"input": "hi"}, {"output": "hello", "intermediate_steps": []})
    legacy.save_context({"input": "and?"}, {"response": AIMessage("the answer")})
    assert [r.text for r in memory.stream.recent(None)] == [
        "User: hi",
        "Assistant: hello",
        "User: and?",
        "Assistant: the answer",
    ]


def test_a_turn_no_memory_could_hold_is_stored_clipped(memory: ReflectiveMemory) -> None:
    from langchain_reflective.records import CUT_MARKER, MAX_TEXT_CHARS

    legacy = chat_memory(memory)
    legacy.save_context({"input": "w " * (MAX_TEXT_CHARS // 2)}, {"output": "a\x00b"})
    first, second = (r.text for r in memory.stream.recent(None))
    assert len(first) == MAX_TEXT_CHARS and first.endswith(CUT_MARKER)
    assert second == "Assistant: a\ufffdb"
    loaded = legacy.load_memory_variables({"input": "w " * (MAX_TEXT_CHARS // 2) + "\x00"})
    assert loaded["history"].startswith(MEMORY_PREAMBLE)  # (the search query cleaned alike)
