"""The values a thinking turn is stored as: its snapshot and summary records and their kinds.

:class:`~langchain_reflective.thinking.context.ContextMemory` writes and reads them on a memory
stream; the graph and the tools pass them around.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.records import MemoryRecord

__all__ = [
    "SNAPSHOT_KIND",
    "SUMMARY_KIND",
    "ContextSnapshot",
    "ContextSummary",
    "RecallResult",
    "TurnTakenError",
    "count_text_tokens",
    "summary_text",
]


SNAPSHOT_KIND = "context_snapshot"
"""Kind of the records holding a turn's full context."""
SUMMARY_KIND = "context_summary"
"""Kind of the records holding a turn's summary and insights."""
_KINDS = frozenset({SNAPSHOT_KIND, SUMMARY_KIND})


class TurnTakenError(InvalidMemoryError):
    """The turn number is already stored in the namespace (by an earlier call or another writer
    recording at the same moment); nothing of the refused turn was written."""


def count_text_tokens(text: str) -> int:
    """Approximate tokens of ``text`` (LangChain's ``count_tokens_approximately``)."""
    return int(count_tokens_approximately([HumanMessage(text)])) if text else 0


@dataclass(frozen=True, slots=True)
class ContextSnapshot:
    """One turn's complete context."""

    id: str
    """The context id (``ctx_<turn>_<namespace hash>``)."""
    turn: int
    """The turn number (1-based, per namespace)."""
    context: str
    """The full context of the turn."""
    token_count: int
    """Approximate tokens of ``context``."""
    tool_calls: tuple[str, ...] = ()
    """Names of the tools used in the turn."""
    namespace: str = "default"
    """Whose context it is."""
    created_at: datetime | None = None
    """When it was stored."""

    @classmethod
    def from_record(cls, record: MemoryRecord) -> ContextSnapshot:
        """The snapshot stored in ``record`` (a :data:`SNAPSHOT_KIND` record)."""
        meta = record.metadata
        return cls(
            id=record.id,
            turn=int(meta.get("turn", 0)),
            context=record.text,
            token_count=int(meta.get("token_count", count_text_tokens(record.text))),
            tool_calls=tuple(str(t) for t in meta.get("tool_calls") or ()),
            namespace=record.namespace,
            created_at=record.created_at,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (for graph state)."""
        return {
            "id": self.id,
            "turn": self.turn,
            "context": self.context,
            "token_count": self.token_count,
            "tool_calls": list(self.tool_calls),
        }


@dataclass(frozen=True, slots=True)
class ContextSummary:
    """One turn's summary: the compressed form injected into later prompts."""

    id: str
    """The summary's record id (``sum_<turn>_<namespace hash>``)."""
    context_id: str
    """Id of the snapshot it summarises (also its evidence)."""
    turn: int
    """The turn number."""
    summary: str
    """The summary text."""
    insights: tuple[str, ...] = ()
    """Key insights of the turn."""
    token_count: int = 0
    """Approximate tokens of the summary and insights."""
    fallback: bool = False
    """``True`` when the model's summary failed and this is the extractive fallback."""
    namespace: str = "default"
    """Whose summary it is."""
    created_at: datetime | None = None
    """When it was stored."""

    @classmethod
    def from_record(cls, record: MemoryRecord) -> ContextSummary:
        """The summary stored in ``record`` (a :data:`SUMMARY_KIND` record)."""
        meta = record.metadata
        return cls(
            id=record.id,
            # the evidence first: an import into another namespace gives the snapshot a new id
            # and rewrites the evidence, not the metadata
            context_id=str((record.evidence or (meta.get("context_id") or "",))[0]),
            turn=int(meta.get("turn", 0)),
            summary=str(meta.get("summary", record.text)),
            insights=tuple(str(i) for i in meta.get("insights") or ()),
            token_count=int(meta.get("token_count", 0)),
            fallback=bool(meta.get("fallback", False)),
            namespace=record.namespace,
            created_at=record.created_at,
        )

    @property
    def text(self) -> str:
        """The stored text: the summary, then its insights."""
        return summary_text(self.summary, self.insights)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (for graph state)."""
        return {
            "id": self.id,
            "context_id": self.context_id,
            "turn": self.turn,
            "summary": self.summary,
            "insights": list(self.insights),
            "token_count": self.token_count,
            "fallback": self.fallback,
        }


def summary_text(summary: str, insights: Sequence[str]) -> str:
    """A summary and its insights as one text (what is stored, searched and injected)."""
    if not insights:
        return summary
    return f"{summary}\nInsights: {'; '.join(insights)}"


@dataclass(frozen=True, slots=True)
class RecallResult:
    """What one recall found."""

    snapshots: list[ContextSnapshot] = field(default_factory=list)
    """The recalled contexts, in request order (turns, then ids, then keyword matches)."""
    missing: list[str] = field(default_factory=list)
    """Requested turns or ids that are not stored in the namespace."""
