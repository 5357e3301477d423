"""The Reflexion examples with test fakes, and ``reflective reflexion report`` on their output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from langchain_core.messages import HumanMessage

from langchain_reflective.reflexion import shipped_json_schema
from tests.fakes import WordEmbeddings
from tests.unit.reflexion_fakes import CodingActor, good_reflection, system_text
from tests.unit.test_examples import EXAMPLES_DIR, load
from tests.unit.test_middleware import FakeChat, tool_call

cli = pytest.importorskip("langchain_reflective.cli", reason='needs the cli extra ("[cli]")')
cli_common = pytest.importorskip("langchain_reflective.cli._common")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _report(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """``reflective reflexion report ARGS`` on a console built for this test's ``COLUMNS``
    (the console is cached with its width); returns the exit status, stdout and stderr."""
    cli_common._console.cache_clear()
    try:
        code = cli.run(["reflexion", "report", *map(str, args)])
    finally:
        cli_common._console.cache_clear()
    out, err = capsys.readouterr()
    return code, out, err


def _written(doc: dict[str, Any], tmp_path: Path) -> Path:
    """``doc`` written as an export file."""
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def coding_export(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, Any], Path, CodingActor]]:
    target = tmp_path_factory.mktemp("reflexion") / "coding.json"
    model = CodingActor()
    for module in load(EXAMPLES_DIR / "reflexion_coding.py"):
        yield (
            module.main(model=model, embeddings=WordEmbeddings(), export_path=target),
            target,
            model,
        )


def test_coding_example_fails_reads_its_reflection_then_passes(
    coding_export: tuple[dict[str, Any], Path, CodingActor],
) -> None:
    result, target, model = coding_export
    assert result["status"] == "passed" and result["trials"] == 2
    assert result["rewards"][0] == pytest.approx(2 / 3)  # real pytest: 2 of 3 tests passed
    assert "return None" in result["output"]
    # the second attempt was written with the stored reflection in context (fenced)
    assert "<reflections>" in system_text(model.actor_calls[1])
    assert result["reflections"][0][:50] in system_text(model.actor_calls[1])
    doc = json.loads(target.read_text())
    jsonschema.Draft202012Validator(shipped_json_schema()).validate(doc)


def test_report_and_plot_run_on_the_examples_output(
    coding_export: tuple[dict[str, Any], Path, CodingActor],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the console is cached with its width: rebuild it
    _, target, _ = coding_export
    png = tmp_path / "curves"
    code, out, err = _report(capsys, target, "--plot", png)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "Reflexion loops (1)" in flat and "edge_case_miss" in flat
    assert "0.67 → 1.00" in flat and "success@2" in flat
    written = tmp_path / "curves.png"
    assert written.read_bytes()[:8] == PNG_MAGIC
    assert str(written) in flat


@pytest.mark.parametrize("field", ["strategy", "status"])
def test_report_shows_markup_in_an_export_as_text(
    coding_export: tuple[dict[str, Any], Path, CodingActor],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    field: str,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    doc = json.loads(coding_export[1].read_text())
    doc["loops"][0][field] = "[/bogus]"  # was: unexpected MarkupError
    code, out, err = _report(capsys, _written(doc, tmp_path))
    assert code == 0, err
    assert "[/bogus]" in out


def test_report_shows_control_characters_of_an_export_as_escapes(
    coding_export: tuple[dict[str, Any], Path, CodingActor],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Task, strategy, status, loop id and failure category reached the terminal raw: an
    export could clear the screen or set the title. They are shown as escapes."""
    monkeypatch.setenv("COLUMNS", "400")
    hostile = "x\x1b[2J\x1b]0;t\x07\u202e"
    doc = json.loads(coding_export[1].read_text())
    [loop] = doc["loops"]
    for field in ("task", "strategy", "status", "loop_id"):
        loop[field] = f"{field[:4]}{hostile}"
    for reflection in loop["reflections"]:
        reflection["self_reflection"]["credit_assignment"]["failure_category"] = f"cat{hostile}"
    doc["loops"] = [loop, {**loop, "loop_id": f"bad{hostile}", "trials": []}]
    code, out, err = _report(capsys, _written(doc, tmp_path))
    assert code == 0, err
    assert not [c for c in ("\x1b", "\x07", "\u202e") if c in out], repr(out)
    flat = "".join(out.split())
    for field in ("task", "stra", "stat", "cat", "bad"):
        assert f"{field}x\\x1b[2J\\x1b]0;t\\x07\\u202e" in flat, field
    assert "loopx\\x1b[2J\\x1b" in flat  # (the first 12 characters of the id)


