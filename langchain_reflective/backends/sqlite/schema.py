"""The memory file's layout: the schema (version 6), upgrades from versions 1-5, the checks
on opening, and how rows encode records.

Nothing here executes code on load: vectors are raw little-endian float32 blobs, metadata and
evidence are JSON. The file carries an application id, a schema version and the embedding
model's identity and dimension, so opening a foreign, newer or mismatched file is a clear error
instead of silent garbage.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import tenacity

from langchain_reflective.backends.base import trusted_record
from langchain_reflective.errors import ForeignFileError, SchemaVersionError, StorageError
from langchain_reflective.records import MemoryRecord
from langchain_reflective.stored_json import load_stored_json, load_stored_metadata

__all__ = [
    "APPLICATION_ID",
    "COLUMNS",
    "INSERT",
    "MAX_VARS",
    "NOT_OBSERVATION",
    "RAISE_SEQ_FLOOR",
    "SCHEMA_VERSION",
    "check_file",
    "check_schema",
    "chunks",
    "dump_evidence",
    "dump_metadata",
    "from_us",
    "init_schema",
    "insert_row",
    "row_to_record",
    "to_us",
]

APPLICATION_ID = 0x52464C54  # "RFLT"
SCHEMA_VERSION = 6
_SQLITE_MAGIC = b"SQLite format 3\x00"
_WAL_SIZE_LIMIT = 64 << 20
"""Bytes a WAL file is truncated to after it restarts."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
MAX_VARS = 900  # stay below SQLite's host-parameter limit

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
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
    vector BLOB NOT NULL,
    UNIQUE (namespace, id)
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
    counted_seq INTEGER NOT NULL DEFAULT 0,
    reflection_generation INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS seq_floor (seq INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS pending (
    pseq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    text TEXT NOT NULL,
    kind TEXT NOT NULL,
    created_us INTEGER NOT NULL,
    importance REAL,
    metadata TEXT NOT NULL,
    UNIQUE (namespace, id)
);
CREATE INDEX IF NOT EXISTS pending_namespace_pseq ON pending (namespace, pseq);
"""
"""Schema notes (version 6).

An id is unique within its namespace (``UNIQUE (namespace, id)``, new in version 6; before, in
the whole file): one namespace's ids neither reveal nor block another's. Ids derived from a
namespace and a name (a LangGraph store item's, a thinking turn's) can be computed by anyone
who knows both, so with file-wide ids one user could learn whether another's item existed by
storing its id and reading the error, and could take the id first.

``pending`` (new in version 4) is the queue of memories written by
:meth:`SQLiteRecordStore.enqueue` and not yet embedded or rated; completing one deletes its row
in the transaction that inserts it into ``memories`` (same id).

``seq`` numbers memories in insertion order and is never reused: an insert takes one more than
the larger of the newest ``seq`` and ``seq_floor`` (one row), and every delete first raises
``seq_floor`` to the newest ``seq``. That is what ``AUTOINCREMENT`` guaranteed in versions 1
and 2, without its extra page write (``sqlite_sequence``) on every insert. Files upgraded from
those versions kept ``AUTOINCREMENT`` on the table until the version-6 upgrade rebuilt it.

``counters`` holds, per namespace, the reflection counter *folded up to* ``counted_seq``:
``importance_sum``/``adds`` cover the namespace's memories with ``seq <= counted_seq`` (and any
explicit :class:`CounterUpdate` increments); memories with a larger ``seq`` count on top of it,
read from the rows themselves (see :meth:`SQLiteRecordStore.reflection_state`). So adding a
memory writes only its row, not the counters row. ``generation`` counts deletes, purges and
counter resets (the "bumps"); the cache generation of a namespace is derived from it and the
namespace's newest ``seq`` (see :meth:`SQLiteRecordStore.generation`).
``reflection_generation`` (new in version 5) counts the counter's resets only (not deletes or
purges): the version a reflection's conditional reset compares with what it read
(``ReflectionState.generation``), so a run that lost the race to another stores nothing.

