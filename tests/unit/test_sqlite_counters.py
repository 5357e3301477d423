"""The SQLite store's derived reflection counter, generations and seqs (schema version 5).

A single add writes only its row: the counter is the counters row (folded up to
``counted_seq``) plus the rows after it, and the generation is ``bumps * 2**40 + newest seq``.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.base import CounterUpdate, ReflectionState
from langchain_reflective.backends.sqlite import counters as sqlite_counters
from langchain_reflective.backends.sqlite import schema as sqlite_schema
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
from langchain_reflective.errors import ReflectionConflictError
from langchain_reflective.records import MemoryRecord
from tests.fakes import WordEmbeddings

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DIM = 4


def _records(n: int, *, start: int = 0, kind: str = "observation", imp: float = 0.25, ns="default"):
    return [
        MemoryRecord(
            id=f"{ns}-{kind}-{start + i}",
            text=f"memory {start + i}",
            kind=kind,
            importance=imp,
            created_at=NOW,
            namespace=ns,
        )
        for i in range(n)
    ]


def _vectors(n: int) -> np.ndarray:
    return np.ones((n, DIM), dtype=np.float32) / 2


def _add(store: SQLiteRecordStore, records: list[MemoryRecord], **kw) -> list[int]:
    """Insert as the stream does: with the counter the rows themselves amount to."""
    ns = records[0].namespace
    counter = CounterUpdate(
        namespace=ns,
        importance=sum(r.importance for r in records if r.kind != "reflection"),
        adds=len(records),
        **kw,
    )
    return store.insert(records, _vectors(len(records)), counter=counter)


def _counters_row(path: Path, ns: str = "default") -> tuple | None:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT importance_sum, adds, counted_seq, generation FROM counters WHERE namespace=?",
            (ns,),
        ).fetchone()
    finally:
        conn.close()


@pytest.fixture
def store(tmp_path: Path):
    s = SQLiteRecordStore(tmp_path / "m.db")
    s.bind_embeddings("test", DIM)
    yield s
    s.close()


def test_single_adds_write_only_their_row(store: SQLiteRecordStore, tmp_path: Path) -> None:
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    for i in range(5):
        _add(store, _records(1, start=i, imp=0.1 * (i + 1)))
    store._conn.set_trace_callback(None)
    assert not any(
        "BEGIN" in s or "INTO counters" in s or "UPDATE counters" in s for s in statements
    )
    # the counters row is read once (its bumps are cached until another connection writes)
    assert sum("FROM counters" in s for s in statements) == 1
    assert sum(s.startswith("INSERT INTO memories") for s in statements) == 5
    assert _counters_row(tmp_path / "m.db") is None  # never written
    state = store.reflection_state("default")
    assert state.importance_sum == pytest.approx(1.5)
    assert state.adds_since == 5
    assert state.last_reflection_at is None


def test_reflections_added_one_by_one_count_as_adds_only(store: SQLiteRecordStore) -> None:
    _add(store, _records(1, imp=0.5))
    _add(store, _records(1, kind="reflection", imp=0.9))
    state = store.reflection_state("default")
    assert (state.importance_sum, state.adds_since) == (pytest.approx(0.5), 2)


def test_batch_adds_count(store: SQLiteRecordStore) -> None:
    _add(store, _records(3, imp=0.5))
    _add(store, _records(2, start=3, imp=0.25) + _records(1, kind="reflection", imp=1.0))
    state = store.reflection_state("default")
    assert (state.importance_sum, state.adds_since) == (pytest.approx(2.0), 6)
    assert store.reflection_state("other") == ReflectionState(generation=0)


def test_a_counter_other_than_the_rows_is_applied(store: SQLiteRecordStore) -> None:
    """A store-level caller may pass any counter: it counts instead of the rows."""
    _add(store, _records(2, imp=0.5))
    rec = _records(1, start=2, imp=0.5)
    store.insert(rec, _vectors(1), counter=CounterUpdate("default", importance=2.0, adds=7))
    state = store.reflection_state("default")
    assert (state.importance_sum, state.adds_since) == (pytest.approx(3.0), 9)
    store.update_counter(CounterUpdate("default", importance=1.0, adds=1))
    state = store.reflection_state("default")
    assert (state.importance_sum, state.adds_since) == (pytest.approx(4.0), 10)


def test_inserts_without_counter_do_not_count(store: SQLiteRecordStore) -> None:
    """Imports insert without a counter: as before, they do not count toward a reflection."""
    _add(store, _records(2, imp=0.5))
    store.insert(_records(1, start=2, imp=0.5), _vectors(1))
    store.insert(_records(3, start=3, imp=0.5), _vectors(3))
    _add(store, _records(1, start=6, imp=0.25))
    state = store.reflection_state("default")
    assert (state.importance_sum, state.adds_since) == (pytest.approx(1.25), 3)


def test_reset_with_insert_leaves_the_reflection_out(store: SQLiteRecordStore) -> None:
    _add(store, _records(3, imp=0.5))
    later = NOW + timedelta(hours=1)
    seqs = _add(store, _records(2, kind="reflection", imp=0.9), reset_at=later)
    state = store.reflection_state("default")
    assert (state.importance_sum, state.adds_since) == (0, 0)
    assert state.last_reflection_at == later
    assert store.last_reflection_seq("default") == seqs[-1]
    _add(store, _records(1, start=3, imp=0.75))
    state = store.reflection_state("default")
    assert (state.importance_sum, state.adds_since) == (pytest.approx(0.75), 1)
    # a single reflection with a reset takes the transaction path and is left out too
    _add(store, _records(1, start=2, kind="reflection", imp=0.9), reset_at=later)
    state = store.reflection_state("default")
    assert (state.importance_sum, state.adds_since) == (0, 0)
    _add(store, _records(1, start=4, imp=0.5))
    store.update_counter(CounterUpdate("default", reset_at=later))  # mark_reflected
    assert store.reflection_state("default").adds_since == 0
    assert (
        store.recent("default", n=None, kinds=None, after_seq=store.last_reflection_seq("default"))
        == []
    )


def test_deleting_unfolded_memories_takes_them_out_of_the_counter(
    store: SQLiteRecordStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changed in schema 2: not-yet-folded deleted memories leave the counter; folded stay."""
    monkeypatch.setattr(sqlite_counters, "_FOLD_ROWS", 4)
    recs = _records(6, imp=0.5)
    for r in recs:
        _add(store, [r])
    # seq 5 - counted 0 > 4: folded up to seq 5 after the fifth add
    assert store._counters["default"][1] == 5
    _add(store, _records(2, start=6, imp=0.25))  # unfolded
    assert store.reflection_state("default").importance_sum == pytest.approx(3.5)
    store.delete([recs[0].id, "default-observation-6"], namespace="default")
    state = store.reflection_state("default")
    # the folded memory stays counted, the unfolded one is gone
    assert (state.importance_sum, state.adds_since) == (pytest.approx(3.25), 7)


