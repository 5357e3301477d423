"""The pending queue's writes: queueing memories to embed later, and taking queued memories
off the queue in the transaction that stores them (``writes.write_batch``). Split out of
``writes.py``, which re-exports these names (tests patch ``writes.dequeue``: ``write_batch``
looks it up there)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from langchain_reflective.backends.postgres.rows import dump_json
from langchain_reflective.backends.types import PendingMemory, pending_pairs
from langchain_reflective.errors import DuplicateIdError, PendingConflictError
from langchain_reflective.records import MemoryRecord

__all__ = ["QUEUE", "dequeue", "enqueue", "queued_rows"]


def dequeue(
    conn: psycopg.Connection[Any], ids: Sequence[str], records: Sequence[MemoryRecord]
) -> None:
    """Remove these ids from the pending queue, each from the namespace of the record that
    completes it (a record of another namespace cannot take a queued memory away); all of
    them must still be queued there."""
    pairs = pending_pairs(ids, records)
    cur = conn.execute(
        "DELETE FROM reflective_pending p USING unnest(%s::text[], %s::text[]) AS w(ns, id) "
        "WHERE p.id = w.id AND p.namespace = w.ns",
        ([ns for ns, _ in pairs], [i for _, i in pairs]),
    )
    if cur.rowcount != len(pairs):
        raise PendingConflictError(
            f"{len(pairs) - cur.rowcount} of {len(pairs)} pending memories are no longer "
            "queued (completed or purged by another process)"
        )


def enqueue(conn: psycopg.Connection[Any], items: Sequence[PendingMemory]) -> None:
    """Queue memories to embed later (in the caller's transaction); none of their ids may be
    stored already. Checked after the insert: a completion of the same id under way (its
    queue row deleted, its memory inserted, not committed yet) makes the insert wait for it,
    and the check, a statement of its own, then sees the memory. Checked first, the memory
    was not there yet, and the id ended up both stored and queued again, a queue entry no
    completion could ever store."""
    conn.cursor().executemany(QUEUE, queued_rows(items))
    stored = conn.execute(
        "SELECT count(*) FROM reflective_memories m "
        "JOIN unnest(%s::text[], %s::text[]) AS q(namespace, id) USING (namespace, id)",
        ([p.namespace for p in items], [p.id for p in items]),
    ).fetchone()
    if stored and stored[0]:
        raise DuplicateIdError("could not queue memories: an id is already stored")


QUEUE = (
    "INSERT INTO reflective_pending (id, namespace, text, kind, created_at, importance, metadata) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s)"
)


def queued_rows(items: Sequence[PendingMemory]) -> list[tuple[Any, ...]]:
    return [
        (
            p.id,
            p.namespace,
            p.text,
            p.kind,
            p.created_at,
            p.importance,
            Jsonb(dict(p.metadata), dumps=dump_json),
        )
        for p in items
    ]
