"""Typed state of the reflection graph.

Internal values are plain JSON (strings, numbers, lists, dicts), so any LangGraph checkpointer
stores them without registering types. The output's ``reflections`` are
:class:`~langchain_reflective.records.MemoryRecord` values. A checkpointed graph that keeps them
(the reflection graph's own ``checkpointer=``, or a parent whose state declares
``reflections: list[MemoryRecord]``) reads them back: with ``LANGGRAPH_STRICT_MSGPACK=true``
LangGraph allows the type because the state schema names it; by default it logs once that it
read an unregistered type. To silence that, allow the type in the serializer
(``JsonPlusSerializer(allowed_msgpack_modules=[("langchain_reflective.records",
"MemoryRecord")])``) or keep only ``reflection_ids``.

:class:`ReflectionInput` and :class:`ReflectionOutput` are the graph's public schemas: a parent
``StateGraph`` that shares these keys can add the compiled graph as a node.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, TypedDict

from langchain_reflective.records import MemoryRecord

__all__ = [
    "InsightBranch",
    "InsightDict",
    "QuestionInsights",
    "ReflectionGraphState",
    "ReflectionInput",
    "ReflectionOutput",
    "SkipReason",
]

SkipReason = Literal["below_threshold", "no_memories", "no_questions", "no_insights", "superseded"]
"""Why a reflection stored nothing: the gate said no (``below_threshold``, ``no_memories``:
the counter is untouched), or it ran and found nothing to store (``no_questions``,
``no_insights``: the counter is reset when ``ReflectionConfig.reset_on_empty``), or another
reflection of the namespace reset the counter after this run's gate read it (``superseded``:
that one's insights are stored, this run stores nothing and leaves the counter alone; forced
runs too)."""


class ReflectionInput(TypedDict, total=False):
    """Input of the reflection graph (every key optional)."""

    force: bool
    """Reflect even when the importance sum is below the threshold (for one run: the gate
    sets it back to ``False``, so a checkpointed thread's next run is not forced)."""
    namespace: str | None
    """Whose memories (default: the stream's namespace)."""
    now: datetime | None
    """The clock for retrieval and for the stored reflections (default: the current time)."""


class ReflectionOutput(TypedDict, total=False):
    """Output of the reflection graph."""

    force: bool
    """``False`` after a forced run (the gate resets it): a parent graph sharing the input
    keys, checkpointed, sees the reset, so its next run is not forced too."""

    reflections: list[MemoryRecord]
    """The stored ``reflection`` records (empty when skipped)."""
    questions: list[str]
    """The questions asked (empty when the gate said no)."""
    skipped: SkipReason | None
    """Why nothing was stored, or ``None`` when reflections were stored (``"superseded"``:
    another run reflected on the namespace meanwhile, see :data:`SkipReason`)."""
    reflection_ids: list[str]
    """Ids of the stored reflections (plain strings, handy in checkpointed parent state)."""
    importance_sum: float
    """The importance summed since the last reflection, as seen by the gate."""


class InsightDict(TypedDict):
    """An insight in the graph state (plain JSON, so any checkpointer can store it)."""

    text: str
    """The insight."""
    evidence: list[str]
    """Ids of the cited records."""
    citations: list[int]
    """The statement numbers cited (local to the prompt that produced it)."""


class QuestionInsights(TypedDict):
    """What one question's branch found."""

    index: int
    """The question's position (0-based)."""
    question: str
    """The question."""
    insights: list[InsightDict]
    """Its insights, with evidence resolved to record ids."""
    evidence_ids: list[str]
    """Ids of the memories retrieved as evidence (cited or not)."""


class InsightBranch(TypedDict):
    """Payload sent to one question's branch (LangGraph ``Send``)."""

    index: int
    question: str
    namespace: str
    now: datetime


def merge_branches(
    left: list[QuestionInsights] | None, right: list[QuestionInsights] | None
) -> list[QuestionInsights]:
    """Reducer of ``branches``: parallel branches append; the gate resets it by writing ``None``."""
    if right is None:
        return []
    return [*(left or []), *right]


class ReflectionGraphState(ReflectionInput, ReflectionOutput, total=False):
    """Internal state: the public keys plus the intermediate results."""

    adds_since: int
    """Memories added since the last reflection, as seen by the gate (with ``importance_sum``
    what the store step takes off the counter: memories added meanwhile keep counting)."""
    reflection_generation: int | None
    """The counter's generation as the gate read it (``ReflectionState.generation``): the store
    step resets the counter only if it is unchanged, so of two runs at once only the first
    stores (``None``, e.g. in state checkpointed by an older version: unconditional)."""
    run_now: datetime
    """This run's clock: the input ``now``, else the time the gate ran (kept apart from
    ``now``, which a checkpointed thread keeps: its next run would take this one's clock as
    given and store its reflections at this run's time)."""
    recent: list[str]
    """Texts of the recent memories the questions are asked about."""
    branches: Annotated[list[QuestionInsights], merge_branches]
    """One entry per question branch (branches run in parallel; order restored by index)."""
    condensed: list[InsightDict]
    """The condensed insights, evidence resolved to record ids."""