def test_report_plot_shows_a_dollar_as_text(
    coding_export: tuple[dict[str, Any], Path, CodingActor],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A strategy named "$\\undefinedmacro$" (a legend label) failed the plot: matplotlib
    parsed it as math."""
    doc = json.loads(coding_export[1].read_text())
    doc["loops"][0]["strategy"] = "$\\undefinedmacro$"
    png = tmp_path / "curves.png"
    code, _, err = _report(capsys, _written(doc, tmp_path), "--plot", png)
    assert code == 0, err
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_report_skips_malformed_loops_and_counts_duplicates(
    coding_export: tuple[dict[str, Any], Path, CodingActor],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    doc = json.loads(coding_export[1].read_text())
    [good] = doc["loops"]
    empty = {**good, "loop_id": "no-trials", "trials": []}
    nan = json.loads(json.dumps(good))
    nan["loop_id"] = "nan-reward"
    nan["trials"][0]["reward"] = float("nan")
    twice = {**good["trials"][0], "record_id": "old-copy", "created_at": "2999-01-01T00:00:00"}
    good["trials"].append(twice)
    doc["loops"] = [good, empty, nan]
    code, out, err = _report(capsys, _written(doc, tmp_path))
    assert code == 0, err
    flat = " ".join(out.split())
    tables = flat.split("malformed loops skipped")[0]
    assert "Reflexion loops (1)" in tables and "nan" not in tables
    assert "0.67 → 1.00" in flat  # the duplicate of trial 0 is not a third point
    assert (
        "2 malformed loops skipped (not in these numbers): loop 1 ('no-trials'): no trials;" in flat
    )
    assert "loop 2 ('nan-reward'): trial 0 has reward nan, not a number in [0, 1]" in flat
    assert "1 duplicate copy of trials or reflections (stored twice by an older version)" in flat
    # nothing left to report: an error, not empty tables
    doc["loops"] = [empty, nan]
    code, _, err = _report(capsys, _written(doc, tmp_path))
    assert code == 1
    [line] = [ln for ln in err.splitlines() if ln.strip()]
    assert "every loop is malformed (loop 0 ('no-trials'): no trials; loop 1" in line


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("not json", "not a JSON document"),
        ('{"format": "langchain-reflective/jsonl"}', "not a Reflexion export"),
        ('{"format": "langchain-reflective/reflexion", "version": 1, "loops": [{}]}', "malformed"),
        (
            '{"format": "langchain-reflective/reflexion", "version": 1, "loops": ["a loop"]}',
            "loop 0 is a str, not a JSON object",  # was: unexpected AttributeError
        ),
    ],
)
def test_report_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "export.json"
    if content is not None:
        path.write_text(content)
    code = cli.run(["reflexion", "report", str(path)])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err
    [line] = [ln for ln in err.splitlines() if ln.strip()]
    assert line.startswith("error: ") and message in line


def test_report_plot_suffix_is_checked_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "export.json"
    path.write_text('{"format": "langchain-reflective/reflexion", "version": 1, "loops": []}')
    assert cli.run(["reflexion", "report", str(path), "--plot", str(tmp_path / "x.gif")]) == 2
    assert cli.run(["reflexion", "report", str(path)]) == 0
    assert "holds no Reflexion loops" in capsys.readouterr().out


def test_agent_example_runs_a_create_agent_agent_in_the_loop() -> None:
    model = FakeChat(
        script=[
            "The answer is 400.",
            good_reflection(1, about="unchecked sum"),
            tool_call("calculate", {"expression": "17 * 23 + 4"}),
            "The answer is 395.",
        ]
    )
    for module in load(EXAMPLES_DIR / "reflexion_agent.py"):
        result = module.main(model=model, embeddings=WordEmbeddings())
    assert result["status"] == "passed" and result["trials"] == 2
    assert "395" in result["output"]
    # the agent's tool call and its result are the second attempt's actions
    assert any("call calculate" in a for actions in result["actions"] for a in actions)
    assert any("result of calculate: 395" in a for actions in result["actions"] for a in actions)
    # the second attempt's prompt held the reflection, fenced, in the agent's human message
    second = [
        c
        for c in model.calls
        if any("<reflections>" in m.text for m in c if isinstance(m, HumanMessage))
    ]
    assert second and "unchecked sum" in second[0][-1].text
