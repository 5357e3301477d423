"""A full disk or a file that cannot be written: typed errors that say what to do, nothing
acknowledged lost, no partial file left behind.

The faults are injected without root or a mount (CI runs on a fresh machine): ``os.fsync``
and the connection's statements are made to fail the way a full disk makes them fail
(``ENOSPC``; SQLite's ``database or disk is full``). The same behaviours were checked by hand on
a 2 MB tmpfs and as an unprivileged user (docs/reliability.md, "Disk full and permissions").
"""

from __future__ import annotations

import copy
import errno
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream, transfer
from langchain_reflective.backends.sqlite import connection as connection_module
from langchain_reflective.errors import ExportError, ForeignFileError, StorageError
from tests.fakes import FullDiskOs, WordEmbeddings

TEXTS = [f"memory {i} about tea and paris" for i in range(40)]


def _enospc(*_: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _populated(path: Path) -> None:
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(TEXTS, ids=[f"m{i}" for i in range(len(TEXTS))], importances=0.5)


def test_close_on_a_full_disk_leaves_no_partial_cache_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memory.db"
    _populated(path)
    for cache in (tmp_path / "memory.db.index").iterdir():
        cache.unlink()  # the next close writes every cache again
    stream = MemoryStream(WordEmbeddings(), path=path)
    stream.add("one more about tea", ids=["late"], importances=0.5)
    assert stream.retrieve("tea", k=3, touch=False)  # loads the index and BM25
    with monkeypatch.context() as m:
        m.setattr(os, "fsync", _enospc)  # every cache file fails after being written
        stream.close()  # the caches are optional: no error
    leftovers = [p.name for p in tmp_path.rglob("*.tmp")]
    assert leftovers == []
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert len(stream) == len(TEXTS) + 1
        assert stream.retrieve("one more about tea", k=1, touch=False)[0].record.id == "late"


class _FullDisk:
    """Stands in for the store's ``sqlite3.Connection``: statements that ``fails(sql)`` picks
    raise what SQLite raises on a full disk; everything else runs on the real connection."""

    def __init__(self, conn: sqlite3.Connection, fails: Callable[[str], bool]) -> None:
        self._conn = conn
        self._fails = fails

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if self._fails(sql):
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if self._fails(sql):
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.executemany(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _fill(stream: MemoryStream, fails: Callable[[str], bool]) -> sqlite3.Connection:
    store: Any = stream.backend.store  # type: ignore[attr-defined]
    real: sqlite3.Connection = store._conn
    store._conn = _FullDisk(real, fails)
    return real


def _writes(sql: str) -> bool:
    return sql.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))


def test_full_disk_add_says_what_to_do_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    _populated(path)
    stream = MemoryStream(WordEmbeddings(), path=path)
    real = _fill(stream, _writes)
    for call in (
        lambda: stream.add(["new a", "new b"], ids=["a", "b"], importances=0.5),
        lambda: stream.enqueue("queued", importances=0.5),
    ):
        with pytest.raises(StorageError, match="is full: free space") as info:
            call()
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert stream.get(["a", "b"]) == []  # all or nothing
    assert len(stream) == len(TEXTS)  # reads still work while full
    assert stream.retrieve("tea", k=3, touch=False)
    stream.backend.store._conn = real  # type: ignore[attr-defined]  # space freed
    stream.add(["new a", "new b"], ids=["a", "b"], importances=0.5)  # no reopen needed
    stream.close()
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert len(stream) == len(TEXTS) + 2


