"""The embedded default store: one SQLite file (WAL) holding records, vectors and counters.

Nothing here executes code on load: vectors are raw little-endian float32 blobs, metadata and
evidence are JSON. The file carries an application id, a schema version and the embedding
model's identity and dimension, so opening a foreign, newer or mismatched file is a clear error
instead of silent garbage.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.base import (
    CounterUpdate,
    PendingMemory,
    ReflectionState,
    trusted_record,
)
from langchain_reflective.backends.sqlite.record_store import BaseRecordStore, PartitionChunk
from langchain_reflective.errors import (
    DimensionMismatchError,
    EmbeddingError,
    ForeignFileError,
    PendingConflictError,
    SchemaVersionError,
    StorageError,
)
from langchain_reflective.records import REFLECTION, MemoryRecord

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SQLiteRecordStore"]

logger = logging.getLogger(__name__)

APPLICATION_ID = 0x52464C54  # "RFLT"
SCHEMA_VERSION = 4
_SQLITE_MAGIC = b"SQLite format 3\x00"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_LE_F32 = np.dtype("<f4")
_MAX_VARS = 900  # stay below SQLite's host-parameter limit

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
    seq INTEGER PRIMARY KEY,
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
CREATE INDEX IF NOT EXISTS memories_namespace_seq ON memories (namespace, seq);
CREATE INDEX IF NOT EXISTS memories_insight_importance
    ON memories (namespace, kind, importance) WHERE kind <> 'observation';
CREATE TABLE IF NOT EXISTS counters (
    namespace TEXT PRIMARY KEY,
    importance_sum REAL NOT NULL DEFAULT 0,
    adds INTEGER NOT NULL DEFAULT 0,
    last_reflection_us INTEGER,
    last_reflection_seq INTEGER NOT NULL DEFAULT 0,
    generation INTEGER NOT NULL DEFAULT 0,
    counted_seq INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS seq_floor (seq INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS pending (
    pseq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL,
    text TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_us INTEGER NOT NULL,
    importance REAL,
    metadata TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS pending_namespace_pseq ON pending (namespace, pseq);
"""
"""Schema notes (version 4).

``pending`` (new in version 4) is the queue of memories written by
:meth:`SQLiteRecordStore.enqueue` and not yet embedded or rated; completing one deletes its row
in the transaction that inserts it into ``memories`` (same id).

``seq`` numbers memories in insertion order and is never reused: an insert takes one more than
the larger of the newest ``seq`` and ``seq_floor`` (one row), and every delete first raises
``seq_floor`` to the newest ``seq``. That is what ``AUTOINCREMENT`` guaranteed in versions 1
and 2, without its extra page write (``sqlite_sequence``) on every insert. Files upgraded from
those versions keep ``AUTOINCREMENT`` on the table (harmless, only slower): rebuilding a large
table on open is not worth it.

``counters`` holds, per namespace, the reflection counter *folded up to* ``counted_seq``:
``importance_sum``/``adds`` cover the namespace's memories with ``seq <= counted_seq`` (and any
explicit :class:`CounterUpdate` increments); memories with a larger ``seq`` count on top of it,
read from the rows themselves (see :meth:`SQLiteRecordStore.reflection_state`). So adding a
memory writes only its row, not the counters row. ``generation`` counts deletes, purges and
counter resets (the "bumps"); the cache generation of a namespace is derived from it and the
namespace's newest ``seq`` (see :meth:`SQLiteRecordStore.generation`).

Version 1 files (no ``counted_seq``; the counters row was bumped on every write) are migrated on
open: their counters were exact, so ``counted_seq`` starts at each namespace's newest ``seq``.
Version 1-3 files get an empty ``pending`` table.
"""

_FOLD_ROWS = 512
"""The reflection counter is folded into the counters row once a namespace's unfolded range
(``seq`` distance past ``counted_seq``) exceeds this, so reading the counter scans at most about
this many rows. Checked by writers: after a single add (one extra transaction per this many
adds) and inside batch inserts."""

_GENERATION_STRIDE = 1 << 40
"""``generation = bumps * _GENERATION_STRIDE + newest seq``: sequence numbers stay far below."""

_NOT_OBSERVATION = "kind <> 'observation'"
"""The partial importance index's condition; a query must repeat it verbatim to use the index.
Observations, the bulk of a stream, stay out of that index: it would take a random-page write
per add, and the hot query (the most important insights) never asks for observations."""

_COLUMNS = (
    "seq, id, namespace, text, kind, created_us, accessed_us, importance, importance_source, "
    "evidence, depth, metadata"
)


def to_us(value: datetime) -> int:
    """Exact microseconds since the epoch of an aware datetime."""
    return (value - _EPOCH) // _US


def from_us(value: int) -> datetime:
    """Inverse of :func:`to_us` (UTC)."""
    return _EPOCH + timedelta(microseconds=int(value))


def _row_to_record(row: Sequence[Any]) -> MemoryRecord:
    evidence = row[9]
    metadata = row[11]
    return trusted_record(
        id=row[1],
        namespace=row[2],
        text=row[3],
        kind=row[4],
        created_at=from_us(row[5]),
        last_accessed_at=from_us(row[6]),
        importance=float(row[7]),
        importance_source=row[8],
        evidence=tuple(str(e) for e in json.loads(evidence)) if evidence != "[]" else (),
        depth=int(row[10]),
        metadata=json.loads(metadata) if metadata != "{}" else {},
    )


def _dump_evidence(evidence: tuple[str, ...]) -> str:
    return json.dumps(list(evidence)) if evidence else "[]"


def _dump_metadata(metadata: Any) -> str:
    return json.dumps(dict(metadata), allow_nan=False) if metadata else "{}"


