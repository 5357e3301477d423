"""Analytics of Reflexion loops: reward curves, trials to success, failure categories, success
rates (overall, at trial k, per strategy) and lesson reuse, from an export document."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_reflective.reflexion.export import export_loops, load_export

if TYPE_CHECKING:
    from langchain_reflective.stream import MemoryStream

__all__ = ["LoopAnalysis", "LoopsSummary", "analyze_loop", "analyze_loops"]


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


def analyze_loop(loop: Mapping[str, Any]) -> LoopAnalysis:
    """Analyse one loop of an export document."""
    trials = sorted(loop.get("trials", []), key=lambda t: int(t["iteration"]))
    rewards = [float(t["reward"]) for t in trials]
    first_pass = next((i + 1 for i, t in enumerate(trials) if t.get("passed")), None)
    reflections = sorted(loop.get("reflections", []), key=lambda r: int(r["iteration"]))
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
        lessons_reused=reused or _trial_lessons(loop),
    )


def _trial_lessons(loop: Mapping[str, Any]) -> list[str]:
    for t in loop.get("trials", []):
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
    )


def analyze_loops(
    source: MemoryStream | Mapping[str, Any] | str, *, namespace: str | None = None
) -> tuple[list[LoopAnalysis], LoopsSummary, dict[str, LoopsSummary]]:
    """Analyse every loop of an export (a document, its JSON text, or a stream to export).

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
    analyses = [analyze_loop(loop) for loop in doc["loops"]]
    by_strategy: dict[str, list[LoopAnalysis]] = {}
    for a in analyses:
        by_strategy.setdefault(a.strategy, []).append(a)
    return analyses, summarize(analyses), {s: summarize(v) for s, v in sorted(by_strategy.items())}
