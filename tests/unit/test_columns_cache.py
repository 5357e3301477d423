"""The column snapshot of a large partition: a reopened file reads its rows' keys, times,
importance and kinds from one raw file instead of every row out of SQLite, and never from a
snapshot that a touch, a delete or another process's write has made stale."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.sqlite import caches
from langchain_reflective.backends.sqlite.store import COLUMNS_KEY, SQLiteRecordStore
from tests.fakes import WordEmbeddings

NOW = datetime(2025, 6, 1, tzinfo=UTC)
QUERIES = ["tea w3 m17", "paris w40", "garden w7 w8", "m1203 music"]


@pytest.fixture(autouse=True)
def _small_snapshots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caches, "_COLUMNS_MIN", 100)


def _texts(n: int, start: int = 0) -> list[str]:
    topics = ["tea", "paris", "garden", "music", "train"]
    return [f"m{i} {topics[i % 5]} w{i % 50} w{(i * 7) % 50} turn" for i in range(start, start + n)]


def _ranked(stream: MemoryStream, now: datetime = NOW) -> list[list[str]]:
    return [[h.record.id for h in stream.retrieve(q, k=10, now=now, touch=False)] for q in QUERIES]


def _columns(stream: MemoryStream) -> dict[str, Any]:
    stream.retrieve("tea", k=1, now=NOW, touch=False)  # loads the partition
    part = stream.backend._partitions[stream.namespace]  # type: ignore[attr-defined]
    names = sorted(part.kinds, key=part.kinds.__getitem__)
    return {
        "seqs": part.seqs.view.tolist(),
        "created": part.created.view.tolist(),
        "accessed": part.accessed.view.tolist(),
        "importance": part.importance.view.tolist(),
        "kinds": [names[c] for c in part.kind_codes.view.tolist()],
    }


def _drop_caches(db: Path) -> None:
    for file in db.with_name(db.name + ".index").iterdir():
        file.unlink()


def _columns_from_file(db: Path) -> dict[str, Any]:
    """The columns read row by row out of the SQLite file (every cache file dropped first)."""
    _drop_caches(db)
    with MemoryStream(WordEmbeddings(32), path=db, exact_limit=300) as s:
        return _columns(s)


class _RowSpy:
    """Counts rows read out of the SQLite file by partition loads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        iterate = SQLiteRecordStore.iter_partition

        def counting(store: SQLiteRecordStore, *args: Any, **kwargs: Any) -> Any:
            for chunk in iterate(store, *args, **kwargs):
                self.rows += len(chunk.seqs)
                yield chunk

        monkeypatch.setattr(SQLiteRecordStore, "iter_partition", counting)


def _build(db: Path, exact_limit: int | None) -> None:
    emb = WordEmbeddings(32)
    with MemoryStream(emb, path=db, exact_limit=exact_limit) as s:
        for b in range(3):
            s.add(_texts(400, 400 * b), importances=0.1 * (b + 1), now=NOW - timedelta(hours=3))
        s.add("tea is a recurring topic", kinds="reflection", importances=0.9, now=NOW)
        s.retrieve("tea w3", k=10, now=NOW - timedelta(hours=1))  # touches: access times differ


@pytest.mark.parametrize("exact_limit", [None, 300], ids=["flat", "ivf"])
def test_reopen_reads_the_columns_from_the_snapshot_and_matches_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exact_limit: int | None
) -> None:
    db = tmp_path / "m.db"
    _build(db, exact_limit)
    emb = WordEmbeddings(32)
    spy = _RowSpy(monkeypatch)
    with MemoryStream(emb, path=db, exact_limit=exact_limit) as s:
        got = _columns(s)
        assert spy.rows == 0  # nothing read row by row out of SQLite
        s.exact_limit = None  # compare exact rankings (recency reads the access times)
        ranked = _ranked(s)
    _drop_caches(db)
    with MemoryStream(emb, path=db, exact_limit=None) as s:
        want = _columns(s)
        assert spy.rows > 1200
        assert _ranked(s) == ranked
    assert got == want
    assert "reflection" in got["kinds"] and len(set(got["accessed"])) > 1


def test_a_touch_after_the_snapshot_is_never_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "m.db"
    _build(db, 300)
    emb = WordEmbeddings(32)
    later = NOW + timedelta(days=2)
    crashed = MemoryStream(emb, path=db, exact_limit=300)
    touched = {h.record.id for h in crashed.retrieve("paris w40", k=10, now=later)}
    crashed.backend.store.close()  # a crash: the snapshot is not rewritten
    assert crashed.backend.store.path is not None
    spy = _RowSpy(monkeypatch)
    with MemoryStream(emb, path=db, exact_limit=300) as s:
        got = _columns(s)
        assert spy.rows >= 1201  # the stale snapshot was not used
        records = {r.id: r for r in s.get(sorted(touched))}
    assert {r.last_accessed_at for r in records.values()} == {later}
    stamp = later.timestamp()
    assert sum(1 for a in got["accessed"] if a == stamp) == len(touched)


