"""A chat model that fails on purpose: exceptions, timeouts, rate limits, malformed/empty output.

:class:`FaultyChatModel` answers every prompt kind of the package (importance, questions,
insights, condense) like ``tests.unit.test_reflection_fakes.ScriptedChatModel`` does, but with a
seeded RNG injects a fault into a configurable share of its calls. It keeps the books the tests
check against: faults injected per type, the last outcome per memory text (so the stored
importance can be predicted exactly), and the backoff waits that retries must have taken.
"""

from __future__ import annotations

import asyncio
import random
import threading
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx
import openai
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr

from langchain_reflective import RetryConfig
from tests.unit.test_reflection_fakes import block_items, default_answer, kind_of

TRANSIENT = ("timeout", "connection", "rate_limit")
"""Fault types the package retries (see ``transient_errors``)."""
FAULT_TYPES = ("exception", *TRANSIENT, "malformed", "empty")

RETRY = RetryConfig(attempts=3, initial_wait=0.001, max_wait=0.01, exp_base=2.0, jitter=0.0)
"""Tiny, jitter-free exponential waits: attempt n waits exactly 0.001 * 2 ** (n - 1) s."""
BACKOFF_WAITS = {round(RETRY.initial_wait * RETRY.exp_base**i, 9) for i in range(RETRY.attempts)}

MALFORMED = (
    "Sorry, I can't help with rating these memories.",
    '{"ratings": [{"index": "one", "rating": "high"',
    "<think>hmm</think>",
    "lorem ipsum dolor sit amet",
    "```json\n{]\n```",
)


def rating_of(text: str) -> int:
    """The rating the fake gives a memory text (deterministic, 1..10)."""
    return 1 + zlib.crc32(text.encode()) % 10


def rate_limit_error() -> openai.RateLimitError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(429, request=request, headers={"retry-after": "0"})
    return openai.RateLimitError("Rate limit reached (429)", response=response, body=None)


def make_fault(kind: str) -> BaseException:
    if kind == "exception":
        return RuntimeError("injected: the model crashed")
    if kind == "timeout":
        return TimeoutError("injected: request timed out")
    if kind == "connection":
        return ConnectionError("injected: connection reset by peer")
    if kind == "rate_limit":
        return rate_limit_error()
    raise ValueError(kind)


class FaultyChatModel(BaseChatModel):
    """Answers like the scripted fake, but a ``rates[type]`` share of calls fail.

    Args:
        rates: fault probability per type (``exception``, ``timeout``, ``connection``,
            ``rate_limit``, ``malformed``, ``empty``); at most one fault per call.
        seed: seeds the RNG (runs are repeatable up to thread scheduling).
        attempts: the retry attempts configured in the package (to predict backoff waits).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    rates: dict[str, float] = Field(default_factory=dict)
    seed: int = 0
    attempts: int = RETRY.attempts
    _rng: random.Random = PrivateAttr()
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    injected: Counter[str] = Field(default_factory=Counter)
    calls: Counter[str] = Field(default_factory=Counter)
    last_rating: dict[str, int | None] = Field(default_factory=dict)
    """Memory text -> the rating of the last importance attempt (None when it failed)."""
    expected_waits: list[float] = Field(default_factory=list)
    """The backoff wait each retried transient fault must be followed by."""
    _streak: dict[str, int] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any) -> None:
        self._rng = random.Random(self.seed)

    @property
    def _llm_type(self) -> str:
        return "faulty-fake"

    @property
    def total_injected(self) -> int:
        return sum(self.injected.values())

    def _pick(self) -> str | None:
        roll = self._rng.random()
        acc = 0.0
        for kind in FAULT_TYPES:
            acc += self.rates.get(kind, 0.0)
            if roll < acc:
                return kind
        return None

    def _respond(self, messages: Sequence[BaseMessage]) -> str:
        kind = kind_of(messages)
        key = "\n".join(str(m.content) for m in messages)
        with self._lock:
            self.calls[kind] += 1
            fault = self._pick()
            items = block_items(messages, "memories") if kind == "importance" else []
            if fault is not None:
                self.injected[fault] += 1
                for item in items:
                    self.last_rating[item] = None
            if fault in TRANSIENT:
                streak = self._streak.get(key, 0) + 1
                if streak < self.attempts:
                    self.expected_waits.append(round(RETRY.initial_wait * 2 ** (streak - 1), 9))
                    self._streak[key] = streak
                else:
                    self._streak.pop(key, None)  # the last attempt: no retry follows
                raise make_fault(fault)
            self._streak.pop(key, None)
            if fault == "exception":
                raise make_fault(fault)
            if fault == "empty":
                return ""
            if fault == "malformed":
                return self._rng.choice(MALFORMED)
            if kind == "importance":
                for item in items:
                    self.last_rating[item] = rating_of(item)
                return "\n".join(f"{i}: {rating_of(t)}" for i, t in enumerate(items, 1))
            return default_answer(kind, messages)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = self._respond(messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        await asyncio.sleep(0)
        text = self._respond(messages)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])
