"""The commands that only read (``inspect``, ``export``) on read-only storage: a read-only
directory or mount, a file the user may not write, a backup copy. SQLite in WAL mode creates
``<file>-wal`` and ``<file>-shm`` beside the file, so opening such a file for writing fails;
the commands read it read-only instead, and never show less than the file holds."""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings
from tests.unit.cli_run import one_line, run_cli
from tests.unit.read_only_storage import listing, permission_bits_apply, read_only

cli_files = pytest.importorskip("langchain_reflective.cli.files", reason="needs the cli extra")

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
TEXTS = ["Ana adopted a greyhound", "It rained all day"]


def _memory_file(folder: Path) -> Path:
    folder.mkdir()
    db = folder / "memory.db"
    with MemoryStream(WordEmbeddings(), path=db) as stream:
        stream.add(TEXTS, importances=0.5, now=T0)
    return db


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    """A copy of a memory file (the file alone, as a closed file is) in a folder of its own."""
    db = _memory_file(tmp_path / "live")
    (tmp_path / "backup").mkdir()
    return Path(shutil.copy2(db, tmp_path / "backup" / db.name))


def _copy_while_open(tmp_path: Path, suffixes: tuple[str, ...]) -> Path:
    """A copy taken while a writer had the file open: its third memory is only in the WAL."""
    db = _memory_file(tmp_path / "live")
    (tmp_path / "backup").mkdir()
    with MemoryStream(WordEmbeddings(), path=db) as stream:
        stream.add("Ben likes chess", importances=0.5, now=T0)
        assert db.with_name(db.name + "-wal").stat().st_size > 0
        for suffix in suffixes:
            shutil.copy2(db.with_name(db.name + suffix), tmp_path / "backup" / (db.name + suffix))
    return tmp_path / "backup" / db.name


def test_inspect_reads_a_file_in_a_read_only_folder(
    backup: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: "cannot open memory file ...: attempt to write a readonly database"."""
    before = listing(backup.parent)
    with read_only(backup.parent, files=True):
        code, out, err = run_cli(capsys, "inspect", backup)
    assert (code, err) == (0, ""), err
    flat = " ".join(out.split())
    assert all(text in flat for text in TEXTS), flat
    assert listing(backup.parent) == before  # nothing written, nothing left beside it


def test_export_reads_a_file_in_a_read_only_folder(
    backup: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Before: the same error as inspect; nothing was exported."""
    out_file = tmp_path / "export.jsonl"
    with read_only(backup.parent, files=True):
        code, out, err = run_cli(capsys, "export", backup, out_file)
    assert (code, err) == (0, ""), err
    assert "Exported 2 memories" in out
    _, *lines = out_file.read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["text"] for line in lines) == sorted(TEXTS)


