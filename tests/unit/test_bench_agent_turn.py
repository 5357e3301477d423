"""``benchmarks/agent_turn.py`` on a tiny stream: call counts only, never times."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "agent_turn.py"


def test_the_turn_path_makes_no_memory_llm_call_after_and_one_before(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_agent_turn", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
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
    finally:
        sys.modules.pop(spec.name, None)
    before, after = result["modes"]
    assert before["mode"] == "before" and before["memory_llm_calls_on_path_max"] == 1
    assert after["mode"] == "after" and after["memory_llm_calls_on_path_max"] == 0
    # the after turns' memories were rated in the background, then all flushed
    assert after["flushed"] and after["background_llm_calls"] >= 1
    assert out.exists() and '"300"' in out.read_text(encoding="utf-8")
