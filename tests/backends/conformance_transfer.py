"""The backend conformance suite (tests/backends/conformance.py): JSONL exports round trip
between backends byte for byte; imports into another namespace, merges of namespaces that
hold one id, and the dimension an import binds."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream, ReflectiveStore
from langchain_reflective.backends.base import BaseMemoryBackend
from langchain_reflective.backends.sqlite import SQLiteBackend
from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.records import REFLECTION
from langchain_reflective.scoring import ScoringConfig
from tests.backends.conformance_base import (
    MODEL,
    NOW,
    QUERIES,
    SHARED_SCORINGS,
    ConformanceBase,
    corpus,
    exact_top,
)
from tests.fakes import WordEmbeddings


class TransferConformance(ConformanceBase):
    """Export and import."""

    # -- export and import ---------------------------------------------------------------------

    def assert_same_ranking(
        self,
        got: BaseMemoryBackend,
        reference: BaseMemoryBackend,
        query: str,
        config: ScoringConfig,
    ) -> None:
        """``got`` ranks namespace ``default`` for ``query`` as ``reference`` does: the same
        top 10 under exact scoring (a backend whose floats differ overrides it with ties)."""
        assert exact_top(got, "default", query, config) == exact_top(
            reference, "default", query, config
        )

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
                self.assert_same_ranking(target.backend, reference, query, config)
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
