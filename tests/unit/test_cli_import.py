"""``reflective import`` when it cannot import everything: a malformed line fails before anything
is written, and an import that fails halfway (a memory refused in the second batch) says how
many records it wrote before the error, in its one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.errors import InvalidMemoryError
from tests.fakes import WordEmbeddings
from tests.unit.cli_run import one_line, run_cli

cli = pytest.importorskip("langchain_reflective.cli", reason='needs the cli extra ("[cli]")')
cli_files = pytest.importorskip("langchain_reflective.cli.files")

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
BATCH = 256
"""Records the import writes per transaction (``import_jsonl``'s default)."""


def texts(path: Path) -> list[str]:
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        return sorted(r.text for r in stream.recent(None))


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """An export of 300 memories whose 290th holds id ``x``, and a memory file holding another
    memory under ``x``."""
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    ids = [f"m{i}" for i in range(300)]
    ids[289] = "x"
    with MemoryStream(WordEmbeddings(), path=source) as stream:
        stream.add([f"memory {i}" for i in range(300)], ids=ids, importances=0.5, now=T0)
        stream.export_jsonl(tmp_path / "export.jsonl")
    with MemoryStream(WordEmbeddings(), path=target) as stream:
        stream.add("the other x", ids=["x"], importances=0.5, now=T0 + timedelta(days=1))
    return tmp_path / "export.jsonl", target


def test_an_import_failing_halfway_says_what_it_imported(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the library's note ("256 record(s) ... were imported before this error") was
    dropped; the user saw only the refusal and could not tell the file had changed."""
    export, target = files
    code, _, err = run_cli(capsys, "import", export, target)
    line = one_line(err)
    assert code == 1
    assert "holds another memory under its id" in line
    assert f"{BATCH} record(s) of {export} were imported before this error" in line
    assert len(texts(target)) == 1 + BATCH  # what the message says


def test_a_refused_memory_names_the_command_line_option(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal named only the API (``namespace=...``); it names --namespace too, and both
    ways to resolve it say where they apply."""
    export, target = files
    code, _, err = run_cli(capsys, "import", export, target)
    line = one_line(err)
    assert code == 1
    assert "--namespace with 'reflective import'" in line
    assert "the namespace= argument in Python" in line and "delete() in Python" in line


@pytest.mark.parametrize("namespace", [[], ["--namespace", "elsewhere"]], ids=["kept", "moved"])
@pytest.mark.parametrize("new", [True, False], ids=["new-file", "existing-file"])
@pytest.mark.parametrize("twin_of", [3, 1], ids=["same-batch", "next-batch"])
def test_two_memories_of_one_id_fail_before_anything_is_written(
    files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    twin_of: int,
    new: bool,
    namespace: list[str],
) -> None:
    """Before: the import refused the second line when its batch came, with remedies that
    cannot work (delete the other memory -- in the next batch, the one this import had just
    written --, or import into another namespace, where both lines get one new id again),
    after the batches before it were written. Now the check before the import finds it."""
    export, target = files
    lines = export.read_text(encoding="utf-8").splitlines()
    twin = {**json.loads(lines[twin_of]), "text": "another memory under that id"}
    export.write_text("\n".join([*lines, json.dumps(twin)]) + "\n", encoding="utf-8")
    twin_at = len(lines) + 1  # (its line number: the header is line 1)
    if new:
        target = tmp_path / "new.db"
    code, _, err = run_cli(capsys, "import", export, target, *namespace)
    line = one_line(err)
    assert code == 1 and f"{export}:{twin_at}: memory " in line, line
    assert f"the export itself is inconsistent: {export}:{twin_of + 1} holds another" in line
    assert "remove or edit one of the two lines" in line and "nothing was imported" in line
    assert "Delete the other memory" not in line
    assert not target.exists() if new else texts(target) == ["the other x"]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("{not json", "Expecting property name"),
        ("[1, 2]", "a memory record is a JSON object, not list"),
        ('{"text": "no id"}', "malformed memory record"),
    ],
)
def test_a_malformed_line_fails_before_anything_is_written(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], bad: str, says: str
) -> None:
    """Before: the 256 records of the first batch were written, then the line failed."""
    export, target = files
    lines = export.read_text(encoding="utf-8").splitlines()
    lines[290] = bad  # (the 290th record: the second batch)
    export.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "import", export, target, "--namespace", "default")
    line = one_line(err)
    assert code == 1 and f"{export}:291: " in line and says in line, line
    assert "nothing was imported" in line
    assert texts(target) == ["the other x"]


