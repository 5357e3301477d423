"""The records of a Reflexion loop (seed 003): evaluator output and structured self-reflection.

Every value here is a pydantic model, so a model's structured answer is validated on the way in
and a record is plain JSON on the way out (episodic memory, export, the JSON Schema).
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "FAILURE_CATEGORIES",
    "FEEDBACK_OUTPUT_CHARS",
    "CheckResult",
    "CheckStatus",
    "CreditAssignment",
    "EvaluatorOutput",
    "FailureCategory",
    "SelfReflection",
    "StructuredError",
]

FailureCategory = Literal[
    "logic_error",
    "edge_case_miss",
    "syntax_error",
    "type_error",
    "test_failure",
    "lint_error",
    "integration_error",
    "misunderstood_task",
    "incomplete_solution",
    "tool_misuse",
    "timeout",
    "environment_error",
    "wrong_answer",
    "other",
]
"""Why an attempt failed (the reflection's ``credit_assignment.failure_category``).

``logic_error``: the approach computes the wrong thing; ``edge_case_miss``: empty, ``None``,
boundary or unusual inputs not handled; ``syntax_error``: the output does not parse or run;
``type_error``: the type checker or a runtime type mismatch; ``test_failure``: tests fail for a
reason not covered above; ``lint_error``: style or lint findings; ``integration_error``: an API,
file or service used wrongly; ``misunderstood_task``: the task was read wrongly;
``incomplete_solution``: parts of the task not done; ``tool_misuse``: an agent tool called
wrongly; ``timeout``: too slow or hung; ``environment_error``: the environment, not the attempt,
failed (missing tool, crash); ``wrong_answer``: a question answered wrongly; ``other``: none of
these (unknown categories from a model become ``other``)."""

FAILURE_CATEGORIES: tuple[str, ...] = FailureCategory.__args__  # type: ignore[attr-defined]

CheckStatus = Literal["passed", "failed", "timeout", "error"]
"""One check's outcome: ``error`` means the check itself could not run (missing program...)."""


class StructuredError(BaseModel):
    """One error found by a check, with its location when the tool reports one."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(description="The check that reported it (pytest, mypy, ruff, judge...).")
    type: str = Field(default="error", description="Error class or rule code.")
    message: str = Field(description="What the tool said.")
    file: str | None = Field(default=None, description="File, when known.")
    line: int | None = Field(default=None, description="1-based line, when known.")
    column: int | None = Field(default=None, description="1-based column, when known.")


class CheckResult(BaseModel):
    """The outcome of one check (one command, one judge call, one comparison)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The check's name (e.g. tests, types, lint).")
    tool: str = Field(description="pytest, mypy, ruff, command, judge, callable or match.")
    status: CheckStatus
    score: float = Field(ge=0.0, le=1.0, description="This check's reward in [0, 1].")
    weight: float = Field(ge=0.0, description="Its weight in the combined reward.")
    command: list[str] | None = Field(default=None, description="The command run, if any.")
    exit_code: int | None = None
    duration_s: float | None = None
    output: str = Field(default="", description="The tail of stdout and stderr.")
    metrics: dict[str, float] = Field(default_factory=dict)


FEEDBACK_OUTPUT_CHARS = 2000
"""Most characters of a failed check's output in :meth:`EvaluatorOutput.feedback`, so in the
reflection and actor prompts (its first and last lines, the middle cut with a marker)."""

_PROGRESS_GAP = re.compile(r"(?<=\S) {2,}(?=\[ *\d+%\]$)")
_PYTEST_SECTION = re.compile(r"^=+ (?:FAILURES|ERRORS) =+$")


def _short_rule(line: str) -> str:
    """A rule of 5 or more ``=_*~#-`` (spaced ``_ _ _`` too), with a title in the middle or
    none, shortened to 3 of its characters on each side; other lines unchanged.

    (String operations, no regular expression: a long line costs linear time.)"""
    text = line.strip()
    char = text[:1]
    if not char or char not in "=_*~#-":
        return line
    if text.count(char) >= 5 and not text.replace(" ", "").strip(char):
        return char * 3
    lead, trail = len(text) - len(text.lstrip(char)), len(text) - len(text.rstrip(char))
    title = text[lead : len(text) - trail].strip() if lead >= 5 and trail >= 5 else ""
    return f"{char * 3} {title} {char * 3}" if title else line


def _tidy(output: str, tool: str) -> list[str]:
    """The output's lines without what costs room and says nothing: trailing whitespace,
    repeated blank lines, terminal-wide rules (``=== FAILURES ===`` is kept as that) and the
    gap before a ``[100%]`` progress mark, which pytest pads to the terminal's width; pytest's
    output starts at its FAILURES or ERRORS section (before it: progress and warnings)."""
    lines = output.strip("\n").splitlines()
    if tool == "pytest":
        start = next((i for i, x in enumerate(lines) if _PYTEST_SECTION.match(x.strip())), 0)
        lines = lines[start:]
    out: list[str] = []
    for line in lines:
        line = _short_rule(_PROGRESS_GAP.sub(" ", line.rstrip()))
        if line or (out and out[-1]):
            out.append(line)
    return out


def output_excerpt(output: str, tool: str = "", max_chars: int = FEEDBACK_OUTPUT_CHARS) -> str:
    """The informative part of a check's output: at most ``max_chars`` characters and a marker.

    Tidied (see :func:`_tidy`), each line cut to a quarter of the budget with ``…``; when still
    too long, its first lines (up to half the budget: pytest's first failure, with the failing
    line and the values) and its last lines (the rest: the summary, the short test summary, a
    crash's exception) are kept, the lines between replaced by ``… (N lines cut) …``.
    """
    cap = max(20, max_chars // 4)
    lines = [x if len(x) <= cap else x[: cap - 1].rstrip() + "…" for x in _tidy(output, tool)]
    if sum(len(x) + 1 for x in lines) <= max_chars + 1:
        return "\n".join(lines)
    head: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > max_chars // 2:
            break
        head.append(line)
        used += len(line) + 1
    tail: list[str] = []
    for line in reversed(lines[len(head) :]):
        if used + len(line) + 1 > max_chars:
            break
        tail.append(line)
        used += len(line) + 1
    cut = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"… ({cut} lines cut) …", *reversed(tail)])