def test_folding_keeps_the_counter_exact_and_the_scan_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_counters, "_FOLD_ROWS", 16)
    path = tmp_path / "m.db"
    store = SQLiteRecordStore(path)
    store.bind_embeddings("test", DIM)
    try:
        imps = [(i % 10) / 10 for i in range(100)]
        for i, imp in enumerate(imps):
            kind = "reflection" if i % 7 == 0 else "observation"
            _add(store, _records(1, start=i, kind=kind, imp=imp))
            _, _, counted, _ = _counters_row(path) or (0, 0, 0, 0)
            assert i + 1 - counted <= 16  # the unfolded range stays bounded
            expected = sum(v for j, v in enumerate(imps[: i + 1]) if j % 7)
            state = store.reflection_state("default")
            assert state.importance_sum == pytest.approx(expected)
            assert state.adds_since == i + 1
        # a batch larger than the fold distance folds inside its transaction
        _add(store, _records(40, start=100, imp=0.5))
        row = _counters_row(path)
        assert row is not None and row[2] == 140
        state = store.reflection_state("default")
        assert state.importance_sum == pytest.approx(expected + 20)
        assert state.adds_since == 140
    finally:
        store.close()
    reopened = SQLiteRecordStore(path)
    try:
        assert reopened.reflection_state("default").adds_since == 140
    finally:
        reopened.close()


