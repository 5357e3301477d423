"""How ``PostgresBackend.put`` writes a batch of memories: keys, terms, links, binary ``COPY``.

A batch costs a fixed handful of statements whatever its size. The keys (``seq``) come from the
identity's sequence in one statement, after the caller has locked the namespaces' counter rows, so
writers of a namespace still take their keys in the order they commit. The memory rows, their term
rows and their access rows are each one binary ``COPY``: vectors travel in pgvector's binary format
and term arrays in Postgres' binary array format, so nothing formats floats as text or parses them
back. Each observation's links to the previous and next observation of its namespace are worked out
here from the batch's order and the namespace's newest stored observation (read once per namespace,
with its terms for the lexical context), instead of one index search per row; the stored observation
that was newest gets its ``next_obs`` in one ``UPDATE``.

What is stored is exactly what row-by-row inserts stored: the same terms (the SQLite backend's
tokenizer), the same float32 vector values, the same links.

Every term becomes an entry of the GIN indexes ``reflective_terms_lex`` and ``_ctx``, which
refuse an entry over ~2.7 KB: the tokenizer cuts words at ``MAX_TERM_CHARS`` (128 characters,
at most ~512 bytes), so a memory holding a hex dump or a hash is stored like any other (before,
its ``COPY`` failed, and a queued one could never be completed).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.abc import Buffer
from psycopg.adapt import Dumper
from psycopg.types.json import Jsonb

from langchain_reflective.backends.postgres.failures import TransactionStillOpenError
from langchain_reflective.backends.postgres.queries import (
    ADD,
    PURGE_COUNTER,
    RECONTEXT,
    RECORDS,
    RELINK,
    RESET,
)
from langchain_reflective.backends.postgres.queue_writes import QUEUE, dequeue, enqueue, queued_rows
from langchain_reflective.backends.postgres.rows import (
    INT4_ARRAY_OID,
    TEXT_ARRAY_OID,
    dump_json,
    int_array_binary,
    text_array_binary,
    vectors_binary,
)
from langchain_reflective.backends.postgres.timeouts import unbounded_transaction
from langchain_reflective.backends.sqlite.lexical import BM25Index
from langchain_reflective.backends.types import F32, CounterUpdate, PendingMemory
from langchain_reflective.errors import (
    DuplicateIdError,
    ReflectionConflictError,
    StorageError,
)
from langchain_reflective.records import OBSERVATION, MemoryRecord

__all__ = [
    "OUTCOME_WAIT",
    "QUEUE",
    "TOKENIZER",
    "LexicalTotals",
    "Replacement",
    "delete_memories",
    "dequeue",
    "enqueue",
    "lock_counter",
    "lock_counters",
    "purge_memories",
    "queued_rows",
    "write_batch",
    "write_memories",
]

TOKENIZER = BM25Index()
"""Only its tokenizer is used: the SQLite backend's terms, so BM25 agrees across backends."""

_MEMORY_COLUMNS = (
    "seq, id, namespace, text, kind, created_at, importance, importance_source, evidence, "
    "depth, metadata, embedding"
)
_TERM_COLUMNS = (
    "seq, namespace, kind, created_at, lex_terms, lex_tfs, lex_len, ctx_terms, ctx_tfs, ctx_len"
)
_ACCESS_COLUMNS = "seq, namespace, last_accessed_at, prev_obs, next_obs"
_KEYS = (
    "SELECT nextval(s) FROM (SELECT pg_get_serial_sequence('reflective_memories', 'seq')"
    "::regclass AS s) AS q CROSS JOIN generate_series(1, %s)"
)
_NEWEST_OBSERVATION = (
    "SELECT t.seq, t.lex_terms, t.lex_tfs FROM reflective_terms t WHERE t.seq = "
    "(SELECT seq FROM reflective_memories WHERE namespace = %s AND kind = 'observation' "
    "ORDER BY seq DESC LIMIT 1)"
)


@dataclass(slots=True)
class LexicalTotals:
    """What a batch adds to one namespace's BM25 statistics."""

    docs: int = 0
    """Memories written."""
    total: int = 0
    """Sum of their ``lex_len``."""
    ctx_total: int = 0
    """Sum of their ``ctx_len``."""


class _EncodedDumper(Dumper):
    """Passes bytes that are already in the column type's binary format through unchanged."""

    format = pq.Format.BINARY

    def dump(self, obj: Any) -> Buffer:
        return bytes(obj)


_DUMPERS: dict[int, type[Dumper]] = {}


