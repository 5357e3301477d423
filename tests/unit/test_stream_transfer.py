"""MemoryStream's JSONL export and import: round trips, refused files, what a failed import
reports, imports raced by another worker, namespaces merged by id, whole batches, and the
first passes of a move."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import InvalidMemoryError, MemoryStream, StorageError
from langchain_reflective.records import MemoryRecord
from tests.fakes import WordEmbeddings
from tests.unit.stream_facts import FACTS


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


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_export_refuses_a_namespace_name_given_alone(
    tmp_path: Path, stream, use_async: bool
) -> None:
    """Before: ``namespaces="bo"`` (a user id passed as it is) was read letter by letter and
    exported the namespaces ``b`` and ``o`` (other users' memories), not ``bo``'s. A string
    other than ``"all"`` is refused before anything is written; ``["all"]`` names the
    namespace called ``all``."""
    for ns, text in (("b", "bob's pin is 4321"), ("o", "olga's diagnosis"), ("bo", "own note")):
        stream.add(text, namespace=ns, importances=0.5)
    stream.add("a note of the user named all", namespace="all", importances=0.5)
    out = tmp_path / "out.jsonl"
    for bad in ("bo", b"bo", 3):
        with pytest.raises(InvalidMemoryError, match=r"namespaces=\[name\]"):
            if use_async:
                await stream.aexport_jsonl(out, namespaces=bad)
            else:
                stream.export_jsonl(out, namespaces=bad)
    assert not out.exists()
    assert stream.export_jsonl(out, namespaces=["bo"]) == 1
    assert "own note" in out.read_text()
    assert stream.export_jsonl(out, namespaces=["all"]) == 1
    assert stream.export_jsonl(out, namespaces="all") == 4


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
    # a first line nested too deep to decode, or with an integer past Python's digit limit:
    # a raw RecursionError / ValueError escaped before
    for first in ("[" * 100_000 + "]" * 100_000, '{"format": ' + "9" * 5_000 + "}"):
        bad.write_text(first + "\n" + json.dumps(line) + "\n")
        with pytest.raises(InvalidMemoryError, match="not a langchain-reflective export"):
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
    path, alices = tmp_path / "all.jsonl", tmp_path / "alice.jsonl"
    assert stream.export_jsonl(path, namespaces="all") == 2
    assert stream.export_jsonl(alices, namespaces=["alice"]) == 1
    shared = tmp_path / "shared.db"
    with (
        MemoryStream(WordEmbeddings(), path=shared) as first,
        MemoryStream(WordEmbeddings(), path=shared) as second,
    ):
        _race_after_lookup(  # the other worker imports alice's memory
            monkeypatch, first, lambda: second.import_jsonl(alices)
        )
        assert first.import_jsonl(path) == 1
        assert [r.text for r in first.recent(None, namespace="bob")] == ["bob likes coffee"]
        assert first.count(namespace="alice") == 1


def test_a_raced_import_refuses_an_id_another_worker_stored_for_another_memory(
    tmp_path: Path, stream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: an id stored by another worker between the import's lookup and its write was
    skipped as "stored already" without comparing, so the file's memory was silently not
    imported when the id held another one; found at the lookup, the same id is refused."""
    stream.add(["alice likes tea"], ids=["x1"], namespace="alice", importances=0.5)
    path = tmp_path / "alice.jsonl"
    assert stream.export_jsonl(path, namespaces="all") == 1
    shared = tmp_path / "shared.db"
    with (
        MemoryStream(WordEmbeddings(), path=shared) as first,
        MemoryStream(WordEmbeddings(), path=shared) as second,
    ):
        _race_after_lookup(  # the other worker stores another memory under that id
            monkeypatch,
            first,
            lambda: second.add(["alice hates tea"], ids=["x1"], namespace="alice"),
        )
        with pytest.raises(InvalidMemoryError, match="holds another memory under its id"):
            first.import_jsonl(path)
        assert [r.text for r in first.recent(None, namespace="alice")] == ["alice hates tea"]


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


def test_an_import_with_nothing_to_move_reads_the_file_once(
    tmp_path: Path, stream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``namespace=`` naming the namespace the records already hold (as ``ContextMemory``'s
    import always does) moves nothing: the first passes, which decide moved ids, never run."""
    from langchain_reflective import transfer_import as transfer

    stream.add(["tea", "coffee"], namespace="alice", importances=0.5)
    export = tmp_path / "e.jsonl"
    stream.export_jsonl(export, namespaces=["alice"])

    def unexpected(*args: Any) -> Any:
        raise AssertionError("a first pass ran")

    monkeypatch.setattr(transfer, "plan_moves", unexpected)
    with MemoryStream(WordEmbeddings(), path=tmp_path / "t.db") as target:
        assert target.import_jsonl(export, namespace="alice") == 2