class EvaluatorOutput(BaseModel):
    """What an evaluator says about one attempt (seed 003's ``EvaluatorOutput``)."""

    model_config = ConfigDict(extra="forbid")

    passed: bool = Field(description="Overall pass/fail: every check passed.")
    reward: float = Field(ge=0.0, le=1.0, description="The scalar reward in [0, 1].")
    verification_type: str = Field(default="custom", description="tests, combined, judge...")
    results: list[CheckResult] = Field(default_factory=list)
    errors: list[StructuredError] = Field(default_factory=list)
    metrics: dict[str, float] = Field(default_factory=dict)

    @field_validator("reward", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("reward must be finite")
        return value

    def feedback(
        self, *, max_errors: int = 20, max_output_chars: int = FEEDBACK_OUTPUT_CHARS
    ) -> list[str]:
        """One item per check and per error, for prompts (not fenced here).

        A passed check's item ends with the last line of its output (a summary); a check that
        did not pass keeps its output's informative part on the following lines (pytest's
        failure details, mypy's and ruff's findings, a crash's traceback), at most about
        ``max_output_chars`` characters (:func:`output_excerpt`: its first and last lines, the
        middle cut with a marker). The prompts cut each item to ``ReflexionConfig.max_chars``.
        """
        lines = []
        for r in self.results:
            head = f"{r.name} ({r.tool}): {r.status}, score {r.score:.2f}"
            if not r.output.strip():
                lines.append(head)
            elif r.status == "passed":
                lines.append(f"{head}; {r.output.strip().splitlines()[-1]}")
            else:
                excerpt = output_excerpt(r.output, r.tool, max_output_chars)
                lines.append(f"{head}; " + ("output:\n" if "\n" in excerpt else "") + excerpt)
        for err in self.errors[:max_errors]:
            where = f" at {err.file}:{err.line}" if err.file and err.line else ""
            where = where or (f" in {err.file}" if err.file else "")
            lines.append(f"{err.tool} {err.type}{where}: {err.message}")
        if len(self.errors) > max_errors:
            lines.append(f"... and {len(self.errors) - max_errors} more errors")
        return lines


class CreditAssignment(BaseModel):
    """Which actions failed and why (the reflection's credit assignment)."""

    failing_action_indices: list[int] = Field(
        default_factory=list, description="0-based indices of the actions that caused it."
    )
    root_cause: str = Field(default="", description="The root cause, in one sentence.")
    failure_category: FailureCategory = Field(
        default="other", description="The closest failure category."
    )

    @field_validator("root_cause", mode="before")
    @classmethod
    def _root_cause(cls, value: Any) -> Any:
        """A null or non-text root cause is no root cause (``""``), not a rejected reflection."""
        return value if isinstance(value, str) else ""

    @field_validator("failure_category", mode="before")
    @classmethod
    def _known_category(cls, value: Any) -> Any:
        if isinstance(value, str):
            norm = value.strip().lower().replace(" ", "_").replace("-", "_")
            return norm if norm in FAILURE_CATEGORIES else "other"
        return "other"

    @field_validator("failing_action_indices", mode="before")
    @classmethod
    def _indices(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return []
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool) and v >= 0]


