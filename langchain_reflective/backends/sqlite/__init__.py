"""The embedded default backend: one SQLite file, FAISS (exact + IVF) and BM25 in-process."""

from langchain_reflective.backends.sqlite.backend import DEFAULT_EXACT_LIMIT, SQLiteBackend
from langchain_reflective.backends.sqlite.record_store import BaseRecordStore, PartitionChunk
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore

__all__ = [
    "DEFAULT_EXACT_LIMIT",
    "BaseRecordStore",
    "PartitionChunk",
    "SQLiteBackend",
    "SQLiteRecordStore",
]