def _encoded(oid: int) -> type[Dumper]:
    """The pass-through dumper registered for ``oid`` (one class per type oid)."""
    cls = _DUMPERS.get(oid)
    if cls is None:
        cls = _DUMPERS[oid] = type(f"Encoded{oid}Dumper", (_EncodedDumper,), {"oid": oid})
    return cls


@dataclass(slots=True)
class _Newest:
    """A namespace's newest observation so far: its key, its row in the batch (or -1 when it
    is stored already) and its terms (the next observation's lexical context)."""

    seq: int
    index: int
    terms: Counter[str] | None


def write_memories(
    conn: psycopg.Connection[Any],
    records: Sequence[MemoryRecord],
    vectors: F32,
    *,
    vector_oid: int,
) -> tuple[dict[str, LexicalTotals], int]:
    """Insert ``records`` (with ``vectors``) and their access rows in ``conn``'s transaction.

    The caller holds the counter row of every namespace in ``records``.

    Args:
        conn: a connection inside a transaction.
        records: the memories, in the order they get their keys.
        vectors: their unit vectors, one float32 row each.
        vector_oid: the oid of pgvector's ``vector`` type in this database.

    Returns:
        Per namespace, what the batch adds to its BM25 statistics; and the newest key.

    Raises:
        UnicodeEncodeError: text that UTF-8 cannot encode (a lone surrogate).
    """
    n = len(records)
    keys = sorted(int(r[0]) for r in conn.execute(_KEYS, (n,)).fetchall())
    newest: dict[str, _Newest | None] = {}
    prev: list[int | None] = [None] * n
    nxt: list[int | None] = [None] * n
    relink: list[tuple[int, int]] = []  # (stored observation, its new next)
    terms: list[tuple[Counter[str], Counter[str]]] = []
    totals: dict[str, LexicalTotals] = {}
    for i, r in enumerate(records):
        own = Counter(TOKENIZER.tokenize(r.text))
        context = own
        if r.kind == OBSERVATION:
            if r.namespace not in newest:
                row = conn.execute(_NEWEST_OBSERVATION, (r.namespace,)).fetchone()
                newest[r.namespace] = (
                    None
                    if row is None
                    else _Newest(int(row[0]), -1, Counter(dict(zip(row[1], row[2], strict=True))))
                )
            last = newest[r.namespace]
            if last is not None:
                if last.terms is not None:
                    context = last.terms + own
                prev[i] = last.seq
                if last.index >= 0:
                    nxt[last.index] = keys[i]
                else:
                    relink.append((last.seq, keys[i]))
            newest[r.namespace] = _Newest(keys[i], i, own)
        terms.append((own, context))
        seen = totals.setdefault(r.namespace, LexicalTotals())
        seen.docs += 1
        seen.total += own.total()
        seen.ctx_total += context.total()
    encoded_vectors = vectors_binary(vectors)
    cur = conn.cursor()
    for oid in (TEXT_ARRAY_OID, INT4_ARRAY_OID, vector_oid):
        cur.adapters.register_dumper(None, _encoded(oid))
    with cur.copy(f"COPY reflective_memories ({_MEMORY_COLUMNS}) FROM STDIN (FORMAT BINARY)") as cp:
        cp.set_types(
            [
                "int8",
                "text",
                "text",
                "text",
                "text",
                "timestamptz",
                "float8",
                "text",
                TEXT_ARRAY_OID,
                "int4",
                "jsonb",
                vector_oid,
            ]
        )
        for i, r in enumerate(records):
            cp.write_row(
                (
                    keys[i],
                    r.id,
                    r.namespace,
                    r.text,
                    r.kind,
                    r.created_at,
                    float(r.importance),
                    r.importance_source,
                    text_array_binary(r.evidence),
                    int(r.depth),
                    Jsonb(dict(r.metadata), dumps=dump_json),
                    encoded_vectors[i],
                )
            )
    with cur.copy(f"COPY reflective_terms ({_TERM_COLUMNS}) FROM STDIN (FORMAT BINARY)") as cp:
        cp.set_types(
            [
                "int8",
                "text",
                "text",
                "timestamptz",
                TEXT_ARRAY_OID,
                INT4_ARRAY_OID,
                "int4",
                TEXT_ARRAY_OID,
                INT4_ARRAY_OID,
                "int4",
            ]
        )
        for i, r in enumerate(records):
            own, context = terms[i]
            cp.write_row(
                (
                    keys[i],
                    r.namespace,
                    r.kind,
                    r.created_at,
                    text_array_binary(own),
                    int_array_binary(list(own.values())),
                    own.total(),
                    text_array_binary(context),
                    int_array_binary(list(context.values())),
                    context.total(),
                )
            )
    with cur.copy(f"COPY reflective_access ({_ACCESS_COLUMNS}) FROM STDIN (FORMAT BINARY)") as cp:
        cp.set_types(["int8", "text", "timestamptz", "int8", "int8"])
        for i, r in enumerate(records):
            cp.write_row((keys[i], r.namespace, r.accessed_at, prev[i], nxt[i]))
    if relink:
        cur.executemany(
            "UPDATE reflective_access SET next_obs = %s WHERE seq = %s",
            [(new, old) for old, new in relink],
        )
    return totals, keys[-1]


