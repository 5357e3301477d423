"""Settings of the Reflexion loop and its typed graph state."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Required, TypedDict

from langchain_reflective.importance import RetryConfig
from langchain_reflective.records import MAX_TEXT_CHARS

__all__ = [
    "STRATEGIES",
    "ReflexionConfig",
    "ReflexionInput",
    "ReflexionOutput",
    "ReflexionState",
    "Strategy",
]

Strategy = Literal["none", "last_attempt", "reflexion", "last_attempt_reflexion"]
"""What the actor sees before a retry (the Reflexion authors' ablation): ``none`` (the task
only), ``last_attempt`` (its previous attempt and the checks' feedback, no self-reflection),
``reflexion`` (the window of self-reflections) or ``last_attempt_reflexion`` (both)."""
STRATEGIES: tuple[str, ...] = ("none", "last_attempt", "reflexion", "last_attempt_reflexion")


@dataclass(frozen=True, slots=True)
class ReflexionConfig:
    """Settings of :func:`~langchain_reflective.reflexion.create_reflexion_graph` beyond Ω,
    the trial limit and the strategy."""

    max_reflection_tokens: int | None = 2000
    """Token budget of the reflections shown to the actor: the newest of the Ω window that fit
    (approximate count, about 4 characters per token), in chronological order. ``None``: no
    budget."""
    min_reflection_chars: int = 100
    """A reflection shorter than this fails the quality check (seed 003: 100 characters)."""
    quality_retry: bool = True
    """Ask once more when a reflection fails a quality check; the second answer (or the better
    of the two) is stored, flagged ``low_quality`` if it still fails."""
    prior_lessons: int = 0
    """Before a new loop's first attempt, show the actor the lessons of this many similar past
    reflections of other loops (:func:`~langchain_reflective.reflexion.search_reflections` on
    the task). 0: off."""
    prior_min_confidence: float | None = 0.5
    """Only past reflections at least this confident (and not low quality) become lessons."""
    max_chars: int = 4000
    """Longest piece of attempt, task or feedback text put in a prompt (longer ones are cut);
    also the longest reflection text, causal reasoning and root cause stored with a trial, and
    the most characters of its actionable insights and of its lessons learned (each list).
    From 10 to ``MAX_TEXT_CHARS`` (200,000, the longest memory text): a prompt holds a bounded
    number of such pieces (task, attempt, feedback, Ω reflections, lessons), so this bounds
    the prompt too."""
    max_stored_attempt_chars: int = 4000
    """Longest attempt output stored with a trial (for the ``last_attempt`` strategies); from
    10 to ``MAX_TEXT_CHARS``."""
    reflection_importance: float = 0.7
    """Importance given to stored reflections (no importance model call)."""
    trial_importance: float = 0.3
    """Importance given to stored trials without a reflection."""
    inline_reflection: bool = False
    """Write the reflection on a failed trial in the same model call as the next attempt (one
    call per failed trial, like LangGraph's Reflexion tutorial, instead of two). Needs a chat
    model actor and a reflecting strategy. The reflection still follows the seed's structure
    and is stored with its trial, but gets no quality retry (it is flagged instead), and a
    failed trial is stored only with the next attempt: a crash in between repeats that trial.
    The last allowed trial and critical errors still get a separate reflection call."""
    structured_output: bool | None = None
    """``None``: ask the reflection model for structured output when it supports it, else
    parse JSON from its text; ``True``: require it; ``False``: text only."""
    retry: RetryConfig = field(default_factory=RetryConfig)
    """Retries of transient errors of the reflection model."""

    def __post_init__(self) -> None:
        if self.max_reflection_tokens is not None and self.max_reflection_tokens < 1:
            raise ValueError("max_reflection_tokens must be positive or None")
        for name in ("min_reflection_chars", "prior_lessons"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("max_chars", "max_stored_attempt_chars"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 10 <= value <= MAX_TEXT_CHARS
            ):
                raise ValueError(
                    f"ReflexionConfig.{name} must be an integer from 10 to {MAX_TEXT_CHARS:,} "
                    f"(the longest memory text), got {value!r}; longer pieces are cut to it"
                )
        for name in ("reflection_importance", "trial_importance"):
            value = getattr(self, name)
            if not math.isfinite(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")


class ReflexionInput(TypedDict, total=False):
    """Input of the Reflexion graph."""

    task: Required[str]
    """The task for the actor."""
    loop_id: str
    """Resume (or name) this loop; a new id when omitted. A loop whose stored trials end in
    success, the trial limit or an error is returned as stored, without new calls. A stored
    loop of another task is not resumed: a new loop (a new id) starts, so the previous run's
    id left in a checkpointed thread's state never answers a new task."""
    namespace: str | None
    """Whose episodic memory (default: the stream's namespace)."""


class ReflexionOutput(TypedDict, total=False):
    """Output of the Reflexion graph."""

    loop_id: str
    """The loop's id (pass it back to resume)."""
    status: Literal["passed", "failed", "error", "running"]
    """``passed``, ``failed`` (trial limit reached) or ``error`` (critical error)."""
    passed: bool
    """Whether the last attempt passed."""
    output: str
    """The last attempt's output (text)."""
    trials: int
    """Trials run by this loop so far (across restarts)."""
    rewards: list[float]
    """The reward of each trial, in order (the reward curve)."""
    evaluation: dict[str, Any] | None
    """The last evaluator output (``EvaluatorOutput`` as a dict)."""
    reflections: list[dict[str, Any]]
    """Every stored reflection of the loop (episodes: metadata plus id, kind, created_at)."""
    window: list[int]
    """Iterations of the reflections in the actor's context now: the Ω window pruned to
    ``max_reflection_tokens``, as the next attempt (or a resumed loop) sees it. Each stored
    reflection's ``memory_metadata.reflections_in_context`` is the same, after it was stored."""
    error: str | None
    """The critical error that stopped the loop, if any."""
    resumed: bool
    """The loop continued from trials stored by an earlier run."""


class ReflexionState(ReflexionInput, ReflexionOutput, total=False):
    """Internal state: the public keys plus the current trial."""

    iteration: int
    """The current trial (0-based)."""
    attempt: str
    """The current attempt's output."""
    actions: list[str]
    """The current attempt's actions."""
    episodes: list[dict[str, Any]]
    """Every stored trial of the loop."""
    lessons: list[str]
    """Lessons of past loops for the first attempt."""
    lessons_reused: list[str]
    """Ids of the past reflections those lessons came from."""
    reflection: dict[str, Any] | None
    """The reflection written for the current trial (not yet stored)."""
    done: bool
    """Nothing left to run (the loop was already finished when loaded)."""
    pending: dict[str, Any] | None
    """A failed trial whose reflection the next (inline) attempt writes."""
