"""The SQLite store's write path: background WAL checkpoints, id locality, index and table
migrations."""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.sqlite import connection as sqlite_connection
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
from langchain_reflective.records import new_memory_id, new_memory_ids
from tests.fakes import WordEmbeddings
from tests.unit.test_fork import in_child

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "langchain-reflective-checkpoint"]


def _wal_frames(path: Path) -> int:
    """Frames in the WAL that a new checkpoint would still have to consider."""
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])
    finally:
        conn.close()


def test_commits_do_not_checkpoint_the_wal_themselves(tmp_path: Path) -> None:
    """Automatic checkpoints (an fsync inside some commits) are off; a thread does them."""
    store = SQLiteRecordStore(tmp_path / "m.db")
    try:
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        assert len(_checkpoint_threads()) == 1
    finally:
        store.close()
    assert _checkpoint_threads() == []


def test_a_long_wal_makes_the_thread_ask_the_writer_to_catch_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_connection, "_WAL_RESTART_FRAMES", 1)
    store = SQLiteRecordStore(tmp_path / "m.db")
    try:
        checkpointer = store._checkpointer
        assert checkpointer is not None
        store.set_meta("k", "v")
        checkpointer.poke()
        deadline = time.monotonic() + 10
        while not checkpointer.catch_up and time.monotonic() < deadline:
            time.sleep(0.01)
        assert checkpointer.catch_up
    finally:
        store.close()


def test_the_writer_catches_up_so_the_wal_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked to, the next commit checkpoints inline; the write after it starts the WAL over."""
    monkeypatch.setattr(sqlite_connection, "_CHECKPOINT_EVERY", 10**9)  # never wake the thread
    path = tmp_path / "m.db"
    store = SQLiteRecordStore(path)
    try:
        checkpointer = store._checkpointer
        assert checkpointer is not None
        for i in range(50):
            store.set_meta(f"k{i}", "v")
        checkpointer.catch_up = True
        store.set_meta("last", "v")  # commits, then checkpoints inline
        assert not checkpointer.catch_up
        store.set_meta("after", "v")  # starts the WAL from its first frame again
        assert _wal_frames(path) < 10  # 52 commits of at least one page each without it
    finally:
        store.close()


def test_a_dead_checkpoint_thread_falls_back_to_automatic_checkpoints(tmp_path: Path) -> None:
    store = SQLiteRecordStore(tmp_path / "m.db")
    try:
        checkpointer = store._checkpointer
        assert checkpointer is not None
        checkpointer.stop()  # as if the thread had died
        store.bind_embeddings("m", 2)
        for _ in range(sqlite_connection._CHECKPOINT_EVERY):
            store.set_meta("k", "v")
        assert store._checkpointer is None
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] > 0
    finally:
        store.close()


def test_an_unclosed_store_does_not_leak_its_thread(tmp_path: Path) -> None:
    store = SQLiteRecordStore(tmp_path / "m.db")
    assert len(_checkpoint_threads()) == 1
    del store
    gc.collect()
    assert _checkpoint_threads() == []


def test_in_memory_store_has_no_checkpoint_thread() -> None:
    before = set(_checkpoint_threads())  # (another test's unclosed file store may have one)
    store = SQLiteRecordStore(None)
    try:
        assert store._checkpointer is None
        assert set(_checkpoint_threads()) <= before
    finally:
        store.close()


def test_new_ids_are_uuid7_and_sort_by_creation() -> None:
    ids = [new_memory_id() for _ in range(1000)] + new_memory_ids(1000) + new_memory_ids(1)
    assert len(set(ids)) == len(ids)
    parsed = [uuid.UUID(i) for i in ids]
    assert {u.version for u in parsed} == {7}
    assert {u.variant for u in parsed} == {uuid.RFC_4122}
    # the first 48 bits are milliseconds: ids from different milliseconds sort by time
    stamps = [int(i[:12], 16) for i in ids]
    assert stamps == sorted(stamps)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_repeats_the_parents_ids() -> None:
    """Ids draw on a pool of random bytes; a forked child must not reuse the parent's pool."""
    new_memory_ids(1)  # the pool holds unused bytes now
    child = in_child(lambda: "".join(new_memory_ids(50)))  # the child's next ids
    # compare the random parts (after the millisecond stamp and the version digit)
    child_random = {child[i + 13 : i + 32] for i in range(0, len(child), 32)}
    assert len(child_random) == 50
    assert not child_random & {i[13:] for i in new_memory_ids(50)}


