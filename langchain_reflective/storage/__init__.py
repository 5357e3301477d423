"""Durable record stores: the protocol and the embedded SQLite default."""

from langchain_reflective.storage.base import (
    BaseRecordStore,
    CounterUpdate,
    PartitionChunk,
    PendingMemory,
    ReflectionState,
)
from langchain_reflective.storage.sqlite import SQLiteRecordStore

__all__ = [
    "BaseRecordStore",
    "CounterUpdate",
    "PartitionChunk",
    "PendingMemory",
    "ReflectionState",
    "SQLiteRecordStore",
]
