"""Old home of the record stores (kept so existing imports work).

The SQLite record layer now lives in :mod:`langchain_reflective.backends.sqlite`, behind
:class:`~langchain_reflective.backends.sqlite.SQLiteBackend`; the shared value types are in
:mod:`langchain_reflective.backends.base`.
"""

from langchain_reflective.backends.base import CounterUpdate, PendingMemory, ReflectionState
from langchain_reflective.backends.sqlite.record_store import BaseRecordStore, PartitionChunk
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore

__all__ = [
    "BaseRecordStore",
    "CounterUpdate",
    "PartitionChunk",
    "PendingMemory",
    "ReflectionState",
    "SQLiteRecordStore",
]