@pytest.mark.parametrize(
    ("vector", "says"),
    [
        (lambda v: ["x"] * len(v), "vector must be a list of numbers"),
        (lambda v: [float("nan")] * len(v), "vector holds NaN or infinite values, or only zeros"),
        (lambda v: [0.0] * len(v), "vector holds NaN or infinite values, or only zeros"),
        (lambda v: [*v, 0.5], f"the vector has {64 + 1} values; the export's vectors have 64"),
    ],
    ids=["not-numbers", "nan", "zeros", "dimension"],
)
def test_a_bad_vector_fails_before_anything_is_written(
    files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    vector: Callable[[list[float]], list[Any]],
    says: str,
) -> None:
    """Before: the check before the import read only JSON and the record, not the vector, so
    the 256 records of the first batch were written into the existing file, then the import
    refused the vector of the 290th record."""
    export, target = files
    lines = export.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[290])
    record["vector"] = vector(record["vector"])
    lines[290] = json.dumps(record)
    export.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "import", export, target)
    line = one_line(err)
    assert code == 1 and f"{export}:291: {says}" in line and "nothing was imported" in line
    assert texts(target) == ["the other x"]


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    def loaded(*args: object, **kwargs: object) -> None:
        raise AssertionError("the embedding model was loaded")

    monkeypatch.setattr(cli_files, "_load_embeddings", loaded)


def test_an_export_of_a_newer_format_is_refused_before_the_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_model: None
) -> None:
    """Before: the check before the import did not read the header's version; an export
    without vectors loaded the embedding model, then the import refused the version."""
    export = tmp_path / "export.jsonl"
    with MemoryStream(WordEmbeddings(), path=tmp_path / "source.db") as stream:
        stream.add("a memory", importances=0.5, now=T0)
        stream.export_jsonl(export, include_vectors=False)
    header, *lines = export.read_text(encoding="utf-8").splitlines()
    export.write_text("\n".join([json.dumps({**json.loads(header), "version": 2}), *lines]))
    code, _, err = run_cli(capsys, "import", export, tmp_path / "new.db")
    assert code == 1 and "an export of format version 2, newer than" in one_line(err)
    assert not (tmp_path / "new.db").exists()