def test_old_importance_index_is_migrated(tmp_path: Path) -> None:
    """Files from earlier versions indexed every memory by importance; that index goes."""
    path = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(
            ["an insight", "a fact"], importances=[0.9, 0.3], kinds=["reflection", "observation"]
        )
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX memories_insight_importance")
    conn.execute(
        "CREATE INDEX memories_namespace_kind_importance ON memories (namespace, kind, importance)"
    )
    conn.commit()
    conn.close()
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert [r.text for r in stream.most_important(1, kinds=["reflection"])] == ["an insight"]
        assert [r.text for r in stream.most_important(2)] == ["an insight", "a fact"]
    conn = sqlite3.connect(path)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    conn.close()
    assert "memories_namespace_kind_importance" not in names
    assert "memories_insight_importance" in names


_V5_TABLES = {
    "memories": "seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, namespace TEXT NOT NULL, "
    "text TEXT NOT NULL, kind TEXT NOT NULL, created_us INTEGER NOT NULL, "
    "accessed_us INTEGER NOT NULL, importance REAL NOT NULL, importance_source TEXT NOT NULL, "
    "evidence TEXT NOT NULL, depth INTEGER NOT NULL, metadata TEXT NOT NULL, "
    "vector BLOB NOT NULL",
    "pending": "pseq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, namespace TEXT NOT NULL, "
    "text TEXT NOT NULL, kind TEXT NOT NULL, created_us INTEGER NOT NULL, importance REAL, "
    "metadata TEXT NOT NULL",
}
"""The two tables as schema version 5 declared them: ids unique in the whole file."""


def _as_version_5(path: Path) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for table, columns in _V5_TABLES.items():
            conn.execute(f"CREATE TABLE {table}_old ({columns})")
            conn.execute(f"INSERT INTO {table}_old SELECT * FROM {table}")
            conn.execute(f"DROP TABLE {table}")
            conn.execute(f"ALTER TABLE {table}_old RENAME TO {table}")
        conn.execute("CREATE INDEX memories_namespace_seq ON memories (namespace, seq)")
        conn.execute("CREATE INDEX pending_namespace_pseq ON pending (namespace, pseq)")
        conn.execute("UPDATE meta SET value='5' WHERE key='schema_version'")
    conn.close()


