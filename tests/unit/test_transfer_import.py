"""JSONL imports at their edges: a memory deleted and added again under its id, a file holding
two memories of one id, and evidence citing ids the file does not hold.

An import skips what the namespace holds already (the same memory: importing a file again, or
after a failure). Another memory under a record's id used to be skipped too, in silence: the
file's memory was lost and the import reported nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream, ReflectiveStore
from langchain_reflective.errors import InvalidMemoryError
from tests.fakes import WordEmbeddings

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _stream(path: Path) -> MemoryStream:
    return MemoryStream(WordEmbeddings(), path=path)


def test_a_memory_added_again_under_its_id_is_not_skipped_in_silence(tmp_path: Path) -> None:
    """The source deletes a memory and adds another under its id; its next export imported
    into the copy used to skip that memory as "already there" (0 imported, the old one kept).
    It is refused naming both, the batch writes nothing, and once the old one is deleted the
    file imports. Importing the same file again still skips what it holds."""
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    with _stream(tmp_path / "a.db") as source, _stream(tmp_path / "b.db") as copy:
        source.add(["the first version", "kept"], ids=["x", "y"], importances=0.5, now=NOW)
        assert source.export_jsonl(first) == 2
        assert copy.import_jsonl(first) == 2
        source.delete("x")
        source.add("the second version", ids=["x"], importances=0.5, now=NOW + timedelta(1))
        source.add("new", ids=["z"], importances=0.5, now=NOW + timedelta(2))
        assert source.export_jsonl(second) == 3
        with pytest.raises(InvalidMemoryError) as caught:
            copy.import_jsonl(second)
        message = str(caught.value)
        assert message.startswith(f"{second}:")
        assert "'x'" in message and "'the second version'" in message
        assert "'the first version'" in message and "Delete the other memory" in message
        assert sorted(r.text for r in copy.recent(None)) == ["kept", "the first version"]
        assert copy.import_jsonl(first) == 0  # the same memories: skipped, as before
        copy.delete("x")
        assert copy.import_jsonl(second) == 2
        assert sorted(r.text for r in copy.recent(None)) == ["kept", "new", "the second version"]
        assert copy.import_jsonl(second) == 0


def test_a_store_item_put_again_is_not_skipped_in_silence(tmp_path: Path) -> None:
    """A ``ReflectiveStore`` put replaces an item under the same id: the later export's value
    is refused, not dropped, in a copy that holds the earlier one (moved or not)."""
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    with _stream(tmp_path / "a.db") as source, _stream(tmp_path / "b.db") as copy:
        store = ReflectiveStore(source)
        store.put(("u",), "drink", {"text": "tea"})
        source.export_jsonl(first, namespaces=["u"])
        assert copy.import_jsonl(first) == 1
        assert copy.import_jsonl(first, namespace="v") == 1
        store.put(("u",), "drink", {"text": "coffee"})
        source.export_jsonl(second, namespaces=["u"])
        for target in (None, "v"):
            with pytest.raises(InvalidMemoryError, match=r"'coffee'.*another memory.*'tea'"):
                copy.import_jsonl(second, namespace=target)
        copied = ReflectiveStore(copy)
        assert copied.get(("u",), "drink").value == {"text": "tea"}  # type: ignore[union-attr]
        assert copied.get(("v",), "drink").value == {"text": "tea"}  # type: ignore[union-attr]


@pytest.mark.parametrize("batch_size", [1, 256])
def test_a_file_holding_two_memories_of_one_id_is_refused(tmp_path: Path, batch_size: int) -> None:
    """Two files joined, or an export that ran while the memory was deleted and added again:
    the second memory of an id used to be skipped in silence (in one batch or in two). A line
    repeating the same memory is still skipped."""
    with _stream(tmp_path / "a.db") as source:
        source.add("older", ids=["x"], importances=0.5, now=NOW)
        source.export_jsonl(tmp_path / "old.jsonl")
        source.delete("x")
        source.add("newer", ids=["x"], importances=0.5, now=NOW + timedelta(1))
        source.export_jsonl(tmp_path / "new.jsonl")
    header, old_line = (tmp_path / "old.jsonl").read_text(encoding="utf-8").splitlines()
    new_line = (tmp_path / "new.jsonl").read_text(encoding="utf-8").splitlines()[1]
    joined = tmp_path / "joined.jsonl"
    joined.write_text("\n".join([header, old_line, old_line, new_line]) + "\n", encoding="utf-8")
    with _stream(tmp_path / "b.db") as copy:
        with pytest.raises(InvalidMemoryError, match=r"joined\.jsonl:4: memory 'x' \('newer'"):
            copy.import_jsonl(joined, batch_size=batch_size)
        assert [r.text for r in copy.recent(None)] == (["older"] if batch_size == 1 else [])


@pytest.mark.parametrize("namespace", [None, "moved"])
@pytest.mark.parametrize("batch_size", [1, 256])
def test_two_memories_of_one_id_in_the_file_are_named_an_inconsistent_export(
    tmp_path: Path, batch_size: int, namespace: str | None
) -> None:
    """The remedies of a stored memory ("delete the other memory", "import into another
    namespace") cannot help when the other memory is a line of the same file: with a
    namespace both get the same new id and clash again; in two batches the "other memory" was
    the one this import had just written. The error says the export is inconsistent, names
    the earlier line, and says to remove or edit one of the two."""
    export = tmp_path / "e.jsonl"
    with _stream(tmp_path / "a.db") as source:
        source.add(["one", "two"], ids=["a", "b"], importances=0.5, now=NOW)
        source.export_jsonl(export)
    lines = export.read_text(encoding="utf-8").splitlines()
    twin = {**json.loads(lines[1]), "text": "another memory under id a"}
    export.write_text("\n".join([*lines, json.dumps(twin)]) + "\n", encoding="utf-8")
    with _stream(tmp_path / "b.db") as copy, pytest.raises(InvalidMemoryError) as caught:
        copy.import_jsonl(export, namespace=namespace, batch_size=batch_size)
    message = str(caught.value)
    assert message.startswith(f"{export}:4: memory "), message
    assert f"the export itself is inconsistent: {export}:2 holds another memory ('one'" in message
    assert "remove or edit one of the two lines" in message
    assert "Delete the other memory" not in message and "another namespace" not in message


def test_merged_items_of_one_key_keep_the_first_and_import_again_as_nothing(
    tmp_path: Path,
) -> None:
    """Items of one key in several namespaces merged into one: the first in the file is kept
    (they take one id, the key's); importing again is not a conflict with the others."""
    export = tmp_path / "all.jsonl"
    with _stream(tmp_path / "a.db") as stream:
        store = ReflectiveStore(stream)
        store.put(("a",), "k", {"text": "from a"})
        store.put(("b",), "k", {"text": "from b"})
        stream.export_jsonl(export, namespaces=["a", "b"])
        for batch_size in (256, 1):
            stream.import_jsonl(export, namespace="merged", batch_size=batch_size)
        assert store.get(("merged",), "k").value == {"text": "from a"}  # type: ignore[union-attr]
        assert stream.count(namespace="merged") == 1


def test_evidence_the_file_does_not_hold_is_imported_as_it_is(tmp_path: Path) -> None:
    """A reflection citing a memory deleted before the export (or exported elsewhere): the
    reflection is imported whole, citing the id still (moved, the moved id), as the source
    held it; nothing is dropped, and the cited memory imported later resolves it."""
    with _stream(tmp_path / "a.db") as source:
        source.add("a fact", ids=["fact"], importances=0.5, now=NOW)
        source.add("an insight", kinds="reflection", evidence=[["fact"]], ids=["r"], now=NOW)
        source.export_jsonl(tmp_path / "fact.jsonl")
        source.delete("fact")
        assert source.export_jsonl(tmp_path / "insight.jsonl") == 1
    line = json.loads((tmp_path / "insight.jsonl").read_text(encoding="utf-8").splitlines()[1])
    assert line["evidence"] == ["fact"] and line["depth"] == 1
    with _stream(tmp_path / "b.db") as copy:
        assert copy.import_jsonl(tmp_path / "insight.jsonl") == 1
        assert copy.import_jsonl(tmp_path / "insight.jsonl", namespace="moved") == 1
        (plain,) = copy.get(["r"])
        assert plain.evidence == ("fact",) and plain.depth == 1
        (moved,) = copy.recent(None, namespace="moved")
        assert moved.text == "an insight" and moved.depth == 1
        assert copy.get(list(moved.evidence), namespace="moved") == []
        assert copy.import_jsonl(tmp_path / "fact.jsonl", namespace="moved") == 1  # (r: held)
        cited = copy.get(list(moved.evidence), namespace="moved")
        assert [r.text for r in cited] == ["a fact"]


def _checked(export: Path, namespace: str | None = None) -> tuple[int, bool]:
    from langchain_reflective.export_file import open_export, read_header
    from langchain_reflective.transfer_import import check_export

    with open_export(export) as fh:
        check = check_export(fh, export, read_header(fh, export), namespace=namespace)
    return check.records, check.vectors


def test_check_export_refuses_before_the_import_what_it_would_refuse_halfway(
    tmp_path: Path,
) -> None:
    """``check_export`` (run by ``reflective import`` before it writes) counts the records,
    tells whether their vectors can be reused, and refuses a second memory under one id in
    one namespace, naming both lines, as the import would in a later batch; store items that
    a namespace merges pass, as the import keeps the first."""
    export, bare, items = tmp_path / "e.jsonl", tmp_path / "bare.jsonl", tmp_path / "i.jsonl"
    with _stream(tmp_path / "a.db") as source:
        source.add(["one", "two"], ids=["a", "b"], importances=0.5, now=NOW)
        source.export_jsonl(export)
        source.export_jsonl(bare, include_vectors=False)
        store = ReflectiveStore(source)
        store.put(("x",), "k", {"text": "from x"})
        store.put(("y",), "k", {"text": "from y"})
        source.export_jsonl(items, namespaces=["x", "y"])
    assert _checked(export) == (2, True) and _checked(bare) == (2, False)
    assert _checked(items, namespace="merged") == (2, True)
    lines = export.read_text(encoding="utf-8").splitlines()
    export.write_text("\n".join([*lines, lines[1]]) + "\n", encoding="utf-8")  # a repeat: fine
    assert _checked(export) == (3, True)
    twin = {**json.loads(lines[1]), "text": "another memory under id a"}
    export.write_text("\n".join([*lines, json.dumps(twin)]) + "\n", encoding="utf-8")
    with pytest.raises(InvalidMemoryError) as caught:
        _checked(export)
    message = str(caught.value)
    assert message.startswith(f"{export}:4: memory 'a' "), message
    assert f"the export itself is inconsistent: {export}:2 holds another memory " in message
