"""A ``token_counter`` assigned after construction is checked as the constructor's argument is,
and the trace metadata of a context run names the counter in use."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_reflective import (
    BaseMemoryStrategy,
    HybridMemory,
    ImportanceMemory,
    InvalidMemoryError,
    MemoryConfig,
    MemoryStream,
    Observation,
    ReflectiveMemory,
    ReflectiveMemoryStrategy,
    SemanticMemory,
    WindowMemory,
)
from langchain_reflective.strategies import count_tokens, fit_observations, observation_messages
from tests.fakes import WordEmbeddings

FACTS = [
    ("I live in Lisbon, near the river", "Noted: you live in Lisbon."),
    ("My cat is called Miso and she is nine", "Miso, a lovely name for a cat."),
    ("I moved from Porto three years ago", "So Porto before Lisbon."),
    ("My sister lives in Oslo with two dogs", "Oslo, and two dogs: noted."),
]
QUESTION = [HumanMessage("Which cities and pets did I tell you about?")]


def per_char(messages: Sequence[BaseMessage]) -> int:
    """One token per character: about four times the approximate count."""
    return sum(len(m.text) for m in messages)


async def _not_sync(messages: Sequence[BaseMessage]) -> int:
    return 1


class _AsyncCall:
    async def __call__(self, messages: Sequence[BaseMessage]) -> int:
        return 1


BAD = [
    (3, "got 3 (int)"),
    ("cl100k_base", "got 'cl100k_base' (str)"),
    (int, "the class int"),
    (_not_sync, "an async function"),
    (_AsyncCall(), "an async function"),
    (FakeListChatModel(responses=["x"]), "pass its get_num_tokens_from_messages"),
]
BAD_IDS = ["int", "str", "class", "async", "async_call", "model"]
KINDS = ["window", "importance", "hybrid", "semantic", "reflective"]


@pytest.fixture(params=KINDS)
def make(request: pytest.FixtureRequest) -> Iterator[Callable[..., BaseMemoryStrategy]]:
    """Builds the parameter's built-in (``make(token_counter=...)``) holding :data:`FACTS`."""
    built: list[Any] = []

    def build(**kwargs: Any) -> BaseMemoryStrategy:
        strategy: BaseMemoryStrategy
        if request.param == "window":
            strategy = WindowMemory(**kwargs)
        elif request.param == "importance":
            strategy = ImportanceMemory(**kwargs)
        elif request.param == "hybrid":
            strategy = HybridMemory(**kwargs)
        elif request.param == "semantic":
            stream = MemoryStream(WordEmbeddings())
            built.append(stream)
            strategy = SemanticMemory(stream, k=len(FACTS), **kwargs)
        else:
            config = MemoryConfig(recent_capacity=100, token_budget=100_000, background=False)
            memory = ReflectiveMemory(None, MemoryStream(WordEmbeddings()), config=config)
            built.append(memory)
            strategy = ReflectiveMemoryStrategy(memory, **kwargs)
        for query, reply in FACTS:
            strategy.commit(Observation(query, reply, importance=0.9))
        return strategy

    yield build
    for thing in built:
        thing.close()


# -- an assigned counter is checked as the constructor's argument ------------------------------


@pytest.mark.parametrize(("counter", "says"), BAD, ids=BAD_IDS)
def test_assigning_a_bad_counter_raises_the_constructors_error(
    make: Callable[..., BaseMemoryStrategy], counter: Any, says: str
) -> None:
    with pytest.raises(InvalidMemoryError) as built:
        make(token_counter=counter)
    strategy = make()
    with pytest.raises(InvalidMemoryError) as assigned:
        strategy.token_counter = counter
    assert str(assigned.value) == str(built.value)
    assert "token_counter must be a function" in str(assigned.value)
    assert says in str(assigned.value)
    assert strategy.token_counter is count_tokens  # the refused counter is not kept


def test_an_assigned_counter_counts_the_budget(make: Callable[..., BaseMemoryStrategy]) -> None:
    strategy = make()
    # (a reflective block without memory lines is about 240 characters)
    budget = 300 if isinstance(strategy, ReflectiveMemoryStrategy) else 120
    approximate = strategy.context(QUESTION, budget=budget)
    assert per_char(approximate) > budget  # counted approximately, over by characters
    strategy.token_counter = per_char
    assert strategy.token_counter is per_char
    exact = strategy.context(QUESTION, budget=budget)
    assert exact and per_char(exact) <= budget
    # None and LangChain's own function are the default count, as in the constructor
    strategy.token_counter = None  # type: ignore[assignment]
    assert strategy.token_counter is count_tokens
    strategy.token_counter = count_tokens_approximately
    assert strategy.token_counter is count_tokens
    assert type(strategy).token_counter is count_tokens  # the class default is unchanged


