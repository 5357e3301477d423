"""The pending queue: memories written at once and embedded and rated later (``pending``).

Completing one deletes its row in the transaction that stores it (same id), so a memory is
pending or stored, never both and never neither.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from langchain_reflective.backends.base import PendingMemory
from langchain_reflective.backends.sqlite._errors import integrity_error, storage_error
from langchain_reflective.backends.sqlite.connection import SQLiteConnection
from langchain_reflective.backends.sqlite.schema import chunks, dump_metadata, from_us, to_us
from langchain_reflective.backends.types import pending_pairs
from langchain_reflective.errors import DuplicateIdError, PendingConflictError
from langchain_reflective.records import MemoryRecord
from langchain_reflective.stored_json import load_stored_metadata

__all__ = ["PendingQueue"]


class PendingQueue(SQLiteConnection):
    """The ``pending`` table of a
    :class:`~langchain_reflective.backends.sqlite.store.SQLiteRecordStore`."""

    @staticmethod
    def _dequeue(
        c: sqlite3.Connection, ids: Sequence[str], records: Sequence[MemoryRecord]
    ) -> None:
        """Delete these pending rows (inside the caller's transaction), each from the namespace
        of the record that completes it (a record of another namespace cannot take a queued
        memory away); all must be there."""
        pairs = pending_pairs(ids, records)
        gone = sum(
            c.execute("DELETE FROM pending WHERE namespace = ? AND id = ?", pair).rowcount
            for pair in pairs
        )
        if gone != len(pairs):
            raise PendingConflictError(
                f"{len(pairs) - gone} of {len(pairs)} pending memories are no longer queued "
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
                dump_metadata(p.metadata),
            )
            for p in items
        ]
        # a memory is pending or stored, never both: no row for an id its namespace stores
        sql = (
            "INSERT INTO pending (id, namespace, text, kind, created_us, importance, metadata) "
            "SELECT ?1,?2,?3,?4,?5,?6,?7 WHERE NOT EXISTS "
            "(SELECT 1 FROM memories WHERE namespace = ?2 AND id = ?1)"
        )
        stored = DuplicateIdError("could not queue memories: an id is already stored")
        try:
            if len(rows) == 1:  # one autocommit statement: the per-turn cheap commit
                self._ensure_writable()
                with self._lock:
                    self._ensure_open()
                    queued = self._conn.execute(sql, rows[0]).rowcount
                    self._after_commit()
                if queued != 1:
                    raise stored
            else:
                with self._transaction() as c:
                    if c.executemany(sql, rows).rowcount != len(rows):
                        raise stored  # (rolls the transaction back)
        except sqlite3.IntegrityError as exc:
            raise integrity_error("could not queue memories", exc) from exc
        except sqlite3.DatabaseError as exc:
            raise storage_error("could not queue memories", exc, self.path) from exc

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
                metadata=load_stored_metadata(r[6], r[1], r[0]) if r[6] != "{}" else {},
            )
            for r in rows
        ]

    def count_pending(self, namespace: str | None = None) -> int:
        if namespace is None:
            return int(self._query("SELECT COUNT(*) FROM pending")[0][0])
        return int(
            self._query("SELECT COUNT(*) FROM pending WHERE namespace=?", (namespace,))[0][0]
        )

    def discard_pending(self, ids: Sequence[str], *, namespace: str) -> int:
        """Delete queued memories of ``namespace`` by id, in one transaction; return how many."""
        gone = 0
        try:
            with self._transaction() as c:
                for chunk in chunks(list(dict.fromkeys(ids))):
                    marks = ",".join("?" * len(chunk))
                    gone += c.execute(
                        f"DELETE FROM pending WHERE namespace=? AND id IN ({marks})",
                        (namespace, *chunk),
                    ).rowcount
        except sqlite3.DatabaseError as exc:
            raise storage_error("could not discard pending memories", exc, self.path) from exc
        return gone