# -- the counter rows and the pending queue (the other statements of a write) ------------------


def add_lexical_stats(
    conn: psycopg.Connection[Any], namespace: str, docs: int, total: int, ctx_total: int
) -> None:
    """BM25's ``N`` and total lengths of ``namespace`` change by these amounts."""
    conn.execute(
        "INSERT INTO reflective_counters AS c (namespace, lex_docs, lex_total, ctx_total) "
        "VALUES (%s, %s, %s, %s) ON CONFLICT (namespace) DO UPDATE SET "
        "lex_docs = c.lex_docs + EXCLUDED.lex_docs, "
        "lex_total = c.lex_total + EXCLUDED.lex_total, "
        "ctx_total = c.ctx_total + EXCLUDED.ctx_total",
        (namespace, docs, total, ctx_total),
    )


def lock_counter(conn: psycopg.Connection[Any], namespace: str, *, create: bool = True) -> bool:
    """Lock ``namespace``'s counter row until the transaction ends; whether it has one.

    A missing row is created, unless ``create`` is false (a purge: see :func:`purge_memories`);
    then nothing is locked (a write in flight that creates the row is not waited for)."""
    if not create:
        row = conn.execute(
            "SELECT 1 FROM reflective_counters WHERE namespace = %s FOR UPDATE", (namespace,)
        ).fetchone()
        return row is not None
    conn.execute(
        "INSERT INTO reflective_counters (namespace) VALUES (%s) "
        "ON CONFLICT (namespace) DO UPDATE SET adds = reflective_counters.adds",
        (namespace,),
    )
    return True


def apply_counter(conn: psycopg.Connection[Any], update: CounterUpdate) -> None:
    """Add to or reset a namespace's reflection counter.

    Raises:
        ReflectionConflictError: a reset conditional on ``consumed.generation`` found another
            generation (the caller's transaction must then roll back: nothing is written).
    """
    if update.reset_at is not None:
        # take off what the reflection consumed (everything without ``consumed``)
        seen = update.consumed
        imp, adds = (math.inf, 2**62) if seen is None else (seen.importance_sum, seen.adds_since)
        gen = None if seen is None else seen.generation
        row = conn.execute(
            RESET,
            {"ns": update.namespace, "at": update.reset_at, "imp": imp, "adds": adds, "gen": gen},
        ).fetchone()
        # (a row created by the reset is generation 1: a conflict unless 0 was read)
        if gen is not None and (row is None or int(row[0]) != gen + 1):
            raise ReflectionConflictError(
                f"the reflection counter of namespace {update.namespace!r} was reset since it "
                f"was read (generation {gen}): another reflection was stored meanwhile, so this "
                "one stored nothing"
            )
    elif update.importance or update.adds:
        conn.execute(
            ADD,
            {"ns": update.namespace, "imp": float(update.importance), "adds": update.adds},
        )


OUTCOME_WAIT = 10.0
"""Seconds (at most, per lock) an outcome check waits for the transaction of the lost
connection to end before it reads whether it committed: the server may not have noticed the
connection is gone (that transaction still open, idle, or its commit still running), and a
check that read before it ended could answer "not committed" and have it written twice. Past
it, ``TransactionStillOpenError`` (``Pools.writing`` then raises
``WriteOutcomeUnknownError``)."""


