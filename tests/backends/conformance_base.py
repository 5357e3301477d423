"""What every module of the backend conformance suite (tests/backends/conformance.py) shares:
the sample memories (``corpus``) and their vectors, the queries and scorings compared with the
reference, and ``ConformanceBase``, the fixtures every topic's mixin runs on (``make_backend``,
provided by a backend's test class; ``backends``, ``backend``, ``reference``, ``loop``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from langchain_reflective.backends.base import BaseMemoryBackend, PendingMemory, RetrievalFilter
from langchain_reflective.backends.sqlite import SQLiteBackend
from langchain_reflective.records import OBSERVATION, REFLECTION, MemoryRecord
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k
from tests.fakes import WordEmbeddings

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
WORDS = [f"w{i}" for i in range(40)] + ["tea", "paris", "coffee", "train", "garden", "music"]
MODEL = "tests.fakes.WordEmbeddings:size=32"

# scorings every backend must rank exactly like the reference (no lexical component)
SHARED_SCORINGS = [
    ScoringConfig.paper(),
    ScoringConfig.dense(),
    ScoringConfig(
        relevance_weight=0.6,
        recency_weight=0.05,
        importance_weight=0.05,
        normalization="none",
        neighbor_weight=0.5,
        name="neighbours-no-lexical",
    ),
    ScoringConfig(
        relevance_weight=1.0,
        recency_weight=0.5,
        importance_weight=0.5,
        decay=0.9,
        normalization="minmax",
        neighbor_weight=0.3,
        name="minmax-neighbours",
    ),
]


def corpus(n: int = 160, *, seed: int = 3, namespace: str = "alice") -> list[MemoryRecord]:
    """Memories with varied texts, kinds, times, importance and metadata, oldest first."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        created = NOW - timedelta(hours=int(n - i) * 7)
        accessed = created + timedelta(hours=int(rng.integers(0, 5)) * 3)
        out.append(
            MemoryRecord(
                id=f"{namespace}-{i:04d}",
                text=" ".join(rng.choice(WORDS, 6)),
                kind=str(rng.choice([OBSERVATION, OBSERVATION, OBSERVATION, REFLECTION, "plan"])),
                created_at=created,
                last_accessed_at=accessed,
                importance=float(rng.integers(1, 11)) / 10,
                importance_source="given",
                depth=0,
                namespace=namespace,
                metadata={"i": i, "tag": "é" if i % 2 else "x"},
            )
        )
    return out


def vectors_of(records: list[MemoryRecord]) -> np.ndarray:
    emb = WordEmbeddings(32)
    return np.asarray(emb.embed_documents([r.text for r in records]), dtype=np.float32)


def query_vector(text: str) -> np.ndarray:
    return np.asarray(WordEmbeddings(32).embed_query(text), dtype=np.float32)


def exact_top(
    backend: BaseMemoryBackend,
    namespace: str,
    query: str,
    config: ScoringConfig,
    *,
    k: int = 10,
    filter: RetrievalFilter | None = None,
) -> list[str]:
    """Ids of the top ``k`` under exact scoring, best first (nothing is touched)."""
    found = backend.candidates(
        namespace,
        query,
        query_vector(query),
        k=k,
        filter=filter or RetrievalFilter(),
        config=config,
        exact=True,
    )
    if found.size == 0:
        return []
    comps, _ = score_candidates(config, found, NOW.timestamp())
    keys = found.keys[top_k(comps.score, k)].tolist()
    records = backend.fetch(namespace, keys)
    return [records[key].id for key in keys]


QUERIES = ["tea paris", "w3 w7 garden", "coffee train music", "w12", "w30 w31 w32 w33"]


class ConformanceBase:
    """The fixtures and helpers of :class:`tests.backends.conformance.BackendConformance`; each
    topic's mixin subclasses it."""

    lexical_matches_reference = False
    """Whether the backend's lexical scores equal the SQLite backend's (BM25 in-process)."""

    @pytest.fixture
    def make_backend(self) -> Callable[[], BaseMemoryBackend]:
        raise NotImplementedError("a backend's test class provides make_backend")

    @pytest.fixture
    def loop(self) -> Iterator[asyncio.AbstractEventLoop]:
        """The test's event loop for the async twins, kept open until the backends are closed
        in it: a backend's async connections belong to the loop that opened them, and left to
        ``asyncio.run``'s shutdown (which cancels their pool's tasks) they can hang it."""
        loop = asyncio.new_event_loop()
        yield loop
        loop.close()

    @pytest.fixture
    def backends(
        self, make_backend: Callable[[], BaseMemoryBackend], loop: asyncio.AbstractEventLoop
    ) -> Iterator[Callable[[], BaseMemoryBackend]]:
        made: list[BaseMemoryBackend] = []

        def new() -> BaseMemoryBackend:
            backend = make_backend()
            made.append(backend)
            return backend

        yield new
        for backend in made:
            loop.run_until_complete(backend.aclose())  # (as async code must close them)

    @pytest.fixture
    def backend(self, backends: Callable[[], BaseMemoryBackend]) -> BaseMemoryBackend:
        return backends()

    @pytest.fixture
    def reference(self) -> Iterator[BaseMemoryBackend]:
        with SQLiteBackend(None) as ref:
            yield ref

    @staticmethod
    def fill(backend: BaseMemoryBackend, records: list[MemoryRecord], **kw: Any) -> None:
        backend.bind_embeddings(MODEL, 32)
        backend.put(records, vectors_of(records), **kw)


def _pending(id: str, namespace: str) -> PendingMemory:
    return PendingMemory(
        id=id,
        namespace=namespace,
        text=f"pending {id}",
        kind=OBSERVATION,
        created_at=NOW,
        importance=None,
        metadata={},
    )


def _fresh(text: str, *, id: str | None = None, namespace: str = "alice") -> MemoryRecord:
    return MemoryRecord(
        id=id or f"fresh-{text}",
        text=text,
        created_at=NOW,
        importance=0.5,
        namespace=namespace,
    )
