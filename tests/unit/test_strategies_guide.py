"""docs/MEMORY.md runs as written: its Python blocks are executed in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langchain_reflective.strategies import format_context

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "MEMORY.md"


def blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(encoding="utf-8"), re.M | re.S)


def test_the_guide_has_the_promised_sections() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for heading in (
        "Which memory for which job",
        "Where LangGraph already does the job",
        "Observations: the fields",
        "Writing a custom strategy, step by step",
        "Thread safety",
        "Token budgets",
        "Eviction policies",
        "Testing a strategy with the conformance class",
    ):
        assert heading in text, heading
    assert len(blocks()) >= 8


def test_every_python_block_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "memory_guide"}
    for number, code in enumerate(blocks(), 1):
        try:
            exec(compile(code, f"{GUIDE.name}:block{number}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"block {number} of {GUIDE.name} failed:\n{code}") from exc
    out = capsys.readouterr().out

    # what the blocks claim is what happened
    ana = namespace["memory"].context([], namespace="ana")
    assert [m.text for m in ana] == [
        "I live in Lisbon.",
        "Noted, Lisbon!",
        "Where do I live?",
        "You live in Lisbon.",
    ]
    wedding = [m.text for m in namespace["important"].context([])]
    assert wedding == ["I got married last week!", "Congratulations!"]
    kept = [m.text for m in namespace["hybrid"].context([]) if isinstance(m, HumanMessage)]
    assert kept == ["question 0", "question 2", "question 3"]
    priority = format_context(namespace["priority"].context([], namespace="ana"))
    assert "- Assistant: A much longer answer that this memory will keep." in priority
    reopened = namespace["reopened"]
    assert [m.text for m in reopened.context([], namespace="ana")] == [
        "I live in Lisbon",
        "Noted, Lisbon.",
    ]
    assert reopened.context([], namespace="bob") == []
    assert "fit in 60 tokens" in out
    assert "My cat is called Miso" in out  # the semantic memory's context was printed


def test_readme_strategies_snippet_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.test_readme import BLOCKS

    (code,) = [c for h, c in BLOCKS if h.startswith("Memory strategies")]
    exec(compile(code, "README.md", "exec"), {})
    assert "What am I allergic to?" in capsys.readouterr().out
