"""Typed state of the thinking graph: its input, its output and the per-round values.

Values are plain JSON (plus the conversation's LangChain messages and an optional ``now``), so
any LangGraph checkpointer stores them. :class:`ThinkingInput` and :class:`ThinkingOutput` are
the public schemas: a parent ``StateGraph`` sharing these keys can add the compiled graph as a
node.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, NotRequired, TypedDict

from langchain_core.messages import AnyMessage

__all__ = [
    "FallbackDict",
    "FallbackKind",
    "SnapshotDict",
    "StopReason",
    "SummaryDict",
    "ThinkingGraphState",
    "ThinkingInput",
    "ThinkingOutput",
    "ThoughtDict",
]

StopReason = Literal["model", "max_rounds", "budget", "model_error"]
"""Why thinking stopped: the model said it is ready, the rounds or the token budget ran out,
or a thinking call failed."""

FallbackKind = Literal[
    "summary_failed",
    "summary_malformed",
    "recall_failed",
    "budget_exhausted",
    "rounds_exhausted",
    "thinking_failed",
    "malformed_decision",
]
"""What went wrong and was handled: a failed or malformed summary (an extractive one is stored),
a failed recall (thinking goes on without it), an exhausted token or round budget (the action
phase is forced), a failed thinking call (likewise) or an unreadable ``continue_thinking`` call
(taken as "ready to act")."""


class FallbackDict(TypedDict):
    """One fallback taken (each is also logged)."""

    kind: FallbackKind
    """Which fallback."""
    detail: str
    """What happened."""
    round: int
    """The round it happened in (0: after the rounds)."""


class ThoughtDict(TypedDict):
    """One thinking round."""

    round: int
    """1-based round number."""
    thought: str
    """What the model wrote this round."""
    continue_thinking: bool
    """Its decision (``False`` also when it made none)."""
    reason: str
    """The reason it gave."""
    next_focus: str | None
    """What it wanted to focus on next."""
    recalled_ids: list[str]
    """Ids of the contexts it recalled this round."""
    recall_missing: NotRequired[list[str]]
    """What it asked to recall this round that is not stored (``"turn 7"``, ``"id x"``; at most
    ten, each cut to 100 characters, then ``"N more"``), shown in its next rounds."""
    tokens: int
    """Tokens of the round's call (usage metadata, else estimated)."""


class SnapshotDict(TypedDict):
    """A recalled context."""

    id: str
    turn: int
    context: str
    token_count: int
    tool_calls: list[str]


class SummaryDict(TypedDict):
    """A turn summary."""

    id: str
    context_id: str
    turn: int
    summary: str
    insights: list[str]
    token_count: int
    fallback: bool


class ThinkingInput(TypedDict, total=False):
    """Input of the thinking graph (``context`` is required).

    With a checkpointer, ``context``, ``messages``, ``tool_calls``, ``record`` and ``now`` apply
    to their run only: each run ends by setting them back to their defaults in the thread's
    state (a run that raises leaves them until the next run gives its own). ``namespace`` stays
    on the thread (its owner) until a run gives another, and the ``turn`` left is the previous
    run's output, not taken as given.
    """

    context: str
    """The current context of the turn (workspace state, the user's request, ...). When the
    turn is recorded it becomes the snapshot, so it may hold at most ``MAX_TEXT_CHARS``
    characters (longer raises ``InvalidMemoryError``); with ``record=False`` any length is
    thought about (each prompt line is cut, and the token budget applies)."""
    messages: list[AnyMessage]
    """The conversation so far (shown to the model as data)."""
    tool_calls: list[str]
    """Names of tools used in this turn (stored with the snapshot)."""
    namespace: str | None
    """Whose memory (default: the stream's namespace)."""
    turn: int | None
    """The turn number (default: the namespace's next turn, or the next free one if another
    writer stores that first). A given number that is already stored raises
    ``InvalidMemoryError``. With a checkpointer, the previous run's number left in the thread's
    state counts as not given. A parent graph whose own state keeps a ``turn`` key passes it
    as given: set it to ``None`` for each new turn."""
    record: bool
    """Summarise and store the turn after thinking (default ``True``; the agent middleware
    thinks first and records once the turn is over)."""
    now: datetime | None
    """Creation time of the stored records (default: the current time)."""


class ThinkingOutput(TypedDict, total=False):
    """Output of the thinking graph."""

    turn: int | None
    """The turn number."""
    context_id: str | None
    """Id of the stored snapshot (``None`` when not recorded)."""
    thoughts: list[ThoughtDict]
    """The rounds, in order."""
    recalled: list[SnapshotDict]
    """Every context recalled during the turn, each once."""
    summary: SummaryDict | None
    """This turn's stored summary (``None`` when not recorded)."""
    summaries: list[SummaryDict]
    """The accumulated summaries for the action prompt (this turn's included when recorded),
    the newest that fit the summary budget, oldest first; one longer than a quarter of the
    budget is cut here (``summary`` ends with ``SUMMARY_CUT_MARKER``), never in storage."""
    accumulated_summaries: str
    """The accumulated summaries as text, one ``[Turn N] summary Insights: ...`` line each."""
    action_context: str
    """Summaries, thoughts and recalled contexts rendered and fenced for the action prompt."""
    stop_reason: StopReason
    """Why thinking stopped."""
    fallbacks: list[FallbackDict]
    """Every fallback taken."""
    fallback_counts: dict[str, int]
    """How many fallbacks of each kind."""
    thinking_tokens: int
    """Tokens spent by the thinking rounds (the budget's measure)."""
    summary_tokens: int
    """Tokens spent by the summary call."""
    llm_calls: int
    """Model calls made (rounds + summary)."""


class ThinkingGraphState(ThinkingInput, ThinkingOutput, total=False):
    """Internal state: the public keys plus the loop's bookkeeping."""

    past_summaries: list[SummaryDict]
    """Summaries of earlier turns injected into the thinking prompt."""
    round: int
    """Rounds done."""
    wants_more: bool
    """The last round asked for another."""
    turn_assigned: bool
    """The turn number was chosen here (the namespace's next), not given: if another writer
    stores that number first, the turn takes the next free one."""
    turn_taken: int | None
    """The turn number this run took: with a checkpointer, the next run on the thread finds
    it still in ``turn`` and knows it was not given for that run."""
