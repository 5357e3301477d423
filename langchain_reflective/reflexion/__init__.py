"""Reflexion (Shinn et al. 2023; seed 003): an actor, an evaluator and self-reflection in a loop,
with the reflections kept as episodic memory in a :class:`~langchain_reflective.MemoryStream`.

* :func:`create_reflexion_graph`: the loop as a compiled LangGraph graph;
* evaluators: :func:`command_evaluator` (real commands: pytest, mypy, ruff, ...),
  :func:`llm_judge_evaluator`, :func:`callable_evaluator`, :func:`match_evaluator`;
* :func:`search_reflections`: cross-task lessons from past reflections;
* :func:`export_loops` (JSON valid against :func:`shipped_json_schema`) and
  :func:`analyze_loops` (reward curves, success rates, lesson reuse).
"""

from __future__ import annotations

from langchain_reflective.reflexion.analytics import LoopAnalysis, LoopsSummary, analyze_loops
from langchain_reflective.reflexion.config import (
    ReflexionConfig,
    ReflexionInput,
    ReflexionOutput,
    Strategy,
)
from langchain_reflective.reflexion.episodic import (
    REFLEXION_KIND,
    TRIAL_KIND,
    ReflectionHit,
    asearch_reflections,
    search_reflections,
)
from langchain_reflective.reflexion.evaluators import (
    Attempt,
    BaseEvaluator,
    Check,
    callable_evaluator,
    command_evaluator,
    llm_judge_evaluator,
    match_evaluator,
)
from langchain_reflective.reflexion.export import export_loops, load_export, shipped_json_schema
from langchain_reflective.reflexion.graph import create_reflexion_graph
from langchain_reflective.reflexion.reflection import ReflexionPrompts, reflection_quality
from langchain_reflective.reflexion.schema import (
    FAILURE_CATEGORIES,
    CheckResult,
    CreditAssignment,
    EvaluatorOutput,
    FailureCategory,
    SelfReflection,
    StructuredError,
)

__all__ = [
    "FAILURE_CATEGORIES",
    "REFLEXION_KIND",
    "TRIAL_KIND",
    "Attempt",
    "BaseEvaluator",
    "Check",
    "CheckResult",
    "CreditAssignment",
    "EvaluatorOutput",
    "FailureCategory",
    "LoopAnalysis",
    "LoopsSummary",
    "ReflectionHit",
    "ReflexionConfig",
    "ReflexionInput",
    "ReflexionOutput",
    "ReflexionPrompts",
    "SelfReflection",
    "Strategy",
    "StructuredError",
    "analyze_loops",
    "asearch_reflections",
    "callable_evaluator",
    "command_evaluator",
    "create_reflexion_graph",
    "export_loops",
    "llm_judge_evaluator",
    "load_export",
    "match_evaluator",
    "reflection_quality",
    "search_reflections",
    "shipped_json_schema",
]
