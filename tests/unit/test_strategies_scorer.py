"""``ImportanceMemory`` and ``HybridMemory`` with a custom ``scorer``: off the event loop, checked
when built, and a failing one does not lose the turn."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy
import pytest
from blockbuster import blockbuster_ctx
from langchain_core.language_models import GenericFakeChatModel

from langchain_reflective import HybridMemory, ImportanceMemory, LLMImportanceScorer, Observation
from langchain_reflective.importance import (
    BaseImportanceScorer,
    HeuristicImportanceScorer,
    ImportanceResult,
)

RATED = [ImportanceMemory, HybridMemory]
Rated = type[ImportanceMemory] | type[HybridMemory]


@pytest.mark.parametrize("cls", RATED)
async def test_a_custom_scorer_rates_off_the_event_loop(cls: Rated) -> None:
    """A scorer that calls a model (here: sleeps) ran on the loop in ``acommit``, blocking it
    for every turn (blockbuster: ``time.sleep``); it runs in a worker thread, and the turn is
    stored as rated."""
    threads: set[int] = set()

    def slow_scorer(observation: Observation) -> float:
        threads.add(threading.get_ident())
        time.sleep(0.01)
        return 0.8

    memory = cls(scorer=slow_scorer)
    turns = [Observation(f"question {i}", f"answer {i}") for i in range(4)]
    with blockbuster_ctx("langchain_reflective"):
        await asyncio.gather(*(memory.acommit(turn) for turn in turns))
    assert threading.get_ident() not in threads
    shown = memory.context([])
    assert [m.text for m in shown][::2] == [f"question {i}" for i in range(4)]
    assert all(k.observation.importance == 0.8 for k in memory._spaces["default"])


@pytest.mark.parametrize("cls", RATED)
async def test_the_default_heuristic_still_rates_on_the_loop(cls: Rated) -> None:
    """No thread hop for the quick built-in heuristic."""
    memory = cls()
    with blockbuster_ctx("langchain_reflective"):
        await memory.acommit(Observation("I got married", "Congratulations!"))
    (kept,) = memory._spaces["default"]
    assert kept.observation.importance == 0.7


# -- what a scorer may be, and when it fails ---------------------------------------------------


async def _rate_later(observation: Observation) -> float:
    return 0.5


@pytest.mark.parametrize("cls", RATED)
@pytest.mark.parametrize(
    "scorer",
    [0.7, "heuristic", HeuristicImportanceScorer, _rate_later],
    ids=["number", "string", "scorer-class", "async-function"],
)
def test_a_scorer_that_cannot_rate_is_refused_when_built(cls: Rated, scorer: object) -> None:
    """They were accepted, and the first commit failed (``'float' object is not callable``)."""
    with pytest.raises(TypeError, match="BaseImportanceScorer such as LLMImportanceScorer"):
        cls(scorer=scorer)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", RATED)
async def test_the_package_llm_scorer_rates_turns(cls: Rated) -> None:
    """``LLMImportanceScorer`` (a ``BaseImportanceScorer``, not a function of an observation)
    failed at the first commit (``object is not callable``); it rates the text of an unrated
    turn, ``acommit`` awaits its ``ascore`` without blocking the loop."""
    model = GenericFakeChatModel(messages=iter(["8", "3"]))
    memory = cls(scorer=LLMImportanceScorer(model))
    memory.commit(Observation("I got married", "Congratulations!"))
    with blockbuster_ctx("langchain_reflective"):
        await memory.acommit(Observation("I had coffee", "Nice."))
    memory.commit(Observation("Given", "rated", importance=0.6))  # no model call
    kept = [k.observation.importance for k in memory._spaces["default"]]
    assert kept == [0.8, 0.3, 0.6]


class _Down(BaseImportanceScorer):
    def score(self, texts: Sequence[str]) -> list[ImportanceResult]:
        raise TimeoutError("rating model timed out")


def _raises(observation: Observation) -> float:
    raise TimeoutError("rating model timed out")


@pytest.mark.parametrize("cls", RATED)
@pytest.mark.parametrize(
    "scorer",
    [_raises, lambda obs: math.nan, lambda obs: "0.9", lambda obs: None, _Down()],
    ids=["raises", "nan", "string", "none", "base-scorer-raises"],
)
async def test_a_failing_scorer_keeps_the_turn(
    cls: Rated, scorer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A scorer that raised failed the commit and the turn was lost (kept: 0); a NaN was kept
    as importance 0. The turn is kept with the heuristic's importance, and a warning names the
    observation and the error."""
    memory = cls(scorer=scorer)
    married = Observation("I got married", "Congratulations!")
    coffee = Observation("I had coffee", "Nice.")
    with caplog.at_level(logging.WARNING, logger="langchain_reflective.strategies.builtin"):
        memory.commit(married)
        await memory.acommit(coffee)
    kept = [(k.observation.id, k.observation.importance) for k in memory._spaces["default"]]
    assert kept == [(married.id, 0.7), (coffee.id, 0.2)]
    assert [m.text for m in memory.context([])][::2] == ["I got married", "I had coffee"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and married.id in warnings[0] and coffee.id in warnings[1]
    assert all("the heuristic's" in w for w in warnings)


def test_a_failing_scorer_keeps_the_turn_s_own_importance(
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = HybridMemory(scorer=_raises)
    with caplog.at_level(logging.WARNING, logger="langchain_reflective.strategies.builtin"):
        memory.commit(Observation("I had coffee", "Nice.", importance=0.4))
    assert [k.observation.importance for k in memory._spaces["default"]] == [0.4]
    assert "TimeoutError: rating model timed out" in caplog.text and "(its own)" in caplog.text


@pytest.mark.parametrize("cls", RATED)
@pytest.mark.parametrize(
    "value",
    [Decimal("0.8"), numpy.float32(0.8), numpy.float64(0.8), numpy.array(0.8), Fraction(4, 5)],
    ids=["decimal", "numpy-float32", "numpy-float64", "numpy-0d-array", "fraction"],
)
async def test_a_scorer_may_return_any_number_float_takes(
    cls: Rated, value: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``Decimal`` or a numpy 0-d array (``model.predict(...)[0]`` of some libraries) rated
    turns through ``float()``; refused as "not a number" they fell back to the heuristic,
    with a warning at every commit."""
    memory = cls(scorer=lambda obs: value)
    with caplog.at_level(logging.WARNING, logger="langchain_reflective.strategies.builtin"):
        memory.commit(Observation("I had coffee", "Nice."))
        await memory.acommit(Observation("I had tea", "Nice."))
    assert [k.observation.importance for k in memory._spaces["default"]] == [
        pytest.approx(0.8),
        pytest.approx(0.8),
    ]
    assert all(type(k.observation.importance) is float for k in memory._spaces["default"])
    assert not caplog.records


@pytest.mark.parametrize(
    "value",
    [
        True,
        numpy.bool_(True),
        numpy.array(True),
        numpy.array([0.8]),
        Decimal("NaN"),
        Decimal("sNaN"),
        Decimal("Infinity"),
        numpy.float32("inf"),
        10**400,
        b"0.8",
        1j,
    ],
    ids=[
        "bool",
        "numpy-bool",
        "numpy-0d-bool",
        "numpy-1d-array",
        "decimal-nan",
        "decimal-snan",
        "decimal-inf",
        "numpy-inf",
        "huge-int",
        "bytes",
        "complex",
    ],
)
def test_what_float_takes_but_is_no_rating_is_refused(
    value: object, caplog: pytest.LogCaptureFixture
) -> None:
    memory = ImportanceMemory(scorer=lambda obs: value)  # type: ignore[arg-type,return-value]
    with caplog.at_level(logging.WARNING, logger="langchain_reflective.strategies.builtin"):
        memory.commit(Observation("I got married", "Congratulations!"))
    assert [k.observation.importance for k in memory._spaces["default"]] == [0.7]
    assert "not a number in [0, 1]" in caplog.text
