"""``benchmarks/reflection_cost.py`` in ``--quick`` mode: LLM call counts only, never times."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.benchmark_scripts import benchmark_script


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    with benchmark_script("reflection_cost") as module:
        yield module


def _by_op(measures: list[Any]) -> dict[str, Any]:
    return {m.operation: m for m in measures}


def test_our_call_counts(bench: ModuleType) -> None:
    ours = _by_op(bench.run_ours(delay=0.0, runs=1))
    for op in ("reflection (invoke)", "reflection (ainvoke)"):
        m = ours[op]
        # 1 question call + 3 insight calls (one per question) + 1 condense + 1 importance batch
        assert m.calls_by_kind == {
            "our_questions": 1,
            "our_insights": 3,
            "our_condense": 1,
            "our_importance": 1,
        }
        assert m.calls == 6
    importance = ours["importance x100"]
    assert importance.calls_by_kind == {"our_importance": 10}  # batches of 10
    assert importance.calls == 10
    assert "100/100 rated by LLM" in importance.detail


def test_peer_call_counts(bench: ModuleType) -> None:
    pytest.importorskip("langchain_experimental.generative_agents")
    peer = bench.run_peer(delay=0.0, runs=1)
    reflection, one_by_one, batched = peer
    # 1 questions call + 3 insight calls + 5 insights x 3 questions rated one by one
    assert reflection.calls_by_kind == {
        "peer_questions": 1,
        "peer_insights": 3,
        "peer_importance": 15,
    }
    assert one_by_one.calls_by_kind == {"peer_importance": 100}
    assert batched.calls_by_kind == {"peer_importance_batch": 1}


def test_quick_main_reports_targets(bench: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    report = bench.main(["--quick", "--no-peer", "--out", str(out)])
    assert report["delay_s"] == 0.0
    assert report["targets"]["reflection_calls_le_6"] == {"value": 6, "met": True}
    assert report["targets"]["importance_100_calls_le_10"] == {"value": 10, "met": True}
    assert json.loads(out.read_text())["targets"] == report["targets"]


def test_fake_model_answers_every_prompt_kind(bench: ModuleType) -> None:
    assert bench.prompt_kind("Memory: x\nRespond with a single integer.") == "peer_importance"
    assert bench.answer("peer_importance", "Memory: had lunch\nRating: ").isdigit()
    batch = "Memories are separated by semi colans (;)\nMemories: a; b; c\nRating: "
    assert bench.prompt_kind(batch) == "peer_importance_batch"
    assert len(bench.answer("peer_importance_batch", batch).split(";")) == 3
    assert bench.prompt_kind("<memories>\n1. a\n2. b\n</memories>") == "our_importance"
    assert bench.answer("our_importance", "<memories>\n1. a\n2. b\n</memories>").count(":") == 2
