"""The two thinking tools, ``continue_thinking`` and ``recall_context``: schemas and tools.

The thinking graph binds these tools to its model and reads the calls itself (a recall runs in
the namespace of the graph's run). :func:`create_thinking_tools` also gives them as ordinary
LangChain tools, e.g. for an agent that should recall earlier contexts on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field, field_validator

from langchain_reflective._llm import neutralise

if TYPE_CHECKING:
    from langchain_reflective.thinking.context import ContextMemory
    from langchain_reflective.thinking.turns import RecallResult

__all__ = [
    "CONTINUE_THINKING",
    "RECALL_CONTEXT",
    "ContinueThinkingArgs",
    "RecallContextArgs",
    "create_thinking_tools",
    "format_recall",
]

CONTINUE_THINKING = "continue_thinking"
"""Name of the tool that controls the thinking flow."""
RECALL_CONTEXT = "recall_context"
"""Name of the tool that recalls earlier contexts."""


class ContinueThinkingArgs(BaseModel):
    """Decide whether to think another round or to proceed to the action."""

    continue_thinking: bool = Field(
        description="true: think another round; false: ready to act now."
    )
    reason: str = Field(default="", description="Why you decided so.")
    next_focus: str | None = Field(
        default=None, description="What the next round should focus on (when continuing)."
    )


class RecallContextArgs(BaseModel):
    """Recall the full context of earlier turns (by number, id or keywords)."""

    turn_numbers: list[int] = Field(default_factory=list, description="Turn numbers to recall.")
    context_ids: list[str] = Field(default_factory=list, description="Context ids to recall.")
    keywords: list[str] = Field(
        default_factory=list, description="Keywords to search earlier contexts and summaries for."
    )

    @field_validator("turn_numbers", "context_ids", "keywords", mode="before")
    @classmethod
    def _one_as_a_list(cls, value: Any) -> Any:
        """One item given without its list (``keywords="parseData"``) is that item; ``None`` is
        none."""
        if value is None:
            return []
        return [value] if isinstance(value, (str, int)) else value


MAX_SHOWN_REQUEST_CHARS = 100
"""A requested turn or id that is not stored is echoed cut to this many characters (a stored
id is a UUID; anything longer is the model's text, not an id)."""


_MAX_SHOWN_MISSING = 10
"""At most this many requested turns or ids that are not stored are echoed, then how many more
(a model may ask for thousands)."""


def _cut_request(missing: str) -> str:
    """A requested turn or id that is not stored, cut to :data:`MAX_SHOWN_REQUEST_CHARS`."""
    if len(missing) > MAX_SHOWN_REQUEST_CHARS:
        return missing[: MAX_SHOWN_REQUEST_CHARS - 3] + "..."
    return missing


def _shown_missing(missing: list[str]) -> list[str]:
    """The requests that are not stored as the recall tool and a thought show them: at most
    :data:`_MAX_SHOWN_MISSING`, each cut, then ``"N more"``. Not neutralised: the tool
    neutralises each item (its output), the thinking step its prompt when rendered."""
    shown = [_cut_request(m) for m in missing[:_MAX_SHOWN_MISSING]]
    if len(missing) > _MAX_SHOWN_MISSING:
        shown.append(f"{len(missing) - _MAX_SHOWN_MISSING} more")
    return shown


def format_recall(result: RecallResult) -> str:
    """A recall result as tool output, fenced as data: one line per recalled context, then the
    requested turns and ids that are not stored (the model's own text: neutralised too)."""
    lines = ["<recalled>"]
    lines += [f"[Turn {s.turn} | {s.id}] {neutralise(s.context)}" for s in result.snapshots]
    if not result.snapshots:
        lines.append("(nothing found)")
    if result.missing:
        shown = _shown_missing(result.missing)
        lines.append("Not stored: " + ", ".join(neutralise(m) for m in shown))
    lines.append("</recalled>")
    return "\n".join(lines)


def create_thinking_tools(
    memory: ContextMemory,
    *,
    namespace: str | None = None,
    max_recall_contexts: int = 3,
) -> list[StructuredTool]:
    """``continue_thinking`` and ``recall_context`` as LangChain tools (sync and async).

    Args:
        memory: the context memory to recall from.
        namespace: whose contexts (default: the stream's namespace).
        max_recall_contexts: at most this many contexts per recall.

    Returns:
        ``[continue_thinking, recall_context]``.
    """

    def continue_thinking(
        continue_thinking: bool, reason: str = "", next_focus: str | None = None
    ) -> str:
        decision = "Thinking continues" if continue_thinking else "Proceeding to the action"
        return f"{decision}." + (f" Next focus: {next_focus}" if next_focus else "")

    def _kwargs(
        turn_numbers: list[int] | None, context_ids: list[str] | None, keywords: list[str] | None
    ) -> dict[str, Any]:
        return {
            "turn_numbers": turn_numbers or [],
            "context_ids": context_ids or [],
            "keywords": keywords or [],
            "limit": max_recall_contexts,
            "namespace": namespace,
        }

    def recall_context(
        turn_numbers: list[int] | None = None,
        context_ids: list[str] | None = None,
        keywords: list[str] | None = None,
    ) -> str:
        return format_recall(memory.recall(**_kwargs(turn_numbers, context_ids, keywords)))

    async def arecall_context(
        turn_numbers: list[int] | None = None,
        context_ids: list[str] | None = None,
        keywords: list[str] | None = None,
    ) -> str:
        return format_recall(await memory.arecall(**_kwargs(turn_numbers, context_ids, keywords)))

    return [
        StructuredTool.from_function(
            continue_thinking,
            name=CONTINUE_THINKING,
            description=ContinueThinkingArgs.__doc__ or "",
            args_schema=ContinueThinkingArgs,
        ),
        StructuredTool.from_function(
            recall_context,
            coroutine=arecall_context,
            name=RECALL_CONTEXT,
            description=RecallContextArgs.__doc__ or "",
            args_schema=RecallContextArgs,
        ),
    ]
