"""MemoryStream on a SQLite file or in memory: reopening ranks alike, the index cache is
rebuilt when stale or tampered with, foreign and newer files are refused, new files are
private, and writes cost the same whatever the size of the store."""

from __future__ import annotations

import os
import sqlite3
import stat
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from langchain_reflective import ForeignFileError, MemoryStream, SchemaVersionError, StorageError
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
from tests.unit.stream_facts import FACTS


def test_the_sqlite_shortcut_defaults_are_the_backends() -> None:
    """``MemoryStream(path=...)`` keeps its own copies of the SQLite backend's defaults (so
    stream.py need not import the backend at import time): they must not drift."""
    import inspect

    from langchain_reflective.backends.sqlite import SQLiteBackend

    stream_defaults = inspect.signature(MemoryStream).parameters
    backend_defaults = inspect.signature(SQLiteBackend).parameters
    for name in ("exact_limit", "ann_candidates", "ann_nprobe"):
        assert stream_defaults[name].default == backend_defaults[name].default, name


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
