"""Memory backends: the seam (:class:`BaseMemoryBackend`) and the embedded SQLite default."""

from langchain_reflective.backends.base import (
    BaseMemoryBackend,
    CandidateSet,
    CounterUpdate,
    PendingMemory,
    RecordBatch,
    ReflectionState,
    RetrievalFilter,
)

__all__ = [
    "BaseMemoryBackend",
    "CandidateSet",
    "CounterUpdate",
    "PendingMemory",
    "RecordBatch",
    "ReflectionState",
    "RetrievalFilter",
]
