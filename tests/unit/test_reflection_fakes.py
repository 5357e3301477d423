"""Scripted fake chat models for the importance and reflection tests (plus their own tests).

``ScriptedChatModel`` recognises which prompt it got (importance, questions, insights, condense),
answers it from the fenced data in the prompt, and records every call with its start/end time.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import BaseModel, ConfigDict, Field

KINDS = ("importance", "questions", "insights", "condense")


def kind_of(messages: Sequence[BaseMessage]) -> str:
    """Which reflection prompt ``messages`` are."""
    text = "\n".join(str(m.content) for m in messages)
    if "rates events" in text or "<memories>" in text:
        return "importance"
    if "condense" in text.lower():
        return "condense"
    if "salient high-level questions" in text:
        return "questions"
    if "high-level insights" in text:
        return "insights"
    return "other"


def block_items(messages: Sequence[BaseMessage], tag: str) -> list[str]:
    """The numbered items inside ``<tag>...</tag>`` of the last message."""
    text = str(messages[-1].content)
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    if not m:
        return []
    return [re.sub(r"^\d+\. ", "", line) for line in m.group(1).splitlines()]


def default_answer(kind: str, messages: Sequence[BaseMessage]) -> str:
    """A well-formed seed-002-style text answer."""
    if kind == "importance":
        items = block_items(messages, "memories")
        return "\n".join(f"{i}: {7 if 'important' in t else 4}" for i, t in enumerate(items, 1))
    if kind == "questions":
        items = block_items(messages, "statements")
        return "\n".join(f"{i}. {t.rstrip('.')}?" for i, t in enumerate(items[-3:], 1))
    if kind == "insights":
        items = block_items(messages, "statements")
        cites = ", ".join(str(i) for i in range(1, min(2, len(items)) + 1))
        return f"1. Insight about {items[0].rstrip('.')} [{cites}]"
    if kind == "condense":
        items = block_items(messages, "insights")
        return "\n".join(f"{i}. {t}" for i, t in enumerate(items[:5], 1))
    return "ok"


def default_json_answer(kind: str, messages: Sequence[BaseMessage]) -> str:
    """The same answers as JSON matching the structured-output schemas."""
    from langchain_reflective.reflection import parse_insights, parse_questions

    text = default_answer(kind, messages)
    if kind == "importance":
        ratings = [
            {"index": i, "rating": int(line.split(": ")[1])}
            for i, line in enumerate(text.splitlines(), 1)
        ]
        return json.dumps({"ratings": ratings})
    if kind == "questions":
        return json.dumps({"questions": parse_questions(text, 10)})
    if kind in ("insights", "condense"):
        pairs = parse_insights(text)
        return json.dumps({"insights": [{"insight": t, "evidence": c} for t, c in pairs]})
    return "{}"


@dataclass(frozen=True)
class Call:
    kind: str
    start: float
    end: float
    thread: int
    messages: tuple[BaseMessage, ...]
    answer: str


Answer = Callable[[str, Sequence[BaseMessage]], str]


class ScriptedChatModel(BaseChatModel):
    """Answers by prompt kind; records calls; can sleep and fail.

    Args:
        answer: ``(kind, messages) -> text``; default :func:`default_answer`.
        overrides: fixed answers per kind (a string, or a list used in turn).
        delay: seconds each call takes (``time.sleep`` / ``asyncio.sleep``).
        fail_on: kinds whose calls raise ``errors[kind]`` (default ``RuntimeError``).
        fail_times: how many times a failing kind fails before succeeding (``-1``: always).
        gate: called with the prompt kind before each sync call is answered, outside the lock
            (a test holds calls there on an event or a barrier to see what runs meanwhile).
        agate: the async twin of ``gate``, awaited before each async call is answered.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    answer: Answer = default_answer
    overrides: dict[str, Any] = Field(default_factory=dict)
    delay: float = 0.0
    fail_on: dict[str, BaseException] = Field(default_factory=dict)
    fail_times: int = -1
    gate: Callable[[str], None] | None = None
    agate: Callable[[str], Awaitable[None]] | None = None
    calls: list[Call] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)
    lock: Any = Field(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "scripted-fake"

    def count(self, kind: str | None = None) -> int:
        return sum(1 for c in self.calls if kind is None or c.kind == kind)

    def _respond(self, messages: list[BaseMessage], start: float) -> str:
        kind = kind_of(messages)
        with self.lock:
            if kind in self.fail_on:
                n_failed = self.failures.count(kind)
                if self.fail_times < 0 or n_failed < self.fail_times:
                    self.failures.append(kind)
                    raise self.fail_on[kind]
            override = self.overrides.get(kind)
            if isinstance(override, list):
                text = override.pop(0) if override else default_answer(kind, messages)
            elif isinstance(override, str):
                text = override
            else:
                text = self.answer(kind, messages)
            self.calls.append(
                Call(kind, start, time.perf_counter(), threading.get_ident(), tuple(messages), text)
            )
        return text

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        start = time.perf_counter()
        if self.gate is not None:
            self.gate(kind_of(messages))
        if self.delay:
            time.sleep(self.delay)
        text = self._respond(messages, start)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        start = time.perf_counter()
        if self.agate is not None:
            await self.agate(kind_of(messages))
        if self.delay:
            await asyncio.sleep(self.delay)
        text = self._respond(messages, start)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


class StructuredScriptedChatModel(ScriptedChatModel):
    """A scripted model that also implements ``with_structured_output`` (like ChatOpenAI).

    Answers are JSON (:func:`default_json_answer`); the runnable returns
    ``{"raw", "parsed", "parsing_error"}`` like LangChain's ``include_raw=True``.
    """

    answer: Answer = default_json_answer
    structured_requests: list[tuple[str, str | None, bool]] = Field(default_factory=list)

    def with_structured_output(  # type: ignore[override]
        self,
        schema: type[BaseModel],
        *,
        method: str | None = None,
        include_raw: bool = False,
        **kwargs: Any,
    ) -> Runnable[Any, Any]:
        self.structured_requests.append((schema.__name__, method, include_raw))

        def parse(message: BaseMessage) -> Any:
            try:
                parsed: Any = schema.model_validate_json(str(message.content))
                error = None
            except ValueError as exc:
                parsed, error = None, exc
            if include_raw:
                return {"raw": message, "parsed": parsed, "parsing_error": error}
            if error is not None:
                raise error
            return parsed

        return self | RunnableLambda(parse)


# -- tests of the fakes themselves ----------------------------------------------------------------


def test_scripted_model_answers_by_kind() -> None:
    from langchain_core.messages import HumanMessage, SystemMessage

    model = ScriptedChatModel()
    msgs = [
        SystemMessage("You are an AI who rates events"),
        HumanMessage("<memories>\n1. a\n2. important b\n</memories>"),
    ]
    assert model.invoke(msgs).content == "1: 4\n2: 7"
    assert model.count("importance") == 1


def test_scripted_model_fails_then_recovers() -> None:
    from langchain_core.messages import HumanMessage

    model = ScriptedChatModel(fail_on={"other": TimeoutError("slow")}, fail_times=1)
    try:
        model.invoke([HumanMessage("hi")])
    except TimeoutError:
        pass
    else:  # pragma: no cover
        raise AssertionError("expected a TimeoutError")
    assert model.invoke([HumanMessage("hi")]).content == "ok"
