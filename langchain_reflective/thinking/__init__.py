"""Reflective thinking (seed 004): multi-round thinking with recall of earlier turns' contexts.

* :class:`ContextMemory` (``context.py``): per-turn snapshot and summary records on a memory
  stream; export/import; its lookups by turn, id and hybrid search (``lookups.py``).
* :func:`create_thinking_graph` (``graph.py``): the thinking phase as a LangGraph graph.
* ``ThinkingMiddleware`` (``middleware.py``, extra ``agents``): the phase inside
  ``create_agent``; import it from ``langchain_reflective.thinking.middleware``.
"""

from langchain_reflective.thinking.config import ThinkingConfig
from langchain_reflective.thinking.context import ContextMemory
from langchain_reflective.thinking.fallbacks import extractive_summary
from langchain_reflective.thinking.graph import create_thinking_graph
from langchain_reflective.thinking.prompts import (
    ThinkingPrompts,
    format_summaries,
    render_for_action,
)
from langchain_reflective.thinking.state import (
    FallbackDict,
    StopReason,
    ThinkingInput,
    ThinkingOutput,
    ThoughtDict,
)
from langchain_reflective.thinking.tools import (
    ContinueThinkingArgs,
    RecallContextArgs,
    create_thinking_tools,
)
from langchain_reflective.thinking.turns import (
    SNAPSHOT_KIND,
    SUMMARY_KIND,
    ContextSnapshot,
    ContextSummary,
    RecallResult,
    TurnTakenError,
)

__all__ = [
    "SNAPSHOT_KIND",
    "SUMMARY_KIND",
    "ContextMemory",
    "ContextSnapshot",
    "ContextSummary",
    "ContinueThinkingArgs",
    "FallbackDict",
    "RecallContextArgs",
    "RecallResult",
    "StopReason",
    "ThinkingConfig",
    "ThinkingInput",
    "ThinkingOutput",
    "ThinkingPrompts",
    "ThoughtDict",
    "TurnTakenError",
    "create_thinking_graph",
    "create_thinking_tools",
    "extractive_summary",
    "format_summaries",
    "render_for_action",
]
