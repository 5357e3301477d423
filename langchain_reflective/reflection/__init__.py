"""Reflection (Generative Agents): questions, cited insights, condensed reflections.

:func:`create_reflection_graph` builds a LangGraph graph over a
:class:`~langchain_reflective.stream.MemoryStream`; the prompts, parsers and typed state are
public so they can be reused or overridden.
"""

from langchain_reflective.reflection.config import ReflectionConfig
from langchain_reflective.reflection.graph import (
    CitedInsight,
    InsightList,
    QuestionList,
    create_reflection_graph,
)
from langchain_reflective.reflection.parsing import (
    Insight,
    format_insights,
    map_citations,
    parse_insights,
    parse_questions,
)
from langchain_reflective.reflection.prompts import ReflectionPrompts
from langchain_reflective.reflection.state import (
    QuestionInsights,
    ReflectionGraphState,
    ReflectionInput,
    ReflectionOutput,
    SkipReason,
)

__all__ = [
    "CitedInsight",
    "Insight",
    "InsightList",
    "QuestionInsights",
    "QuestionList",
    "ReflectionConfig",
    "ReflectionGraphState",
    "ReflectionInput",
    "ReflectionOutput",
    "ReflectionPrompts",
    "SkipReason",
    "create_reflection_graph",
    "format_insights",
    "map_citations",
    "parse_insights",
    "parse_questions",
]