def test_appends_after_the_snapshot_are_read_on_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "m.db"
    _build(db, 300)
    emb = WordEmbeddings(32)
    crashed = MemoryStream(emb, path=db, exact_limit=300)
    crashed.add(_texts(25, 9000), importances=0.7, now=NOW)  # no touch: snapshot still a prefix
    crashed.backend.store.close()
    spy = _RowSpy(monkeypatch)
    with MemoryStream(emb, path=db, exact_limit=300) as s:
        got = _columns(s)
        assert spy.rows <= 3 * 25  # only the rows stored since: columns, vectors, texts
    assert _columns_from_file(db) == got


def test_a_delete_after_the_snapshot_makes_it_unusable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "m.db"
    _build(db, 300)
    emb = WordEmbeddings(32)
    crashed = MemoryStream(emb, path=db, exact_limit=300)
    victim = crashed.retrieve("garden", k=1, now=NOW, touch=False)[0].record.id
    crashed.delete([victim])
    crashed.backend.store.close()
    with MemoryStream(emb, path=db, exact_limit=300) as s:
        got = _columns(s)
        assert s.get([victim]) == []
    assert _columns_from_file(db) == got
    assert len(got["seqs"]) == 1200


def test_a_tampered_snapshot_is_rebuilt_from_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "m.db"
    _build(db, 300)
    emb = WordEmbeddings(32)
    [cols] = db.with_name(db.name + ".index").glob("*.cols")
    data = bytearray(cols.read_bytes())
    data[-5] ^= 0xFF
    cols.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING), MemoryStream(emb, path=db, exact_limit=300) as s:
        got = _columns(s)
    assert "column snapshot" in caplog.text
    assert _columns_from_file(db) == got


def test_the_snapshot_entry_is_not_written_over_another_process_write(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(8), path=db) as s:
        s.add("one memory", importances=0.5, now=NOW)
    first, second = SQLiteRecordStore(db), SQLiteRecordStore(db)
    try:
        first.changed_elsewhere()
        second.set_meta("unrelated", "x")  # another connection commits
        assert not first.set_meta_unless_changed(COLUMNS_KEY + "default", "{}")
        assert first.get_meta(COLUMNS_KEY + "default") is None
        first.changed_elsewhere()  # looked again: now it describes the file as it is
        assert first.set_meta_unless_changed(COLUMNS_KEY + "default", "{}")
        assert first.get_meta(COLUMNS_KEY + "default") == "{}"
    finally:
        first.close()
        second.close()


def test_columns_round_trip_bit_for_bit(tmp_path: Path) -> None:
    from langchain_reflective.backends.sqlite.columns_cache import (
        Columns,
        load_columns,
        save_columns,
    )

    rng = np.random.default_rng(0)
    cols = Columns(
        np.arange(5, 105, dtype=np.int64),
        rng.random(100),
        rng.random(100),
        rng.random(100),
        rng.integers(0, 3, 100).astype(np.int32),
    )
    digest = save_columns(tmp_path / "c.cols", cols)
    back = load_columns(tmp_path / "c.cols", rows=100, expected_sha256=digest)
    assert back is not None
    for a, b in zip(cols, back, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert load_columns(tmp_path / "c.cols", rows=99, expected_sha256=digest) is None
    assert load_columns(tmp_path / "c.cols", rows=100, expected_sha256="0" * 64) is None
    assert load_columns(tmp_path / "missing.cols", rows=100, expected_sha256=digest) is None


def test_an_entry_for_no_rows_is_not_used(tmp_path: Path) -> None:
    import json

    from langchain_reflective.backends.sqlite.columns_cache import Columns, save_columns

    db = tmp_path / "m.db"
    _build(db, 300)
    [cols] = db.with_name(db.name + ".index").glob("*.cols")
    empty = np.zeros(0)
    digest = save_columns(
        cols, Columns(empty.astype(np.int64), empty, empty, empty, empty.astype(np.int32))
    )
    store = SQLiteRecordStore(db)
    try:
        [key] = [k for (k,) in store._query("SELECT key FROM meta") if k.startswith(COLUMNS_KEY)]
        info = json.loads(store.get_meta(key) or "{}")
        store.set_meta(key, json.dumps({**info, "rows": 0, "sha256": digest}))
    finally:
        store.close()
    with MemoryStream(WordEmbeddings(32), path=db, exact_limit=300) as s:
        assert len(_columns(s)["seqs"]) == 1201  # read from the file
