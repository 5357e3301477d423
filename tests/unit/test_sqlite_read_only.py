"""``read_only=True`` of the SQLite store and backend: a memory file read and never written
(on read-only storage, where SQLite cannot create ``<file>-shm``, too), never created, never
upgraded; and the read-only storage helper the tests use (``read_only_storage.py``)."""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import stat
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.sqlite import SQLiteBackend
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
from langchain_reflective.errors import StorageError
from tests.fakes import WordEmbeddings
from tests.unit.read_only_storage import listing, permission_bits_apply, read_only

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A closed memory file of two memories, alone in its folder."""
    (tmp_path / "live").mkdir()
    live = tmp_path / "live" / "memory.db"
    with MemoryStream(WordEmbeddings(), path=live) as stream:
        stream.add(["Ana adopted a greyhound", "It rained"], importances=0.5, now=T0)
    (tmp_path / "files").mkdir()
    return Path(shutil.copy2(live, tmp_path / "files" / live.name))


def _schema_version(path: Path) -> str:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return str(conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
    finally:
        conn.close()


def test_reads_a_read_only_folder_and_refuses_every_write(db: Path) -> None:
    before = listing(db.parent)
    with read_only(db.parent, files=True):
        store = SQLiteRecordStore(db, read_only=True)
        try:
            assert store.read_only
            assert store.namespaces() == ["default"] and store.count("default") == 2
            assert store.embedding_model is not None
            with pytest.raises(StorageError, match="opened read-only"):
                store.set_meta("x", "y")
            with pytest.raises(StorageError, match="opened read-only"):
                store.purge("default")
        finally:
            store.close()
    assert listing(db.parent) == before


def test_reads_the_wal_of_a_copy_through_its_shared_memory(tmp_path: Path, db: Path) -> None:
    """A copy with its ``-wal`` and ``-shm`` is read through them (``mode=ro``), WAL and all."""
    copy = tmp_path / "copy"
    copy.mkdir()
    with MemoryStream(WordEmbeddings(), path=db) as stream:
        stream.add("Ben likes chess", importances=0.5, now=T0)
        for suffix in ("", "-wal", "-shm"):
            shutil.copy2(db.with_name(db.name + suffix), copy / (db.name + suffix))
    with read_only(copy, files=True):
        store = SQLiteRecordStore(copy / db.name, read_only=True)
        try:
            assert store.count("default") == 3
        finally:
            store.close()


def test_never_creates_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(StorageError, match="does not exist"):
        SQLiteRecordStore(missing, read_only=True)
    assert not missing.exists()
    with pytest.raises(ValueError, match="read_only"):
        SQLiteRecordStore(None, read_only=True)


def test_never_upgrades_and_a_normal_open_still_does(db: Path) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE meta SET value='5' WHERE key='schema_version'")
    conn.close()
    with pytest.raises(StorageError, match="schema version 5") as caught:
        SQLiteRecordStore(db, read_only=True)  # (in a writable folder: still no upgrade)
    assert "writable" in str(caught.value) and "copy" in str(caught.value)
    assert _schema_version(db) == "5"
    SQLiteRecordStore(db).close()
    assert _schema_version(db) == "6"


def test_the_backend_writes_no_caches_nor_memories(db: Path) -> None:
    """A read-only backend retrieves, and writes no index caches beside the file; a write
    (an access time, an add, a queued memory) says the file was opened read-only."""
    cache = db.with_name(db.name + ".index")
    assert not cache.exists()
    backend = SQLiteBackend(db, read_only=True)
    with MemoryStream(WordEmbeddings(), backend=backend) as stream:
        [hit] = stream.retrieve("greyhound", k=1, now=T0, touch=False)
        assert hit.record.text == "Ana adopted a greyhound"
        for write in (
            lambda: stream.retrieve("greyhound", k=1, now=T0),  # records the access time
            lambda: stream.add("Ben likes chess", importances=0.5, now=T0),
            lambda: stream.enqueue("Ben likes chess"),
        ):
            with pytest.raises(StorageError, match="opened read-only"):
                write()
    assert not cache.exists()


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="gives a folder to another user"
)
def test_a_folder_another_user_may_write_is_not_read_unlocked(db: Path) -> None:
    """Where SQLite cannot create ``-shm`` but the folder's owner could start writing the
    file, reading it unlocked (``immutable``) could see a half-copied change: refused, with
    what to do."""
    os.chown(db.parent, 65534, 65534)
    try:
        with permission_bits_apply(), pytest.raises(StorageError, match="copy") as caught:
            SQLiteRecordStore(db, read_only=True)
    finally:
        os.chown(db.parent, 0, 0)
    assert f"{db}-shm" in str(caught.value)
    assert listing(db.parent) == {db.name: db.read_bytes()}


def _copy_while_open(tmp_path: Path, db: Path) -> Path:
    """A copy of ``db`` and its ``-wal`` (no ``-shm``) taken while a writer had it open: its
    third memory is only in the WAL."""
    backup = tmp_path / "backup"
    backup.mkdir()
    with MemoryStream(WordEmbeddings(), path=db) as stream:
        stream.add("Ben likes chess", importances=0.5, now=T0)
        assert db.with_name(db.name + "-wal").stat().st_size > 0
        for suffix in ("", "-wal"):
            shutil.copy2(db.with_name(db.name + suffix), backup / (db.name + suffix))
    return backup / db.name


def test_a_link_to_a_copy_whose_wal_cannot_be_read_is_refused_as_the_copy_is(
    tmp_path: Path, db: Path
) -> None:
    """SQLite keeps ``-wal`` and ``-shm`` beside a link's target, not beside the link. Before:
    through ``link.db -> backup/memory.db`` the checks looked beside the link, found no WAL,
    read the file ``immutable`` and silently missed the WAL's memory (2 instead of 3)."""
    copy = _copy_while_open(tmp_path, db)
    link = tmp_path / "link.db"
    link.symlink_to(copy)
    before = listing(copy.parent)
    with read_only(copy.parent, files=True):
        for path in (copy, link):
            with pytest.raises(StorageError, match="holds changes") as caught:
                SQLiteRecordStore(path, read_only=True)
            assert f"{copy}-wal" in str(caught.value), str(caught.value)
    assert listing(copy.parent) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "files", "link.db", "live"]


