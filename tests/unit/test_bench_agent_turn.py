"""``benchmarks/agent_turn.py`` on a tiny stream: call counts only, never times."""

from __future__ import annotations

from pathlib import Path

from tests.benchmark_scripts import benchmark_script


def test_the_turn_path_makes_no_memory_llm_call_after_and_one_before(tmp_path: Path) -> None:
    with benchmark_script("agent_turn") as module:
        out = tmp_path / "agent_turn.json"
        result = module.main(
            [
                "--size",
                "300",
                "--turns",
                "4",
                "--before-turns",
                "2",
                "--rating-delay",
                "0",
                "--dim",
                "32",
                "--output",
                str(out),
            ]
        )
    before, after = result["modes"]
    assert before["mode"] == "before" and before["memory_llm_calls_on_path_max"] == 1
    assert after["mode"] == "after" and after["memory_llm_calls_on_path_max"] == 0
    # the after turns' memories were rated in the background, then all flushed
    assert after["flushed"] and after["background_llm_calls"] >= 1
    assert out.exists() and '"300"' in out.read_text(encoding="utf-8")
