"""Memory strategies: what an agent remembers of its turns and what it is shown of them.

:class:`BaseMemoryStrategy` is the extension point (``commit`` / ``context`` / ``purge`` and
their async twins, over :class:`Observation`\\ s); the built-ins are :class:`VoidMemory`,
:class:`WindowMemory`, :class:`ImportanceMemory`, :class:`HybridMemory`,
:class:`SemanticMemory` and :class:`ReflectiveMemoryStrategy` (a ``ReflectiveMemory``).
``MemoryMiddleware`` (``langchain_reflective.integrations.middleware``) runs any of them in a
``create_agent`` agent; :class:`~langchain_reflective.strategies.testing.StrategyConformanceTests`
checks a strategy against the contract. The guide is ``docs/MEMORY.md``.
"""

from __future__ import annotations

from langchain_reflective.strategies.base import (
    DEFAULT_NAMESPACE,
    BaseMemoryStrategy,
    Observation,
    check_budget,
    latest_query,
)
from langchain_reflective.strategies.budget import (
    TokenCounter,
    count_tokens,
    fit_groups,
    fit_observations,
    observation_messages,
    trim_to_budget,
)
from langchain_reflective.strategies.builtin import (
    HybridMemory,
    ImportanceMemory,
    ImportanceScorer,
    VoidMemory,
    WindowMemory,
    heuristic_importance,
)
from langchain_reflective.strategies.reflective import ReflectiveMemoryStrategy
from langchain_reflective.strategies.render import format_context
from langchain_reflective.strategies.semantic import SemanticMemory

__all__ = [
    "DEFAULT_NAMESPACE",
    "BaseMemoryStrategy",
    "HybridMemory",
    "ImportanceMemory",
    "ImportanceScorer",
    "Observation",
    "ReflectiveMemoryStrategy",
    "SemanticMemory",
    "TokenCounter",
    "VoidMemory",
    "WindowMemory",
    "check_budget",
    "count_tokens",
    "fit_groups",
    "fit_observations",
    "format_context",
    "heuristic_importance",
    "latest_query",
    "observation_messages",
    "trim_to_budget",
]