def _after_open_writers(conn: psycopg.Connection[Any], lock: Callable[[], object]) -> None:
    """``lock()``, in a transaction of its own on ``conn`` (autocommit) that is rolled back: it
    takes a lock the lost write held until its transaction ended, so it returns once no
    transaction holds it (waiting at most :data:`OUTCOME_WAIT` s: the users' timeouts are
    off)."""
    try:
        with conn.transaction(force_rollback=True):
            unbounded_transaction(conn)
            wait = str(max(1, math.ceil(OUTCOME_WAIT * 1000)))
            conn.execute("SELECT set_config('lock_timeout', %s, true)", (wait,))
            lock()
    except pg_errors.LockNotAvailable as exc:
        raise TransactionStillOpenError(
            f"a transaction that writes its memories was still open on the server after "
            f"{OUTCOME_WAIT:g} s (that of the lost connection, which the server has not found "
            "gone yet, or whose commit still runs)"
        ) from exc


def after_writers(conn: psycopg.Connection[Any], namespaces: Collection[str]) -> None:
    """Returns once no transaction writes to ``namespaces`` (the counter row each write locks,
    or creates for a namespace's first memory, taken here as a write takes it: see
    :func:`_after_open_writers`)."""
    _after_open_writers(conn, lambda: [lock_counter(conn, ns) for ns in sorted(namespaces)])


def after_queuers(conn: psycopg.Connection[Any], items: Sequence[PendingMemory]) -> None:
    """Returns once no transaction queues these ids (:func:`enqueue` locks no counter row: the
    same queue entries are inserted here, which waits for a transaction inserting them, and
    rolled back; see :func:`_after_open_writers`)."""
    _after_open_writers(
        conn,
        lambda: conn.cursor().executemany(f"{QUEUE} ON CONFLICT DO NOTHING", queued_rows(items)),
    )


def queued_outcome(conn: psycopg.Connection[Any], items: Sequence[PendingMemory]) -> bool | None:
    """Whether an :func:`enqueue` of ``items`` committed (for ``Pools.writing``): ``True`` if
    every one is queued or already stored (another process may have completed it since),
    ``None`` if none is. Waits first for a transaction still queueing them
    (:func:`after_queuers`)."""
    after_queuers(conn, items)
    wanted = {(p.namespace, p.id) for p in items}
    namespaces, ids = [ns for ns, _ in wanted], [i for _, i in wanted]
    found = conn.execute(
        "SELECT namespace, id FROM reflective_pending "
        "JOIN unnest(%s::text[], %s::text[]) AS q(namespace, id) USING (namespace, id) "
        "UNION SELECT namespace, id FROM reflective_memories "
        "JOIN unnest(%s::text[], %s::text[]) AS q(namespace, id) USING (namespace, id)",
        (namespaces, ids, namespaces, ids),
    ).fetchall()
    return _all_or_none(len(found), len(wanted), "queueing memories")


def ids_note(records: Sequence[MemoryRecord] | Sequence[PendingMemory]) -> str | None:
    """What a ``WriteOutcomeUnknownError`` of a write of ``records`` (or of queued memories)
    adds: their ids, to look up before writing them again (``None`` without records)."""
    if not records:
        return None
    shown = ", ".join(r.id for r in records[:5])
    more = f" and {len(records) - 5} more" if len(records) > 5 else ""
    return f"the memories' ids: {shown}{more} (namespace {records[0].namespace!r})"


def stored_outcome(conn: psycopg.Connection[Any], records: Sequence[MemoryRecord]) -> int | None:
    """Whether a :func:`write_batch` of ``records`` committed (for ``Pools.writing``): its
    newest key if every record is stored in its namespace, ``None`` if none is. Waits first for
    a transaction still writing to their namespaces (:func:`after_writers`)."""
    after_writers(conn, {r.namespace for r in records})
    wanted = {(r.namespace, r.id) for r in records}
    found = conn.execute(
        "SELECT seq FROM reflective_memories "
        "JOIN unnest(%s::text[], %s::text[]) AS q(namespace, id) USING (namespace, id)",
        ([ns for ns, _ in wanted], [i for _, i in wanted]),
    ).fetchall()
    mine = [seq for (seq,) in found]
    return max(mine) if _all_or_none(len(mine), len(wanted), "storing memories") else None


def _all_or_none(found: int, wanted: int, what: str) -> bool | None:
    """Whether a write whose connection was lost committed, from how many of its ``wanted``
    ids are ``found`` now: none (``None``: it did not), all (``True``), or some: it did not
    (it would hold them all), and the ids found are another write's, made before it or at the
    same time, so it was refused as a duplicate would have been (:class:`DuplicateIdError`:
    a caller that writes again without those ids, as a strategy queueing a regenerated turn
    does, can)."""
    if found == 0:
        return None
    if found == wanted:
        return True
    raise DuplicateIdError(
        f"the connection to Postgres was lost while {what}, and {found} of {wanted} of the "
        "ids are taken now, by another write (this one did not commit, or some of what it "
        "wrote was removed since: nothing was written twice); check those ids, and write "
        "again without them"
    )