def test_generation_changes_on_every_write_and_never_repeats(store: SQLiteRecordStore) -> None:
    seen: list[int] = [store.generation("default")]

    def check() -> None:
        gen = store.generation("default")
        assert store.last_generation == gen
        assert gen not in seen
        seen.append(gen)

    a = _records(1, imp=0.5)
    _add(store, a)  # single-row path
    check()
    _add(store, _records(3, start=1))  # batch
    check()
    store.insert(_records(1, start=4), _vectors(1))  # without counter
    check()
    store.delete([a[0].id], namespace="default")
    check()
    assert store.delete(["no-such-id"], namespace="default") == []  # nothing changed
    assert store.generation("default") == seen[-1]
    # delete the newest row, then insert one: the newest seq alone could repeat, bumps don't
    newest = _records(1, start=5)
    _add(store, newest)
    check()
    store.delete([newest[0].id], namespace="default")
    check()
    _add(store, _records(1, start=6))
    check()
    _add(store, _records(1, start=7, kind="reflection"), reset_at=NOW)  # insert with reset
    check()
    before = store.generation("default")
    store.update_counter(CounterUpdate("default", reset_at=NOW))  # reset alone
    assert store.generation("default") != before
    seen.append(store.generation("default"))
    store.purge("default")
    check()
    _add(store, _records(1, start=8))
    check()
    # another namespace's writes leave this one alone
    _add(store, _records(1, ns="other"))
    assert store.generation("default") == seen[-1]
    # the same values from a fresh connection (nothing cached)
    other = SQLiteRecordStore(store.path)
    try:
        assert other.generation("default") == seen[-1]
        assert other.reflection_state("default") == store.reflection_state("default")
    finally:
        other.close()


def test_seqs_are_never_reused(store: SQLiteRecordStore, tmp_path: Path) -> None:
    """Deleting the newest memories (one, a namespace, all of them) never frees their seqs."""
    handed_out: list[int] = []
    handed_out += _add(store, _records(3))
    [newest] = _add(store, _records(1, start=3))  # single-row path
    handed_out.append(newest)
    assert store.delete(["default-observation-3"], namespace="default") == [newest]
    handed_out += _add(store, _records(1, start=4))
    handed_out += _add(store, _records(2, ns="other"))
    store.purge("other")  # held the newest seqs
    handed_out += _add(store, _records(2, start=5))  # batch path
    store.purge("default")  # the file is empty now
    other = SQLiteRecordStore(store.path)  # another connection, nothing cached
    try:
        handed_out += _add(other, _records(1, start=9))
    finally:
        other.close()
    handed_out += store.insert(_records(1, start=10), _vectors(1))  # without counter
    assert handed_out == sorted(handed_out)
    assert len(set(handed_out)) == len(handed_out)
    # new files do without AUTOINCREMENT (its sqlite_sequence write on every insert)
    conn = sqlite3.connect(store.path)
    try:
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name='memories'").fetchone()[0]
        assert "AUTOINCREMENT" not in sql.upper()
    finally:
        conn.close()


def test_another_writer_shows_at_the_next_look_after_single_adds(
    store: SQLiteRecordStore,
) -> None:
    """A one-memory insert does not read the data version; the next changed_elsewhere() (which
    the stream calls before reads and before saving caches) still sees the other writer."""
    _add(store, _records(1))
    assert store.changed_elsewhere() is False
    other = SQLiteRecordStore(store.path)
    try:
        _add(other, _records(1, start=1))
        other.delete(["default-observation-0"], namespace="default")  # bumps the generation
    finally:
        other.close()
    _add(store, _records(1, start=2))
    assert store.changed_elsewhere() is True
    assert store.changed_elsewhere() is False
    # the cached bumps were dropped at that look: the next add's generation is the file's
    _add(store, _records(1, start=3))
    assert store.last_generation == store.generation("default")
    assert store.changed_elsewhere() is False


def test_index_caches_are_not_saved_over_unseen_writes(tmp_path: Path) -> None:
    """Another process adds while this stream adds one memory at a time; this stream's
    partition lacks those rows, so closing it must not save a cache under the file's
    generation (a reopen would load vectors that do not match the rows)."""
    path = tmp_path / "m.db"
    a = MemoryStream(WordEmbeddings(), path=path)
    a.add(["alice likes tea"], importances=0.5, now=NOW)
    a.retrieve("tea", k=1, now=NOW)  # loads the partition
    with MemoryStream(WordEmbeddings(), path=path) as b:
        b.add(["bob likes coffee", "dan likes rain"], importances=0.5, now=NOW)
    a.add(["carol likes paris"], importances=0.5, now=NOW)  # newest seq: the file's generation
    a.close()
    with MemoryStream(WordEmbeddings(), path=path) as c:
        texts = {h.record.text for h in c.retrieve("likes", k=10, now=NOW, touch=False)}
        assert texts == {
            "alice likes tea",
            "bob likes coffee",
            "dan likes rain",
            "carol likes paris",
        }
        hit = c.retrieve("bob coffee", k=1, now=NOW, touch=False)[0]
        assert hit.record.text == "bob likes coffee"
        assert hit.relevance == pytest.approx(
            max(h.relevance for h in c.retrieve("bob coffee", k=4, now=NOW, touch=False))
        )


