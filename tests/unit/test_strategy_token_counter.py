"""The built-in strategies count a context's budget with the user's own ``token_counter``."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_reflective import (
    BaseMemoryStrategy,
    HybridMemory,
    ImportanceMemory,
    InvalidMemoryError,
    MemoryConfig,
    MemoryRecord,
    MemoryStream,
    Observation,
    ReflectiveMemory,
    ReflectiveMemoryStrategy,
    ScoredMemory,
    SemanticMemory,
    WindowMemory,
)
from langchain_reflective.strategies import (
    count_tokens,
    fit_observations,
    format_context,
    observation_messages,
)
from langchain_reflective.strategies.reflective import _STEPS_COUNTED
from langchain_reflective.strategies.testing import StrategyConformanceTests
from tests.fakes import WordEmbeddings

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
QUESTION = [HumanMessage("Which cities and pets did I tell you about?")]
FACTS = [
    ("I live in Lisbon, near the river", "Noted: you live in Lisbon."),
    ("My cat is called Miso and she is nine", "Miso, a lovely name for a cat."),
    ("I moved from Porto three years ago", "So Porto before Lisbon."),
    ("My sister lives in Oslo with two dogs", "Oslo, and two dogs: noted."),
    ("I am allergic to penicillin", "I will remember the penicillin allergy."),
    ("I drink my coffee black, no sugar", "Black coffee, no sugar."),
]


def per_char(messages: Sequence[BaseMessage]) -> int:
    """One token per character: about four times the approximate count."""
    return sum(len(m.text) for m in messages)


def per_word(messages: Sequence[BaseMessage]) -> int:
    """One token per word: under the approximate count for plain words."""
    return sum(len(m.text.split()) for m in messages)


def texts(messages: Sequence[BaseMessage]) -> list[tuple[str, str]]:
    """What a context shows (the message ids name each build's observations)."""
    return [(m.type, m.text) for m in messages]


Make = Callable[..., BaseMemoryStrategy]


@pytest.fixture(params=["semantic", "reflective"])
def make(request: pytest.FixtureRequest) -> Iterator[Make]:
    """Builds the parameter's strategy (``make(token_counter=...)``), with :data:`FACTS`
    committed to namespace ``ana``; closes what it built."""
    built: list[Any] = []

    def build(**kwargs: Any) -> BaseMemoryStrategy:
        strategy: BaseMemoryStrategy
        if request.param == "semantic":
            stream = MemoryStream(WordEmbeddings())
            built.append(stream)
            strategy = SemanticMemory(stream, k=len(FACTS), **kwargs)
        else:
            config = MemoryConfig(recent_capacity=100, token_budget=100_000, background=False)
            memory = ReflectiveMemory(None, MemoryStream(WordEmbeddings()), config=config)
            built.append(memory)
            strategy = ReflectiveMemoryStrategy(memory, **kwargs)
        for i, (query, reply) in enumerate(FACTS):
            when = T0 + timedelta(minutes=i)
            strategy.commit(Observation(query, reply, namespace="ana", created_at=when))
        return strategy

    yield build
    for thing in built:
        thing.close()


# -- the budget is counted with the strategy's counter ------------------------------------------


@pytest.mark.parametrize("budget", [250, 300, 350])
def test_the_context_fits_the_budget_by_the_given_counter(make: Make, budget: int) -> None:
    exact = make(token_counter=per_char)
    assert exact.token_counter is per_char
    context = exact.context(QUESTION, budget=budget, namespace="ana")
    assert context, "something fits"
    assert per_char(context) <= budget
    # counted approximately, the same budget takes more than the counter allows
    approximate = make().context(QUESTION, budget=budget, namespace="ana")
    assert per_char(approximate) > budget


async def test_acontext_fits_the_budget_by_the_given_counter(make: Make) -> None:
    exact = make(token_counter=per_char)
    context = await exact.acontext(QUESTION, budget=300, namespace="ana")
    assert context and per_char(context) <= 300
    assert texts(context) == texts(exact.context(QUESTION, budget=300, namespace="ana"))
    approximate = await make().acontext(QUESTION, budget=300, namespace="ana")
    assert per_char(approximate) > 300


def test_a_cheaper_counter_fits_more(make: Make) -> None:
    """One token per word: more fits than counted approximately, never more than the budget."""
    context = make(token_counter=per_word).context(QUESTION, budget=120, namespace="ana")
    approximate = make().context(QUESTION, budget=120, namespace="ana")
    assert per_word(context) <= 120 < count_tokens(context)
    assert len(format_context(context)) > len(format_context(approximate))


@pytest.mark.parametrize("counter", [per_char, per_word], ids=["per_char", "per_word"])
def test_the_reflective_fit_never_overshoots_and_never_gives_up(
    counter: Callable[[Sequence[BaseMessage]], int],
) -> None:
    """For every budget: at most ``budget`` tokens by the counter, and a block (with as many
    memory lines as fit, at least none) whenever the block without memory lines fits."""
    config = MemoryConfig(recent_capacity=100, token_budget=100_000, background=False)
    with ReflectiveMemory(None, MemoryStream(WordEmbeddings()), config=config) as memory:
        strategy = ReflectiveMemoryStrategy(memory, token_counter=counter)
        for query, reply in FACTS:
            strategy.commit(Observation(query, reply, namespace="ana"))
        parts = memory.context_parts(QUESTION[0].text, namespace="ana")
        bare = counter([SystemMessage(memory.render_context(*parts, budget=0))])
        for budget in [*range(0, 1200, 7), 5000]:
            context = strategy.context(QUESTION, budget=budget, namespace="ana")
            assert counter(context) <= budget, budget
            assert bool(context) == (budget >= bare), budget
        assert "Miso" in strategy.context(QUESTION, budget=5000, namespace="ana")[0].text


def test_the_reflective_fit_ends_when_nothing_ever_fits() -> None:
    """A counter that always overshoots by one token: the old loop rendered budget + 1 times;
    a bounded number of renders, then ``[]`` as when nothing fits."""
    calls: list[int] = []

    def one_over(messages: Sequence[BaseMessage]) -> int:
        calls.append(1)
        return 5001

    with ReflectiveMemory(None, MemoryStream(WordEmbeddings())) as memory:
        strategy = ReflectiveMemoryStrategy(memory, token_counter=one_over)
        assert strategy.context(QUESTION, budget=5000) == []
        assert len(calls) <= 30  # a few steps, then about log2(5000) renders bisected


def _thirds(counts: list[int]) -> Callable[[Sequence[BaseMessage]], int]:
    """A counter of about 3 characters per token (4 are assumed), noting each count."""

    def thirds(messages: Sequence[BaseMessage]) -> int:
        counts.append(1)
        return sum(len(m.text) for m in messages) // 3

    return thirds


def _largest_fit(memory: ReflectiveMemory, parts: Any, budget: int, counter: Any) -> str | None:
    """The render of the largest line budget within ``budget`` by ``counter``: what bisecting
    with unlimited counts finds (renders fit up to some line budget, none above it)."""
    for lines in range(budget, -1, -1):
        message = SystemMessage(memory.render_context(*parts, budget=lines))
        if counter([message]) <= budget:
            return message.text
    return None


def _steps_fit(memory: ReflectiveMemory, parts: Any, budget: int, counter: Any) -> str | None:
    """The first fit of ``_fit``'s steps with a user's counter (what it returned before it
    grew that fit), ``None`` when the steps find none."""
    lines = budget
    for _ in range(_STEPS_COUNTED):
        message = SystemMessage(memory.render_context(*parts, budget=lines))
        cost = counter([message])
        if cost <= budget:
            return message.text
        lines -= cost - budget
        if lines < 0:
            break
    return None


def _lines(text: str | None) -> int:
    """How many memory lines a reflective context text shows (``-1``: no block)."""
    return -1 if text is None else sum(line.startswith("- [") for line in text.splitlines())


def test_a_counter_near_three_characters_per_token_fills_the_block() -> None:
    """About 3 characters per token (4 assumed): a render over the budget gives up its
    overshoot in tokens, which drops whole lines, so the steps' first fit showed a line or two
    fewer than fit. The counts the steps did not use grow it to the largest fit."""
    counts: list[int] = []
    thirds = _thirds(counts)
    with ReflectiveMemory(None, MemoryStream(WordEmbeddings())) as memory:
        strategy = ReflectiveMemoryStrategy(memory, token_counter=thirds)
        recent = [MemoryRecord(id=f"r{i}", text=f"{i} " + "x" * 58) for i in range(10)]
        parts = ([], recent, [])
        grown = 0
        for budget in range(100, 400, 10):
            counts.clear()
            fitted = strategy._fit(parts, budget)
            assert len(counts) <= _STEPS_COUNTED + 1 + budget.bit_length(), budget
            assert thirds(fitted) <= budget
            largest = _largest_fit(memory, parts, budget, thirds)
            assert [m.text for m in fitted] == [largest], budget
            grown += _lines(_steps_fit(memory, parts, budget, thirds)) < _lines(largest)
        assert grown >= 10  # (of 30 budgets: 12 where the steps alone fell short)


def test_growing_the_fit_counts_no_more_than_the_steps_could() -> None:
    """Random memories and budgets, about 3 characters per token: never over the budget; where
    the steps found a fit, the grown one is no shorter and takes no count beyond the steps'
    :data:`_STEPS_COUNTED` (each may be a provider's request); elsewhere the bisection counts
    each text once. Almost always the largest fit (a long memory cut at another length may
    leave one a little short)."""
    rng = random.Random(11)
    counts: list[int] = []
    thirds = _thirds(counts)
    cases = largest_found = 0
    with ReflectiveMemory(None, MemoryStream(WordEmbeddings())) as memory:
        strategy = ReflectiveMemoryStrategy(memory, token_counter=thirds)
        for _ in range(15):
            parts = _random_parts(rng)
            for budget in range(0, 700, 19):
                counts.clear()
                fitted = [m.text for m in strategy._fit(parts, budget)]
                used = len(counts)
                assert thirds([SystemMessage(t) for t in fitted]) <= budget
                stepped = _steps_fit(memory, parts, budget, thirds)
                if stepped is not None:
                    assert used <= _STEPS_COUNTED, budget
                    assert len(fitted[0]) >= len(stepped), budget
                assert used <= _STEPS_COUNTED + 1 + budget.bit_length(), budget
                cases += 1
                largest = _largest_fit(memory, parts, budget, thirds)
                largest_found += fitted == ([] if largest is None else [largest])
    assert largest_found >= 0.95 * cases, (largest_found, cases)


def test_the_fitting_helpers_name_a_bad_counter() -> None:
    turns = [Observation(q, r) for q, r in FACTS]
    with pytest.raises(KeyError, match="encoding"):  # the counter's own error, as it is
        fit_observations(turns, 100, token_counter=_raises)
    with pytest.raises(InvalidMemoryError, match=r"returned -3, not a token count"):
        fit_observations(turns, 100, token_counter=lambda messages: -3)


@pytest.mark.parametrize("kind", [WindowMemory, ImportanceMemory, HybridMemory])
def test_list_memories_count_with_their_counter(kind: type[Any]) -> None:
    """The in-process built-ins take ``token_counter=`` too, and refuse one that is not a
    function when built."""
    exact, approximate = kind(token_counter=per_char), kind()
    for memory in (exact, approximate):
        for query, reply in FACTS:
            memory.commit(Observation(query, reply, importance=0.9))
    assert exact.token_counter is per_char and approximate.token_counter is count_tokens
    context = exact.context([], budget=200)
    assert context and per_char(context) <= 200 < per_char(approximate.context([], budget=200))
    with pytest.raises(InvalidMemoryError, match="token_counter must be a function"):
        kind(token_counter="cl100k_base")


# -- the default is unchanged -------------------------------------------------------------------


def _reference_fit(strategy: ReflectiveMemoryStrategy, parts: Any, budget: int) -> list[str]:
    """``ReflectiveMemoryStrategy._fit`` before counters could be chosen (the texts)."""
    lines = budget
    while lines >= 0:
        message = SystemMessage(strategy.memory.render_context(*parts, budget=lines))
        cost = count_tokens([message])
        if cost <= budget:
            return [message.text]
        lines -= cost - budget
    return []


def test_the_default_counter_is_the_approximate_one(make: Make) -> None:
    default, explicit = make(), make(token_counter=count_tokens)
    assert default.token_counter is count_tokens is BaseMemoryStrategy.token_counter
    assert make(token_counter=None).token_counter is count_tokens
    # LangChain's own function is the same count: its contexts stay on the event loop too
    assert make(token_counter=count_tokens_approximately).token_counter is count_tokens
    for budget in [None, 0, 20, 60, 61, 80, 100, 150, 333, 1000]:
        got = default.context(QUESTION, budget=budget, namespace="ana")
        assert texts(got) == texts(explicit.context(QUESTION, budget=budget, namespace="ana"))
        assert budget is None or count_tokens(got) <= budget
        if isinstance(default, ReflectiveMemoryStrategy) and budget is not None:
            parts = default.memory.context_parts(QUESTION[0].text, namespace="ana")
            assert [m.text for m in got] == _reference_fit(default, parts, budget), budget


def _random_parts(rng: random.Random) -> Any:
    """Insights, recent and relevant memories of random lengths (a few characters to ~300)."""

    def records(prefix: str) -> list[MemoryRecord]:
        return [
            MemoryRecord(id=f"{prefix}{i}", text="x" * rng.choice([3, 8, 40, 60, 100, 300]))
            for i in range(rng.randint(0, 5))
        ]

    relevant = [ScoredMemory(r, 0.5, 0.5, 0.0, 1.0, 0.5) for r in records("s")]
    return records("i"), records("r"), relevant


def test_the_default_fit_keeps_every_context_the_steps_found() -> None:
    """With the default counter ``_fit`` returns the old loop's context wherever that loop found
    one; where its steps went below zero lines it returned nothing, and the bisection may now
    find a fit (the block saying memories exist but none fit): never over the budget."""
    rng = random.Random(7)
    found_more = 0
    with ReflectiveMemory(None, MemoryStream(WordEmbeddings())) as memory:
        strategy = ReflectiveMemoryStrategy(memory)
        for _ in range(60):
            parts = _random_parts(rng)
            for budget in range(0, 260, 3):
                got = [m.text for m in strategy._fit(parts, budget)]
                old = _reference_fit(strategy, parts, budget)
                assert count_tokens([SystemMessage(t) for t in got]) <= budget
                if old:
                    assert got == old, budget
                else:
                    found_more += bool(got)
    assert found_more  # (the steps overshot zero where a fit existed: seen with these shapes)


# -- a bad counter is a clear error -------------------------------------------------------------


async def _not_sync(messages: Sequence[BaseMessage]) -> int:
    return 1


@pytest.mark.parametrize(
    ("counter", "says"),
    [
        (3, "got 3 (int)"),
        ("cl100k_base", "got 'cl100k_base' (str)"),
        (int, "the class int"),
        (_not_sync, "an async function"),
        (FakeListChatModel(responses=["x"]), "pass its get_num_tokens_from_messages"),
    ],
    ids=["int", "str", "class", "async", "model"],
)
def test_a_counter_that_is_not_a_function_is_refused(make: Make, counter: Any, says: str) -> None:
    with pytest.raises(InvalidMemoryError, match="token_counter must be a function") as error:
        make(token_counter=counter)
    assert says in str(error.value)


def _raises(messages: Sequence[BaseMessage]) -> int:
    raise KeyError("encoding")


@pytest.mark.parametrize("value", [2.5, -1, None, True, "12", [3]])
def test_a_counter_that_returns_no_count_is_named(make: Make, value: Any) -> None:
    def no_count(messages: Sequence[BaseMessage]) -> Any:
        return value

    strategy = make(token_counter=no_count)
    with pytest.raises(InvalidMemoryError, match=r"token_counter .*no_count returned") as error:
        strategy.context(QUESTION, budget=500, namespace="ana")
    assert repr(value) in str(error.value)
    with pytest.raises(InvalidMemoryError, match="no_count returned"):
        asyncio.run(strategy.acontext(QUESTION, budget=500, namespace="ana"))
    assert strategy.context(QUESTION, namespace="ana")  # no budget: not counted


def test_what_a_counter_raises_reaches_the_caller(make: Make) -> None:
    """A counter's own failure (a tokenizer that cannot load, a remote counter timing out) is
    not a fault of the memories: it propagates unchanged, for the caller to handle or retry."""
    strategy = make(token_counter=_raises)
    with pytest.raises(KeyError, match="encoding"):
        strategy.context(QUESTION, budget=500, namespace="ana")
    with pytest.raises(KeyError, match="encoding"):
        asyncio.run(strategy.acontext(QUESTION, budget=500, namespace="ana"))


def test_any_integer_type_is_a_count(make: Make) -> None:
    strategy = make(token_counter=lambda messages: np.int64(per_char(messages)))
    assert per_char(strategy.context(QUESTION, budget=600, namespace="ana")) <= 600


# -- the conformance class checks budgets with the strategy's counter ----------------------------


class _Budgets(StrategyConformanceTests):
    """The conformance budget tests alone (the name keeps pytest from collecting all)."""

    def __init__(self, strategy: Callable[[], BaseMemoryStrategy]) -> None:
        self._make = strategy

    def make_strategy(self) -> BaseMemoryStrategy:
        return self._make()

    def close_strategy(self, strategy: BaseMemoryStrategy) -> None:
        if isinstance(strategy, SemanticMemory):
            strategy.stream.close()

    def check(self) -> None:
        self.test_budget_is_respected()
        self.test_async_twins()


def test_conformance_passes_a_strategy_that_counts_exactly() -> None:
    """Fitted by words, the conformance turns overshoot the approximate count (see the guide):
    the budget is the strategy's counter's, so the strategy conforms."""
    _Budgets(
        lambda: SemanticMemory(MemoryStream(WordEmbeddings()), k=60, token_counter=per_word)
    ).check()


class _Overshooting(BaseMemoryStrategy):
    """Says it counts characters, fits approximately: over its own budget."""

    blocking = False

    def __init__(self) -> None:
        self.token_counter = per_char
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
        ns = self.resolve_namespace(namespace)
        kept = [o for o in self._kept if self.resolve_namespace(o.namespace) == ns]
        return observation_messages(fit_observations(kept, budget))

    def purge(self, *, namespace: str | None = None) -> None:
        ns = self.resolve_namespace(namespace)
        self._kept = [o for o in self._kept if self.resolve_namespace(o.namespace) != ns]


def test_conformance_fails_a_strategy_over_its_own_counter() -> None:
    with pytest.raises(AssertionError, match="per_char"):
        _Budgets(_Overshooting).test_budget_is_respected()


class _Undercounting(_Overshooting):
    """Counts one token per message: every budget above is "respected"."""

    def __init__(self) -> None:
        super().__init__()
        self.token_counter = len


@pytest.mark.parametrize("counter", [len, lambda messages: 0], ids=["per_message", "zero"])
def test_conformance_fails_a_counter_that_undercounts(counter: Any) -> None:
    """The budgets are checked with the strategy's own counter: one that cannot tell a long
    message from nothing would let any context through, so it fails the conformance class."""

    def undercounting() -> _Undercounting:
        strategy = _Undercounting()
        strategy.token_counter = counter
        return strategy

    with pytest.raises(AssertionError, match="at least one token per 40 characters"):
        _Budgets(undercounting).test_budget_is_respected()


# -- a counter of the user's never runs on the event loop ---------------------------------------


def _thread_counter(threads: list[int]) -> Callable[[Sequence[BaseMessage]], int]:
    def counting(messages: Sequence[BaseMessage]) -> int:
        threads.append(threading.get_ident())
        return per_char(messages)

    return counting


def _acontext_thread(strategy: BaseMemoryStrategy, namespace: str) -> tuple[int, int]:
    """The event loop's thread, and how many messages the context holds."""

    async def run() -> tuple[int, int]:
        context = await strategy.acontext(QUESTION, budget=600, namespace=namespace)
        return threading.get_ident(), len(context)

    return asyncio.run(run())


def test_an_async_context_counts_in_a_worker_thread(make: Make) -> None:
    """A model's ``get_num_tokens_from_messages`` may call its provider: ``acontext`` with a
    budget runs the user's counter off the event loop."""
    threads: list[int] = []
    loop_thread, shown = _acontext_thread(make(token_counter=_thread_counter(threads)), "ana")
    assert shown and threads and loop_thread not in threads


def test_a_list_memory_counts_in_a_worker_thread_too() -> None:
    """The list memories run on the loop (``blocking = False``), but not a user's counter."""
    threads: list[int] = []
    strategy = WindowMemory(token_counter=_thread_counter(threads))
    for query, reply in FACTS:
        strategy.commit(Observation(query, reply))
    loop_thread, shown = _acontext_thread(strategy, strategy.default_namespace)
    assert shown and threads and loop_thread not in threads
