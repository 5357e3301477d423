"""``benchmarks/reflexion_cost.py``: LLM calls per failed trial (never times)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.benchmark_scripts import benchmark_script


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    with benchmark_script("reflexion_cost") as module:
        yield module


@pytest.mark.parametrize("failures", [1, 3])
def test_calls_per_failed_trial(bench: ModuleType, failures: int) -> None:
    ours = bench.run_ours(failures)
    inline = bench.run_ours(failures, inline=True)
    tutorial = bench.run_tutorial(failures)
    # the seed's separate self-reflection model: actor + reflection per failed trial
    assert ours.calls_by_kind == {"ours_actor": failures + 1, "ours_reflection": failures}
    assert ours.calls_per_failed_trial == 2.0
    # inline: the reflection rides on the next attempt's call, like the tutorial's revisions
    assert inline.calls_by_kind == {"ours_actor": 1, "ours_inline": failures}
    assert inline.calls_per_failed_trial == 1.0 == tutorial.calls_per_failed_trial
    assert tutorial.calls_by_kind == {"tutorial_draft": 1, "tutorial_revise": failures}
    assert inline.calls_to_success == tutorial.calls_to_success == failures + 1


def test_the_tutorials_prompt_grows_with_its_history(bench: ModuleType) -> None:
    short, long = bench.run_tutorial(2), bench.run_tutorial(6)
    assert long.last_failed_trial_input_tokens > short.last_failed_trial_input_tokens


def test_quick_mode_writes_nothing(bench: ModuleType) -> None:
    before = bench.RESULTS.read_bytes() if bench.RESULTS.exists() else None
    report = bench.main(["--quick"])
    assert {m["system"] for m in report["measures"]} == {"ours", "ours+inline", "tutorial"}
    assert (bench.RESULTS.read_bytes() if bench.RESULTS.exists() else None) == before