_DEFAULT_CONFIDENCE = 0.5
"""A reflection's confidence when the model gave none or none that can be read."""

_CONFIDENCE_WORDS: dict[str, float] = {"low": 0.25, "medium": 0.5, "moderate": 0.5, "high": 0.75}


class SelfReflection(BaseModel):
    """A structured, first-person self-reflection after a failed attempt (seed 003)."""

    reflection_text: str = Field(
        description="First-person narrative: what I did, why it failed, what I will do next."
    )
    credit_assignment: CreditAssignment = Field(default_factory=CreditAssignment)
    """A text is the root cause (models often give just that); ``null`` or any other value is
    the default, empty, credit assignment."""
    causal_reasoning: str = Field(default="", description="Why the actions led to the failure.")
    """``null`` or a non-text value is the default, ``""``."""
    actionable_insights: list[str] = Field(
        default_factory=list, description="Concrete steps for the next attempt."
    )
    lessons_learned: list[str] = Field(
        default_factory=list, description="General lessons that carry over to other tasks."
    )
    confidence: float = Field(
        default=_DEFAULT_CONFIDENCE,
        ge=0.0,
        le=1.0,
        description="How sure I am of this analysis, in [0, 1].",
    )
    """Read leniently, as models write it: a percentage (``85``, ``"80%"``) is divided by 100,
    a number as text is read as a number, out-of-range values are clamped (not finite: 0.0),
    and the words ``low``/``medium``/``high`` (or ``moderate``) are 0.25/0.5/0.75 (the middle
    of each third, a hedge rather than a claim of precision). Anything else (``null``, other
    words, a list) is the default 0.5, "no idea", so one bad field never costs the reflection."""
    related_reflections: list[int] = Field(
        default_factory=list, description="Iterations of earlier reflections this builds on."
    )

    @field_validator("reflection_text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("reflection_text is empty")
        return value.strip()

    @field_validator("actionable_insights", "lessons_learned", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            return []
        return [
            str(v).strip() for v in value if isinstance(v, str | int | float) and str(v).strip()
        ]

    @field_validator("credit_assignment", mode="before")
    @classmethod
    def _credit(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"root_cause": value.strip()}
        return value if isinstance(value, dict | CreditAssignment) else {}

    @field_validator("causal_reasoning", mode="before")
    @classmethod
    def _reasoning(cls, value: Any) -> Any:
        return value if isinstance(value, str) else ""

    @field_validator("confidence", mode="before")
    @classmethod
    def _clamp(cls, value: Any) -> Any:
        """See the field: it never fails, so a bad confidence never costs the reflection."""
        if isinstance(value, bool):
            return value  # (read by pydantic as 1.0 / 0.0, as before)
        if isinstance(value, str):
            text = value.strip().lower()
            if text in _CONFIDENCE_WORDS:
                return _CONFIDENCE_WORDS[text]
            try:
                number = float(text.removesuffix("%"))
            except ValueError:
                return _DEFAULT_CONFIDENCE
            if text.endswith("%"):
                return min(1.0, max(0.0, number / 100.0)) if math.isfinite(number) else 0.0
            value = number
        if not isinstance(value, int | float):
            return _DEFAULT_CONFIDENCE
        if not math.isfinite(value):
            return 0.0
        if 1.0 < value <= 100.0:  # a percentage
            value = value / 100.0
        return min(1.0, max(0.0, float(value)))

    @field_validator("related_reflections", mode="before")
    @classmethod
    def _related(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return []
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
