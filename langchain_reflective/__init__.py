"""langchain-reflective: long-term memory that reflects, for LangChain and LangGraph agents."""

from importlib.metadata import PackageNotFoundError, version

from langchain_reflective.errors import (
    DimensionMismatchError,
    EmbeddingError,
    ForeignFileError,
    ImportanceError,
    InvalidFilterError,
    InvalidMemoryError,
    ReflectionError,
    ReflectiveError,
    SchemaVersionError,
    StorageError,
)
from langchain_reflective.importance import (
    BaseImportanceScorer,
    HeuristicImportanceScorer,
    ImportanceResult,
)
from langchain_reflective.integrations.retriever import ReflectiveRetriever
from langchain_reflective.records import MemoryRecord
from langchain_reflective.scoring import ScoringConfig
from langchain_reflective.storage import BaseRecordStore, ReflectionState, SQLiteRecordStore
from langchain_reflective.stream import MemoryStream, RetrievalFilter, ScoredMemory

try:
    __version__ = version("langchain-reflective")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "BaseImportanceScorer",
    "BaseRecordStore",
    "DimensionMismatchError",
    "EmbeddingError",
    "ForeignFileError",
    "HeuristicImportanceScorer",
    "ImportanceError",
    "ImportanceResult",
    "InvalidFilterError",
    "InvalidMemoryError",
    "MemoryRecord",
    "MemoryStream",
    "ReflectionError",
    "ReflectionState",
    "ReflectiveError",
    "ReflectiveRetriever",
    "RetrievalFilter",
    "SQLiteRecordStore",
    "SchemaVersionError",
    "ScoredMemory",
    "ScoringConfig",
    "StorageError",
    "__version__",
]
