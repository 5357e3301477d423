"""``benchmarks/thinking_cost.py`` on a tiny session: call counts, token accounting and recall
hits only, never times."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmark_scripts import benchmark_script


def test_session_counts_and_recall_hits(tmp_path: Path) -> None:
    with benchmark_script("thinking_cost") as module:
        out = tmp_path / "thinking_cost.json"
        argv = ["--turns", "8", "--recall-size", "60", "--queries", "5", "--output", str(out)]
        result = module.main([*argv, "--context-tokens", "300"])
        extractive = module.main([*argv, "--summaries", "extractive"])
    session = result["session"]
    rows = session["rows"]
    # two rounds + one summary per turn with summaries; two rounds without
    assert [r["llm_calls_summaries"] for r in rows] == [3] * 8
    assert [r["llm_calls_full"] for r in rows] == [2] * 8
    # turn 1 has no history; afterwards the full history grows faster than the summaries
    assert rows[0]["history_tokens_summaries"] == rows[0]["history_tokens_full"] == 0
    assert all(r["history_tokens_full"] > r["history_tokens_summaries"] > 0 for r in rows[1:])
    assert session["compression"] > 3 and session["fallbacks"] == 0
    assert rows[4]["recalled"] == 1 and rows[6]["recalled"] == 1  # turns 5 and 7 recall
    assert result["recall"]["keyword_hit_at_1"] == 1.0
    assert result["recall"]["records"] == 120
    # extractive summaries: one fallback per turn, still shorter than the contexts
    assert extractive["session"]["fallbacks"] == 8 and extractive["session"]["compression"] > 1
    assert set(json.loads(out.read_text(encoding="utf-8"))) == {"model", "extractive"}