# -- a whole write or delete in the caller's transaction (put, delete, replace) ---------------


def lock_counters(
    conn: psycopg.Connection[Any],
    records: Sequence[MemoryRecord],
    counter: CounterUpdate | None,
    also: str | None = None,
) -> None:
    """Lock the counter rows of every namespace a write touches, in one order.

    Writers of a namespace take their keys (seq) in the order they commit, so "after the last
    reset" is exact and the neighbour links see every earlier memory."""
    spaces = {r.namespace for r in records}
    if counter is not None:
        spaces.add(counter.namespace)
    if also is not None:
        spaces.add(also)
    for ns in sorted(spaces):
        lock_counter(conn, ns)


def write_batch(
    conn: psycopg.Connection[Any],
    records: Sequence[MemoryRecord],
    vectors: F32,
    counter: CounterUpdate | None,
    pending: Sequence[str],
    vector_oid: int,
    *,
    locked: bool = False,
) -> int:
    """Everything ``PostgresBackend.put`` writes, in ``conn``'s transaction: the counter rows
    locked (unless the caller holds them: ``locked``), the queue entries removed, the memories
    and their BM25 statistics, the counter change. Returns the newest key (0 without records)."""
    if not locked:
        lock_counters(conn, records, counter)
    if pending:
        dequeue(conn, pending, records)
    newest = 0
    if records:
        totals, newest = write_memories(conn, records, vectors, vector_oid=vector_oid)
        for ns, t in totals.items():
            add_lexical_stats(conn, ns, t.docs, t.total, t.ctx_total)
    if counter is not None:
        apply_counter(conn, counter)
    return newest


def delete_memories(
    conn: psycopg.Connection[Any], namespace: str, ids: Sequence[str], *, locked: bool = False
) -> list[int]:
    """Delete memories of ``namespace`` by id in ``conn``'s transaction, relinking their
    neighbours, giving the observations after deleted ones the lexical context of their new
    previous observation (:data:`RECONTEXT`: one statement more when there are such; a local
    index reads them again when it applies the removal, ``local_docs.py``) and updating the
    BM25 statistics; returns the deleted keys, in order. Locks the namespace's counter row
    first unless the caller holds it (``locked``)."""
    if not ids:
        return []
    if not locked:
        lock_counter(conn, namespace)
    gone = conn.execute(
        "SELECT m.seq, t.lex_len, t.ctx_len, a.prev_obs, a.next_obs "
        f"FROM {RECORDS} JOIN reflective_terms t ON t.seq = m.seq "
        "WHERE m.namespace = %s AND m.id = ANY(%s)",
        (namespace, list(ids)),
    ).fetchall()
    if not gone:
        return []
    seqs = {r[0] for r in gone}
    # the observations next to deleted ones link to their new neighbours
    near = {s for r in gone for s in r[3:] if s is not None} - seqs
    # every access row this transaction changes, locked in key order first, as a touch locks
    # its rows: a touch of a neighbour and a deleted memory would otherwise deadlock with it
    # (the newest remaining observation too: a replace links the new ones to it)
    conn.execute(
        "SELECT 1 FROM reflective_access WHERE seq = ANY(%s) OR seq = (SELECT max(seq) "
        "FROM reflective_memories WHERE namespace = %s AND kind = 'observation' "
        "AND seq <> ALL(%s)) ORDER BY seq FOR UPDATE",
        (sorted(seqs | near), namespace, sorted(seqs)),
    )
    conn.execute("DELETE FROM reflective_memories WHERE seq = ANY(%s)", (sorted(seqs),))
    grown = 0
    if near:
        conn.execute(RELINK, (namespace, sorted(near)))
        # the observations after deleted ones: their previous observation's terms change
        after = sorted({r[4] for r in gone if r[4] is not None} - seqs)
        if after:
            found = conn.execute(RECONTEXT, {"seqs": after}).fetchone()
            grown = int(found[0]) if found else 0
    add_lexical_stats(
        conn, namespace, -len(gone), -sum(r[1] for r in gone), grown - sum(r[2] for r in gone)
    )
    return sorted(seqs)  # (also logged by a trigger: schema version 7)