def test_a_header_dimension_of_true_does_not_pass_for_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``"dimension": true`` is no dimension (the import reads it so): the vectors of one
    value cannot be reused as they are. Before: the check took it for 1, the import ran
    without a model and failed ("this command needs the embedding model, but none was
    loaded"); now the texts are embedded again."""
    export = tmp_path / "export.jsonl"
    with MemoryStream(WordEmbeddings(), path=tmp_path / "source.db") as stream:
        stream.add(["one", "two"], importances=0.5, now=T0)
        stream.export_jsonl(export)
    header, *lines = export.read_text(encoding="utf-8").splitlines()
    records = [{**json.loads(line), "vector": [1.0]} for line in lines]
    export.write_text(
        "\n".join(json.dumps(d) for d in [{**json.loads(header), "dimension": True}, *records])
    )
    monkeypatch.setattr(cli_files, "_load_embeddings", lambda *a, **k: WordEmbeddings())
    code, out, err = run_cli(capsys, "import", export, tmp_path / "new.db")
    assert (code, err) == (0, "") and "Imported 2 memories" in out
    assert "embedding the texts again" in " ".join(out.split())


def test_what_was_not_imported_is_counted_for_what_it_is(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Before: into a new file, "1 of its 301 were stored already" for a line repeating an
    earlier one (in another batch): the file held nothing. Imported again, the 300 are stored
    already and the repeat is still a repeat."""
    export, _ = files
    lines = export.read_text(encoding="utf-8").splitlines()
    export.write_text("\n".join([*lines, lines[1]]) + "\n", encoding="utf-8")
    target = tmp_path / "new.db"
    code, out, _ = run_cli(capsys, "import", export, target)
    flat = " ".join(out.split())
    assert code == 0 and "Imported 300 memories" in flat, flat
    assert "1 of its 301 repeated an earlier line" in flat and "stored already" not in flat
    code, out, _ = run_cli(capsys, "import", export, target)
    flat = " ".join(out.split())
    assert code == 0 and "Imported 0 memories" in flat, flat
    assert "; 300 of its 301 were stored already; 1 of its 301 repeated an earlier line" in flat


def test_store_items_merged_by_a_namespace_are_not_called_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: "1 of its 2 were stored already" into a new file, for the item of one key that
    --namespace merged away (the first in the file is kept)."""
    from langchain_reflective import ReflectiveStore

    export = tmp_path / "items.jsonl"
    with MemoryStream(WordEmbeddings(), path=tmp_path / "source.db") as stream:
        store = ReflectiveStore(stream)
        store.put(("a",), "k", {"text": "from a"})
        store.put(("b",), "k", {"text": "from b"})
        stream.export_jsonl(export, namespaces=["a", "b"])
    code, out, _ = run_cli(capsys, "import", export, tmp_path / "new.db", "--namespace", "m")
    flat = " ".join(out.split())
    assert code == 0 and "Imported 1 memories" in flat, flat
    assert "1 of its 2 were store items merged into the first of their key" in flat
    assert "stored already" not in flat


def failing_batches(monkeypatch: pytest.MonkeyPatch, fail_at: int, error: BaseException) -> None:
    """The import's ``fail_at``-th batch (1: the first) raises ``error``; the others import."""
    from langchain_reflective import transfer_import as transfer

    real, calls = transfer._import_batch, []

    def batch(*args: Any) -> int:
        calls.append(1)
        if len(calls) == fail_at:
            raise error
        return real(*args)

    monkeypatch.setattr(transfer, "_import_batch", batch)


def test_a_failure_in_the_first_batch_of_a_new_file_says_it_was_removed(
    files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the "removed" note replaced the import's note, so with no batch imported
    (no note) the user was not told the new file was removed."""
    export, _ = files
    failing_batches(monkeypatch, 1, InvalidMemoryError("the disk broke"))
    target = tmp_path / "new.db"
    code, _, err = run_cli(capsys, "import", export, target)
    line = one_line(err)
    assert code == 1
    assert (
        line == f"error: the disk broke -- nothing was imported: the new file {target} was removed"
    )
    assert not target.exists()


def test_a_failed_import_into_a_new_file_keeps_notes_not_its_own(
    files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the note saying batches were imported goes (the file is gone); before, every
    note of the error was replaced."""
    export, _ = files
    error = InvalidMemoryError("the disk broke")
    error.add_note("a note of the backend")
    failing_batches(monkeypatch, 2, error)
    target = tmp_path / "new.db"
    code, _, err = run_cli(capsys, "import", export, target)
    line = one_line(err)
    assert code == 1 and "a note of the backend" in line, line
    assert "were imported before" not in line
    assert f"nothing was imported: the new file {target} was removed" in line


def test_ctrl_c_halfway_into_an_existing_file_says_what_was_written(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "error: interrupted" alone, though the first batch was written (the import
    added its note only to an Exception, and typer reports a Ctrl-C as a bare status)."""
    export, target = files
    failing_batches(monkeypatch, 2, KeyboardInterrupt())
    code, _, err = run_cli(capsys, "import", export, target)
    line = one_line(err)
    assert code == 130
    assert line.startswith(
        f"error: interrupted -- {BATCH} record(s) of {export} were imported before the "
        "interruption (whole batches)"
    ), line
    assert len(texts(target)) == 1 + BATCH


def test_ctrl_c_into_a_new_file_says_it_was_removed(
    files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    export, _ = files
    failing_batches(monkeypatch, 2, KeyboardInterrupt())
    target = tmp_path / "new.db"
    code, _, err = run_cli(capsys, "import", export, target)
    assert code == 130
    assert one_line(err) == (
        f"error: interrupted -- nothing was imported: the new file {target} was removed"
    )
    assert not target.exists()


def test_import_help_says_a_different_memory_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(capsys, "import", "--help")
    flat = " ".join(out.replace("│", " ").split())
    assert code == 0
    assert "existing ids are skipped" not in flat
    assert "A different memory stored under one of the export's ids is refused" in flat
    assert "the error says how many" in flat


def test_a_moved_memory_landing_on_another_line_s_id_fails_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An export of namespaces ``t`` and ``a`` where ``t`` holds an earlier copy of a's
    memory ``m299`` (under the id --namespace t gives it) and a's ``m299`` is another memory
    now. Before: the check keyed the lines by the ids they had in the file, not the ones the
    import gives them, so it passed; the import refused line 302 after the 256 records of
    the first batch were written into the existing file."""
    from langchain_reflective.transfer_moves import namespace_tag

    export, target = tmp_path / "e.jsonl", tmp_path / "target.db"
    copy = f"m299@{namespace_tag('t')}@{namespace_tag('a')}"
    with MemoryStream(WordEmbeddings(), path=tmp_path / "source.db") as stream:
        ids = [f"m{i}" for i in range(300)]
        stream.add(ids, ids=ids, importances=0.5, namespace="a", now=T0)
        stream.add("the earlier m299", ids=[copy], importances=0.5, namespace="t", now=T0)
        stream.export_jsonl(export, namespaces=["t", "a"])
    with MemoryStream(WordEmbeddings(), path=target) as stream:
        stream.add("already there", importances=0.5, namespace="t", now=T0)
    code, _, err = run_cli(capsys, "import", export, target, "--namespace", "t")
    line = one_line(err)
    assert code == 1 and f"{export}:302: memory " in line, line
    assert f"the export itself is inconsistent: {export}:2 holds another" in line
    assert "nothing was imported" in line and "were imported before" not in line
    with MemoryStream(WordEmbeddings(), path=target) as stream:
        assert [r.text for r in stream.recent(None, namespace="t")] == ["already there"]
