"""Parsers for the output of pytest, mypy and ruff: pass/fail counts and error locations.

Each parser takes the combined output and exit code of one run and returns a
:class:`ParsedRun`: the check's score in [0, 1], its metrics and its structured errors. Unknown
programs fall back to the exit code (0 passes) plus any ``file:line:`` locations in the output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from langchain_reflective.reflexion.schema import StructuredError

__all__ = ["ParsedRun", "Parser", "parse_exit_code", "parse_mypy", "parse_pytest", "parse_ruff"]


@dataclass(frozen=True, slots=True)
class ParsedRun:
    """What a parser found in one run's output."""

    passed: bool
    """Whether the check passed."""
    score: float
    """The check's reward in [0, 1]."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Counts (tests_passed, tests_total, type_errors, lint_errors, ...)."""
    errors: list[StructuredError] = field(default_factory=list)
    """Errors with their locations."""


Parser = Callable[[str, int], ParsedRun]
"""``(output, exit_code) -> ParsedRun``."""

_MAX_ERRORS = 50
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)\b")
_SUMMARY = re.compile(r"^[=\s]*(?:\d+ \w+(?:, )?)+.* in [\d.]+s", re.MULTILINE)
_FAILED_LINE = re.compile(r"^(FAILED|ERROR) (\S+?)(?:::(\S+))?(?: - (.*))?$", re.MULTILINE)
_TRACE_LOC = re.compile(r"^(\S+\.py):(\d+): (\w*(?:Error|Exception|Exit|Failed)\w*|in \S+)$", re.M)
_MYPY = re.compile(
    r"^(?P<file>[^\s:][^:\n]*?):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>error|note): "
    r"(?P<msg>.*?)(?:  \[(?P<code>[\w-]+)\])?$",
    re.MULTILINE,
)
_RUFF_CONCISE = re.compile(
    r"^(?P<file>[^\s:][^:\n]*?):(?P<line>\d+):(?P<col>\d+): (?P<code>[A-Z]+\d+) (?:\[\*\] )?"
    r"(?P<msg>.*)$",
    re.MULTILINE,
)
_RUFF_FULL = re.compile(
    r"^(?P<code>[A-Z]+\d+) (?:\[\*\] )?(?P<msg>.+)\n\s*--> (?P<file>[^:\n]+):(?P<line>\d+):"
    r"(?P<col>\d+)",
    re.MULTILINE,
)
_GENERIC_LOC = re.compile(
    r"^(?P<file>[^\s:][^:\n]*?\.\w+):(?P<line>\d+):(?:(\d+):)?\s*(?P<msg>.+)$", re.M
)


def _tail_message(text: str | None, default: str) -> str:
    text = (text or "").strip()
    return text[:500] if text else default