def test_a_link_to_a_closed_copy_is_read(tmp_path: Path, db: Path) -> None:
    """A link to a file that holds every commit, on read-only storage, reads it whole."""
    link = tmp_path / "link.db"
    link.symlink_to(db)
    before = listing(db.parent)
    with read_only(db.parent, files=True):
        store = SQLiteRecordStore(link, read_only=True)
        try:
            assert store.count("default") == 2
        finally:
            store.close()
    assert listing(db.parent) == before


def test_a_file_its_owner_may_make_writable_is_read_as_it_changes(db: Path) -> None:
    """A file without write permission in a folder someone may write (a backup made read-only)
    is read as any reader reads it (``mode=ro``, through the WAL): its owner can make it
    writable and write it while the reader is open, and the reader sees those writes. Before:
    it was read ``immutable`` and went on answering from the file as it was, in silence (2
    memories where 3 were stored)."""
    db.chmod(0o444)
    with permission_bits_apply():
        store = SQLiteRecordStore(db, read_only=True)
    try:
        assert store.count("default") == 2
        db.chmod(0o644)
        for suffix in ("-wal", "-shm"):  # (the reader's, with the file's bits: the module says)
            beside = db.with_name(db.name + suffix)
            if beside.exists():
                beside.chmod(0o644)
        with MemoryStream(WordEmbeddings(), path=db) as stream:
            stream.add("Ben likes chess", importances=0.5, now=T0)
        assert store.count("default") == 3
    finally:
        store.close()


def test_a_file_others_may_write_is_read_as_any_sqlite_reader_reads_it(db: Path) -> None:
    """Where the file may be written meanwhile, the read goes through SQLite's WAL index, as
    every reader's does: ``-wal`` and ``-shm`` are created beside the file with its permission
    bits and left there (a reader does not remove them); the next writer uses them, and
    removes them when it closes the file."""
    db.chmod(0o640)
    store = SQLiteRecordStore(db, read_only=True)
    store.close()
    for suffix in ("-wal", "-shm"):
        assert (db.parent / (db.name + suffix)).stat().st_mode & 0o777 == 0o640
    with permission_bits_apply(), MemoryStream(WordEmbeddings(), path=db) as stream:
        stream.add("Ben likes chess", importances=0.5, now=T0)
    assert not {f"{db.name}-wal", f"{db.name}-shm"} & set(listing(db.parent))


def test_a_thread_left_running_with_the_bits_applied_fails_the_test() -> None:
    """Linux copies a thread's capabilities when it starts: one started inside
    ``permission_bits_apply()`` keeps root's DAC capabilities dropped for good. Before: it was
    left running in silence, and a later test in the worker could fail on it."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="left-behind")
    try:
        with pytest.raises(AssertionError, match="left-behind"), permission_bits_apply():
            thread.start()
    finally:
        stop.set()
        thread.join()
    done = threading.Thread(target=lambda: None, name="joined-inside")
    with permission_bits_apply():  # a thread that ends inside the block is fine
        done.start()
        done.join()


def test_a_failing_chmod_leaves_the_folder_as_it_was(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``read_only()`` made the folder 0555 before its ``try``, so a file's ``chmod``
    failing left the folder read-only."""
    folder_mode, file_mode = (stat.S_IMODE(p.stat().st_mode) for p in (db.parent, db))
    chmod = Path.chmod

    def failing(self: Path, mode: int, **kwargs: bool) -> None:
        if mode == 0o444:
            raise PermissionError(errno.EPERM, "Operation not permitted", str(self))
        chmod(self, mode, **kwargs)

    monkeypatch.setattr(Path, "chmod", failing)
    with pytest.raises(PermissionError), read_only(db.parent, files=True):
        pytest.fail("the block must not run")
    monkeypatch.undo()
    found = [stat.S_IMODE(p.stat().st_mode) for p in (db.parent, db)]
    db.parent.chmod(folder_mode)  # (so pytest can remove it, whatever the test finds)
    assert found == [folder_mode, file_mode]


def test_files_a_reader_left_without_write_permission_give_a_clear_error(db: Path) -> None:
    """A reader of a file without write permission (a backup made read-only) leaves ``-wal`` and
    ``-shm`` without it too (SQLite's way, see the module). Once the file is writable again, a
    write fails with a ``StorageError`` that says what to do, not SQLite's bare "attempt to
    write a readonly database"; once they are removed, it works."""
    db.chmod(0o444)
    with permission_bits_apply():
        SQLiteRecordStore(db, read_only=True).close()
    db.chmod(0o644)
    advice = "delete them when no process has the file open"
    with (
        permission_bits_apply(),
        MemoryStream(WordEmbeddings(), path=db) as stream,
        pytest.raises(StorageError, match=advice),
    ):
        stream.add("Ben likes chess", importances=0.5, now=T0)
    for suffix in ("-wal", "-shm"):
        db.with_name(db.name + suffix).unlink()
    with permission_bits_apply(), MemoryStream(WordEmbeddings(), path=db) as stream:
        stream.add("Ben likes chess", importances=0.5, now=T0)
        assert stream.count() == 3
