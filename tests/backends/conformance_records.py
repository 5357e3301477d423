"""The backend conformance suite (tests/backends/conformance.py): records stored and read
back with every field, typed errors that lose nothing, namespaces that never see each other
(an id belongs to its namespace), deletes, purges and replaces."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from langchain_reflective import MemoryStream, ReflectiveStore
from langchain_reflective.backends.base import BaseMemoryBackend, CounterUpdate, RetrievalFilter
from langchain_reflective.errors import (
    DimensionMismatchError,
    DuplicateIdError,
    EmbeddingError,
    InvalidFilterError,
    InvalidMemoryError,
    StorageError,
)
from langchain_reflective.records import OBSERVATION, REFLECTION, MemoryRecord
from langchain_reflective.scoring import ScoringConfig
from tests.backends.conformance_base import (
    MODEL,
    NOW,
    ConformanceBase,
    _fresh,
    _pending,
    corpus,
    exact_top,
    query_vector,
    vectors_of,
)
from tests.fakes import WordEmbeddings


class RecordsConformance(ConformanceBase):
    """Storing, reading, deleting and replacing records; errors; namespaces."""

    # -- records -------------------------------------------------------------------------------

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

    # -- errors --------------------------------------------------------------------------------

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

    # -- namespaces ----------------------------------------------------------------------------

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

    # -- delete and purge ----------------------------------------------------------------------

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