def test_close_when_the_cache_metadata_cannot_be_written(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    _populated(path)
    for cache in (tmp_path / "memory.db.index").iterdir():
        cache.unlink()
    stream = MemoryStream(WordEmbeddings(), path=path)
    assert stream.retrieve("tea", k=3, touch=False)
    _fill(stream, lambda sql: "INTO meta" in sql)  # cache files fit, their records do not
    stream.close()  # before: the raw sqlite3.OperationalError escaped close()
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert len(stream) == len(TEXTS)
        assert stream.retrieve("memory 3 about tea", k=1, touch=False)


def test_unwritable_file_is_not_called_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memory.db"
    _populated(path)

    def readonly(*_: object, **__: object) -> None:
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(connection_module, "init_schema", readonly)
    with pytest.raises(StorageError, match="needs write access") as info:
        MemoryStream(WordEmbeddings(), path=path)
    assert not isinstance(info.value, ForeignFileError)  # before: "may be truncated"

    def denied(p: Path) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(p))

    monkeypatch.setattr(connection_module, "check_file", denied)
    with pytest.raises(StorageError, match="needs write access"):  # before: PermissionError
        MemoryStream(WordEmbeddings(), path=tmp_path / "new.db")


def test_reflection_lock_folder_that_cannot_be_made(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    _populated(path)
    (tmp_path / "memory.db.locks").write_text("not a directory")
    stream = MemoryStream(WordEmbeddings(), path=path)
    try:
        with (
            pytest.raises(StorageError, match="reflection lock"),  # before: FileExistsError
            stream.backend.reflection_lock("default", timeout=1),
        ):
            pass
    finally:
        stream.close()


def _export_refused(error: ExportError, out: Path, code: int = errno.ENOSPC) -> None:
    """``error`` names ``out`` (not a temporary file), says what to do, and is the OSError
    the disk raised as far as ``except OSError`` code can tell."""
    assert isinstance(error, OSError) and isinstance(error, StorageError)
    assert error.errno == code and error.filename == str(out)
    assert error.strerror == os.strerror(code)
    message = str(error)
    assert message.startswith(f"cannot write the export {out}: {os.strerror(code)}")
    assert ".tmp" not in message and "Errno" not in message
    assert "no partial file was left" in message
    assert isinstance(error.__cause__, OSError) and error.__cause__.errno == code
    copied = copy.copy(error)  # e.g. an error sent back from a worker process
    assert (str(copied), copied.errno, copied.filename) == (message, code, str(out))


@pytest.mark.parametrize("fail", ["write", "fsync", "replace"])
def test_export_to_a_full_disk_names_the_file_and_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: str
) -> None:
    """Before, a bare ``OSError: [Errno 28] No space left on device`` (naming nothing, or the
    temporary file). Now an ``ExportError`` (a ``StorageError`` and an ``OSError``) naming the
    export; the earlier export is untouched and no ``.tmp`` file is left. The fsync is new: a
    full disk may only tell when the data is flushed."""
    path = tmp_path / "memory.db"
    _populated(path)
    out = tmp_path / "out.jsonl"
    out.write_text("an earlier export\n", encoding="utf-8")
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        with monkeypatch.context() as m:
            m.setattr(transfer, "os", FullDiskOs(fail))
            with pytest.raises(ExportError) as info:
                stream.export_jsonl(out)
        _export_refused(info.value, out)
        assert "is full: free space or export to another disk" in str(info.value)
        assert out.read_text(encoding="utf-8") == "an earlier export\n"
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("out.")] == ["out.jsonl"]
        assert stream.export_jsonl(out) == len(TEXTS)  # space freed: no reopen needed


