"""One conformance suite for every memory backend (``BaseMemoryBackend``).

A backend's test module subclasses :class:`BackendConformance` and provides a ``make_backend``
fixture: a callable returning a new, empty backend each time it is called (the suite closes
them). For example::

    class TestMyBackend(BackendConformance):
        @pytest.fixture
        def make_backend(self, tmp_path):
            return lambda: MyBackend(...)

Rankings are compared with a reference -- the SQLite backend in memory -- under exact scoring
(``candidates(..., exact=True)`` then :func:`langchain_reflective.scoring.score_candidates`), for
scorings without the lexical component (lexical rankers differ between databases). A backend
whose lexical scores are SQLite's sets ``lexical_matches_reference = True`` to compare the
default hybrid scoring too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from langchain_reflective import MemoryStream, ReflectiveStore
from langchain_reflective.backends.base import (
    BaseMemoryBackend,
    CounterUpdate,
    PendingMemory,
    ReflectionState,
    RetrievalFilter,
)
from langchain_reflective.backends.sqlite import SQLiteBackend
from langchain_reflective.backends.types import concat_candidates
from langchain_reflective.errors import (
    DimensionMismatchError,
    DuplicateIdError,
    EmbeddingError,
    InvalidFilterError,
    InvalidMemoryError,
    PendingConflictError,
    ReflectionConflictError,
    StorageError,
)
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


class BackendConformance:
    """The behaviour every :class:`BaseMemoryBackend` must show."""

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

    # -- records ---------------------------------------------------------------------------

    def test_namespaces_are_listed_in_code_point_order(self, backend: BaseMemoryBackend) -> None:
        """Python's and SQLite's order; a server's linguistic collation (en_US.UTF-8) would
        put "alice" before "Bob" and "émile" before "zoe"."""
        names = ["zoe", "émile", "alice", "Bob", "_x", "Émile", "10", "9"]
        self.fill(backend, [r for ns in names for r in corpus(1, namespace=ns)])
        assert backend.namespaces() == sorted(names)

    def test_put_then_get_returns_every_field(self, backend: BaseMemoryBackend) -> None:
        records = corpus(20)
        self.fill(backend, records)
        wanted = [records[5].id, "missing", records[0].id, records[19].id]
        assert backend.get("alice", wanted) == [records[5], records[0], records[19]]
        assert backend.count("alice") == 20 and backend.count() == 20
        assert backend.namespaces() == ["alice"]
        assert backend.dimension == 32 and backend.embedding_model == MODEL
        assert backend.recent("alice", n=3) == records[-3:]
        assert (
            backend.recent("alice", n=2, kinds=[REFLECTION, "plan"])
            == [r for r in records if r.kind != OBSERVATION][-2:]
        )
        top = backend.recent("alice", n=4, by_importance=True)
        assert [r.importance for r in top] == sorted((r.importance for r in records), reverse=True)[
            :4
        ]
        batches = list(backend.iter_records("alice", batch_size=7))
        assert [r for b in batches for r in b.records] == records
        stacked = np.concatenate([b.vectors for b in batches if b.vectors is not None])
        np.testing.assert_array_equal(stacked, vectors_of(records))

    def test_same_top10_as_the_reference_under_exact_scoring(
        self, backend: BaseMemoryBackend, reference: BaseMemoryBackend
    ) -> None:
        records = corpus(160)
        for b in (backend, reference):
            self.fill(b, records[:100])
            self.fill(b, records[100:])  # two batches
        configs = list(SHARED_SCORINGS)
        if self.lexical_matches_reference:
            configs += [ScoringConfig.hybrid(), ScoringConfig.hybrid(context=False)]
        filters = [None, RetrievalFilter(kinds=frozenset({OBSERVATION}))]
        filters.append(RetrievalFilter(created_after=NOW - timedelta(days=20)))
        for config in configs:
            backend.configure(config)
            reference.configure(config)
            for query in QUERIES:
                for flt in filters:
                    got = exact_top(backend, "alice", query, config, filter=flt)
                    want = exact_top(reference, "alice", query, config, filter=flt)
                    assert got == want, (config.name, query, flt)
                    assert len(got) == 10

    def test_candidate_set_contract(self, backend: BaseMemoryBackend) -> None:
        records = corpus(60)
        self.fill(backend, records)
        config = ScoringConfig.hybrid()
        backend.configure(config)
        q = "tea paris w1"
        found = backend.candidates(
            "alice", q, query_vector(q), k=5, filter=RetrievalFilter(), config=config, exact=True
        )
        assert found.size == 60 and found.exact
        keys = found.keys[: found.size]
        assert (np.diff(keys) > 0).all()  # insertion order
        by_key = backend.fetch("alice", keys.tolist())
        assert [by_key[key].id for key in keys.tolist()] == [r.id for r in records]
        cosine = vectors_of(records) @ query_vector(q)
        np.testing.assert_allclose(found.relevance[: found.size], cosine, atol=1e-5)
        np.testing.assert_allclose(
            found.importance[: found.size], [r.importance for r in records], atol=1e-9
        )
        np.testing.assert_allclose(
            found.created[: found.size], [r.created_at.timestamp() for r in records], atol=1e-6
        )
        np.testing.assert_allclose(
            found.accessed[: found.size], [r.accessed_at.timestamp() for r in records], atol=1e-6
        )
        kinds = [found.kind_names[c] for c in found.kinds[: found.size].tolist()]
        assert kinds == [r.kind for r in records]
        assert found.lexical is not None and found.previous is not None and found.next is not None
        assert found.lexical_max >= float(found.lexical.max()) > 0
        observations = [i for i, r in enumerate(records) if r.kind == OBSERVATION]
        for before, after in itertools.pairwise(observations):
            assert found.keys[found.previous[after]] == keys[before]
            assert found.keys[found.next[before]] == keys[after]
        for i, r in enumerate(records):
            if r.kind != OBSERVATION:
                assert found.previous[i] == found.next[i] == -1
        flt = RetrievalFilter(kinds=frozenset({"plan"}), min_relevance=-1.0)
        plans = backend.candidates(
            "alice", q, query_vector(q), k=5, filter=flt, config=config, exact=True
        )
        assert plans.size == sum(r.kind == "plan" for r in records)

    # -- errors ----------------------------------------------------------------------------

    def test_a_stream_refusing_a_backend_leaves_it_open(
        self, backends: Callable[[], BaseMemoryBackend]
    ) -> None:
        """A stream whose embeddings the backend's memories were not made with closed the
        backend it was given: one misconfigured stream took a shared backend down."""
        backend = backends()
        with MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL) as first:
            first.add("kept tea", importances=0.5, now=NOW)
            with pytest.raises(EmbeddingError, match="not comparable"):
                MemoryStream(WordEmbeddings(16), backend=backend)  # (another model)
            assert [r.text for r in first.recent(None)] == ["kept tea"]

    def test_bad_input_is_a_typed_error_and_loses_nothing(
        self, backends: Callable[[], BaseMemoryBackend]
    ) -> None:
        stream = MemoryStream(WordEmbeddings(32), backend=backends(), embedding_model=MODEL)
        stream.add(["kept tea", "kept paris"], importances=0.5, now=NOW)
        bad_adds: list[dict[str, Any]] = [
            {"texts": "lone \ud800 surrogate"},
            {"texts": ["fine", "bad \udfff"]},
            {"texts": "ok", "metadatas": {"k": "\ud800"}},
            {"texts": "ok", "metadatas": {"\udc00": 1}},
            {"texts": "ok", "kinds": "kind\ud800"},
            {"texts": "ok", "namespace": "ns\ud800"},
            {"texts": "ok", "ids": ["id\ud800"]},
            {"texts": ""},
            {"texts": "ok", "importances": 2.0},
            {"texts": "ok", "evidence": [["missing-id"]]},
            # NUL: Postgres cannot store it and SQLite did, so exports could not move
            {"texts": "ok", "ids": ["id\x00"]},
            {"texts": "ok", "kinds": "kind\x00"},
            {"texts": "ok", "namespace": "ns\x00"},
            {"texts": "ok", "metadatas": {"k": "v\x00"}},
            {"texts": "ok", "metadatas": {"k\x00": 1}},
            {"texts": "ok", "evidence": [["id\x00"]]},
        ]
        for kwargs in bad_adds:
            texts = kwargs.pop("texts")
            with pytest.raises(InvalidMemoryError):
                stream.add(texts, now=NOW, **kwargs)
        with pytest.raises(InvalidMemoryError):
            stream.retrieve("query \ud800")
        with pytest.raises(InvalidMemoryError):
            stream.enqueue("pending \ud800")
        with pytest.raises(InvalidFilterError):
            stream.retrieve("tea", filter={"nope": 1})
        with pytest.raises(InvalidFilterError):
            stream.retrieve("tea", filter={"kinds": ["observation\x00"]})
        with pytest.raises(InvalidMemoryError):
            stream.get(["id\x00"])
        with pytest.raises(StorageError):  # ids are unique across the backend
            stream.add("again", ids=[stream.recent(1)[0].id], now=NOW)
        with pytest.raises(DimensionMismatchError):
            stream.backend.bind_embeddings(MODEL, 16)
        with pytest.raises(EmbeddingError):
            stream.backend.bind_embeddings("another-model", 32)
        with pytest.raises(DimensionMismatchError):
            stream.backend.candidates(
                "default",
                "tea",
                np.ones(16, dtype=np.float32) / 4,
                k=3,
                filter=RetrievalFilter(),
                config=ScoringConfig.paper(),
            )
        assert [r.text for r in stream.recent(None)] == ["kept tea", "kept paris"]
        assert stream.pending() == []
        assert stream.reflection_state().adds_since == 2
        stream.close()

    # -- namespaces --------------------------------------------------------------------------

    def test_a_namespace_never_sees_another(self, backend: BaseMemoryBackend) -> None:
        alice, bob = corpus(30, namespace="alice"), corpus(30, seed=4, namespace="bob")
        self.fill(backend, alice, counter=CounterUpdate("alice", importance=1.0, adds=30))
        self.fill(backend, bob)
        config = ScoringConfig.hybrid()
        found = backend.candidates(
            "alice", "tea", query_vector("tea"), k=10, filter=RetrievalFilter(), config=config
        )
        got = backend.fetch("alice", found.keys.tolist())
        assert {r.namespace for r in got.values()} == {"alice"}
        bob_found = backend.candidates(
            "bob", "tea", query_vector("tea"), k=10, filter=RetrievalFilter(), config=config
        )
        bob_keys = bob_found.keys[: bob_found.size].tolist()
        assert backend.fetch("alice", bob_keys) == {}
        assert backend.touch("alice", bob_keys, NOW + timedelta(days=9)) == {}
        assert backend.get("bob", [bob[0].id]) == [bob[0]]  # untouched
        assert backend.get("alice", [r.id for r in bob]) == []
        assert backend.delete("alice", [r.id for r in bob]) == 0
        assert backend.count("bob") == 30
        assert backend.reflection_state("bob").adds_since == 0
        assert backend.reflection_state("alice").adds_since == 30
        assert backend.purge("alice") == 30
        assert backend.count("alice") == 0 and backend.count("bob") == 30
        assert backend.namespaces() == ["bob"]

    def test_an_id_belongs_to_its_namespace(self, backend: BaseMemoryBackend) -> None:
        """Two namespaces may hold one id. With ids unique across the backend, bob storing
        the id of alice's store item (computable from her namespace and the key) failed only
        if she had that item -- telling him so -- and, stored first, kept her from storing
        it. Within a namespace an id stays unique; the queue follows the same rule."""
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)
        store = ReflectiveStore(stream)
        store.put(("alice",), "profile", {"text": "alice w1 tea"})
        taken = store.memory_id("alice", "profile")
        (bobs,) = stream.add(["bob w2 tea"], ids=[taken], namespace="bob", now=NOW)
        assert bobs.id == taken
        with pytest.raises(DuplicateIdError, match="already stored"):
            stream.add(["bob again"], ids=[taken], namespace="bob", now=NOW)
        assert [r.text for r in stream.get(taken, namespace="alice")] == ["alice w1 tea"]
        assert [r.text for r in stream.get(taken, namespace="bob")] == ["bob w2 tea"]
        found = stream.retrieve("tea", k=5, namespace="bob", now=NOW)
        assert [(s.record.id, s.record.text) for s in found] == [(taken, "bob w2 tea")]
        # bob first: carol's later put of that key still stores her item
        stream.add(["bob w3"], ids=[store.memory_id("carol", "plan")], namespace="bob", now=NOW)
        store.put(("carol",), "plan", {"text": "carol w4"})
        item = store.get(("carol",), "plan")
        assert item is not None and item.value == {"text": "carol w4"}
        # an update or a delete in one namespace leaves the other's memory of that id alone
        store.put(("alice",), "profile", {"text": "alice w5"})
        assert [r.text for r in stream.get(taken, namespace="bob")] == ["bob w2 tea"]
        assert stream.delete(taken, namespace="bob") == 1
        item = store.get(("alice",), "profile")
        assert item is not None and item.value == {"text": "alice w5"}
        # queued memories: one id per namespace, completed in its own namespace only
        backend.enqueue([_pending("p1", "alice")])
        backend.enqueue([_pending("p1", "bob")])
        with pytest.raises(DuplicateIdError):
            backend.enqueue([_pending("p1", "bob")])
        self.fill(backend, [_fresh("bob's p1", id="p1", namespace="bob")], pending=["p1"])
        assert [(p.id, p.namespace) for p in backend.pending()] == [("p1", "alice")]
        assert [r.text for r in backend.get("bob", ["p1"])] == ["bob's p1"]
        assert backend.get("alice", ["p1"]) == []
        # one write completing one id in two namespaces empties both queue entries
        backend.enqueue([_pending("p2", "alice"), _pending("p2", "bob")])
        both = [_fresh("alice's p2", id="p2"), _fresh("bob's p2", id="p2", namespace="bob")]
        self.fill(backend, both, pending=["p2"])
        assert [(p.id, p.namespace) for p in backend.pending()] == [("p1", "alice")]
        assert [r.text for r in backend.get("alice", ["p2"])] == ["alice's p2"]
        # an id stored in one namespace may be queued in another, never in its own (a memory
        # is pending or stored, not both); a refused batch queues nothing
        backend.enqueue([_pending("p2", "carol")])
        with pytest.raises(DuplicateIdError, match="already stored"):
            backend.enqueue([_pending("p2", "alice")])
        with pytest.raises(DuplicateIdError, match="already stored"):
            backend.enqueue([_pending("p9", "carol"), _pending("p2", "bob")])
        assert [(p.id, p.namespace) for p in backend.pending()] == [
            ("p1", "alice"), ("p2", "carol"),
        ]  # fmt: skip

    # -- touch -------------------------------------------------------------------------------

    def test_touch_sets_the_access_time_durably_and_only_that(
        self, backend: BaseMemoryBackend
    ) -> None:
        records = corpus(12)
        self.fill(backend, records)
        config = ScoringConfig.paper()
        found = backend.candidates(
            "alice", "w1", query_vector("w1"), k=3, filter=RetrievalFilter(), config=config
        )
        keys = found.keys[:3].tolist()
        when = NOW + timedelta(days=2)
        touched = backend.touch("alice", keys, when)
        assert set(touched) == set(keys)
        before = {r.id: r for r in records}
        for record in touched.values():
            assert record.last_accessed_at == when
            old = before[record.id]
            assert (record.text, record.created_at, record.importance) == (
                old.text,
                old.created_at,
                old.importance,
            )
        stored = backend.get("alice", [r.id for r in touched.values()])
        assert all(r.last_accessed_at == when for r in stored)
        again = backend.candidates(
            "alice", "w1", query_vector("w1"), k=3, filter=RetrievalFilter(), config=config
        )
        at = {int(k): i for i, k in enumerate(again.keys[: again.size].tolist())}
        for key in keys:
            assert again.accessed[at[key]] == pytest.approx(when.timestamp())
        assert backend.fetch("alice", keys) == touched  # fetch writes nothing
        assert backend.touch("alice", [], when) == {}

    def test_retrieval_through_the_stream_touches_what_it_returns(
        self, backends: Callable[[], BaseMemoryBackend]
    ) -> None:
        stream = MemoryStream(
            WordEmbeddings(32),
            backend=backends(),
            embedding_model=MODEL,
            scoring=ScoringConfig.paper(),
        )
        stream.add([r.text for r in corpus(30)], importances=0.5, now=NOW)
        later = NOW + timedelta(hours=5)
        hits = stream.retrieve("tea paris", k=4, now=later)
        assert len(hits) == 4
        assert all(h.record.last_accessed_at == later for h in hits)
        assert all(r.last_accessed_at == later for r in stream.get([h.record.id for h in hits]))
        quiet = stream.retrieve("tea paris", k=4, now=later + timedelta(hours=1), touch=False)
        assert all(h.record.last_accessed_at == later for h in quiet)
        stream.close()

    def test_a_given_query_embedding_ranks_as_the_embedded_query(
        self, backends: Callable[[], BaseMemoryBackend]
    ) -> None:
        """``retrieve(..., query_embedding=...)`` skips the embedding call and ranks exactly as
        the embedded query (normalised alike); unusable vectors are the usual typed errors."""
        embeddings = WordEmbeddings(32)
        stream = MemoryStream(embeddings, backend=backends(), embedding_model=MODEL)
        stream.add([r.text for r in corpus(30)], importances=0.5, now=NOW)

        def ranked(hits: list[Any]) -> list[tuple[str, float]]:
            return [(h.record.id, h.score) for h in hits]

        query = "tea paris w3"
        expected = ranked(stream.retrieve(query, k=6, now=NOW, touch=False))
        vector = [3.0 * x for x in embeddings.embed_query(query)]  # not unit length
        calls = embeddings.query_calls
        got = ranked(stream.retrieve(query, k=6, now=NOW, touch=False, query_embedding=vector))
        assert [i for i, _ in got] == [i for i, _ in expected]
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-6)
        assert embeddings.query_calls == calls
        with pytest.raises(DimensionMismatchError):
            stream.retrieve(query, k=3, query_embedding=vector[:31])
        with pytest.raises(EmbeddingError):
            stream.retrieve(query, k=3, query_embedding=[float("nan")] * 32)

        async def run() -> list[tuple[str, float]]:
            async with stream:
                hits = await stream.aretrieve(
                    query, k=6, now=NOW, touch=False, query_embedding=vector
                )
            return ranked(hits)

        assert [i for i, _ in asyncio.run(run())] == [i for i, _ in expected]
        assert embeddings.query_calls == calls

    # -- delete and purge ------------------------------------------------------------------

    def test_delete_and_purge(self, backend: BaseMemoryBackend) -> None:
        records = corpus(20)
        self.fill(backend, records)
        backend.enqueue([_pending("p1", "alice"), _pending("p2", "bob")])
        doomed = [records[3].id, records[4].id, "missing"]
        assert backend.delete("alice", doomed) == 2
        assert backend.get("alice", doomed) == []
        assert backend.count("alice") == 18
        found = backend.candidates(
            "alice",
            "w1",
            query_vector("w1"),
            k=5,
            filter=RetrievalFilter(),
            config=ScoringConfig.paper(),
            exact=True,
        )
        assert found.size == 18
        assert set(r.id for r in backend.fetch("alice", found.keys.tolist()).values()).isdisjoint(
            doomed
        )
        newest = int(found.keys.max())
        self.fill(backend, [_fresh("late")])
        late = backend.candidates(
            "alice",
            "late",
            query_vector("late"),
            k=1,
            filter=RetrievalFilter(),
            config=ScoringConfig.dense(),
            exact=True,
        )
        assert int(late.keys.max()) > newest  # keys are never reused
        assert backend.purge("alice") == 19
        assert backend.count("alice") == 0
        assert [p.id for p in backend.pending(namespace="alice")] == []
        assert [p.id for p in backend.pending()] == ["p2"]
        assert backend.reflection_state("alice").adds_since == 0

    def test_replace_updates_in_one_write_and_a_failed_one_changes_nothing(
        self, backend: BaseMemoryBackend
    ) -> None:
        records = corpus(12)
        self.fill(backend, records)
        old = records[4]
        new = MemoryRecord(
            id=old.id,
            text="tea garden replaced",
            kind=OBSERVATION,
            created_at=old.created_at,
            importance=0.9,
            namespace="alice",
        )
        counter = CounterUpdate("alice", importance=0.9, adds=1)
        before = backend.reflection_state("alice").adds_since
        assert (
            backend.replace("alice", [old.id, "missing"], [new], vectors_of([new]), counter=counter)
            == 1
        )
        assert backend.get("alice", [old.id]) == [new]
        assert backend.count("alice") == 12
        assert backend.reflection_state("alice").adds_since == before + 1
        assert exact_top(backend, "alice", "tea garden replaced", ScoringConfig.dense(), k=1) == [
            old.id
        ]
        # a write that fails (an id already stored: records[7]) deletes nothing either
        again = MemoryRecord(
            id=old.id, text="never stored", kind=OBSERVATION, created_at=NOW, namespace="alice"
        )
        clash = MemoryRecord(
            id=records[7].id, text="clash", kind=OBSERVATION, created_at=NOW, namespace="alice"
        )
        with pytest.raises(StorageError):
            backend.replace("alice", [old.id], [again, clash], vectors_of([again, clash]))
        assert backend.get("alice", [old.id, records[7].id]) == [new, records[7]]
        assert backend.count("alice") == 12
        assert backend.reflection_state("alice").adds_since == before + 1
        # and the stream updates in place through it
        with MemoryStream(WordEmbeddings(32), backend=backend, namespace="alice") as stream:
            stream.add("coffee train", ids=[old.id], replacing=[old.id], importances=0.5)
            assert [r.text for r in backend.get("alice", [old.id])] == ["coffee train"]
            assert stream.count() == 12
            for bad in ("not-a-list", [""], ["\ud800"]):  # one string, empty, unencodable
                with pytest.raises(InvalidMemoryError):
                    stream.add("x", replacing=bad)
            assert stream.count() == 12

    # -- the reflection counter ------------------------------------------------------------

    def test_reflection_counter(self, backend: BaseMemoryBackend) -> None:
        records = corpus(10)
        self.fill(backend, records[:4], counter=CounterUpdate("alice", importance=1.5, adds=4))
        self.fill(backend, records[4:6])  # no counter: an import, not counted
        state = backend.reflection_state("alice")
        assert state.importance_sum == pytest.approx(1.5) and state.adds_since == 4
        assert state.last_reflection_at is None
        backend.update_counter(CounterUpdate("alice", importance=0.25, adds=1))
        assert backend.reflection_state("alice").adds_since == 5
        reflected = NOW + timedelta(hours=1)
        self.fill(
            backend,
            [records[6]],
            counter=CounterUpdate("alice", importance=9.0, adds=1, reset_at=reflected),
        )
        state = backend.reflection_state("alice")
        assert (state.importance_sum, state.adds_since) == (0.0, 0)
        assert state.last_reflection_at == reflected
        assert backend.recent("alice", since_last_reflection=True) == []
        self.fill(backend, records[7:9], counter=CounterUpdate("alice", importance=0.7, adds=2))
        assert backend.recent("alice", since_last_reflection=True) == records[7:9]
        assert backend.reflection_state("alice").adds_since == 2
        backend.mark_reflected("alice", reflected + timedelta(hours=1))
        assert backend.reflection_state("alice").adds_since == 0

    def test_reflection_counter_through_the_stream(
        self, backends: Callable[[], BaseMemoryBackend]
    ) -> None:
        stream = MemoryStream(WordEmbeddings(32), backend=backends(), embedding_model=MODEL)
        stream.add(["a", "b", "c"], importances=[0.2, 0.3, 0.5], now=NOW)
        stored = stream.add(
            "insight", importances=0.9, kinds=REFLECTION, now=NOW, reset_reflection_counter=True
        )
        assert stream.reflection_state().adds_since == 0
        stream.add("d", importances=0.4, now=NOW)
        stream.add("e", importances=0.6, kinds=REFLECTION, evidence=[[stored[0].id]], now=NOW)
        state = stream.reflection_state()
        assert state.importance_sum == pytest.approx(0.4) and state.adds_since == 2
        assert stream.get(stream.recent(1)[0].id)[0].depth == 1
        stream.close()

    def test_a_reset_after_another_reset_since_its_read_writes_nothing(
        self, backend: BaseMemoryBackend, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Optimistic concurrency of reflections: a reset carrying the generation it read is
        refused, with everything written with it, once another reset came in between -- also
        when both carry the same timestamp. Only resets move the generation."""
        records = corpus(8)
        self.fill(backend, records[:3], counter=CounterUpdate("alice", importance=1.5, adds=3))
        seen = backend.reflection_state("alice")
        assert seen.generation == 0 and backend.reflection_state("bob").generation == 0
        first = CounterUpdate("alice", reset_at=NOW, consumed=seen)
        self.fill(backend, [records[3]], counter=first)  # the reflection that stores first
        won = backend.reflection_state("alice")
        assert (won.importance_sum, won.adds_since, won.generation) == (0.0, 0, 1)
        self.fill(backend, [records[4]], counter=CounterUpdate("alice", importance=0.5, adds=1))
        late = CounterUpdate("alice", reset_at=NOW, consumed=seen)  # same read, same clock
        with pytest.raises(ReflectionConflictError):
            backend.put([records[5]], vectors_of([records[5]]), counter=late)
        with pytest.raises(ReflectionConflictError):
            backend.replace(
                "alice", [records[0].id], [records[5]], vectors_of([records[5]]), counter=late
            )
        with pytest.raises(ReflectionConflictError):
            backend.mark_reflected("alice", NOW, consumed=seen)
        with pytest.raises(ReflectionConflictError):
            loop.run_until_complete(
                backend.aput([records[5]], vectors_of([records[5]]), counter=late)
            )
        with pytest.raises(ReflectionConflictError):
            loop.run_until_complete(backend.amark_reflected("alice", NOW, consumed=seen))
        assert backend.get("alice", [records[0].id, records[5].id]) == [records[0]]
        now = backend.reflection_state("alice")
        assert (now.importance_sum, now.adds_since, now.generation) == (0.5, 1, 1)
        # adds, deletes and purges leave the generation alone; every reset raises it
        backend.delete("alice", [records[1].id])
        assert backend.reflection_state("alice").generation == 1
        backend.mark_reflected("alice", NOW, consumed=backend.reflection_state("alice"))
        backend.mark_reflected("alice", NOW)  # unconditional
        hand_made = ReflectionState(importance_sum=1.0, adds_since=1)  # no generation: as before
        self.fill(backend, [records[6]], counter=CounterUpdate("alice", reset_at=NOW,
                                                               consumed=hand_made))  # fmt: skip
        assert backend.reflection_state("alice").generation == 4
        backend.purge("alice")
        state = backend.reflection_state("alice")
        assert (state.importance_sum, state.adds_since, state.generation) == (0.0, 0, 4)
        assert state.last_reflection_at is None
        with pytest.raises(ReflectionConflictError):  # a read from before the purge
            backend.mark_reflected("alice", NOW, consumed=won)
        self.fill(backend, [records[7]], counter=CounterUpdate("alice", reset_at=NOW,
                                                               consumed=state))  # fmt: skip
        assert backend.reflection_state("alice").generation == 5
        assert backend.reflection_state("bob").generation == 0

    # -- the pending queue -----------------------------------------------------------------

    def test_pending_queue(self, backend: BaseMemoryBackend) -> None:
        items = [_pending(f"q{i}", "alice" if i % 3 else "bob") for i in range(6)]
        backend.enqueue(items[:1])
        backend.enqueue(items[1:])
        assert [p.id for p in backend.pending()] == [p.id for p in items]
        assert [p.id for p in backend.pending(limit=2)] == ["q0", "q1"]
        alice = [p.id for p in items if p.namespace == "alice"]
        assert [p.id for p in backend.pending(namespace="alice")] == alice
        assert [p.id for p in backend.pending(namespace="alice", limit=2, newest=True)] == alice[
            -2:
        ]
        assert backend.count_pending() == 6 and backend.count_pending("bob") == 2
        assert backend.pending(namespace="alice")[0] == items[1]
        done = [_fresh(p.text, id=p.id) for p in items if p.id in ("q1", "q2")]
        self.fill(backend, done, pending=["q1", "q2"])
        assert backend.count_pending() == 4
        assert [r.id for r in backend.get("alice", ["q1", "q2"])] == ["q1", "q2"]
        with pytest.raises(PendingConflictError):
            self.fill(backend, [_fresh("x", id="q1b")], pending=["q1"])
        assert backend.get("alice", ["q1b"]) == []
        # a record of bob's cannot take alice's queued memory away by completing its id
        with pytest.raises(PendingConflictError):
            self.fill(backend, [_fresh("bob's", id="q4", namespace="bob")], pending=["q4"])
        assert backend.get("bob", ["q4"]) == []
        assert "q4" in [p.id for p in backend.pending(namespace="alice")]
        with pytest.raises(StorageError):
            backend.enqueue([_pending("q3", "bob")])  # already queued

    def test_discard_pending(self, backend: BaseMemoryBackend) -> None:
        backend.enqueue([_pending("d0", "alice"), _pending("d1", "alice"), _pending("d2", "bob")])
        assert backend.discard_pending("alice", []) == 0
        # another namespace's id, an unknown one and a repeat are ignored
        assert backend.discard_pending("alice", ["d0", "d2", "nope", "d0"]) == 1
        assert [p.id for p in backend.pending()] == ["d1", "d2"]
        self.fill(backend, [_fresh("done", id="d1")], pending=["d1"])
        assert backend.discard_pending("alice", ["d1"]) == 0  # stored: not a pending memory
        assert backend.get("alice", ["d1"])[0].id == "d1"
        assert backend.count_pending() == 1 and backend.count_pending("bob") == 1

    # -- the reflection lock ---------------------------------------------------------------

    def test_reflection_lock_excludes_others_per_namespace(
        self, backend: BaseMemoryBackend
    ) -> None:
        outcome: dict[str, Any] = {}

        def contend(namespace: str) -> None:
            try:
                with backend.reflection_lock(namespace, timeout=0):
                    outcome[namespace] = "acquired"
            except TimeoutError:
                outcome[namespace] = "busy"

        with backend.reflection_lock("alice"):
            for ns in ("alice", "bob"):
                thread = threading.Thread(target=contend, args=(ns,))
                thread.start()
                thread.join()
        assert outcome == {"alice": "busy", "bob": "acquired"}
        contend("alice")  # released on exit
        assert outcome["alice"] == "acquired"
        with pytest.raises(RuntimeError), backend.reflection_lock("alice"):
            raise RuntimeError("reflection failed")
        contend("alice")  # released on errors too
        assert outcome["alice"] == "acquired"

    # -- export and import -----------------------------------------------------------------

    def test_export_import_round_trips_between_backends(
        self,
        backends: Callable[[], BaseMemoryBackend],
        reference: BaseMemoryBackend,
        tmp_path: Path,
    ) -> None:
        def stream_of(backend: BaseMemoryBackend) -> MemoryStream:
            return MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)

        source = stream_of(reference)
        source.add([r.text for r in corpus(25)], importances=0.5, now=NOW)
        source.add(["about ünïcode ☕", "emoji 😀"], metadatas={"k": ["v", 1.5]}, now=NOW)
        source.add("other ns", namespace="bob", now=NOW)
        source.retrieve("w1 w2", k=3, now=NOW + timedelta(hours=1))  # some access times differ
        first = tmp_path / "first.jsonl"
        assert source.export_jsonl(first, namespaces="all") == 28
        target = stream_of(backends())
        assert target.import_jsonl(first) == 28
        assert target.import_jsonl(first) == 0  # existing ids are skipped
        second = tmp_path / "second.jsonl"
        target.export_jsonl(second, namespaces="all")
        assert second.read_text(encoding="utf-8") == first.read_text(encoding="utf-8")
        back = stream_of(SQLiteBackend(None))
        back.import_jsonl(second)
        third = tmp_path / "third.jsonl"
        back.export_jsonl(third, namespaces="all")
        assert third.read_text(encoding="utf-8") == first.read_text(encoding="utf-8")
        for config in SHARED_SCORINGS:
            for query in QUERIES:
                got = exact_top(target.backend, "default", query, config)
                assert got == exact_top(reference, "default", query, config)
        back.close()

    def test_import_into_another_namespace_copies_under_new_ids(
        self, backend: BaseMemoryBackend, tmp_path: Path
    ) -> None:
        """Ids are unique across namespaces: a copy moved into another namespace gets ids of
        its own (evidence following them, store items keyed in the new namespace), so it
        lives beside the original and a second import finds it."""
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)
        store = ReflectiveStore(stream)
        store.put(("users", "alice"), "drink", {"text": "alice drinks tea"})
        facts = stream.add(["alice w1 w2", "alice w3"], namespace="users/alice", now=NOW)
        stream.add(
            "insight w1",
            kinds=REFLECTION,
            evidence=[[facts[0].id, store.memory_id("users/alice", "drink")]],
            namespace="users/alice",
            now=NOW,
        )
        export = tmp_path / "alice.jsonl"
        assert stream.export_jsonl(export, namespaces=["users/alice"]) == 4
        carol = "users/carol"
        assert stream.import_jsonl(export, namespace=carol) == 4
        assert stream.import_jsonl(export, namespace=carol) == 0  # found again
        assert stream.import_jsonl(export) == 0  # the originals are untouched
        assert stream.count(namespace="users/alice") == 4
        copies = stream.recent(None, namespace=carol)
        assert len(copies) == 4
        assert not {r.id for r in copies} & {
            r.id for r in stream.recent(None, namespace="users/alice")
        }
        (insight,) = [r for r in copies if r.kind == REFLECTION]
        cited = stream.get(list(insight.evidence), namespace=carol)
        assert sorted(r.text for r in cited) == ["alice drinks tea", "alice w1 w2"]
        item = store.get(("users", "carol"), "drink")
        assert item is not None and item.value == {"text": "alice drinks tea"}
        assert [i.key for i in store.search(("users", "carol"))].count("drink") == 1

    def test_merging_namespaces_that_hold_one_id_keeps_every_memory(
        self, backend: BaseMemoryBackend, tmp_path: Path
    ) -> None:
        """Two namespaces may hold one id: an import merging them into one namespace keeps
        both memories (a moved id was tagged with the target namespace only, so the second
        was taken for the first and dropped), their evidence follows each its own, a plain
        memory holding a store item's id stays apart from the item, and a second import finds
        everything."""
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)
        store = ReflectiveStore(stream)
        store.put(("alice",), "drink", {"text": "alice drinks tea"})
        item_id = store.memory_id("alice", "drink")
        for ns in ("alice", "bob"):
            stream.add([f"{ns} w1"], ids=["x1"], namespace=ns, now=NOW)
            stream.add(f"{ns} insight", kinds=REFLECTION, evidence=[["x1"]], ids=["i1"],
                       namespace=ns, now=NOW)  # fmt: skip
        stream.add(["bob's note w2"], ids=[item_id], namespace="bob", now=NOW)
        export = tmp_path / "all.jsonl"
        assert stream.export_jsonl(export, namespaces="all") == 6
        assert stream.import_jsonl(export, namespace="merged") == 6
        assert stream.import_jsonl(export, namespace="merged") == 0
        merged = stream.recent(None, namespace="merged")
        assert sorted(r.text for r in merged) == [
            "alice drinks tea", "alice insight", "alice w1", "bob insight", "bob w1",
            "bob's note w2",
        ]  # fmt: skip
        for ns in ("alice", "bob"):
            (insight,) = [r for r in merged if r.text == f"{ns} insight"]
            cited = stream.get(list(insight.evidence), namespace="merged")
            assert [r.text for r in cited] == [f"{ns} w1"]
        item = store.get(("merged",), "drink")
        assert item is not None and item.value == {"text": "alice drinks tea"}

    def test_merging_separate_exports_that_hold_one_id_keeps_every_memory(
        self, backend: BaseMemoryBackend, tmp_path: Path
    ) -> None:
        """Each namespace's export imported into one namespace, one file after the other: the
        second file's memory of an id the first one moved there is kept beside it (it was
        skipped as already imported), its evidence cites its own, and importing any file
        again, one at a time or both in one file, adds nothing."""
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)
        exports = {}
        for ns in ("alice", "bob"):
            stream.add([f"{ns} w1"], ids=["x1"], namespace=ns, now=NOW)
            stream.add(f"{ns} insight", kinds=REFLECTION, evidence=[["x1"]], ids=["i1"],
                       namespace=ns, now=NOW)  # fmt: skip
            exports[ns] = tmp_path / f"{ns}.jsonl"
            assert stream.export_jsonl(exports[ns], namespaces=[ns]) == 2
        both = tmp_path / "both.jsonl"
        assert stream.export_jsonl(both, namespaces=["bob", "alice"]) == 4
        assert stream.import_jsonl(exports["alice"], namespace="merged") == 2
        assert stream.import_jsonl(exports["bob"], namespace="merged") == 2
        for again in (exports["alice"], exports["bob"], both):
            assert stream.import_jsonl(again, namespace="merged") == 0, again.name
        merged = stream.recent(None, namespace="merged")
        assert sorted(r.text for r in merged) == [
            "alice insight", "alice w1", "bob insight", "bob w1",
        ]  # fmt: skip
        for ns in ("alice", "bob"):
            (insight,) = [r for r in merged if r.text == f"{ns} insight"]
            cited = stream.get(list(insight.evidence), namespace="merged")
            assert [r.text for r in cited] == [f"{ns} w1"]

    def test_import_binds_the_stream_dimension_and_a_refused_export_writes_nothing(
        self, backend: BaseMemoryBackend, tmp_path: Path
    ) -> None:
        """An export of the same model name at another dimension is embedded again: the
        empty backend is bound to the stream's dimension, not the export's (which made every
        later add and retrieve a DimensionMismatchError). An export refused for a bad line
        (a vector of another length, a lone surrogate in the evidence) leaves the backend
        empty and unbound."""
        export = tmp_path / "sixteen.jsonl"
        with MemoryStream(WordEmbeddings(16), embedding_model=MODEL) as source:
            source.add(["alice w1 w2", "bob w3 tea"], importances=0.5, now=NOW)
            source.export_jsonl(export)
        lines = export.read_text(encoding="utf-8").splitlines()
        for change in ({"vector": [0.25] * 15}, {"evidence": ["\ud800"], "depth": 1}):
            bad = tmp_path / "bad.jsonl"
            bad.write_text("\n".join([*lines[:2], json.dumps({**json.loads(lines[2]), **change})]))
            stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)
            with pytest.raises(InvalidMemoryError, match=r"bad\.jsonl:3: "):
                stream.import_jsonl(bad)
            assert backend.namespaces() == [] and backend.dimension is None
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)
        assert stream.import_jsonl(export) == 2
        assert backend.dimension == 32
        stream.add("carol w4", importances=0.5, now=NOW)
        assert stream.retrieve("bob tea", k=1, now=NOW)[0].record.text == "bob w3 tea"

    def test_several_namespaces_rank_as_one(self, backend: BaseMemoryBackend) -> None:
        """``retrieve(namespaces=[...])`` ranks the namespaces' memories as one namespace
        holding them all would (min-max over all of them), touches each in its own namespace,
        and never reads one it was not given."""
        alice, bob = corpus(70, namespace="alice"), corpus(70, seed=9, namespace="bob")
        both = [dataclasses.replace(r, id="both-" + r.id, namespace="both") for r in alice + bob]
        for records in (alice, bob, both):
            self.fill(backend, records)
        backend.put(corpus(5, seed=4, namespace="carol"), vectors_of(corpus(5, seed=4)))
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)

        def ranked(hits: list[Any]) -> list[tuple[str, float]]:
            return [(h.record.id.removeprefix("both-"), h.score) for h in hits]

        def same(got: list[Any], want: list[Any]) -> bool:
            return [i for i, _ in got] == [i for i, _ in want] and [s for _, s in got] == (
                pytest.approx([s for _, s in want], abs=1e-6)
            )

        def exact(namespaces: list[str], query: str, config: ScoringConfig) -> list[Any]:
            sets = [
                backend.candidates(
                    ns,
                    query,
                    query_vector(query),
                    k=10,
                    filter=RetrievalFilter(),
                    config=config,
                    exact=True,
                )
                for ns in namespaces
            ]
            found, origin = concat_candidates(sets) if len(sets) > 1 else (sets[0], None)
            comps, _ = score_candidates(config, found, NOW.timestamp())
            best = top_k(comps.score, 10)
            owners = [0] * len(best) if origin is None else origin[best].tolist()
            return [
                (backend.fetch(namespaces[o], [k])[k].id.removeprefix("both-"), sc)
                for k, o, sc in zip(
                    found.keys[best].tolist(), owners, comps.score[best].tolist(), strict=True
                )
            ]

        for config in (ScoringConfig.paper(), ScoringConfig.dense()):  # (no neighbour links)
            for query in QUERIES:
                want = exact(["both"], query, config)
                assert same(exact(["alice", "bob"], query, config), want)
                kw: dict[str, Any] = {"k": 10, "now": NOW, "touch": False, "scoring": config}
                joint = stream.retrieve(query, namespaces=["alice", "bob"], **kw)
                assert {h.record.namespace for h in joint} <= {"alice", "bob"}
                if backend.candidates(
                    "both",
                    query,
                    query_vector(query),
                    k=10,
                    filter=RetrievalFilter(),
                    config=config,
                ).exact:  # (an approximate backend's candidates depend on its index)
                    assert same(ranked(joint), want)
        later = NOW + timedelta(hours=3)
        hits = stream.retrieve("tea paris", k=12, now=later, namespaces=["bob", "alice"])
        assert {h.record.namespace for h in hits} == {"alice", "bob"}
        for h in hits:
            (stored,) = backend.get(h.record.namespace, [h.record.id])
            assert stored.last_accessed_at == later == h.record.last_accessed_at
        for bad in ({"namespaces": "alice"}, {"namespaces": []}):
            with pytest.raises(InvalidMemoryError, match="namespaces"):
                stream.retrieve("tea", **bad)
        with pytest.raises(InvalidMemoryError, match="not both"):
            stream.retrieve("tea", namespace="alice", namespaces=["bob"])

    def test_a_namespace_ranked_with_others_is_not_its_own_best_match(
        self, backend: BaseMemoryBackend
    ) -> None:
        """The lexical half is relative to the best match of every namespace ranked: a lone
        memory sharing one word with the query is its namespace's best match (1.0 alone) but
        not the others' (a store's prefix search over both used to rank it as 1.0)."""
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)
        stream.add(
            ["tea in paris", "coffee on the train", "music in the garden", "tea at home"],
            importances=0.5,
            namespace="rich",
            now=NOW,
        )
        stream.add(["a train to nowhere"], importances=0.5, namespace="solo", now=NOW)
        kw: dict[str, Any] = {"k": 5, "now": NOW, "touch": False}
        (alone,) = stream.retrieve("coffee train", namespace="solo", **kw)
        assert alone.lexical == pytest.approx(1.0)
        joint = {
            h.record.text: h
            for h in stream.retrieve("coffee train", namespaces=["rich", "solo"], **kw)
        }
        assert joint["coffee on the train"].lexical == pytest.approx(1.0)
        assert joint["a train to nowhere"].lexical < 0.9
        assert joint["a train to nowhere"].score < alone.score

    @pytest.mark.parametrize("kind", ["item", OBSERVATION])
    def test_store_items_rank_on_their_own(self, backend: BaseMemoryBackend, kind: str) -> None:
        """Store items (kind ``"item"``) are independent facts: an unrelated item put right
        after a relevant one scores as it does alone. Items stored as observations are a
        stream of related events, and the default scoring's neighbour context pulls it up."""
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)
        store = ReflectiveStore(stream) if kind == "item" else ReflectiveStore(stream, kind=kind)
        store.put(("a",), "pet", {"text": "alice has a cat named miso"})
        store.put(("a",), "colour", {"text": "bob likes blue"})
        store.put(("b",), "colour", {"text": "bob likes blue"})

        def scores(ns: tuple[str, ...]) -> dict[str, float]:
            hits = store.search(ns, query="cat named miso", limit=5)
            return {h.key: float(h.score or 0.0) for h in hits}

        after, alone = scores(("a",)), scores(("b",))
        assert after["pet"] > after["colour"]
        if kind == "item":
            assert after["colour"] == pytest.approx(alone["colour"], abs=1e-4)
        else:
            assert after["colour"] > alone["colour"] + 0.2

    # -- async twins -------------------------------------------------------------------------

    def test_async_twins_match_the_sync_methods(
        self, backend: BaseMemoryBackend, loop: asyncio.AbstractEventLoop
    ) -> None:
        records = corpus(15)

        async def run() -> None:
            await backend.abind_embeddings(MODEL, 32)
            await backend.aput(
                records, vectors_of(records), counter=CounterUpdate("alice", adds=15)
            )
            assert await backend.aget("alice", [records[2].id]) == [records[2]]
            assert await backend.acount("alice") == 15
            assert (await backend.areflection_state("alice")).adds_since == 15
            found = await backend.acandidates(
                "alice",
                "tea",
                query_vector("tea"),
                k=3,
                filter=RetrievalFilter(),
                config=ScoringConfig.paper(),
            )
            keys = found.keys[:2].tolist()
            touched = await backend.atouch("alice", keys, NOW)
            assert set(touched) == set(keys)
            with pytest.raises(DimensionMismatchError):  # as the sync method refuses it
                await backend.acandidates(
                    "alice", "tea", np.ones(16, dtype=np.float32) / 4, k=3,
                    filter=RetrievalFilter(), config=ScoringConfig.paper(),
                )  # fmt: skip
            async with backend.areflection_lock("alice"):
                with pytest.raises(TimeoutError), backend.reflection_lock("alice", timeout=0):
                    pass
            assert await backend.adelete("alice", [records[0].id]) == 1
            assert await backend.apurge("alice") == 14

        loop.run_until_complete(run())

    def test_async_reflection_locks_wait_for_each_other_and_a_cancelled_wait_holds_nothing(
        self, backend: BaseMemoryBackend, loop: asyncio.AbstractEventLoop
    ) -> None:
        """``areflection_lock`` took the lock on one worker thread and released it from
        another; a file lock keeps its holders per thread, so a later wait on the first
        thread raised ``RuntimeError('Deadlock: ...')`` instead of waiting (SQLite file)."""
        inside: list[int] = []

        async def hold(i: int) -> None:
            async with backend.areflection_lock("alice"):
                inside.append(i)
                assert len(inside) == 1, "two holders of one namespace's lock at once"
                await asyncio.sleep(0.002)
                inside.remove(i)

        async def run() -> None:
            for _ in range(8):
                await asyncio.gather(*(hold(i) for i in range(4)))
            async with backend.areflection_lock("alice"):
                waiter = asyncio.ensure_future(hold(99))
                await asyncio.sleep(0.05)
                waiter.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiter
            async with (
                backend.areflection_lock("alice", timeout=5),  # (nothing left held)
                backend.areflection_lock("bob", timeout=0),  # (one lock per namespace)
            ):
                pass

        loop.run_until_complete(run())

    def test_stream_transfer_and_queue_twins_match_the_sync_methods(
        self,
        backends: Callable[[], BaseMemoryBackend],
        tmp_path: Path,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """``aexport_jsonl``/``aimport_jsonl`` write and read what the sync methods do, and
        ``aenqueue``/``apending`` queue what ``enqueue``/``pending`` do, on this backend."""

        def stream_of(backend: BaseMemoryBackend) -> MemoryStream:
            return MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)

        source = stream_of(backends())
        source.add([r.text for r in corpus(12)], importances=0.5, now=NOW)
        source.add("other ns", namespace="bob", now=NOW)
        sync_file, async_file = tmp_path / "sync.jsonl", tmp_path / "async.jsonl"
        sync_copy, async_copy = stream_of(backends()), stream_of(backends())

        async def run() -> None:
            assert await source.aexport_jsonl(async_file, namespaces="all") == 13
            assert source.export_jsonl(sync_file, namespaces="all") == 13
            assert async_file.read_bytes() == sync_file.read_bytes()
            assert await async_copy.aimport_jsonl(sync_file, batch_size=5) == 13
            assert sync_copy.import_jsonl(sync_file, batch_size=5) == 13
            assert await async_copy.aimport_jsonl(sync_file) == 0
            queued = await async_copy.aenqueue(["later w1", "later w2"], now=NOW)
            expected = sync_copy.enqueue(["later w1", "later w2"], now=NOW)
            assert [(p.text, p.created_at) for p in queued] == [
                (p.text, p.created_at) for p in expected
            ]
            pending = await async_copy.apending()
            assert [p.id for p in pending] == [p.id for p in queued]
            assert [p.text for p in pending] == [p.text for p in sync_copy.pending()]

        loop.run_until_complete(run())
        sync_copy.export_jsonl(sync_file, namespaces="all")
        async_copy.export_jsonl(async_file, namespaces="all")
        assert async_file.read_bytes() == sync_file.read_bytes()


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
