"""Analytics of Reflexion loops: reward curves, trials to success, failure categories, success
rates (overall, at trial k, per strategy) and lesson reuse, from an export document.

A loop the export schema would reject (no trials, a reward that is not a number in [0, 1], a
trial or reflection missing what the numbers need) is never counted: :func:`analyze_loop`
raises for it and :func:`analyze_loops` leaves it out and says why
(:attr:`LoopsSummary.malformed`). An iteration stored twice by an old version counts once: the
first stored copy (the oldest ``created_at``, then the smaller id), as when reading a stream.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.reflexion.export import export_loops, load_export

if TYPE_CHECKING:
    from langchain_reflective.stream import MemoryStream

__all__ = ["LoopAnalysis", "LoopsSummary", "analyze_loop", "analyze_loops", "malformed_reason"]


@dataclass(frozen=True, slots=True)
class LoopAnalysis:
    """One loop at a glance."""

    loop_id: str
    """The loop's id."""
    task: str
    """Its task."""
    strategy: str
    """The strategy it ran with."""
    status: str
    """passed, failed, error or running."""
    rewards: list[float]
    """The reward of each trial (the reward curve)."""
    trials_to_success: int | None
    """Trials until the first pass (1-based), ``None`` if it never passed."""
    failure_categories: list[str]
    """The failure category of each reflection, in order."""
    lessons_count: int
    """Lessons learned written by its reflections."""
    avg_confidence: float | None
    """Mean self-assessed confidence of its reflections."""
    learning_rate: float
    """``(last reward - first reward) / trials`` (seed 003)."""
    low_quality: int
    """Reflections flagged low quality."""
    lessons_reused: list[str] = field(default_factory=list)
    """Ids of past reflections whose lessons its first attempt was given."""
    duplicates: int = 0
    """Trials and reflections of an iteration stored twice (by an old version) and ignored."""

    @property
    def trials(self) -> int:
        """Trials run."""
        return len(self.rewards)