def parse_pytest(output: str, exit_code: int) -> ParsedRun:
    """pytest: score = passed / (passed + failed + errors); 0 when nothing ran.

    Counts come from the final summary line (``1 failed, 2 passed in 0.1s``); errors from the
    ``FAILED``/``ERROR`` lines of the short summary and the ``file.py:12: AssertionError`` lines
    of the tracebacks (the last location of a test's traceback is where it failed).
    """
    counts: dict[str, int] = {}
    summaries = _SUMMARY.findall(output)
    source = summaries[-1] if summaries else output[-2000:]
    for n, key in _COUNT.findall(source):
        key = {"error": "errors", "warning": "warnings"}.get(key, key)
        counts[key] = counts.get(key, 0) + int(n)
    passed, failed, errors = (
        counts.get("passed", 0),
        counts.get("failed", 0),
        counts.get("errors", 0),
    )
    total = passed + failed + errors
    score = passed / total if total else 0.0
    found: list[StructuredError] = []
    locations = [(m.group(1), int(m.group(2)), m.group(3)) for m in _TRACE_LOC.finditer(output)]
    for m in _FAILED_LINE.finditer(output):
        file, test, msg = m.group(2), m.group(3), m.group(4)
        loc = next(
            ((f, ln) for f, ln, kind in reversed(locations) if not kind.startswith("in ")), None
        )
        found.append(
            StructuredError(
                tool="pytest",
                type="error" if m.group(1) == "ERROR" else "test_failure",
                message=_tail_message(msg, f"{test or file} {m.group(1).lower()}"),
                file=file.split("::")[0],
                line=loc[1]
                if loc and loc[0].endswith(file.split("::")[0].split("/")[-1])
                else None,
            )
        )
    for file, line, kind in locations:
        if kind.startswith("in "):
            continue
        found.append(StructuredError(tool="pytest", type=kind, message=kind, file=file, line=line))
    if not total and exit_code != 0 and not found:
        found.append(
            StructuredError(
                tool="pytest",
                type="no_tests" if exit_code == 5 else "error",
                message=_tail_message(
                    output.strip().splitlines()[-1] if output.strip() else "",
                    f"pytest exited with status {exit_code}",
                ),
            )
        )
    ok = exit_code == 0 and total > 0 and failed == 0 and errors == 0
    metrics = {
        "tests_passed": float(passed),
        "tests_failed": float(failed),
        "tests_errors": float(errors),
        "tests_total": float(total),
        "tests_skipped": float(counts.get("skipped", 0)),
    }
    return ParsedRun(
        passed=ok, score=1.0 if ok else score, metrics=metrics, errors=found[:_MAX_ERRORS]
    )


def parse_mypy(output: str, exit_code: int) -> ParsedRun:
    """mypy: passes with no error (score 1), else 0; one error per ``file:line: error:`` line."""
    found = [
        StructuredError(
            tool="mypy",
            type=m.group("code") or "error",
            message=m.group("msg").strip(),
            file=m.group("file"),
            line=int(m.group("line")),
            column=int(m.group("col")) if m.group("col") else None,
        )
        for m in _MYPY.finditer(output)
        if m.group("sev") == "error"
    ]
    ok = exit_code == 0 and not found
    if not ok and not found:
        found.append(
            StructuredError(
                tool="mypy", message=_tail_message(output, f"mypy exited with {exit_code}")
            )
        )
    return ParsedRun(
        passed=ok,
        score=1.0 if ok else 0.0,
        metrics={"type_errors": float(len(found) if not ok else 0)},
        errors=found[:_MAX_ERRORS],
    )


def parse_ruff(output: str, exit_code: int) -> ParsedRun:
    """ruff check: passes with no finding (score 1), else 0; concise and full formats parsed."""
    found = [
        StructuredError(
            tool="ruff",
            type=m.group("code"),
            message=m.group("msg").strip(),
            file=m.group("file").strip(),
            line=int(m.group("line")),
            column=int(m.group("col")),
        )
        for pattern in (_RUFF_CONCISE, _RUFF_FULL)
        for m in pattern.finditer(output)
    ]
    ok = exit_code == 0 and not found
    if not ok and not found:
        found.append(
            StructuredError(
                tool="ruff", message=_tail_message(output, f"ruff exited with {exit_code}")
            )
        )
    return ParsedRun(
        passed=ok,
        score=1.0 if ok else 0.0,
        metrics={"lint_errors": float(len(found) if not ok else 0)},
        errors=found[:_MAX_ERRORS],
    )


def parse_exit_code(output: str, exit_code: int) -> ParsedRun:
    """Any command: exit status 0 passes; ``file:line: message`` lines become errors."""
    ok = exit_code == 0
    found: list[StructuredError] = []
    if not ok:
        found = [
            StructuredError(
                tool="command",
                message=m.group("msg").strip()[:500],
                file=m.group("file"),
                line=int(m.group("line")),
            )
            for m in _GENERIC_LOC.finditer(output)
        ][:_MAX_ERRORS]
        if not found:
            lines = output.strip().splitlines()
            found.append(
                StructuredError(
                    tool="command",
                    message=_tail_message(
                        lines[-1] if lines else "", f"exited with status {exit_code}"
                    ),
                )
            )
    return ParsedRun(passed=ok, score=1.0 if ok else 0.0, metrics={}, errors=found)