_NEXT_SEQ = (
    "MAX(COALESCE((SELECT MAX(seq) FROM memories), 0), "
    "COALESCE((SELECT MAX(seq) FROM seq_floor), 0)) + 1"
)
_INSERT = (
    "INSERT INTO memories (seq, id, namespace, text, kind, created_us, accessed_us, importance, "
    f"importance_source, evidence, depth, metadata, vector) VALUES ({_NEXT_SEQ},"
    "?,?,?,?,?,?,?,?,?,?,?,?)"
)
_RAISE_SEQ_FLOOR = (
    "UPDATE seq_floor SET seq = MAX(seq, COALESCE((SELECT MAX(seq) FROM memories), 0))"
)
"""Run before deleting memories: the seqs they free are never handed out again."""


def _row(r: MemoryRecord, created_us: int, accessed_us: int, vector: bytes) -> tuple[Any, ...]:
    """The parameters of :data:`_INSERT` for one record."""
    return (
        r.id,
        r.namespace,
        r.text,
        r.kind,
        created_us,
        accessed_us,
        r.importance,
        r.importance_source,
        _dump_evidence(r.evidence),
        r.depth,
        _dump_metadata(r.metadata),
        vector,
    )


def _counts_itself(record: MemoryRecord, counter: CounterUpdate | None) -> bool:
    """Whether ``counter`` is exactly what the row itself adds to the reflection counter.

    Then inserting the row is all there is to do: the counter is derived from the rows after
    ``counted_seq`` (the importance of non-reflection memories, one add per memory).
    """
    return (
        counter is not None
        and counter.reset_at is None
        and counter.namespace == record.namespace
        and counter.adds == 1
        and counter.importance == (record.importance if record.kind != REFLECTION else 0.0)
    )


_WAL_SIZE_LIMIT = 64 << 20
"""Bytes a WAL file is truncated to after it restarts."""
_CHECKPOINT_EVERY = 256
"""Commits (or rows written) between two wake-ups of the background checkpointer. Each
checkpoint ends in an ``fsync`` of the database file and copies every page touched since the
last one; waking every 256 rather than 16 commits took ~30 us of CPU off each one-row add (a
leaf page takes several rows before it is full) and leaves at most ~1,300 frames (~5 MB) in
the WAL between checkpoints."""
_WAL_RESTART_FRAMES = 8192
"""WAL length (pages, ~32 MB) at which the writer checkpoints once itself, so the WAL restarts."""