@dataclass(frozen=True, slots=True)
class LoopsSummary:
    """Many loops at a glance (one strategy, or all)."""

    loops: int
    """How many loops."""
    success_rate: float
    """Fraction of loops that passed."""
    success_at: dict[int, float]
    """``k -> fraction of loops that passed within k trials``, for k = 1..max trials."""
    mean_trials: float
    """Mean trials per loop."""
    mean_trials_to_success: float | None
    """Mean trials to the first pass over the loops that passed."""
    failure_categories: dict[str, int]
    """How often each failure category was reflected on."""
    lesson_reuse_rate: float
    """Fraction of loops whose first attempt was given lessons of earlier loops."""
    success_rate_with_lessons: float | None
    """Success rate of those loops (``None``: no such loop)."""
    mean_learning_rate: float
    """Mean of the loops' learning rates."""
    duplicates: int = 0
    """Trials and reflections stored twice, counted once (:attr:`LoopAnalysis.duplicates`)."""
    malformed: tuple[str, ...] = ()
    """Loops left out of these numbers because the export schema would reject them, one line
    each saying which and why (set on the summary of all loops by :func:`analyze_loops`)."""


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_unit(value: Any) -> bool:
    """A finite number in [0, 1] (NaN and infinities are not)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0.0 <= value <= 1.0
    )


def _trial_problem(i: int, trial: Any) -> str | None:
    if not isinstance(trial, Mapping):
        return f"trial {i} is not a JSON object"
    if not _is_index(trial.get("iteration")):
        return f"trial {i} has no iteration (a non-negative integer)"
    if not _is_unit(trial.get("reward")):
        return f"trial {i} has reward {trial.get('reward')!r}, not a number in [0, 1]"
    if not isinstance(trial.get("passed"), bool):
        return f"trial {i} has no 'passed' (true or false)"
    if not isinstance(trial.get("lessons_reused", []), list):
        return f"trial {i} has lessons_reused that are not a list"
    return None


def _reflection_problem(i: int, entry: Any) -> str | None:
    if not isinstance(entry, Mapping) or not _is_index(entry.get("iteration")):
        return f"reflection {i} is not an object with an iteration"
    sr = entry.get("self_reflection")
    if not isinstance(sr, Mapping):
        return f"reflection {i} has no self_reflection"
    credit = sr.get("credit_assignment")
    if not isinstance(credit, Mapping) or not isinstance(credit.get("failure_category"), str):
        return f"reflection {i} has no failure category"
    if not _is_unit(sr.get("confidence")):
        return f"reflection {i} has confidence {sr.get('confidence')!r}, not a number in [0, 1]"
    if not isinstance(sr.get("lessons_learned", []), list):
        return f"reflection {i} has lessons_learned that are not a list"
    if not isinstance(entry.get("lessons_reused", []), list):
        return f"reflection {i} has lessons_reused that are not a list"
    return None


def malformed_reason(loop: Any) -> str | None:
    """Why the export schema would reject this loop of an export (in what the analytics read),
    or ``None`` when it can be analysed."""
    if not isinstance(loop, Mapping):
        return "not a JSON object"
    if not isinstance(loop.get("loop_id"), str) or not loop["loop_id"]:
        return "no loop_id"
    trials, reflections = loop.get("trials"), loop.get("reflections", [])
    if not isinstance(trials, list) or not trials:
        return "no trials"
    if not isinstance(reflections, list):
        return "its reflections are not a list"
    problems = (
        *(_trial_problem(i, t) for i, t in enumerate(trials)),
        *(_reflection_problem(i, r) for i, r in enumerate(reflections)),
    )
    return next((p for p in problems if p is not None), None)


def _stored_first(entry: Mapping[str, Any], id_key: str) -> tuple[datetime, str]:
    try:
        when = datetime.fromisoformat(str(entry.get("created_at")))
    except ValueError:
        return datetime.max.replace(tzinfo=UTC), str(entry.get(id_key, ""))
    when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return when, str(entry.get(id_key, ""))


def _once_per_iteration(entries: Sequence[Mapping[str, Any]], id_key: str) -> list[Any]:
    """The entries by iteration, each iteration once: its first stored copy."""
    first: dict[int, Mapping[str, Any]] = {}
    for e in entries:
        kept = first.get(e["iteration"])
        if kept is None or _stored_first(e, id_key) < _stored_first(kept, id_key):
            first[e["iteration"]] = e
    return [first[i] for i in sorted(first)]


def analyze_loop(loop: Mapping[str, Any]) -> LoopAnalysis:
    """Analyse one loop of an export document.

    An iteration whose trial (or reflection) appears twice counts once: the first stored copy
    (oldest ``created_at``, then the smaller id); :attr:`LoopAnalysis.duplicates` counts the
    others.

    Raises:
        InvalidMemoryError: a loop the export schema would reject (:func:`malformed_reason`).
    """
    problem = malformed_reason(loop)
    if problem is not None:
        raise InvalidMemoryError(f"malformed Reflexion loop: {problem}")
    trials = _once_per_iteration(loop["trials"], "record_id")
    reflections = _once_per_iteration(loop.get("reflections", []), "id")
    duplicates = len(loop["trials"]) - len(trials) + len(loop.get("reflections", []))
    duplicates -= len(reflections)
    rewards = [float(t["reward"]) for t in trials]
    first_pass = next((i + 1 for i, t in enumerate(trials) if t.get("passed")), None)
    cats = [r["self_reflection"]["credit_assignment"]["failure_category"] for r in reflections]
    confidences = [float(r["self_reflection"]["confidence"]) for r in reflections]
    reused = next(
        (list(r.get("lessons_reused") or []) for r in reflections if r.get("lessons_reused")), []
    )
    return LoopAnalysis(
        loop_id=str(loop["loop_id"]),
        task=str(loop.get("task", "")),
        strategy=str(loop.get("strategy", "")),
        status=str(loop.get("status", "")),
        rewards=rewards,
        trials_to_success=first_pass,
        failure_categories=cats,
        lessons_count=sum(
            len(r["self_reflection"].get("lessons_learned", [])) for r in reflections
        ),
        avg_confidence=sum(confidences) / len(confidences) if confidences else None,
        learning_rate=(rewards[-1] - rewards[0]) / len(rewards) if len(rewards) > 1 else 0.0,
        low_quality=sum(bool(r.get("low_quality")) for r in reflections),
        lessons_reused=reused or _trial_lessons(trials),
        duplicates=duplicates,
    )


def _trial_lessons(trials: Sequence[Mapping[str, Any]]) -> list[str]:
    for t in trials:
        if t.get("lessons_reused"):
            return list(t["lessons_reused"])
    return []


def summarize(analyses: Sequence[LoopAnalysis]) -> LoopsSummary:
    """Aggregate loop analyses."""
    n = len(analyses)
    if n == 0:
        return LoopsSummary(0, 0.0, {}, 0.0, None, {}, 0.0, None, 0.0)
    passed = [a for a in analyses if a.trials_to_success is not None]
    max_trials = max((a.trials for a in analyses), default=0)
    success_at = {
        k: sum(1 for a in passed if (a.trials_to_success or 0) <= k) / n
        for k in range(1, max_trials + 1)
    }
    with_lessons = [a for a in analyses if a.lessons_reused]
    cats = Counter(c for a in analyses for c in a.failure_categories)
    return LoopsSummary(
        loops=n,
        success_rate=len(passed) / n,
        success_at=success_at,
        mean_trials=sum(a.trials for a in analyses) / n,
        mean_trials_to_success=(
            sum(a.trials_to_success or 0 for a in passed) / len(passed) if passed else None
        ),
        failure_categories=dict(cats.most_common()),
        lesson_reuse_rate=len(with_lessons) / n,
        success_rate_with_lessons=(
            sum(a.trials_to_success is not None for a in with_lessons) / len(with_lessons)
            if with_lessons
            else None
        ),
        mean_learning_rate=sum(a.learning_rate for a in analyses) / n,
        duplicates=sum(a.duplicates for a in analyses),
    )


def analyze_loops(
    source: MemoryStream | Mapping[str, Any] | str, *, namespace: str | None = None
) -> tuple[list[LoopAnalysis], LoopsSummary, dict[str, LoopsSummary]]:
    """Analyse every loop of an export (a document, its JSON text, or a stream to export).

    A loop the export schema would reject is left out of every number; the summary of all
    loops lists it in :attr:`LoopsSummary.malformed`.

    Returns:
        ``(per loop, all loops, per strategy)``: the per-strategy summaries are the ablation
        (does ``reflexion`` beat ``none`` or ``last_attempt`` on these tasks?).

    Raises:
        InvalidMemoryError: the document is not a Reflexion export.
    """
    from langchain_reflective.stream import MemoryStream

    doc = (
        export_loops(source, namespace=namespace)
        if isinstance(source, MemoryStream)
        else load_export(source)
    )
    analyses: list[LoopAnalysis] = []
    malformed: list[str] = []
    for i, loop in enumerate(doc["loops"]):
        problem = malformed_reason(loop)
        if problem is None:
            analyses.append(analyze_loop(loop))
            continue
        loop_id = loop.get("loop_id") if isinstance(loop, Mapping) else None
        name = f"loop {i}" + (f" ({loop_id!r})" if isinstance(loop_id, str) and loop_id else "")
        malformed.append(f"{name}: {problem}")
    by_strategy: dict[str, list[LoopAnalysis]] = {}
    for a in analyses:
        by_strategy.setdefault(a.strategy, []).append(a)
    overall = dataclasses.replace(summarize(analyses), malformed=tuple(malformed))
    return analyses, overall, {s: summarize(v) for s, v in sorted(by_strategy.items())}
