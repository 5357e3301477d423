"""langchain-reflective: long-term memory that reflects, for LangChain and LangGraph agents.

The flat public API lives here. Pieces that need an optional extra
(``MemoryMiddleware``, ``ReflectiveMemoryMiddleware`` and ``ThinkingMiddleware``: extra
``agents``; ``PostgresBackend``: extra ``postgres``;
``ReflectiveChatMemory``: extra ``legacy``)
are imported on first access, so ``import langchain_reflective`` stays light.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from langchain_reflective.backends import (
    BaseMemoryBackend,
    CandidateSet,
    PendingMemory,
    ReflectionState,
)
from langchain_reflective.backends.sqlite import BaseRecordStore, SQLiteBackend, SQLiteRecordStore
from langchain_reflective.errors import (
    DimensionMismatchError,
    DuplicateIdError,
    EmbeddingError,
    ExportError,
    ForeignFileError,
    ImportanceError,
    InvalidFilterError,
    InvalidMemoryError,
    PendingConflictError,
    ReflectionConflictError,
    ReflectionError,
    ReflectiveError,
    SchemaVersionError,
    StorageError,
)
from langchain_reflective.importance import (
    BaseImportanceScorer,
    HeuristicImportanceScorer,
    ImportanceConfig,
    ImportanceResult,
    LLMImportanceScorer,
    RetryConfig,
)
from langchain_reflective.integrations.retriever import ReflectiveRetriever
from langchain_reflective.integrations.tools import create_memory_tools
from langchain_reflective.memory import (
    MemoryConfig,
    QuarantinedMemory,
    ReflectionFailure,
    ReflectiveMemory,
)
from langchain_reflective.records import MemoryRecord
from langchain_reflective.reflection import (
    ReflectionConfig,
    ReflectionInput,
    ReflectionOutput,
    ReflectionPrompts,
    create_reflection_graph,
    parse_insights,
)
from langchain_reflective.reflexion import (
    asearch_reflections,
    create_reflexion_graph,
    search_reflections,
)
from langchain_reflective.scoring import ScoringConfig
from langchain_reflective.store import ReflectiveStore
from langchain_reflective.strategies import (
    BaseMemoryStrategy,
    HybridMemory,
    ImportanceMemory,
    Observation,
    ReflectiveMemoryStrategy,
    SemanticMemory,
    VoidMemory,
    WindowMemory,
)
from langchain_reflective.stream import MemoryStream, RetrievalFilter, ScoredMemory
from langchain_reflective.thinking import ContextMemory, create_thinking_graph

if TYPE_CHECKING:
    from langchain_reflective.backends.postgres import PostgresBackend
    from langchain_reflective.integrations.legacy import ReflectiveChatMemory
    from langchain_reflective.integrations.middleware import (
        MemoryMiddleware,
        ReflectiveMemoryMiddleware,
    )
    from langchain_reflective.thinking.middleware import ThinkingMiddleware

try:
    __version__ = version("langchain-reflective")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

_LAZY = {
    "MemoryMiddleware": "langchain_reflective.integrations.middleware",
    "PostgresBackend": "langchain_reflective.backends.postgres",
    "ReflectiveChatMemory": "langchain_reflective.integrations.legacy",
    "ReflectiveMemoryMiddleware": "langchain_reflective.integrations.middleware",
    "ThinkingMiddleware": "langchain_reflective.thinking.middleware",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'langchain_reflective' has no attribute {name!r}")


__all__ = [
    "BaseImportanceScorer",
    "BaseMemoryBackend",
    "BaseMemoryStrategy",
    "BaseRecordStore",
    "CandidateSet",
    "ContextMemory",
    "DimensionMismatchError",
    "DuplicateIdError",
    "EmbeddingError",
    "ExportError",
    "ForeignFileError",
    "HeuristicImportanceScorer",
    "HybridMemory",
    "ImportanceConfig",
    "ImportanceError",
    "ImportanceMemory",
    "ImportanceResult",
    "InvalidFilterError",
    "InvalidMemoryError",
    "LLMImportanceScorer",
    "MemoryConfig",
    "MemoryMiddleware",
    "MemoryRecord",
    "MemoryStream",
    "Observation",
    "PendingConflictError",
    "PendingMemory",
    "PostgresBackend",
    "QuarantinedMemory",
    "ReflectionConfig",
    "ReflectionConflictError",
    "ReflectionError",
    "ReflectionFailure",
    "ReflectionInput",
    "ReflectionOutput",
    "ReflectionPrompts",
    "ReflectionState",
    "ReflectiveChatMemory",
    "ReflectiveError",
    "ReflectiveMemory",
    "ReflectiveMemoryMiddleware",
    "ReflectiveMemoryStrategy",
    "ReflectiveRetriever",
    "ReflectiveStore",
    "RetrievalFilter",
    "RetryConfig",
    "SQLiteBackend",
    "SQLiteRecordStore",
    "SchemaVersionError",
    "ScoredMemory",
    "ScoringConfig",
    "SemanticMemory",
    "StorageError",
    "ThinkingMiddleware",
    "VoidMemory",
    "WindowMemory",
    "__version__",
    "asearch_reflections",
    "create_memory_tools",
    "create_reflection_graph",
    "create_reflexion_graph",
    "create_thinking_graph",
    "parse_insights",
    "search_reflections",
]