Version 1 files (no ``counted_seq``; the counters row was bumped on every write) are migrated on
open: their counters were exact, so ``counted_seq`` starts at each namespace's newest ``seq``.
Version 1-3 files get an empty ``pending`` table; version 1-4 files a ``reflection_generation``
of 0 in every counters row (the first reset after the upgrade makes it 1). Version 1-5 files
have ``memories`` and ``pending`` rebuilt with the per-namespace uniqueness (SQLite cannot drop
a column's ``UNIQUE``): every row is copied once, under the write lock, with its ``seq``.
"""

NOT_OBSERVATION = "kind <> 'observation'"
"""The partial importance index's condition; a query must repeat it verbatim to use the index.
Observations, the bulk of a stream, stay out of that index: it would take a random-page write
per add, and the hot query (the most important insights) never asks for observations."""

COLUMNS = (
    "seq, id, namespace, text, kind, created_us, accessed_us, importance, importance_source, "
    "evidence, depth, metadata"
)


def to_us(value: datetime) -> int:
    """Exact microseconds since the epoch of an aware datetime."""
    return (value - _EPOCH) // _US


def from_us(value: int) -> datetime:
    """Inverse of :func:`to_us` (UTC)."""
    # positional arguments: this runs twice per record read (~0.2 us less than the keyword)
    return _EPOCH + timedelta(0, 0, value if type(value) is int else int(value))


def row_to_record(row: Sequence[Any]) -> MemoryRecord:
    _, id_, ns, text, kind, created, accessed, importance, source, evidence, depth, meta = row
    return trusted_record(  # positional (cheaper), in trusted_record's parameter order
        id_,
        text,
        kind,
        from_us(created),
        from_us(accessed),
        float(importance),
        source,
        _evidence(evidence, ns, id_) if evidence != "[]" else (),
        int(depth),
        ns,
        load_stored_metadata(meta, ns, id_) if meta != "{}" else {},
    )


def _evidence(raw: Any, namespace: str, memory_id: str) -> tuple[str, ...]:
    """The evidence ids of a stored row; none when its JSON cannot be read (too deep, broken,
    not a list: see :func:`~langchain_reflective.stored_json.load_stored_json`), so that row does
    not make its namespace unreadable."""
    ids, problem = load_stored_json(raw, "evidence", namespace, memory_id, list)
    return () if problem else tuple(str(e) for e in ids)


def dump_evidence(evidence: tuple[str, ...]) -> str:
    return json.dumps(list(evidence)) if evidence else "[]"


def dump_metadata(metadata: Any) -> str:
    return json.dumps(dict(metadata), allow_nan=False) if metadata else "{}"


_NEXT_SEQ = (
    "MAX(COALESCE((SELECT MAX(seq) FROM memories), 0), "
    "COALESCE((SELECT MAX(seq) FROM seq_floor), 0)) + 1"
)
INSERT = (
    "INSERT INTO memories (seq, id, namespace, text, kind, created_us, accessed_us, importance, "
    f"importance_source, evidence, depth, metadata, vector) VALUES ({_NEXT_SEQ},"
    "?,?,?,?,?,?,?,?,?,?,?,?)"
)
RAISE_SEQ_FLOOR = (
    "UPDATE seq_floor SET seq = MAX(seq, COALESCE((SELECT MAX(seq) FROM memories), 0))"
)
"""Run before deleting memories: the seqs they free are never handed out again."""


def insert_row(
    r: MemoryRecord, created_us: int, accessed_us: int, vector: bytes
) -> tuple[Any, ...]:
    """The parameters of :data:`INSERT` for one record."""
    return (
        r.id,
        r.namespace,
        r.text,
        r.kind,
        created_us,
        accessed_us,
        r.importance,
        r.importance_source,
        dump_evidence(r.evidence),
        r.depth,
        dump_metadata(r.metadata),
        vector,
    )


def chunks(values: Sequence[Any], size: int = MAX_VARS) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def check_file(path: Path) -> None:
    """Refuse a directory, a non-SQLite file or another program's database; create a new
    file private to its owner."""
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
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:  # another process opening the same new file created it
            return
        os.close(fd)


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says another connection holds the file (``SQLITE_BUSY``,
    ``SQLITE_LOCKED`` and their extended codes, e.g. ``SQLITE_BUSY_RECOVERY``)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _journal_mode_wal(c: sqlite3.Connection, busy_timeout: float) -> str:
    """``PRAGMA journal_mode=WAL``, retried while another connection locks the file: SQLite
    answers the switch with "database is locked" at once instead of waiting (several processes
    opening one new file at once)."""
    for attempt in tenacity.Retrying(
        retry=tenacity.retry_if_exception(
            lambda exc: isinstance(exc, sqlite3.OperationalError) and is_busy(exc)
        ),
        stop=tenacity.stop_after_delay(busy_timeout),
        wait=tenacity.wait_fixed(0.01),
        reraise=True,
    ):
        with attempt:
            return str(c.execute("PRAGMA journal_mode=WAL").fetchone()[0])
    raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover


def _check_identity(c: sqlite3.Connection, path: Path | None) -> int:
    """The file's application id, after refusing another program's tables under id 0."""
    app_id = int(c.execute("PRAGMA application_id").fetchone()[0])
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if app_id == 0 and tables:
        raise ForeignFileError(
            f"{path} is an SQLite database of another program (tables: "
            f"{', '.join(sorted(tables))}); refusing to touch it"
        )
    return app_id


def _create(c: sqlite3.Connection) -> None:
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


def init_schema(
    c: sqlite3.Connection,
    path: Path | None,
    synchronous: str,
    transaction: Callable[[], AbstractContextManager[sqlite3.Connection]],
    *,
    busy_timeout: float = 30.0,
) -> None:
    """Create the schema in a new file, or check and upgrade an existing one's.

    Several processes may open one new file at once: the file's identity is read in one
    snapshot, and read again under the write lock before the schema is created, so the
    processes that did not create it find it created (not "another program's database")."""
    c.execute("BEGIN")
    try:
        app_id = _check_identity(c, path)
    except BaseException:
        if c.in_transaction:  # (an I/O error may have ended it already)
            c.execute("ROLLBACK")
        raise
    c.execute("COMMIT")
    if path is not None:
        mode = _journal_mode_wal(c, busy_timeout)
        if str(mode).lower() != "wal":
            raise StorageError(f"could not enable WAL mode on {path} (got {mode})")
    c.execute(f"PRAGMA synchronous={synchronous}")
    c.execute("PRAGMA foreign_keys=ON")
    c.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT}")
    if app_id == 0:
        with transaction():
            if _check_identity(c, path) == 0:  # (else another process created it meanwhile)
                _create(c)
    if _schema_version(c, path) < SCHEMA_VERSION:
        migrate(transaction)
    if c.execute(
        "SELECT 1 FROM sqlite_master WHERE type='index' "
        "AND name='memories_namespace_kind_importance'"
    ).fetchone():
        # a file from an earlier version: index every kind but observations (same schema
        # version: older readers use the new index as they used the old one)
        with transaction():
            c.execute("DROP INDEX IF EXISTS memories_namespace_kind_importance")
            c.execute(
                "CREATE INDEX IF NOT EXISTS memories_insight_importance ON memories "
                f"(namespace, kind, importance) WHERE {NOT_OBSERVATION}"
            )


def _schema_version(c: sqlite3.Connection, path: Path | None) -> int:
    """The file's schema version, after refusing one without a version or a newer one."""
    version_row = c.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if version_row is None:
        raise ForeignFileError(f"{path} has no schema version; it is not a memory file")
    version = int(version_row[0])
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path} has schema version {version}, newer than this "
            f"langchain-reflective supports ({SCHEMA_VERSION}); upgrade the package"
        )
    return version


