"""``ImportanceMemory`` and ``HybridMemory`` with a custom ``scorer``: off the event loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from blockbuster import blockbuster_ctx

from langchain_reflective import HybridMemory, ImportanceMemory, Observation

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
