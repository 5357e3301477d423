"""Settings of a reflection."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from langchain_reflective.completion import PromptStyle, check_prompt_style
from langchain_reflective.importance import RetryConfig

__all__ = ["ReflectionConfig"]


@dataclass(frozen=True, slots=True)
class ReflectionConfig:
    """Settings of :func:`create_reflection_graph` (defaults follow the paper and seed 002)."""

    threshold: float = 15.0
    """Reflect when the importance summed over memories added since the last reflection reaches
    this, in [0, 1] importance units (15.0 = the paper's 150 on the 1-10 scale). Reflections'
    own importance does not count. ``force=True`` skips the check.

    This is the graph's own gate, for runs of :func:`create_reflection_graph` that are not
    forced (alone or as a node of your graph). A
    :class:`~langchain_reflective.memory.ReflectiveMemory` does not use it: it decides when to
    reflect on its ``MemoryConfig.reflect_threshold`` (or ``reflect_every``) and runs the graph
    forced, so there ``MemoryConfig.reflect_threshold`` rules (a different threshold set here
    warns)."""
    n_questions: int = 3
    """High-level questions asked about the recent memories (one parallel branch each)."""
    min_relevance: float = 0.5
    """Evidence must have at least this cosine similarity to its question (seed 002: > 0.5)."""
    evidence_k: int = 10
    """At most this many evidence memories per question."""
    max_insights: int = 5
    """At most this many insights survive the condense step (and are stored)."""
    keep_insights_without_evidence: bool = False
    """Keep insights that cite no valid statement (by default they are dropped)."""
    recent_window: int = 100
    """The questions are asked about this many most recent memories (any kind)."""
    evidence_kinds: tuple[str, ...] | None = None
    """Kinds that may serve as evidence (``None``: all, so reflections can build on reflections
    and grow deeper)."""
    touch_evidence: bool = False
    """Whether retrieving evidence updates its ``last_accessed_at`` (off: reflecting does not
    change what counts as recent)."""
    reset_on_empty: bool = True
    """When a reflection runs but yields nothing to store (no questions, no evidence, nothing
    parseable), still reset the counter, so the next add does not start the same costly attempt
    again. Reflections that fail with an error never reset it."""
    strict: bool = False
    """Raise :class:`~langchain_reflective.errors.ReflectionError` on an unusable model answer
    instead of taking the documented fallback."""
    structured_output: bool | None = None
    """``None``: use ``with_structured_output(method="json_schema")`` when the model supports
    it, else plain text and the tolerant parsers; ``True``: require it; ``False``: text only."""
    max_chars: int = 1000
    """Memory texts longer than this are cut in prompts (stored texts are untouched)."""
    retry: RetryConfig = field(default_factory=RetryConfig)
    """Retries of transient model errors (timeouts, connection errors, rate limits)."""
    prompt_style: PromptStyle = "auto"
    """``"chat"``: seed 002's prompts (or the ``prompts`` given); ``"completion"``: few-shot
    documents answered under a per-call JSON schema (questions start with What/How/Why and end
    with ``?``, citations can only name statements that exist), for base models; ``"auto"``:
    completion for the embedded local model unless custom ``prompts`` are given, chat otherwise
    (:mod:`langchain_reflective.completion`)."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.threshold) or self.threshold < 0:
            raise ValueError(f"threshold must be a finite number >= 0, got {self.threshold!r}")
        for name in ("n_questions", "evidence_k", "max_insights", "recent_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not math.isfinite(self.min_relevance) or not -1.0 <= self.min_relevance <= 1.0:
            raise ValueError(f"min_relevance must be in [-1, 1], got {self.min_relevance!r}")
        check_prompt_style(self.prompt_style)
        if self.max_chars < 10:
            raise ValueError(f"max_chars must be >= 10, got {self.max_chars!r}")
        if self.evidence_kinds is not None:
            object.__setattr__(self, "evidence_kinds", tuple(self.evidence_kinds))
