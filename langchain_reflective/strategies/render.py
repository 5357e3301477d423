"""How a strategy's context reaches the model: fenced as data, after the memory preamble."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage

from langchain_reflective._llm import neutralise
from langchain_reflective.memory import MEMORY_FENCE_CLOSE, MEMORY_FENCE_OPEN, MEMORY_PREAMBLE

__all__ = ["format_context"]


def _line(message: BaseMessage, user_prefix: str, assistant_prefix: str) -> str | None:
    text = neutralise(message.text)
    if not text:
        return None
    if isinstance(message, HumanMessage):
        return f"- {user_prefix}{text}"
    if isinstance(message, AIMessage):
        return f"- {assistant_prefix}{text}"
    if isinstance(message, ChatMessage) and message.role not in ("", "note"):
        return f"- {neutralise(message.role)}: {text}"
    return f"- {text}"


def format_context(
    messages: Sequence[BaseMessage],
    *,
    user_prefix: str = "User: ",
    assistant_prefix: str = "Assistant: ",
) -> str:
    """The text added to the system prompt for a strategy's context (``""`` when empty).

    Non-system messages are memory data: each becomes one line of a ``<memory>`` block
    (newlines collapsed, tag-like text defused, so a remembered ``</memory>`` cannot close the
    block), labelled ``user_prefix`` for user messages and ``assistant_prefix`` for the
    agent's, after :data:`~langchain_reflective.memory.MEMORY_PREAMBLE`, which tells the model
    the block is data, not instructions. A ``SystemMessage`` is taken as it is: the strategy
    has fenced its memory text itself (``ReflectiveMemory``'s working context does).

    Args:
        messages: what :meth:`BaseMemoryStrategy.context` returned.
        user_prefix: label of remembered user messages.
        assistant_prefix: label of remembered agent messages.
    """
    parts: list[str] = []
    lines: list[str] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            if message.text.strip():
                parts.append(message.text.strip())
        elif (line := _line(message, user_prefix, assistant_prefix)) is not None:
            lines.append(line)
    if lines:
        parts.append(
            "\n\n".join(
                [MEMORY_PREAMBLE, "\n".join([MEMORY_FENCE_OPEN, *lines, MEMORY_FENCE_CLOSE])]
            )
        )
    return "\n\n".join(parts)