def test_inspect_query_reads_a_file_in_a_read_only_folder(
    backup: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the overview failed to open the file; ``--query`` opens it a second time, with
    the embedding model, and must not write its index caches beside it either."""
    monkeypatch.setattr(cli_files, "_load_embeddings", lambda *a, **k: WordEmbeddings())
    before = listing(backup.parent)
    with read_only(backup.parent, files=True):
        code, out, err = run_cli(capsys, "inspect", backup, "--query", "greyhound", "-n", "0")
    assert (code, err) == (0, ""), err
    assert "Ranked for: greyhound" in out and "Ana adopted a greyhound" in out
    assert listing(backup.parent) == before


def test_a_file_the_user_may_not_write_is_read(
    backup: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A backup the user may not write (0444) in a folder they may write: read read-only (as
    any SQLite reader, through the WAL: ``backends/sqlite/read_only.py`` says what it leaves
    beside the file), never written."""
    monkeypatch.setattr(cli_files, "_load_embeddings", lambda *a, **k: WordEmbeddings())
    backup.chmod(0o444)
    before = backup.read_bytes()
    with permission_bits_apply():
        for args in (
            ["inspect", backup],
            ["inspect", backup, "--query", "greyhound", "-n", "0"],
            ["export", backup, tmp_path / "export.jsonl"],
        ):
            code, out, err = run_cli(capsys, *args)
            assert (code, err) == (0, ""), err
            assert "greyhound" in out or "Exported 2 memories" in out, out
    assert backup.read_bytes() == before


def test_a_copy_with_its_wal_and_shared_memory_is_read_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy of a file in use (``-wal`` and ``-shm`` beside it) holds the WAL's memory too
    (SQLite reads the WAL through a ``-shm`` it cannot write; this worked before, and must
    keep working)."""
    copy = _copy_while_open(tmp_path, ("", "-wal", "-shm"))
    with read_only(copy.parent, files=True):
        code, out, err = run_cli(capsys, "inspect", copy)
    assert (code, err) == (0, ""), err
    assert "Ben likes chess" in " ".join(out.split())


def test_a_wal_that_cannot_be_read_is_an_error_never_stale_memories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``-shm``, SQLite cannot read the WAL where it cannot create one; reading the
    file alone (``immutable``) would silently miss the WAL's memory. The error says what to do."""
    copy = _copy_while_open(tmp_path, ("", "-wal"))
    out_file = tmp_path / "export.jsonl"
    for args in (["inspect", copy], ["export", copy, out_file]):
        with read_only(copy.parent, files=True):
            code, out, err = run_cli(capsys, *args)
        line = one_line(err)
        assert code == 1 and out == "", out
        assert f"{copy}-wal" in line and "writable" in line and "copy" in line, line
    assert not out_file.exists()


def test_a_link_to_a_copy_whose_wal_cannot_be_read_is_an_error_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: through a link the WAL was looked for beside the link, not found, and inspect
    showed the file without the WAL's memory (exit 0)."""
    copy = _copy_while_open(tmp_path, ("", "-wal"))
    link = tmp_path / "link.db"
    link.symlink_to(copy)
    with read_only(copy.parent, files=True):
        code, out, err = run_cli(capsys, "inspect", link)
    line = one_line(err)
    assert code == 1 and out == "", out
    assert f"{copy}-wal" in line and "copy" in line, line


def test_a_file_that_needs_an_upgrade_is_not_upgraded_on_read_only_storage(
    backup: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read-only open never upgrades: the error says how to read the file."""
    conn = sqlite3.connect(backup)
    with conn:
        conn.execute("UPDATE meta SET value='5' WHERE key='schema_version'")
    conn.close()
    before = listing(backup.parent)
    with read_only(backup.parent, files=True):
        code, _, err = run_cli(capsys, "inspect", backup)
    line = one_line(err)
    assert code == 1 and "schema version 5" in line, line
    assert "writable" in line and "copy" in line, line
    assert listing(backup.parent) == before


def test_inspect_still_upgrades_a_writable_file(
    backup: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where the file can be written, the commands open it as before: an old file is upgraded
    (so a writable copy of a file on read-only storage can be read)."""
    conn = sqlite3.connect(backup)
    with conn:
        conn.execute("UPDATE meta SET value='5' WHERE key='schema_version'")
    conn.close()
    code, _, err = run_cli(capsys, "inspect", backup)
    assert (code, err) == (0, ""), err
    conn = sqlite3.connect(backup)
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("6",)
    conn.close()


def test_import_still_refuses_read_only_storage(
    backup: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A command that writes keeps failing, with the error that says why."""
    export = tmp_path / "export.jsonl"
    assert run_cli(capsys, "export", backup, export)[0] == 0
    target = tmp_path / "other"
    _memory_file(target)
    before = listing(target)
    with read_only(target, files=True):
        code, _, err = run_cli(capsys, "import", export, target / "memory.db")
    line = one_line(err)
    assert code == 1 and "cannot be written by this process" in line, line
    assert listing(target) == before
