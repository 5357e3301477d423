"""Sample memories for the Postgres backend tests: records with known words, kinds, times and
importances (``_records``), unit vectors of ``DIM`` dimensions (``_unit``), and a backend filled
with both (``_fill``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import numpy as np

from langchain_reflective.records import MemoryRecord, new_memory_id

if TYPE_CHECKING:
    from langchain_reflective.backends.postgres import PostgresBackend

T0 = datetime(2025, 1, 1, tzinfo=UTC)
DIM = 16
WORDS = [
    "tea",
    "paris",
    "dog",
    "running",
    "garden",
    "music",
    "river",
    "coffee",
    "train",
    "winter",
    "book",
    "mountain",
]


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _records(n: int, namespace: str = "default", seed: int = 0) -> list[MemoryRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = rng.choice(WORDS, size=3, replace=False)
        out.append(
            MemoryRecord(
                id=new_memory_id(),
                text=f"memory {i} about {' and '.join(words)}",
                kind="observation" if i % 5 else "reflection",
                created_at=T0 + timedelta(minutes=i),
                importance=float(rng.integers(1, 11)) / 10,
                namespace=namespace,
                metadata={"i": i},
            )
        )
    return out


def _fill(
    backend: PostgresBackend, n: int, namespace: str = "default", seed: int = 0
) -> tuple[list[MemoryRecord], np.ndarray]:
    records = _records(n, namespace, seed)
    vectors = _unit(np.random.default_rng(seed + 1), n)
    backend.put(records, vectors)
    return records, vectors