def test_a_failed_single_add_is_a_storage_error(store: SQLiteRecordStore) -> None:
    from langchain_reflective.errors import DuplicateIdError, StorageError

    rec = _records(1)
    _add(store, rec)
    with pytest.raises(DuplicateIdError):
        _add(store, rec)
    state = store.reflection_state("default")
    assert state.adds_since == 1
    store.close()
    with pytest.raises(StorageError, match="closed"):
        _add(store, _records(1, start=1))


def test_stream_reloads_after_another_stream_wrote(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with (
        MemoryStream(WordEmbeddings(), path=path) as a,
        MemoryStream(WordEmbeddings(), path=path) as b,
    ):
        a.add(["alice likes tea"], importances=0.5, now=NOW)
        b.add(["bob likes coffee"], importances=0.5, now=NOW)
        a.add(["carol likes paris"], importances=0.5, now=NOW)  # reloads: sees bob's
        hits = a.retrieve("bob coffee", k=1, now=NOW)
        assert hits[0].record.text == "bob likes coffee"
        assert a.reflection_state().adds_since == 3


def test_two_writers_single_adds_lose_nothing(tmp_path: Path) -> None:
    """Autocommit inserts wait on the busy timeout like BEGIN IMMEDIATE: nothing is lost."""
    path = tmp_path / "m.db"
    first = SQLiteRecordStore(path)
    first.bind_embeddings("test", DIM)
    second = SQLiteRecordStore(path)
    errors: list[BaseException] = []
    per_writer = 300

    def write(store: SQLiteRecordStore, ns_tag: str) -> None:
        try:
            for i in range(per_writer):
                rec = MemoryRecord(id=f"{ns_tag}-{i}", text="x", importance=0.5, created_at=NOW)
                _add(store, [rec])
                if i % 50 == 0:
                    store.delete([f"{ns_tag}-{i}"], namespace="default")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=write, args=(first, "a")),
        threading.Thread(target=write, args=(second, "b")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    deleted = 2 * len(range(0, per_writer, 50))
    assert first.count("default") == 2 * per_writer - deleted
    # unfolded deletes leave the counter; folded ones stay: between the two bounds
    adds = first.reflection_state("default").adds_since
    assert 2 * per_writer - deleted <= adds <= 2 * per_writer
    assert first.generation("default") == second.generation("default")
    first.close()
    second.close()


V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE memories (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    text TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_us INTEGER NOT NULL,
    accessed_us INTEGER NOT NULL,
    importance REAL NOT NULL,
    importance_source TEXT NOT NULL,
    evidence TEXT NOT NULL,
    depth INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX memories_namespace_seq ON memories (namespace, seq);
CREATE INDEX memories_insight_importance
    ON memories (namespace, kind, importance) WHERE kind <> 'observation';
CREATE TABLE counters (
    namespace TEXT PRIMARY KEY,
    importance_sum REAL NOT NULL DEFAULT 0,
    adds INTEGER NOT NULL DEFAULT 0,
    last_reflection_us INTEGER,
    last_reflection_seq INTEGER NOT NULL DEFAULT 0,
    generation INTEGER NOT NULL DEFAULT 0
);
"""

V1_INSERT = (
    "INSERT INTO memories (id, namespace, text, kind, created_us, accessed_us, importance, "
    "importance_source, evidence, depth, metadata, vector) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)


def _v1_file(path: Path) -> None:
    """A version-1 file as the previous release wrote it: 5 memories in "default" (the first
    two before a reflection at seq 2), one in "other"; a counter that still counts a memory
    deleted since (v1 counters were exact as of their writes, not re-derived)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA application_id={sqlite_schema.APPLICATION_ID}")
    conn.executescript(V1_SCHEMA)
    conn.executemany(
        "INSERT INTO meta VALUES (?, ?)",
        [
            ("schema_version", "1"),
            ("created_by", "langchain-reflective"),
            ("dimension", str(DIM)),
            ("embedding_model", "test"),
        ],
    )
    vec = _vectors(1).tobytes()
    rows = [
        ("d0", "default", "observation", 0.5),
        ("d1", "default", "reflection", 0.9),
        ("d2", "default", "observation", 0.25),
        ("o0", "other", "observation", 0.5),
        ("d3", "default", "observation", 0.5),
    ]
    for rid, ns, kind, imp in rows:
        conn.execute(
            V1_INSERT,
            (rid, ns, rid, kind, 0, 0, imp, "given", "[]", 0, "{}", vec),
        )
    # d2 counted, then deleted; d3 counted: 0.75 over 2 adds since the reflection at seq 2
    conn.execute("DELETE FROM memories WHERE id='d2'")
    conn.executemany(
        "INSERT INTO counters VALUES (?, ?, ?, ?, ?, ?)",
        [("default", 0.75, 2, 1_000_000, 2, 7), ("other", 0.5, 1, None, 0, 1)],
    )
    conn.commit()
    conn.close()


def test_version_1_files_are_migrated(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _v1_file(path)
    store = SQLiteRecordStore(path)
    try:
        assert store.get_meta("schema_version") == str(sqlite_schema.SCHEMA_VERSION) == "6"
        state = store.reflection_state("default")
        assert (state.importance_sum, state.adds_since) == (pytest.approx(0.75), 2)
        assert state.last_reflection_at == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
        assert store.reflection_state("other").adds_since == 1
        assert store.last_reflection_seq("default") == 2
        assert _counters_row(path)[2] == 5  # folded up to the newest seq
        # generations differ from any version-1 generation (so old index caches are stale)
        gen = store.generation("default")
        assert gen > 7
        _add(store, _records(1, imp=0.5))
        assert store.generation("default") not in (gen, 7)
        assert store.last_generation == store.generation("default")
        state = store.reflection_state("default")
        assert (state.importance_sum, state.adds_since) == (pytest.approx(1.25), 3)
    finally:
        store.close()
    # reopening a migrated file migrates nothing again
    store = SQLiteRecordStore(path)
    try:
        assert store.reflection_state("default").adds_since == 3
    finally:
        store.close()


def test_version_2_files_never_reuse_a_seq_autoincrement_handed_out(tmp_path: Path) -> None:
    """A version-2 file whose newest memories were deleted: ``sqlite_sequence`` remembers seqs
    that no row holds any more; the upgrade carries them into ``seq_floor``."""
    path = tmp_path / "m.db"
    _v1_file(path)
    conn = sqlite3.connect(path)  # what the 1 -> 2 upgrade of the previous release did
    conn.execute("ALTER TABLE counters ADD COLUMN counted_seq INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE counters SET counted_seq = 5")
    conn.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    conn.execute("DELETE FROM memories WHERE seq >= 4")  # o0 and d3: seqs 4 and 5 freed
    conn.commit()
    assert conn.execute("SELECT MAX(seq) FROM memories").fetchone()[0] == 2
    conn.close()
    store = SQLiteRecordStore(path)
    try:
        assert store.get_meta("schema_version") == "6"
        assert _add(store, _records(1)) == [6]  # single-row path
        assert _add(store, _records(2, start=1)) == [7, 8]  # batch path
        # seq_floor keeps the rule AUTOINCREMENT kept (the version-6 upgrade rebuilt the table)
        store.delete(["default-observation-2"], namespace="default")
        assert _add(store, _records(1, start=3)) == [9]
    finally:
        store.close()


def test_version_1_stream_file_keeps_working(tmp_path: Path) -> None:
    """A whole stream file written by version 1 (simulated): reads and counts carry on."""
    path = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(["alice likes tea", "bob likes coffee"], importances=[0.5, 0.25], now=NOW)
        model = stream.store.embedding_model
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE counters DROP COLUMN counted_seq")
    conn.execute("ALTER TABLE counters DROP COLUMN reflection_generation")  # new in version 5
    # v1 wrote the counters row on every add, exact as of then
    conn.execute(
        "INSERT OR REPLACE INTO counters(namespace, importance_sum, adds, generation) "
        "VALUES ('default', 0.75, 2, 1)"
    )
    conn.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert stream.store.embedding_model == model
        state = stream.reflection_state()
        assert (state.importance_sum, state.adds_since) == (pytest.approx(0.75), 2)
        stream.add(["carol likes paris"], importances=0.5, now=NOW)
        assert stream.reflection_state().importance_sum == pytest.approx(1.25)
        assert stream.retrieve("carol paris", k=1, now=NOW)[0].record.text == "carol likes paris"


def test_remembered_sums_follow_other_writers(tmp_path: Path) -> None:
    """reflection_state only sums new rows while bumps and counted_seq are unchanged."""
    path = tmp_path / "m.db"
    a = SQLiteRecordStore(path)
    a.bind_embeddings("test", DIM)
    b = SQLiteRecordStore(path)
    try:
        _add(a, _records(3, imp=0.5))
        assert a.reflection_state("default").adds_since == 3  # remembered: seqs 1-3
        _add(b, _records(1, start=3, imp=0.25))
        state = a.reflection_state("default")
        assert (state.importance_sum, state.adds_since) == (pytest.approx(1.75), 4)
        b.delete(["default-observation-1"], namespace="default")  # unfolded: leaves the counter
        state = a.reflection_state("default")
        assert (state.importance_sum, state.adds_since) == (pytest.approx(1.25), 3)
        b.insert(_records(2, start=4, imp=0.5), _vectors(2))  # an import folds, not counted
        state = a.reflection_state("default")
        assert (state.importance_sum, state.adds_since) == (pytest.approx(1.25), 3)
        _add(a, _records(1, start=6, imp=0.5))
        assert a.reflection_state("default").importance_sum == pytest.approx(1.75)
        b.update_counter(CounterUpdate("default", reset_at=NOW))
        state = a.reflection_state("default")
        assert (state.importance_sum, state.adds_since) == (0, 0)
        assert state.last_reflection_at == NOW
        _add(b, _records(1, start=7, imp=0.5))
        assert a.reflection_state("default").adds_since == 1
        b.purge("default")
        assert a.reflection_state("default") == ReflectionState(generation=1)  # kept: one reset
        _add(a, _records(1, start=8, imp=0.5))
        assert a.reflection_state("default").adds_since == 1
    finally:
        a.close()
        b.close()


def _counters_columns(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [str(r[1]) for r in conn.execute("PRAGMA table_info(counters)")]
    finally:
        conn.close()


def test_version_4_files_count_resets_from_the_upgrade_on(tmp_path: Path) -> None:
    """Version 4 -> 5: ``counters.reflection_generation``, 0 in every row (resets before the
    upgrade were not counted); from there every reset counts, and a reset conditional on a
    generation read before another reset stores nothing."""
    path = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(["alice likes tea", "bob likes coffee"], importances=[0.5, 0.25], now=NOW)
        stream.add("an insight", kinds="reflection", importances=0.5, now=NOW,
                   reset_reflection_counter=True)  # fmt: skip
        stream.add("carol likes paris", importances=0.5, now=NOW)
        stream.add("dave likes rome", importances=0.5, now=NOW, namespace="other")
    fresh = _counters_columns(path)
    conn = sqlite3.connect(path)  # what version 4 wrote: no reflection_generation
    conn.execute("ALTER TABLE counters DROP COLUMN reflection_generation")
    conn.execute("UPDATE meta SET value='4' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert stream.store.get_meta("schema_version") == "6"
        assert _counters_columns(path) == fresh
        seen = stream.reflection_state()
        assert (seen.importance_sum, seen.adds_since, seen.generation) == (0.5, 1, 0)
        assert seen.last_reflection_at == NOW
        assert stream.reflection_state("other").generation == 0
        stream.add("a second insight", kinds="reflection", importances=0.5, now=NOW,
                   reset_reflection_counter=seen)  # fmt: skip
        with pytest.raises(ReflectionConflictError):
            stream.mark_reflected(now=NOW, consumed=seen)
        state = stream.reflection_state()
        assert (state.importance_sum, state.adds_since, state.generation) == (0.0, 0, 1)
    with MemoryStream(WordEmbeddings(), path=path) as stream:  # nothing migrates again
        assert stream.reflection_state().generation == 1


def _locked_file(path: Path) -> sqlite3.Connection:
    """A rollback-journal file that another connection holds an exclusive lock on."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    return holder


def test_the_switch_to_wal_waits_for_a_lock_another_connection_releases(tmp_path: Path) -> None:
    """SQLite answers ``PRAGMA journal_mode=WAL`` with "database is locked" at once while
    another connection holds the file: the switch is retried until the busy timeout."""
    path = tmp_path / "locked.db"
    holder = _locked_file(path)
    release = threading.Timer(0.2, holder.rollback)
    release.start()
    try:
        conn = sqlite3.connect(path, timeout=0)
        assert sqlite_schema._journal_mode_wal(conn, busy_timeout=10.0) == "wal"
        conn.close()
    finally:
        release.join()
        holder.close()


def test_the_switch_to_wal_gives_up_after_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = _locked_file(path)
    try:
        conn = sqlite3.connect(path, timeout=0)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            sqlite_schema._journal_mode_wal(conn, busy_timeout=0.1)
        conn.close()
    finally:
        holder.close()
