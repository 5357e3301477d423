"""Settings of reflective thinking (rounds, budgets, recall, retries) in one frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field

from langchain_reflective._llm import RetryConfig

__all__ = ["ThinkingConfig"]


@dataclass(frozen=True, slots=True)
class ThinkingConfig:
    """How a thinking turn runs. Seed 004's advice: simple tasks 2-3 rounds and 5,000 tokens,
    complex ones 5-7 rounds and 15,000, research 7-10 rounds and 20,000."""

    max_rounds: int = 5
    """Most thinking rounds per turn (a model that always continues stops here)."""
    thinking_token_budget: int = 10_000
    """Tokens the rounds may spend (prompt + answer; usage metadata, else estimated). A round
    whose prompt would not fit is not started, and thinking stops once the budget is spent."""
    enable_recall: bool = True
    """Offer the ``recall_context`` tool."""
    max_recall_contexts: int = 3
    """Most contexts one recall returns."""
    summary_token_budget: int | None = 2_000
    """Tokens the accumulated summaries may take in a prompt (``None``: no limit); older
    summaries leave the prompt, never the storage. One summary takes at most a quarter of it
    (a longer one is cut with a marker in the prompt, never in storage), so the newest four
    always fit."""
    max_summaries: int = 200
    """At most this many newest summaries are read to fill the summary budget."""
    retry: RetryConfig = field(default_factory=RetryConfig)
    """Retries of transient model errors (a call that still fails takes its fallback)."""
    structured_output: bool | None = None
    """Summaries through ``with_structured_output`` (``None``: when the model supports it)."""

    def __post_init__(self) -> None:
        for name in ("max_rounds", "thinking_token_budget", "max_recall_contexts", "max_summaries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ThinkingConfig.{name} must be a positive integer, got {value!r}")
        budget = self.summary_token_budget
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, int) or budget < 0
        ):
            raise ValueError(
                f"ThinkingConfig.summary_token_budget must be >= 0 or None, got {budget!r}"
            )
        if self.max_rounds > 20:
            raise ValueError(
                "ThinkingConfig.max_rounds is at most 20 (one graph step per round), "
                f"got {self.max_rounds}"
            )