async def test_every_export_of_a_full_disk_names_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The async twin and ``ContextMemory``'s exports too (``ContextMemory.export_jsonl``
    wrote the stream's export into a temporary folder, then filtered it: a full disk raised
    an error naming the temporary file, or a bare ``OSError``)."""
    from langchain_reflective import ContextMemory

    with MemoryStream(WordEmbeddings(), path=tmp_path / "memory.db") as stream:
        memory = ContextMemory(stream)
        memory.record_turn(1, "Files: main.ts", "Read the code")
        out = tmp_path / "turns.jsonl"
        monkeypatch.setattr(transfer, "os", FullDiskOs("write"))
        for export in (
            lambda: stream.aexport_jsonl(out),
            lambda: memory.aexport_jsonl(out),
        ):
            with pytest.raises(ExportError) as info:
                await export()
            _export_refused(info.value, out)
        with pytest.raises(OSError) as caught:  # what code catching OSError sees
            memory.export_jsonl(out)
        _export_refused(caught.value, out)  # type: ignore[arg-type]
        assert list(tmp_path.glob("turns*")) == []
        monkeypatch.undo()
        assert memory.export_jsonl(out) == 2


def test_export_into_a_folder_that_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def denied(*_: object, **__: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path))

    out = tmp_path / "out.jsonl"
    with MemoryStream(WordEmbeddings(), path=tmp_path / "memory.db") as stream:
        stream.add("one memory", importances=0.5)
        monkeypatch.setattr(transfer.tempfile, "mkstemp", denied)
        with pytest.raises(ExportError, match="this process cannot write in") as info:
            stream.export_jsonl(out)
        _export_refused(info.value, out, errno.EACCES)
        with pytest.raises(ExportError, match=r"the folder .*nowhere does not exist") as info:
            monkeypatch.undo()
            stream.export_jsonl(tmp_path / "nowhere" / "out.jsonl")
        _export_refused(info.value, tmp_path / "nowhere" / "out.jsonl", errno.ENOENT)
        assert not out.exists()


def test_an_add_stored_before_its_index_update_failed_returns_and_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The rows commit, then the in-memory index is brought up to date: a failure there (an
    I/O error loading the namespace, memory) was raised as if the add had failed, though the
    memories were stored; a caller retrying the add stored them twice."""
    from langchain_reflective.backends.sqlite.backend import SQLiteBackend

    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as stream:
        stream.add("the first memory loads the namespace", importances=0.5)
        real = SQLiteBackend._after_put

        def failing(*args: Any, **kwargs: Any) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(SQLiteBackend, "_after_put", failing)
        with caplog.at_level("WARNING", logger="langchain_reflective.backends.sqlite.backend"):
            (record,) = stream.add("Alice keeps bees on the roof", importances=0.5)
        assert "were stored" in caplog.text and "Input/output error" in caplog.text
        monkeypatch.setattr(SQLiteBackend, "_after_put", real)
        assert len(stream) == 2
        hits = stream.retrieve("bees on the roof", k=1)
        assert hits[0].record.id == record.id


def test_a_failed_index_update_reloads_only_the_namespaces_of_its_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every namespace of the add reloads (one updated before the failure, the failing one, one
    not reached); the other namespaces' loaded partitions are kept (they were all dropped)."""
    from langchain_reflective.backends.sqlite.backend import SQLiteBackend

    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as stream:
        for ns in ("a", "b", "c", "kept"):
            stream.add(f"{ns} keeps bees", importances=0.5, namespace=ns)
            stream.retrieve("bees", k=1, namespace=ns)  # loads its partition
        backend = stream.backend
        assert isinstance(backend, SQLiteBackend)
        loaded = {ns: backend._partitions[ns] for ns in ("a", "b", "c", "kept")}
        real = SQLiteBackend._after_put

        def failing_on_b(self: SQLiteBackend, namespace: str, *args: Any) -> None:
            if namespace == "b":
                raise MemoryError
            real(self, namespace, *args)

        export = tmp_path / "three.jsonl"
        with MemoryStream(WordEmbeddings(), path=tmp_path / "other.db") as other:
            added = [
                other.add(f"{ns} hives honey", importances=0.5, namespace=ns)[0]
                for ns in ("a", "b", "c")
            ]
            other.export_jsonl(export, namespaces="all")
        monkeypatch.setattr(SQLiteBackend, "_after_put", failing_on_b)
        assert stream.import_jsonl(export) == 3  # one put of three namespaces
        monkeypatch.undo()
        assert set(backend._partitions) == {"kept"}
        assert backend._partitions["kept"] is loaded["kept"]
        for record, ns in zip(added, ("a", "b", "c"), strict=True):
            hits = stream.retrieve("hives honey", k=1, namespace=ns)
            assert hits[0].record.id == record.id