def purge_memories(conn: psycopg.Connection[Any], namespace: str) -> int:
    """Everything ``PostgresBackend.purge`` deletes, in ``conn``'s transaction: the memories
    and queued memories of ``namespace``, and its counter zeroed (its generation kept: see
    :data:`PURGE_COUNTER`); returns how many memories were deleted.

    The counter row is locked first, as every write locks it: a write of the namespace in
    flight commits before the purge reads the rows (else its rows would outlive the purge while
    the BM25 statistics were zeroed). A namespace without a counter row holds no memory (the
    transaction that stores its first memory creates the row, and none deletes one), and the
    purge gives it none: it deletes its queue and reads neither its memories nor its counter,
    so a first write in flight comes after it. (Creating the row failed for a namespace over
    Postgres' ~2.7 KB index entry limit, which a stream may read and purge: nothing stored.)
    """
    if not lock_counter(conn, namespace, create=False):
        conn.execute("DELETE FROM reflective_pending WHERE namespace = %s", (namespace,))
        return 0
    conn.execute(  # in key order, as a touch locks them (see delete_memories)
        "SELECT 1 FROM reflective_access WHERE namespace = %s ORDER BY seq FOR UPDATE",
        (namespace,),
    )
    n = conn.execute("DELETE FROM reflective_memories WHERE namespace = %s", (namespace,)).rowcount
    conn.execute("DELETE FROM reflective_pending WHERE namespace = %s", (namespace,))
    conn.execute(PURGE_COUNTER, (namespace,))
    return n


@dataclass(slots=True)
class Replacement:
    """``PostgresBackend.replace``: ``ids`` of ``namespace`` deleted and ``records`` stored in
    one transaction, for ``Pools.writing``: :meth:`write` is the transaction's work,
    :meth:`outcome` tells after a lost connection whether it committed.

    The records usually reuse the deleted ids (a store's put over a key), so their ids cannot
    tell (``stored_outcome`` would find the old memories and call a lost write stored); keys
    can, as they are never reused: a key this transaction took exists only if it committed,
    and a key it deleted only if it did not."""

    namespace: str
    ids: Sequence[str]
    records: Sequence[MemoryRecord]
    vectors: F32
    counter: CounterUpdate | None
    vector_oid: Callable[[psycopg.Connection[Any]], int]
    """The oid of pgvector's ``vector`` type in the database (``PostgresBackend._vector_oid``)."""
    deleted: list[int] | None = None
    """The keys the last run deleted; ``None`` until that run's statements all returned."""
    newest: int = 0
    """The newest key the last run wrote (0: none)."""

    def write(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        """The memories deleted and the newest key written (0 without records)."""
        self.deleted = None
        lock_counters(conn, self.records, self.counter, also=self.namespace)  # in one order
        deleted = delete_memories(conn, self.namespace, self.ids, locked=True)
        oid = self.vector_oid(conn)
        self.newest = write_batch(
            conn, self.records, self.vectors, self.counter, (), oid, locked=True
        )
        self.deleted = deleted  # (only now may its commit be sent)
        return len(deleted), self.newest

    def outcome(self, conn: psycopg.Connection[Any]) -> tuple[int, int] | None:
        """What :meth:`write` returned if its transaction committed, ``None`` if it did not.

        Raises:
            StorageError: its keys cannot tell (the new memory gone and the old ones too:
                another process changed them since; or nothing deleted nor stored: only the
                counter changed).
            TransactionStillOpenError: a transaction writing to the namespace did not end
                within ``OUTCOME_WAIT`` (:func:`after_writers`).
        """
        if self.deleted is None:
            return None  # (lost before its statements all returned: no commit was sent)
        after_writers(conn, {self.namespace})  # (a transaction still open: its end first)
        keys = [*self.deleted, self.newest] if self.newest else self.deleted
        found = {int(r[0]) for r in conn.execute(_FOUND, (keys,)).fetchall()}
        if self.newest in found:
            return len(self.deleted), self.newest
        if found or (self.newest and not self.deleted):  # (an old one left, or no new one)
            return None
        if self.deleted and not self.newest:  # (it only deleted: they are gone)
            return len(self.deleted), 0
        raise StorageError(
            "the connection to Postgres was lost while replacing memories, and whether the "
            "replace committed cannot be read back: "
            + (
                "the memories it stored and those it deleted are both gone now (another "
                "process changed them since)"
                if self.deleted
                else "it deleted and stored no memory (only its counter change would tell)"
            )
            + "; look the memories up by id before writing them again"
        )


_FOUND = "SELECT seq FROM reflective_memories WHERE seq = ANY(%s)"
