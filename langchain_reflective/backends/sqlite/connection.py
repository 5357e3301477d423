"""One SQLite connection shared by a store's threads: transactions, writes by other processes
(the data version), background WAL checkpoints and the ``meta`` table.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_reflective.backends._fork import ProcessLock
from langchain_reflective.backends.sqlite._errors import is_environment_failure, storage_error
from langchain_reflective.backends.sqlite.read_only import connect_read_only
from langchain_reflective.backends.sqlite.schema import (
    check_file,
    check_schema,
    init_schema,
    is_busy,
)
from langchain_reflective.errors import ForeignFileError, StorageError

__all__ = ["SQLiteConnection"]

logger = logging.getLogger(__name__)

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


IN_MEMORY = ":memory:"
"""SQLite's name for an in-memory database; as a path it means ``None`` (nothing written)."""


def memory_file(path: str | os.PathLike[str] | None) -> Path | None:
    """Return the memory file ``path`` names, or ``None`` for an in-memory database.

    ``None`` and SQLite's ``":memory:"`` (what LangGraph's SQLite savers accept too) both
    mean in memory; anything else is a file path.
    """
    if path is None or os.fspath(path) == IN_MEMORY:
        return None
    return Path(path)


class SQLiteConnection:
    """The connection under :class:`~langchain_reflective.backends.sqlite.store.SQLiteRecordStore`.

    Args:
        path: the database file; ``None`` (or ``":memory:"``) keeps everything in memory
            (nothing is written).
        synchronous: SQLite's ``synchronous`` pragma.
        timeout: seconds to wait for another writer's lock before failing.
        read_only: only read the existing file ``path``: it is never written (every write
            raises :class:`StorageError`), a missing file is not created and an older file is
            not upgraded (an error says how to read it). It reads files this process cannot
            write, on read-only storage too. Beside a file nobody can be writing it creates
            nothing; beside another, in a directory this process may write, SQLite creates a
            missing ``<file>-wal`` and ``<file>-shm`` as for any reader, and leaves them
            (``backends/sqlite/read_only.py`` says when).

    Raises:
        ForeignFileError: the file is not a langchain-reflective memory file.
        SchemaVersionError: the file was written by a newer version of the package.
        ValueError: ``read_only`` without a file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL",
        timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        self.path = memory_file(path)
        if read_only and self.path is None:
            raise ValueError("read_only=True needs a memory file to read (a path)")
        self.read_only = read_only
        """Whether the file was opened read-only (``read_only=True``)."""
        self._lock = ProcessLock(f"the memory file {self.path}", guard=self.path is not None)
        """Serialises the connection's use; refuses a forked child (``backends/_fork.py``)."""
        self._closed = False
        self._data_version = 0
        self._external_change = False
        self._writes = 0
        self._checkpointer: _Checkpointer | None = None
        if self.path is not None:
            try:
                if read_only and not self.path.exists():
                    raise StorageError(f"{self.path} does not exist (read-only: not created)")
                check_file(self.path)
            except OSError as exc:  # no permission to create or read it, a full disk
                raise storage_error(f"cannot open memory file {self.path}", exc, self.path) from exc
        target = ":memory:" if self.path is None else str(self.path)
        try:
            if self.path is not None and read_only:
                self._conn = connect_read_only(self.path, timeout)
            else:
                self._conn = sqlite3.connect(
                    target, timeout=timeout, check_same_thread=False, isolation_level=None
                )
        except sqlite3.Error as exc:
            raise storage_error(f"cannot open memory file {self.path}", exc, self.path) from exc
        try:
            if self.path is not None and read_only:
                check_schema(self._conn, self.path)
            else:
                init_schema(
                    self._conn, self.path, synchronous, self._transaction, busy_timeout=timeout
                )
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            if is_environment_failure(exc) or is_busy(exc):
                # read-only, full disk, held by another process past the timeout: not damaged
                raise storage_error(f"cannot open memory file {self.path}", exc, self.path) from exc
            raise ForeignFileError(
                f"{self.path} is not a readable langchain-reflective memory file ({exc}); "
                "it may be truncated or belong to another program"
            ) from exc
        except BaseException:
            self._conn.close()
            raise
        self._data_version = self._read_data_version()
        self._external_change = False
        if self.path is not None and not read_only:
            self._conn.execute("PRAGMA wal_autocheckpoint=0")
            self._checkpointer = _Checkpointer(self.path, timeout)
            # a store that is never closed must not leave its thread behind
            self._stop_checkpointer = weakref.finalize(self, self._checkpointer.stop)

    def _on_stale(self) -> None:
        """Drop what was cached from the file: another connection wrote, or a transaction of
        ours rolled back (subclasses that cache rows override this)."""

    # executescript commits implicitly; wrap plain statements in explicit transactions.
    class _Tx:
        def __init__(self, store: SQLiteConnection) -> None:
            self.store = store

        def __enter__(self) -> sqlite3.Connection:
            self.store._lock.acquire()
            try:
                self.store._ensure_open()
                try:
                    self.store._conn.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as exc:  # (busy past the timeout, a read-only file or -shm)
                    where = self.store.path
                    doing = f"could not write {where or 'the memory store'}"
                    raise storage_error(doing, exc, where) from exc
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
                        self.store._on_stale()
                        raise
                    self.store._after_commit()
                else:
                    self.store._on_stale()  # it may hold values of the rolled-back writes
                    self.store._conn.execute("ROLLBACK")
            finally:
                self.store._lock.release()

    def _transaction(self) -> SQLiteConnection._Tx:
        self._ensure_writable()
        return SQLiteConnection._Tx(self)

    def _ensure_writable(self) -> None:
        """Refuse a write to a file opened read-only (every write path calls this first)."""
        if self.read_only:
            raise StorageError(f"{self.path} was opened read-only (read_only=True): not written")

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

    @property
    def forked(self) -> bool:
        """Whether this is a forked child of the process that opened the file (an in-memory
        store is the child's own copy: never). Then every use raises, before it waits for
        the connection's lock (a parent thread may have held it at the fork)."""
        return self._lock.process.forked

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
            self._on_stale()

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            self._ensure_open()
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                raise storage_error(
                    f"reading {self.path or 'the memory store'} failed", exc, self.path
                ) from exc

    # -- metadata ------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key=?", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        try:
            with self._transaction() as c:
                c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
        except sqlite3.Error as exc:  # e.g. a full disk while close() records its caches
            raise storage_error(f"could not write {key!r}", exc, self.path) from exc

    def set_meta_unless_changed(self, key: str, value: str) -> bool:
        """Write a metadata value unless another connection wrote since this one last looked
        (a value that describes the file as this process sees it); return whether written."""
        try:
            with self._transaction() as c:
                if self._external_change:
                    return False
                c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
        except sqlite3.Error as exc:
            raise storage_error(f"could not write {key!r}", exc, self.path) from exc
        return True

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
                self._on_stale()
            self._data_version = version
            self._external_change = False
            return changed

    def close(self) -> None:
        if self.forked:  # the parent's connection and thread: left alone
            self._closed = True
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._checkpointer is not None:
                self._stop_checkpointer()
                self._checkpointer = None
            self._conn.close()