def check_schema(c: sqlite3.Connection, path: Path) -> None:
    """Check the schema of a file opened read-only, writing nothing: its identity and version
    as :func:`init_schema` checks them, but an empty database is not a memory file and an
    older version is an error (a read-only open never upgrades). A file with the index of
    earlier versions is read as it is (its reads use that index as they did)."""
    if _check_identity(c, path) == 0:
        raise ForeignFileError(f"{path} is an empty SQLite database, not a memory file")
    version = _schema_version(c, path)
    if version < SCHEMA_VERSION:
        raise StorageError(
            f"{path} has schema version {version}, older than this langchain-reflective "
            f"reads ({SCHEMA_VERSION}), and was opened read-only, which never upgrades a file: "
            "open it once where it can be written (that upgrades it), or copy it to a "
            "writable directory and read the copy"
        )


def migrate(transaction: Callable[[], AbstractContextManager[sqlite3.Connection]]) -> None:
    """Bring an older file up to :data:`SCHEMA_VERSION` (one transaction).

    Version 1 -> 2: ``counters.counted_seq``. Version 1 kept the counters exact on every
    write, so each namespace's counter is folded up to its newest ``seq`` as of now.

    Version 2 -> 3: ``seq_floor``, set to the highest ``seq`` ever handed out (what
    ``AUTOINCREMENT`` recorded in ``sqlite_sequence``), so no seq is reused.

    Version 3 -> 4: the (empty) ``pending`` queue.

    Version 4 -> 5: ``counters.reflection_generation``, 0 in every row (resets before the
    upgrade were not counted; only later ones need telling apart).

    Version 5 -> 6: ids unique per namespace: ``memories`` and ``pending`` are rebuilt (every
    row copied with its ``seq``/``pseq``: ~3.5 s at 100k memories of 384 dimensions here; the
    caches stay valid). It needs about twice the file's size free on disk while it runs (the
    copy, and a WAL as large until the next checkpoint) and leaves the file twice its size,
    the old pages free for later writes (``VACUUM`` gives them back).

    Another process may migrate at the same time: the version is read again under the
    write lock. Old versions of the package refuse the migrated file (its version is newer).
    """
    with transaction() as c:
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
            _add_seq_floor(c)
        if version < 4:
            for statement in _SCHEMA.split(";"):
                if "pending" in statement:
                    c.execute(statement)
        if version < 5:
            c.execute(
                "ALTER TABLE counters ADD COLUMN reflection_generation INTEGER NOT NULL DEFAULT 0"
            )
        if version < 6:
            _ids_per_namespace(c)
        c.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))