class _Checkpointer:
    """Copies the WAL into the database file on a background thread.

    With SQLite's automatic checkpoints, every ~1,000 pages one commit waits for the copy and
    two ``fsync`` calls, which on a virtual disk is half the cost of a small durable write. Here a
    thread with its own connection runs passive checkpoints (they never block writers or
    readers), so a commit only appends to the WAL. A passive checkpoint cannot restart a WAL that
    is written to while it runs, so when the WAL grows past ``_WAL_RESTART_FRAMES`` the thread
    pauses and asks the writer to run one checkpoint inline (only the few frames the thread has
    not copied yet); the next write then starts the WAL from the beginning. Durability is
    unchanged: commits are in the WAL either way.
    """

    def __init__(self, path: Path, timeout: float) -> None:
        self._path = path
        self._timeout = timeout
        self._wake = threading.Event()
        self._stopping = False
        self.catch_up = False
        """Set by the thread: the writer should finish a checkpoint inline."""
        self._thread = threading.Thread(
            target=self._run, name="langchain-reflective-checkpoint", daemon=True
        )
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def poke(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(str(self._path), timeout=self._timeout, isolation_level=None)
        except sqlite3.Error as exc:
            logger.warning("WAL checkpoint thread could not open %s: %s", self._path, exc)
            return
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                if self.catch_up:
                    continue  # the writer is finishing the checkpoint
                _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if frames >= _WAL_RESTART_FRAMES:
                    self.catch_up = True
        except sqlite3.Error as exc:
            logger.warning("WAL checkpoint thread for %s stopped: %s", self._path, exc)
        finally:
            conn.close()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()


def _chunks(values: Sequence[Any], size: int = _MAX_VARS) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


class SQLiteRecordStore(BaseRecordStore):
    """Records, vectors and counters in one SQLite database.

    Args:
        path: the database file; ``None`` keeps everything in memory (nothing is written).
        synchronous: SQLite's ``synchronous`` pragma. ``"NORMAL"`` (default) in WAL mode never
            loses a committed transaction when the process crashes; ``"FULL"`` also survives
            power loss at some cost per write.
        timeout: seconds to wait for another writer's lock before failing.

    Raises:
        ForeignFileError: the file is not a langchain-reflective memory file.
        SchemaVersionError: the file was written by a newer version of the package.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL",
        timeout: float = 30.0,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.RLock()
        self._closed = False
        self._data_version = 0
        self._external_change = False
        self._writes = 0
        self._checkpointer: _Checkpointer | None = None
        self._counters: dict[str, tuple[int, int]] = {}
        """Per namespace ``(bumps, counted_seq)`` as of ``_data_version`` (see ``_counter_row``);
        cleared when another connection wrote or a transaction of ours rolled back."""
        self._unfolded: dict[str, tuple[int, int, int, float, int]] = {}
        """Per namespace, what :meth:`reflection_state` summed last: ``(bumps, counted_seq,
        newest seq summed, importance, rows)``; valid while bumps and ``counted_seq`` are."""
        if self.path is not None:
            self._check_file(self.path)
        target = ":memory:" if self.path is None else str(self.path)
        try:
            self._conn = sqlite3.connect(
                target, timeout=timeout, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open memory file {self.path}: {exc}") from exc
        try:
            self._init_schema(synchronous)
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise ForeignFileError(
                f"{self.path} is not a readable langchain-reflective memory file ({exc}); "
                "it may be truncated or belong to another program"
            ) from exc
        except BaseException:
            self._conn.close()
            raise
        self._data_version = self._read_data_version()
        self._external_change = False
        if self.path is not None:
            self._conn.execute("PRAGMA wal_autocheckpoint=0")
            self._checkpointer = _Checkpointer(self.path, timeout)
            # a store that is never closed must not leave its thread behind
            self._stop_checkpointer = weakref.finalize(self, self._checkpointer.stop)
        self.last_generation = 0
        """The generation returned by the last write (see :meth:`generation`)."""

    # -- opening -------------------------------------------------------------------------------

    @staticmethod
    def _check_file(path: Path) -> None:
        if path.exists():
            if path.is_dir():
                raise ForeignFileError(f"{path} is a directory, not a memory file")
            size = path.stat().st_size
            if size == 0:
                return
            with path.open("rb") as fh:
                header = fh.read(100)
            if not header.startswith(_SQLITE_MAGIC) or len(header) < 100:
                raise ForeignFileError(
                    f"{path} is not a langchain-reflective memory file (not SQLite); "
                    "choose another path or remove the file"
                )
            app_id = int.from_bytes(header[68:72], "big")
            if app_id not in (0, APPLICATION_ID):
                raise ForeignFileError(
                    f"{path} is an SQLite file of another program (application id "
                    f"{app_id:#x}); refusing to touch it"
                )
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            # create the file private to its owner before SQLite opens it
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.close(fd)

    def _init_schema(self, synchronous: str) -> None:
        c = self._conn
        app_id = c.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if app_id == 0 and tables:
            raise ForeignFileError(
                f"{self.path} is an SQLite database of another program (tables: "
                f"{', '.join(sorted(tables))}); refusing to touch it"
            )
        if self.path is not None:
            mode = c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StorageError(f"could not enable WAL mode on {self.path} (got {mode})")
        c.execute(f"PRAGMA synchronous={synchronous}")
        c.execute("PRAGMA foreign_keys=ON")
        c.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
        if app_id == 0:
            with self._transaction():
                c.execute(f"PRAGMA application_id={APPLICATION_ID}")
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        c.execute(statement)
                c.execute("INSERT INTO seq_floor(seq) VALUES (0)")
                c.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
                c.execute(
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('created_by', ?)",
                    ("langchain-reflective",),
                )
        version_row = c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if version_row is None:
            raise ForeignFileError(f"{self.path} has no schema version; it is not a memory file")
        version = int(version_row[0])
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path} has schema version {version}, newer than this "
                f"langchain-reflective supports ({SCHEMA_VERSION}); upgrade the package"
            )
        if version < SCHEMA_VERSION:
            self._migrate()
        if c.execute(
            "SELECT 1 FROM sqlite_master WHERE type='index' "
            "AND name='memories_namespace_kind_importance'"
        ).fetchone():
            # a file from an earlier version: index every kind but observations (same schema
            # version: older readers use the new index as they used the old one)
            with self._transaction():
                c.execute("DROP INDEX IF EXISTS memories_namespace_kind_importance")
                c.execute(
                    "CREATE INDEX IF NOT EXISTS memories_insight_importance ON memories "
                    f"(namespace, kind, importance) WHERE {_NOT_OBSERVATION}"
                )

    def _migrate(self) -> None:
        """Bring an older file up to :data:`SCHEMA_VERSION` (one transaction).

        Version 1 -> 2: ``counters.counted_seq``. Version 1 kept the counters exact on every
        write, so each namespace's counter is folded up to its newest ``seq`` as of now.

        Version 2 -> 3: ``seq_floor``, set to the highest ``seq`` ever handed out (what
        ``AUTOINCREMENT`` recorded in ``sqlite_sequence``), so no seq is reused.

        Version 3 -> 4: the (empty) ``pending`` queue.

        Another process may migrate at the same time: the version is read again under the
        write lock. Old versions of the package refuse the migrated file (its version is newer).
        """
        with self._transaction() as c:
            row = c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0])
            if version >= SCHEMA_VERSION:
                return
            if version < 2:
                c.execute("ALTER TABLE counters ADD COLUMN counted_seq INTEGER NOT NULL DEFAULT 0")
                # every v1 write bumped its namespace's counters row, but be safe about
                # namespaces without one: their counter was zero, so they are folded too
                c.execute(
                    "INSERT INTO counters(namespace, counted_seq) "
                    "SELECT namespace, MAX(seq) FROM memories WHERE true GROUP BY namespace "
                    "ON CONFLICT(namespace) DO UPDATE SET counted_seq = excluded.counted_seq"
                )
            if version < 3:
                self._add_seq_floor(c)
            if version < 4:
                for statement in _SCHEMA.split(";"):
                    if "pending" in statement:
                        c.execute(statement)
            c.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))

    @staticmethod
    def _add_seq_floor(c: sqlite3.Connection) -> None:
        """Version 2 -> 3 (see :meth:`_migrate`)."""
        c.execute("CREATE TABLE IF NOT EXISTS seq_floor (seq INTEGER PRIMARY KEY)")
        floor = int(
            c.execute(
                "SELECT MAX(COALESCE((SELECT MAX(seq) FROM memories), 0), "
                "COALESCE((SELECT MAX(seq) FROM seq_floor), 0))"
            ).fetchone()[0]
        )
        if c.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='sqlite_sequence'"
        ).fetchone():
            used = c.execute(
                "SELECT MAX(seq) FROM sqlite_sequence WHERE name='memories'"
            ).fetchone()[0]
            floor = max(floor, int(used or 0))
        c.execute("DELETE FROM seq_floor")
        c.execute("INSERT INTO seq_floor(seq) VALUES (?)", (floor,))

    # executescript commits implicitly; wrap plain statements in explicit transactions.
    class _Tx:
        def __init__(self, store: SQLiteRecordStore) -> None:
            self.store = store

        def __enter__(self) -> sqlite3.Connection:
            self.store._lock.acquire()
            try:
                self.store._ensure_open()
                self.store._conn.execute("BEGIN IMMEDIATE")
                self.store._check_data_version()
            except BaseException:
                self.store._lock.release()
                raise
            return self.store._conn

        def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
            try:
                if exc_type is None:
                    try:
                        self.store._conn.execute("COMMIT")
                    except BaseException:
                        self.store._counters.clear()
                        raise
                    self.store._after_commit()
                else:
                    self.store._counters.clear()  # it may hold values of the rolled-back writes
                    self.store._conn.execute("ROLLBACK")
            finally:
                self.store._lock.release()

    def _transaction(self) -> SQLiteRecordStore._Tx:
        return SQLiteRecordStore._Tx(self)

    def _after_commit(self) -> None:
        """Keep the WAL short: wake the checkpoint thread, or checkpoint here if asked to."""
        checkpointer = self._checkpointer
        if checkpointer is None:
            return
        if checkpointer.catch_up:
            try:
                busy = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[0]
            except sqlite3.Error as exc:  # the data is committed; the WAL just stays long
                logger.warning("WAL checkpoint of %s failed: %s", self.path, exc)
                busy = 1
            if not busy:
                checkpointer.catch_up = False
        self._writes += 1
        if self._writes >= _CHECKPOINT_EVERY:
            self._writes = 0
            if checkpointer.alive:
                checkpointer.poke()
            else:  # the thread died: let SQLite checkpoint on commit again
                self._conn.execute("PRAGMA wal_autocheckpoint=1000")
                self._checkpointer = None

    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError("the memory store is closed")

    def _read_data_version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _check_data_version(self) -> None:
        """Note a write by another connection since we last looked (caller holds the lock).

        Our own commits do not change our connection's data version, so a change means another
        connection (process) committed: :meth:`consume_write_conflict` reports it, and the cached
        counters rows may be stale.
        """
        version = self._read_data_version()
        if version != self._data_version:
            self._external_change = True
            self._data_version = version
            self._counters.clear()

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            self._ensure_open()
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                raise StorageError(f"reading {self.path or 'memory store'} failed: {exc}") from exc

    # -- metadata ------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key=?", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._transaction() as c:
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    @property
    def dimension(self) -> int | None:
        value = self.get_meta("dimension")
        return int(value) if value is not None else None

    @property
    def embedding_model(self) -> str | None:
        return self.get_meta("embedding_model")

    def bind_embeddings(self, model: str, dimension: int) -> None:
        with self._transaction() as c:
            rows = dict(
                c.execute(
                    "SELECT key, value FROM meta WHERE key IN ('dimension', 'embedding_model')"
                ).fetchall()
            )
            if "dimension" in rows:
                stored = int(rows["dimension"])
                if stored != dimension:
                    raise DimensionMismatchError(
                        f"the memory file {self.path or ''} holds {stored}-dimensional vectors "
                        f"from {rows.get('embedding_model')!r}, but the embeddings give "
                        f"{dimension}-dimensional ones; use the same embedding model or a new file"
                    )
                stored_model = rows.get("embedding_model")
                if stored_model and model and stored_model != model:
                    raise EmbeddingError(
                        f"the memory file {self.path or ''} was written with embedding model "
                        f"{stored_model!r}, not {model!r}; vectors from different models are not "
                        f"comparable. Use the same model, or pass embedding_model={stored_model!r} "
                        "if it is the same model under another name"
                    )
                return
            c.execute("INSERT INTO meta(key, value) VALUES ('dimension', ?)", (str(dimension),))
            c.execute("INSERT INTO meta(key, value) VALUES ('embedding_model', ?)", (model,))

    # -- writes --------------------------------------------------------------------------------

    def insert(
        self,
        records: Sequence[MemoryRecord],
        vectors: npt.NDArray[np.float32],
        *,
        counter: CounterUpdate | None = None,
        pending: Sequence[str] = (),
    ) -> list[int]:
        if (
            not pending
            and len(records) == 1
            and type(vectors) is np.ndarray
            and vectors.dtype == _LE_F32
            and vectors.shape[0] == 1
            and _counts_itself(records[0], counter)
        ):  # one memory per add: no batch bookkeeping
            r = records[0]
            created_us = to_us(r.created_at)
            accessed_us = created_us if r.accessed_at == r.created_at else to_us(r.accessed_at)
            row = _row(r, created_us, accessed_us, vectors.tobytes())
            return [self._insert_one(row, r.namespace)]
        vecs = np.ascontiguousarray(vectors, dtype="<f4")
        if len(records) != vecs.shape[0]:
            raise StorageError(f"{len(records)} records but {vecs.shape[0]} vectors")
        blob = vecs.tobytes()  # one copy; rows are slices of it
        width = len(blob) // len(records) if records else 0
        stamps: dict[datetime, int] = {}  # records of one add share their timestamps
        rows = []
        for i, r in enumerate(records):
            created = stamps.get(r.created_at)
            if created is None:
                created = stamps[r.created_at] = to_us(r.created_at)
            accessed = stamps.get(r.accessed_at)
            if accessed is None:
                accessed = stamps[r.accessed_at] = to_us(r.accessed_at)
            rows.append(_row(r, created, accessed, blob[i * width : (i + 1) * width]))
        if not pending and len(rows) == 1 and _counts_itself(records[0], counter):
            return [self._insert_one(rows[0], records[0].namespace)]
        try:
            with self._transaction() as c:
                if pending:
                    self._dequeue(c, pending)
                seqs: list[int]
                if len(rows) == 1:
                    cur = c.execute(_INSERT, rows[0])
                    assert cur.lastrowid is not None
                    seqs = [cur.lastrowid]
                elif rows:
                    # one prepared statement for the batch; each row takes the next seq, so
                    # with the write lock held the new sequence numbers are consecutive
                    c.executemany(_INSERT, rows)
                    self._writes += len(rows) - 1  # a big batch wakes the checkpointer sooner
                    last = int(c.execute("SELECT last_insert_rowid()").fetchone()[0])
                    seqs = list(range(last - len(rows) + 1, last + 1))
                else:
                    seqs = []
                # per namespace: importance that counts, rows, first and last new seq
                spans: dict[str, list[Any]] = {}
                for r, seq in zip(records, seqs, strict=True):
                    span = spans.get(r.namespace)
                    if span is None:
                        span = spans[r.namespace] = [0, 0, seq, seq]
                    if r.kind != REFLECTION:
                        span[0] += r.importance
                    span[1] += 1
                    span[3] = seq
                for ns, (importance, n, first, last) in spans.items():
                    mine = counter if counter is not None and counter.namespace == ns else None
                    if mine is not None and mine.reset_at is not None:
                        continue  # the reset below leaves these rows out of the counter
                    if mine is not None and (mine.importance, mine.adds) == (importance, n):
                        # the counter is what the rows say: they count themselves
                        if last - self._counter_row(c, ns)[1] > _FOLD_ROWS:
                            self._fold(c, ns, last)
                    else:
                        # no counter for these rows (an import: they do not count, as before),
                        # or one that differs from them: fold the older rows, add the counter's
                        extra = (mine.importance, mine.adds) if mine is not None else (0.0, 0)
                        self._fold(c, ns, last, below=first, extra=extra)
                if counter is not None and (
                    counter.reset_at is not None or counter.namespace not in spans
                ):
                    self._apply_counter(c, counter)
                for ns, span in spans.items():
                    self.last_generation = (
                        self._counter_row(c, ns)[0] * _GENERATION_STRIDE + span[3]
                    )
                return seqs
        except sqlite3.IntegrityError as exc:
            raise StorageError(f"could not store memories (duplicate id?): {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"could not store memories: {exc}") from exc

    @staticmethod
    def _dequeue(c: sqlite3.Connection, ids: Sequence[str]) -> None:
        """Delete these pending rows (inside the caller's transaction); all must be there."""
        gone = 0
        for chunk in _chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            gone += c.execute(f"DELETE FROM pending WHERE id IN ({marks})", tuple(chunk)).rowcount
        if gone != len(set(ids)):
            raise PendingConflictError(
                f"{len(set(ids)) - gone} of {len(ids)} pending memories are no longer queued "
                "(completed or purged by another process)"
            )

    def enqueue(self, items: Sequence[PendingMemory]) -> None:
        """Queue memories in one transaction (see :meth:`BaseRecordStore.enqueue`)."""
        if not items:
            return
        rows = [
            (
                p.id,
                p.namespace,
                p.text,
                p.kind,
                to_us(p.created_at),
                p.importance,
                _dump_metadata(p.metadata),
            )
            for p in items
        ]
        sql = (
            "INSERT INTO pending (id, namespace, text, kind, created_us, importance, metadata) "
            "VALUES (?,?,?,?,?,?,?)"
        )
        try:
            if len(rows) == 1:  # one autocommit statement: the per-turn cheap commit
                with self._lock:
                    self._ensure_open()
                    self._conn.execute(sql, rows[0])
                    self._after_commit()
            else:
                with self._transaction() as c:
                    c.executemany(sql, rows)
        except sqlite3.IntegrityError as exc:
            raise StorageError(f"could not queue memories (duplicate id?): {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"could not queue memories: {exc}") from exc

    def pending(
        self, *, namespace: str | None = None, limit: int | None = None, newest: bool = False
    ) -> list[PendingMemory]:
        """Queued memories, oldest first (see :meth:`BaseRecordStore.pending`)."""
        sql = "SELECT id, namespace, text, kind, created_us, importance, metadata FROM pending"
        params: list[Any] = []
        if namespace is not None:
            sql += " WHERE namespace=?"
            params.append(namespace)
        sql += " ORDER BY pseq DESC" if newest else " ORDER BY pseq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        rows = self._query(sql, params)
        if newest:
            rows.reverse()
        return [
            PendingMemory(
                id=r[0],
                namespace=r[1],
                text=r[2],
                kind=r[3],
                created_at=from_us(r[4]),
                importance=None if r[5] is None else float(r[5]),
                metadata=json.loads(r[6]) if r[6] != "{}" else {},
            )
            for r in rows
        ]

    def count_pending(self, namespace: str | None = None) -> int:
        if namespace is None:
            return int(self._query("SELECT COUNT(*) FROM pending")[0][0])
        return int(
            self._query("SELECT COUNT(*) FROM pending WHERE namespace=?", (namespace,))[0][0]
        )

    def _insert_one(self, row: tuple[Any, ...], namespace: str) -> int:
        """Insert one memory that counts itself: a single autocommit statement.

        No explicit transaction and no counters write: the reflection counter and the
        generation are derived from the row. Like ``BEGIN IMMEDIATE``, the statement waits for
        another writer's lock up to the busy timeout.

        No data-version read either (it was ~7% of a one-memory add): our own commit leaves the
        data version alone, so a write by another connection still shows in the next
        :meth:`changed_elsewhere`, which the stream calls before it reads a partition and
        before it saves an index cache. Until then :attr:`last_generation` is as of this
        store's last look at the file.
        """
        with self._lock:
            self._ensure_open()
            c = self._conn
            try:
                seq = c.execute(_INSERT, row).lastrowid
            except sqlite3.IntegrityError as exc:
                raise StorageError(f"could not store memories (duplicate id?): {exc}") from exc
            except sqlite3.DatabaseError as exc:
                raise StorageError(f"could not store memories: {exc}") from exc
            assert seq is not None
            try:
                bumps, counted = self._counter_row(c, namespace)
            except sqlite3.Error as exc:  # the row is stored; make the caller reload instead
                logger.warning("reading %s after a write failed: %s", self.path, exc)
                self._external_change = True
                self._counters.clear()
                bumps, counted = 0, seq
            self.last_generation = bumps * _GENERATION_STRIDE + seq
            self._after_commit()
            if seq - counted > _FOLD_ROWS:
                try:
                    with self._transaction() as tx:
                        self._fold(tx, namespace, seq)
                except (sqlite3.Error, StorageError) as exc:  # exact anyway, only slower to read
                    logger.warning(
                        "folding the reflection counter of %s failed: %s", self.path, exc
                    )
            return seq

    def _counter_row(self, c: sqlite3.Connection, namespace: str) -> tuple[int, int]:
        """``(bumps, counted_seq)`` of a namespace's counters row (cached; lock held, data
        version checked)."""
        state = self._counters.get(namespace)
        if state is None:
            row = c.execute(
                "SELECT generation, counted_seq FROM counters WHERE namespace=?", (namespace,)
            ).fetchone()
            state = (int(row[0]), int(row[1])) if row else (0, 0)
            if len(self._counters) >= 4096:
                self._counters.clear()
            self._counters[namespace] = state
        return state

    def _fold(
        self,
        c: sqlite3.Connection,
        namespace: str,
        upto: int,
        *,
        below: int | None = None,
        extra: tuple[float, int] = (0.0, 0),
    ) -> None:
        """Fold the counter up to ``upto`` (inside a write transaction).

        Rows after ``counted_seq`` are added to the stored sums, except those from ``below`` on
        (rows just inserted that must not count); ``extra`` is added as well.
        """
        bumps, counted = self._counter_row(c, namespace)
        if counted >= upto:
            return  # another writer folded further already
        hi = upto if below is None else below - 1
        importance, n = c.execute(
            "SELECT COALESCE(SUM(CASE WHEN kind <> 'reflection' THEN importance ELSE 0 END), 0), "
            "COUNT(*) FROM memories WHERE namespace=? AND seq > ? AND seq <= ?",
            (namespace, counted, hi),
        ).fetchone()
        c.execute(
            "INSERT INTO counters(namespace, importance_sum, adds, counted_seq) VALUES (?,?,?,?) "
            "ON CONFLICT(namespace) DO UPDATE SET "
            "importance_sum = importance_sum + excluded.importance_sum, "
            "adds = adds + excluded.adds, counted_seq = excluded.counted_seq",
            (namespace, float(importance) + extra[0], int(n) + extra[1], upto),
        )
        self._counters[namespace] = (bumps, upto)

    def _bump(self, c: sqlite3.Connection, namespace: str) -> int:
        """Count a delete, purge or reset of the namespace (inside a write transaction)."""
        counted = self._counter_row(c, namespace)[1]
        row = c.execute(
            "INSERT INTO counters(namespace, generation) VALUES (?, 1) ON CONFLICT(namespace) "
            "DO UPDATE SET generation = generation + 1 RETURNING generation",
            (namespace,),
        ).fetchone()
        bumps = int(row[0])
        self._counters[namespace] = (bumps, counted)
        return bumps

    def _newest_seq(self, c: sqlite3.Connection, namespace: str) -> int:
        row = c.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM memories WHERE namespace=?", (namespace,)
        ).fetchone()
        return int(row[0])

    def _apply_counter(self, c: sqlite3.Connection, update: CounterUpdate) -> None:
        ns = update.namespace
        if update.reset_at is not None:
            # everything up to the newest row (including rows inserted in this transaction,
            # e.g. the reflection that resets the counter) is left out of the new count
            newest = self._newest_seq(c, ns)
            bumps = self._bump(c, ns)
            c.execute(
                "UPDATE counters SET importance_sum=0, adds=0, last_reflection_us=?, "
                "last_reflection_seq=?, counted_seq=? WHERE namespace=?",
                (to_us(update.reset_at), newest, newest, ns),
            )
            self._counters[ns] = (bumps, newest)
            self.last_generation = bumps * _GENERATION_STRIDE + newest
        else:
            c.execute(
                "INSERT INTO counters(namespace, importance_sum, adds) VALUES (?, ?, ?) "
                "ON CONFLICT(namespace) DO UPDATE SET "
                "importance_sum = importance_sum + excluded.importance_sum, "
                "adds = adds + excluded.adds",
                (ns, update.importance, update.adds),
            )

    def update_counter(self, update: CounterUpdate) -> None:
        with self._transaction() as c:
            self._apply_counter(c, update)

    def delete(self, ids: Sequence[str], *, namespace: str) -> list[int]:
        """Delete records; see :meth:`BaseRecordStore.delete`.

        Deleted memories that the reflection counter had not folded yet (see ``_FOLD_ROWS``)
        leave the counter too; folded ones stay counted (version 1 kept every deleted memory
        counted).
        """
        deleted: list[int] = []
        with self._transaction() as c:
            for chunk in _chunks(list(ids)):
                marks = ",".join("?" * len(chunk))
                found = c.execute(
                    f"SELECT seq FROM memories WHERE namespace=? AND id IN ({marks})",
                    (namespace, *chunk),
                ).fetchall()
                seqs = [int(r[0]) for r in found]
                if seqs and not deleted:
                    c.execute(_RAISE_SEQ_FLOOR)
                for part in _chunks(seqs):
                    c.execute(
                        f"DELETE FROM memories WHERE seq IN ({','.join('?' * len(part))})",
                        tuple(part),
                    )
                deleted.extend(seqs)
            if deleted:
                bumps = self._bump(c, namespace)
                newest = self._newest_seq(c, namespace)
                self.last_generation = bumps * _GENERATION_STRIDE + newest
        return deleted

    def purge(self, namespace: str) -> int:
        with self._transaction() as c:
            c.execute(_RAISE_SEQ_FLOOR)
            n = c.execute("DELETE FROM memories WHERE namespace=?", (namespace,)).rowcount
            c.execute("DELETE FROM pending WHERE namespace=?", (namespace,))
            bumps = self._bump(c, namespace)
            c.execute(
                "UPDATE counters SET importance_sum=0, adds=0, last_reflection_us=NULL, "
                "last_reflection_seq=0, counted_seq=0 WHERE namespace=?",
                (namespace,),
            )
            self._counters[namespace] = (bumps, 0)
            self.last_generation = bumps * _GENERATION_STRIDE
        return int(n)

    def touch(self, seqs: Sequence[int], when: datetime) -> None:
        if not seqs:
            return
        us = to_us(when)
        with self._transaction() as c:
            for chunk in _chunks(list(seqs)):
                marks = ",".join("?" * len(chunk))
                c.execute(f"UPDATE memories SET accessed_us=? WHERE seq IN ({marks})", (us, *chunk))

    def touch_and_get(
        self, seqs: Sequence[int], when: datetime, *, namespace: str | None = None
    ) -> dict[int, MemoryRecord]:
        """Set the access time and read the records back in one statement per chunk.

        The usual handful of hits is one autocommit statement; more than one chunk of ids runs
        in one transaction, so either every access time changes or none does.
        """
        out: dict[int, MemoryRecord] = {}
        if not seqs:
            return out
        us = to_us(when)
        wanted = [int(s) for s in seqs]
        try:
            if len(wanted) <= _MAX_VARS:
                with self._lock:
                    self._ensure_open()
                    self._touch_chunk(self._conn, us, wanted, out, namespace)
                    # no data-version read: our own commit leaves it alone, so a write by
                    # another connection still shows in the next changed_elsewhere()
                    self._after_commit()
            else:
                with self._transaction() as c:
                    for chunk in _chunks(wanted):
                        self._touch_chunk(c, us, chunk, out, namespace)
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"updating access times failed: {exc}") from exc
        return out

    @staticmethod
    def _touch_chunk(
        c: sqlite3.Connection,
        us: int,
        seqs: Sequence[int],
        out: dict[int, MemoryRecord],
        namespace: str | None,
    ) -> None:
        marks = ",".join("?" * len(seqs))
        where = f"seq IN ({marks})"
        params: tuple[Any, ...] = (us, *seqs)
        if namespace is not None:
            where += " AND namespace=?"
            params += (namespace,)
        sql = f"UPDATE memories SET accessed_us=? WHERE {where} RETURNING {_COLUMNS}"
        for row in c.execute(sql, params).fetchall():  # fetching all ends the statement
            out[int(row[0])] = _row_to_record(row)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, ids: Sequence[str], *, namespace: str) -> list[MemoryRecord]:
        found: dict[str, MemoryRecord] = {}
        for chunk in _chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            for row in self._query(
                f"SELECT {_COLUMNS} FROM memories WHERE namespace=? AND id IN ({marks})",
                (namespace, *chunk),
            ):
                found[row[1]] = _row_to_record(row)
        return [found[i] for i in ids if i in found]

    def get_by_seq(self, seqs: Sequence[int]) -> dict[int, MemoryRecord]:
        out: dict[int, MemoryRecord] = {}
        for chunk in _chunks([int(s) for s in seqs]):
            marks = ",".join("?" * len(chunk))
            for row in self._query(
                f"SELECT {_COLUMNS} FROM memories WHERE seq IN ({marks})", tuple(chunk)
            ):
                out[int(row[0])] = _row_to_record(row)
        return out

    def iter_partition(
        self,
        namespace: str,
        *,
        with_vectors: bool = True,
        chunk_size: int = 50_000,
        after_seq: int = 0,
        with_texts: bool = True,
    ) -> Iterator[PartitionChunk]:
        last = int(after_seq)
        # without texts, ids and texts are not read (NULL placeholders keep the positions)
        cols = "seq, id, text" if with_texts else "seq, NULL, NULL"
        cols += ", kind, created_us, accessed_us, importance"
        if with_vectors:
            cols += ", vector"
        dim = self.dimension
        while True:
            rows = self._query(
                f"SELECT {cols} FROM memories WHERE namespace=? AND seq>? ORDER BY seq LIMIT ?",
                (namespace, last, chunk_size),
            )
            if not rows:
                return
            vectors: npt.NDArray[np.float32] | None = None
            if with_vectors:
                if dim is None:
                    raise StorageError("memory file has vectors but no recorded dimension")
                blob = b"".join(r[7] for r in rows)
                if len(blob) != len(rows) * dim * 4:
                    raise StorageError(
                        f"memory file {self.path} has vectors of the wrong size; it is corrupt"
                    )
                vectors = np.frombuffer(blob, dtype="<f4").reshape(len(rows), dim).copy()
            yield PartitionChunk(
                seqs=np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                ids=[r[1] for r in rows] if with_texts else [],
                texts=[r[2] for r in rows] if with_texts else [],
                kinds=[r[3] for r in rows],
                created=np.fromiter((r[4] for r in rows), np.float64, len(rows)) / 1e6,
                accessed=np.fromiter((r[5] for r in rows), np.float64, len(rows)) / 1e6,
                importance=np.fromiter((r[6] for r in rows), np.float64, len(rows)),
                vectors=vectors,
            )
            last = int(rows[-1][0])

    def count(self, namespace: str | None = None) -> int:
        if namespace is None:
            return int(self._query("SELECT COUNT(*) FROM memories")[0][0])
        return int(
            self._query("SELECT COUNT(*) FROM memories WHERE namespace=?", (namespace,))[0][0]
        )

    def namespaces(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT namespace FROM memories ORDER BY 1")]

    def recent(
        self,
        namespace: str,
        *,
        n: int | None,
        kinds: Sequence[str] | None,
        after_seq: int | None,
        by_importance: bool = False,
    ) -> list[MemoryRecord]:
        where = ["namespace=?"]
        params: list[Any] = [namespace]
        if kinds is not None:
            kinds = list(kinds)
            where.append(f"kind IN ({','.join('?' * len(kinds))})")
            params.extend(kinds)
            if by_importance and "observation" not in kinds:
                where.append(_NOT_OBSERVATION)  # lets SQLite use the partial importance index
        if after_seq is not None:
            where.append("seq>?")
            params.append(after_seq)
        order = "importance DESC, seq DESC" if by_importance else "seq DESC"
        sql = f"SELECT {_COLUMNS} FROM memories WHERE {' AND '.join(where)} ORDER BY {order}"
        if n is not None:
            sql += " LIMIT ?"
            params.append(int(n))
        rows = self._query(sql, params)
        records = [_row_to_record(r) for r in rows]
        return records if by_importance else records[::-1]

    def reflection_state(self, namespace: str) -> ReflectionState:
        """The folded counter plus the memories after ``counted_seq``, in one statement.

        Writers fold the counter every ``_FOLD_ROWS`` sequence numbers, so a cold read scans at
        most about that many rows. This store also remembers what it summed last time: while
        the namespace's bumps and ``counted_seq`` are unchanged (read in the same statement),
        the rows it summed are unchanged too (rows are never updated in a way that matters
        here; deletes bump), so it only sums the rows added since.
        """
        with self._lock:
            cached = self._unfolded.get(namespace)
            bumps, counted, upto, part_imp, part_n = cached or (-1, -1, 0, 0.0, 0)
            rows = self._query(
                "SELECT c.importance_sum, c.adds, c.last_reflection_us, "
                "COALESCE(c.generation, 0), COALESCE(c.counted_seq, 0), "
                "COALESCE(SUM(CASE WHEN m.kind <> 'reflection' THEN m.importance ELSE 0 END), 0), "
                "COUNT(m.seq), MAX(m.seq) FROM (SELECT ?1 AS ns) AS q "
                "LEFT JOIN counters AS c ON c.namespace = q.ns "
                "LEFT JOIN memories AS m ON m.namespace = q.ns AND m.seq > CASE "
                "WHEN COALESCE(c.generation, 0) = ?2 AND COALESCE(c.counted_seq, 0) = ?3 THEN ?4 "
                "ELSE COALESCE(c.counted_seq, 0) END",
                (namespace, bumps, counted, upto),
            )
            imp, adds, last, now_bumps, now_counted, new_imp, new_n, newest = rows[0]
            if (now_bumps, now_counted) == (bumps, counted):
                new_imp += part_imp
                new_n += part_n
                newest = max(upto, newest or 0)
            else:
                newest = newest or now_counted
            if len(self._unfolded) >= 4096:
                self._unfolded.clear()
            self._unfolded[namespace] = (now_bumps, now_counted, newest, new_imp, new_n)
        return ReflectionState(
            importance_sum=float(imp or 0.0) + float(new_imp),
            adds_since=int(adds or 0) + int(new_n),
            last_reflection_at=from_us(last) if last is not None else None,
        )

    def last_reflection_seq(self, namespace: str) -> int:
        rows = self._query(
            "SELECT last_reflection_seq FROM counters WHERE namespace=?", (namespace,)
        )
        return int(rows[0][0]) if rows else 0

    def generation(self, namespace: str) -> int:
        """``bumps * 2**40 + newest seq`` of the namespace (one statement, one snapshot).

        An insert raises the newest seq (seqs are never reused, see ``seq_floor``); a delete,
        purge or reset raises the bumps. So equal generations mean equal contents, and adds do
        not have to write the counters row.
        """
        rows = self._query(
            "SELECT COALESCE((SELECT generation FROM counters WHERE namespace=?1), 0), "
            "COALESCE((SELECT MAX(seq) FROM memories WHERE namespace=?1), 0)",
            (namespace,),
        )
        bumps, newest = rows[0]
        return int(bumps) * _GENERATION_STRIDE + int(newest)

    def consume_write_conflict(self) -> bool:
        with self._lock:
            changed = self._external_change
            self._external_change = False
            return changed

    def changed_elsewhere(self) -> bool:
        with self._lock:
            self._ensure_open()
            version = self._read_data_version()
            changed = version != self._data_version or self._external_change
            if version != self._data_version:
                self._counters.clear()
            self._data_version = version
            self._external_change = False
            return changed

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._checkpointer is not None:
                self._stop_checkpointer()
                self._checkpointer = None
            self._conn.close()