def test_deleting_an_assigned_counter_restores_the_class_default() -> None:
    strategy = WindowMemory(token_counter=per_char)
    del strategy.token_counter
    assert strategy.token_counter is count_tokens
    other = WindowMemory(token_counter=len)
    assert other.token_counter is len and WindowMemory().token_counter is count_tokens


# -- custom strategies set it as documented -----------------------------------------------------


class _Kept(BaseMemoryStrategy):
    """A minimal custom strategy: fits its turns with :attr:`token_counter`."""

    blocking = False

    def __init__(self) -> None:
        self._kept: list[Observation] = []

    def commit(self, observation: Observation) -> None:
        self._kept.append(self.check_observation(observation))

    def context(
        self,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        namespace: str | None = None,
    ) -> list[BaseMessage]:
        fitted = fit_observations(self._kept, budget, token_counter=self.token_counter)
        return observation_messages(fitted)

    def purge(self, *, namespace: str | None = None) -> None:
        self._kept.clear()


class _AssignsInInit(_Kept):
    def __init__(self, counter: Any = per_char) -> None:
        super().__init__()
        self.token_counter = counter


class _SetInClassBody(_Kept):
    token_counter = staticmethod(per_char)


class _MethodCounter(_Kept):
    """A counter that is a method of the strategy (it needs the instance): left a method."""

    def token_counter(self, messages: Sequence[BaseMessage]) -> int:
        return per_char(messages)


def _filled(strategy: _Kept) -> _Kept:
    for query, reply in FACTS:
        strategy.commit(Observation(query, reply))
    return strategy


def test_a_custom_strategy_assigning_in_init_is_checked_too() -> None:
    strategy = _filled(_AssignsInInit())
    assert strategy.token_counter is per_char
    assert per_char(strategy.context([], budget=120)) <= 120
    with pytest.raises(InvalidMemoryError, match="an async function"):
        _AssignsInInit(_not_sync)
    with pytest.raises(InvalidMemoryError, match="an async function"):
        strategy.token_counter = _not_sync  # type: ignore[assignment]


def test_a_counter_set_in_the_class_body_keeps_working() -> None:
    strategy = _filled(_SetInClassBody())
    assert strategy.token_counter is per_char and _SetInClassBody.token_counter is per_char
    context = strategy.context([], budget=120)
    assert context and per_char(context) <= 120
    assert _filled(_Kept()).token_counter is count_tokens  # (no leak to other classes)
    with pytest.raises(InvalidMemoryError, match="the class int"):
        strategy.token_counter = int  # type: ignore[assignment]
    strategy.token_counter = len
    assert strategy.token_counter is len and _SetInClassBody().token_counter is per_char


def test_a_bad_counter_in_the_class_body_is_refused_when_the_class_is_made() -> None:
    with pytest.raises(InvalidMemoryError, match="an async function"):

        class _Async(_Kept):
            token_counter = staticmethod(_not_sync)  # type: ignore[assignment]

    with pytest.raises(InvalidMemoryError, match="got 'cl100k_base'"):

        class _Named(_Kept):
            token_counter = "cl100k_base"  # type: ignore[assignment]


def test_a_counter_method_stays_a_method() -> None:
    strategy = _filled(_MethodCounter())
    context = strategy.context([], budget=120)
    assert context and per_char(context) <= 120


# -- the trace metadata names the counter ------------------------------------------------------


def test_the_trace_metadata_names_the_counter(make: Callable[..., BaseMemoryStrategy]) -> None:
    """The context run's metadata (``trace_metadata``) says what the budget was counted with,
    next to the strategy's settings; it follows an assigned counter."""
    default = make().trace_metadata()
    assert default["strategy"] and default["token_counter"] == "count_tokens"
    assert len(default) >= 3  # (and each built-in's settings, at least one)
    strategy = make(token_counter=per_char)
    assert strategy.trace_metadata()["token_counter"] == "per_char"
    strategy.token_counter = functools.partial(per_char)
    assert strategy.trace_metadata()["token_counter"] == "partial"
    model = FakeListChatModel(responses=["x"])
    strategy.token_counter = model.get_num_tokens_from_messages
    assert strategy.trace_metadata() == {
        **default,
        "token_counter": "FakeListChatModel.get_num_tokens_from_messages",
    }
    json.dumps(strategy.trace_metadata())  # (run metadata: JSON)


def test_a_custom_strategys_trace_metadata_names_its_counter() -> None:
    assert _SetInClassBody().trace_metadata() == {
        "strategy": "_SetInClassBody",
        "token_counter": "per_char",
    }
    assert _AssignsInInit(lambda messages: 1).trace_metadata()["token_counter"].endswith("<lambda>")