def _table_sql(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")
        return {name: sql.replace(f'"{name}"', name) for name, sql in rows}  # (renamed: quoted)
    finally:
        conn.close()


def test_version_5_files_take_ids_per_namespace(tmp_path: Path) -> None:
    """Version 5 -> 6: ``memories`` and ``pending`` are rebuilt with ids unique per namespace;
    every memory keeps its seq and fields, queued memories stay queued, the indexes are
    those of a new file, and from then on two namespaces may hold one id."""
    path, fresh = tmp_path / "m.db", tmp_path / "fresh.db"
    with MemoryStream(WordEmbeddings(), path=fresh):
        pass
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(["alice likes tea", "an insight"], ids=["a1", "a2"], kinds=["observation",
                   "reflection"], importances=[0.3, 0.9], namespace="alice", now=NOW)  # fmt: skip
        stream.delete("a1", namespace="alice")
        stream.add(["alice likes paris"], ids=["a3"], namespace="alice", importances=0.4, now=NOW)
        stream.enqueue(["queued for bob"], namespace="bob", now=NOW)
        before = stream.get(["a2", "a3"], namespace="alice")
        queued = stream.pending(namespace="bob")
    _as_version_5(path)
    assert "UNIQUE (namespace, id)" not in _table_sql(path)["memories"]
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert stream.store.get_meta("schema_version") == "6"
        assert _table_sql(path) == _table_sql(fresh)
        assert stream.get(["a2", "a3"], namespace="alice") == before
        assert stream.pending(namespace="bob") == queued
        assert [r.text for r in stream.most_important(1, kinds=["reflection"], namespace="alice")
                ] == ["an insight"]  # fmt: skip
        stream.add(["bob's own a3"], ids=["a3"], namespace="bob", now=NOW)
        assert stream.get("a3", namespace="alice") == before[1:]
        stream.add(["alice again"], namespace="alice", now=NOW)
    conn = sqlite3.connect(path)
    seqs = dict(conn.execute("SELECT text, seq FROM memories"))
    conn.close()
    assert seqs["an insight"] < seqs["alice likes paris"] < seqs["bob's own a3"]
    assert seqs["alice likes paris"] == 3  # (the deleted a1's seq 1 is not handed out again)
    assert seqs["alice again"] == 5


def test_insight_queries_use_the_partial_index(tmp_path: Path) -> None:
    store = SQLiteRecordStore(tmp_path / "m.db")
    try:
        plans: list[str] = []
        store._conn.set_trace_callback(plans.append)
        store.recent("default", n=5, kinds=["reflection"], after_seq=None, by_importance=True)
        store._conn.set_trace_callback(None)
        (sql,) = [p for p in plans if p.startswith("SELECT")]
        plan = store._conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
        assert any("memories_insight_importance" in str(row) for row in plan), plan
    finally:
        store.close()


def test_batch_rows_keep_their_own_vectors(tmp_path: Path) -> None:
    """Rows of one insert are slices of one buffer: each row must get its own vector."""
    path = tmp_path / "m.db"
    texts = [f"word{i} other{i}" for i in range(50)]
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(texts, importances=0.5, now=NOW)
        expected = np.asarray(WordEmbeddings().embed_documents(texts), dtype=np.float64)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    store = SQLiteRecordStore(path)
    try:
        (chunk,) = list(store.iter_partition("default"))
        assert chunk.vectors is not None
        order = [texts.index(t) for t in chunk.texts]
        np.testing.assert_allclose(chunk.vectors, expected[order], atol=1e-6)
    finally:
        store.close()


@pytest.mark.parametrize("many", [False, True], ids=["one-statement", "chunked"])
def test_touch_and_get_matches_touch_then_get(tmp_path: Path, many: bool) -> None:
    from langchain_reflective.backends.sqlite.record_store import BaseRecordStore

    path = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add([f"memory {i}" for i in range(1000)], importances=0.5, now=NOW)
        store = stream.store
        later = datetime(2026, 2, 1, tzinfo=UTC)
        # more than one chunk of ids, or a retrieval's few; one missing either way
        seqs = [*range(1, 1001), 5000] if many else [3, 7, 11, 5000]
        got = store.touch_and_get(seqs, later)
        assert sorted(got) == sorted(seqs[:-1])
        assert {r.last_accessed_at for r in got.values()} == {later}
        # same records as the two-step default implementation gives
        even_later = datetime(2026, 3, 1, tzinfo=UTC)
        reference = BaseRecordStore.touch_and_get(store, seqs, even_later)
        again = store.touch_and_get(seqs, even_later)
        assert again == reference
    with MemoryStream(WordEmbeddings(), path=path) as reopened:  # the access time is durable
        (record,) = reopened.store.get_by_seq([7]).values()
        assert record.last_accessed_at == datetime(2026, 3, 1, tzinfo=UTC)


def test_a_touching_retrieval_notices_another_writer(tmp_path: Path) -> None:
    """The one-statement touch must not hide a write by another connection: the stream still
    reloads, so the other writer's memory is found by the next retrieval."""
    path = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(), path=path) as ours:
        ours.add(["tea with alice", "bob moved to paris"], importances=0.5, now=NOW)
        assert ours.retrieve("alice", k=1)[0].record.text == "tea with alice"
        assert not ours.store.changed_elsewhere()
        with MemoryStream(WordEmbeddings(), path=path) as other:
            other.add(["carol plays the cello"], importances=0.5, now=NOW)
        ours.store.touch_and_get([1], datetime(2026, 2, 1, tzinfo=UTC))
        assert ours.store.changed_elsewhere()
        ours.store.touch_and_get([1], datetime(2026, 2, 2, tzinfo=UTC))
        assert not ours.store.changed_elsewhere()  # our own writes are not "elsewhere"
        with MemoryStream(WordEmbeddings(), path=path) as other:
            other.add(["dave bakes bread"], importances=0.5, now=NOW)
        ours.retrieve("alice", k=1)  # touches; the other connection's commit is noticed
        assert ours.retrieve("bread", k=1)[0].record.text == "dave bakes bread"