def _ids_per_namespace(c: sqlite3.Connection) -> None:
    """Version 5 -> 6 (see :func:`migrate`): ``memories`` and ``pending`` rebuilt under this
    version's definitions (SQLite's way to change a constraint), rows, keys and indexes kept.

    ``secure_delete`` is off meanwhile: where SQLite is built with it on (Debian's is), the
    ``DROP TABLE`` would write a zeroed copy of every freed page into the WAL (a WAL the size
    of the file, on top of the copy); the dropped rows live on in the new table anyway."""
    secure = int(c.execute("PRAGMA secure_delete").fetchone()[0])
    c.execute("PRAGMA secure_delete=OFF")
    try:
        pending = "pseq, id, namespace, text, kind, created_us, importance, metadata"
        for table, columns in (("memories", f"{COLUMNS}, vector"), ("pending", pending)):
            (create,) = [s for s in _SCHEMA.split(";") if f"EXISTS {table} (" in s]
            c.execute(create.replace(f"IF NOT EXISTS {table} (", f"{table}_v6 ("))
            c.execute(f"INSERT INTO {table}_v6 ({columns}) SELECT {columns} FROM {table}")
            c.execute(f"DROP TABLE {table}")
            c.execute(f"ALTER TABLE {table}_v6 RENAME TO {table}")
        for statement in _SCHEMA.split(";"):
            if "CREATE INDEX" in statement:
                c.execute(statement)
    finally:
        c.execute(f"PRAGMA secure_delete={secure}")


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
        used = c.execute("SELECT MAX(seq) FROM sqlite_sequence WHERE name='memories'").fetchone()[0]
        floor = max(floor, int(used or 0))
    c.execute("DELETE FROM seq_floor")
    c.execute("INSERT INTO seq_floor(seq) VALUES (?)", (floor,))
