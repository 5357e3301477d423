"""The embedded default store: records and their vectors in one SQLite file (WAL).

:class:`SQLiteRecordStore` writes and reads the ``memories`` rows; its connection, the file's
schema, the reflection counters and the pending queue are in
:mod:`~langchain_reflective.backends.sqlite.connection`,
:mod:`~langchain_reflective.backends.sqlite.schema`,
:mod:`~langchain_reflective.backends.sqlite.counters` and
:mod:`~langchain_reflective.backends.sqlite.pending`.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.base import CounterUpdate
from langchain_reflective.backends.sqlite._errors import integrity_error, storage_error
from langchain_reflective.backends.sqlite.counters import (
    _GENERATION_STRIDE,
    CounterTable,
    counts_itself,
)
from langchain_reflective.backends.sqlite.pending import PendingQueue
from langchain_reflective.backends.sqlite.record_store import BaseRecordStore, PartitionChunk
from langchain_reflective.backends.sqlite.schema import (
    APPLICATION_ID,
    COLUMNS,
    INSERT,
    MAX_VARS,
    NOT_OBSERVATION,
    RAISE_SEQ_FLOOR,
    SCHEMA_VERSION,
    chunks,
    insert_row,
    row_to_record,
    to_us,
)
from langchain_reflective.errors import DimensionMismatchError, EmbeddingError, StorageError
from langchain_reflective.records import REFLECTION, MemoryRecord

__all__ = ["APPLICATION_ID", "COLUMNS_KEY", "SCHEMA_VERSION", "SQLiteRecordStore"]

COLUMNS_KEY = "columns_cache:"
"""``meta`` key prefix of a namespace's column snapshot (``backends/sqlite/caches.py``)."""
_COLUMNS_END = COLUMNS_KEY[:-1] + chr(ord(COLUMNS_KEY[-1]) + 1)


def _forget_columns(c: sqlite3.Connection, namespace: str | None) -> None:
    """Invalidate the column snapshot of ``namespace`` (every namespace's when ``None``)
    before its access times change: the snapshot holds them. Deleting an absent key writes
    nothing, so only the first touch after a snapshot pays for it."""
    if namespace is not None:
        c.execute("DELETE FROM meta WHERE key=?", (COLUMNS_KEY + namespace,))
    else:
        c.execute("DELETE FROM meta WHERE key>=? AND key<?", (COLUMNS_KEY, _COLUMNS_END))


logger = logging.getLogger(__name__)

_LE_F32 = np.dtype("<f4")


class SQLiteRecordStore(CounterTable, PendingQueue, BaseRecordStore):
    """Records, vectors and counters in one SQLite database.

    Args:
        path: the database file; ``None`` keeps everything in memory (nothing is written).
        synchronous: SQLite's ``synchronous`` pragma. ``"NORMAL"`` (default) in WAL mode never
            loses a committed transaction when the process crashes; ``"FULL"`` also survives
            power loss at some cost per write.
        timeout: seconds to wait for another writer's lock before failing.
        read_only: only read the existing file ``path``, on read-only storage too: it is never
            written nor upgraded, a missing one is not created (what SQLite may create beside
            it: :class:`SQLiteConnection`).

    Raises:
        ForeignFileError: the file is not a langchain-reflective memory file.
        SchemaVersionError: the file was written by a newer version of the package.
    """

    # -- the embedding model ---------------------------------------------------------------------

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
            and counts_itself(records[0], counter)
        ):  # one memory per add: no batch bookkeeping
            r = records[0]
            created_us = to_us(r.created_at)
            accessed_us = created_us if r.accessed_at == r.created_at else to_us(r.accessed_at)
            row = insert_row(r, created_us, accessed_us, vectors.tobytes())
            return [self._insert_one(row, r.namespace)]
        rows = self._rows(records, vectors)
        if not pending and len(rows) == 1 and counts_itself(records[0], counter):
            return [self._insert_one(rows[0], records[0].namespace)]
        with self._storing() as c:
            return self._insert_in(c, records, rows, counter, pending)

    def replace(
        self,
        namespace: str,
        ids: Sequence[str],
        records: Sequence[MemoryRecord],
        vectors: npt.NDArray[np.float32],
        *,
        counter: CounterUpdate | None = None,
    ) -> tuple[list[int], list[int]]:
        """Delete ``ids`` of ``namespace`` and insert ``records`` in one transaction; returns
        the new seqs and the deleted ones."""
        rows = self._rows(records, vectors)
        with self._storing() as c:
            deleted = self._delete_in(c, ids, namespace)
            return self._insert_in(c, records, rows, counter, ()), deleted

    @contextlib.contextmanager
    def _storing(self) -> Iterator[Any]:
        """A write transaction of new memories whose SQLite errors become StorageError."""
        try:
            with self._transaction() as c:
                yield c
        except sqlite3.IntegrityError as exc:
            raise integrity_error("could not store memories", exc) from exc
        except sqlite3.DatabaseError as exc:
            raise storage_error("could not store memories", exc, self.path) from exc

    @staticmethod
    def _rows(
        records: Sequence[MemoryRecord], vectors: npt.NDArray[np.float32]
    ) -> list[tuple[Any, ...]]:
        """The insert rows of ``records`` (one vector each)."""
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
            rows.append(insert_row(r, created, accessed, blob[i * width : (i + 1) * width]))
        return rows

    def _insert_in(
        self,
        c: Any,
        records: Sequence[MemoryRecord],
        rows: list[tuple[Any, ...]],
        counter: CounterUpdate | None,
        pending: Sequence[str],
    ) -> list[int]:
        """The statements of :meth:`insert` in the open transaction ``c``."""
        if pending:
            self._dequeue(c, pending, records)
        seqs: list[int]
        if len(rows) == 1:
            cur = c.execute(INSERT, rows[0])
            assert cur.lastrowid is not None
            seqs = [cur.lastrowid]
        elif rows:
            # one prepared statement for the batch; each row takes the next seq, so
            # with the write lock held the new sequence numbers are consecutive
            c.executemany(INSERT, rows)
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
                if self._fold_due(last, self._counter_row(c, ns)[1]):
                    self._fold(c, ns, last)
            else:
                # no counter for these rows (an import: they do not count, as before),
                # or one that differs from them: fold the older rows, add the counter's
                extra = (mine.importance, mine.adds) if mine is not None else (0.0, 0)
                self._fold(c, ns, last, below=first, extra=extra)
        if counter is not None and (counter.reset_at is not None or counter.namespace not in spans):
            span = spans.get(counter.namespace)
            self._apply_counter(c, counter, below=span[2] if span else None)
        for ns, span in spans.items():
            self.last_generation = self._counter_row(c, ns)[0] * _GENERATION_STRIDE + span[3]
        return seqs

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
        self._ensure_writable()
        with self._lock:
            self._ensure_open()
            c = self._conn
            try:
                seq = c.execute(INSERT, row).lastrowid
            except sqlite3.IntegrityError as exc:
                raise integrity_error("could not store memories", exc) from exc
            except sqlite3.DatabaseError as exc:
                raise storage_error("could not store memories", exc, self.path) from exc
            assert seq is not None
            try:
                bumps, counted = self._counter_row(c, namespace)
            except sqlite3.Error as exc:  # the row is stored; make the caller reload instead
                logger.warning("reading %s after a write failed: %s", self.path, exc)
                self._external_change = True
                self._on_stale()
                bumps, counted = 0, seq
            self.last_generation = bumps * _GENERATION_STRIDE + seq
            self._after_commit()
            if self._fold_due(seq, counted):
                try:
                    with self._transaction() as tx:
                        self._fold(tx, namespace, seq)
                except (sqlite3.Error, StorageError) as exc:  # exact anyway, only slower to read
                    logger.warning(
                        "folding the reflection counter of %s failed: %s", self.path, exc
                    )
            return seq

    def delete(self, ids: Sequence[str], *, namespace: str) -> list[int]:
        """Delete records; see :meth:`BaseRecordStore.delete`.

        Deleted memories that the reflection counter had not folded yet (see ``_FOLD_ROWS``)
        leave the counter too; folded ones stay counted (version 1 kept every deleted memory
        counted).
        """
        with self._transaction() as c:
            return self._delete_in(c, ids, namespace)

    def _delete_in(self, c: Any, ids: Sequence[str], namespace: str) -> list[int]:
        """The statements of :meth:`delete` in the open transaction ``c``."""
        deleted: list[int] = []
        texts: dict[int, str] = {}  # (observations': the lexical context of the next ones)
        self.deleted_texts = texts
        for chunk in chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            found = c.execute(
                "SELECT seq, CASE WHEN kind = 'observation' THEN text END FROM memories "
                f"WHERE namespace=? AND id IN ({marks})",
                (namespace, *chunk),
            ).fetchall()
            seqs = [int(r[0]) for r in found]
            texts.update((int(r[0]), r[1]) for r in found if r[1] is not None)
            if seqs and not deleted:
                c.execute(RAISE_SEQ_FLOOR)
            for part in chunks(seqs):
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
            c.execute(RAISE_SEQ_FLOOR)
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
            _forget_columns(c, None)
            for chunk in chunks(list(seqs)):
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
            if len(wanted) <= MAX_VARS:
                self._ensure_writable()
                with self._lock:
                    self._ensure_open()
                    self._touch_chunk(self._conn, us, wanted, out, namespace)
                    # no data-version read: our own commit leaves it alone, so a write by
                    # another connection still shows in the next changed_elsewhere()
                    self._after_commit()
            else:
                with self._transaction() as c:
                    for chunk in chunks(wanted):
                        self._touch_chunk(c, us, chunk, out, namespace)
        except sqlite3.DatabaseError as exc:
            raise storage_error("updating access times failed", exc, self.path) from exc
        return out

    @staticmethod
    def _touch_chunk(
        c: sqlite3.Connection,
        us: int,
        seqs: Sequence[int],
        out: dict[int, MemoryRecord],
        namespace: str | None,
    ) -> None:
        _forget_columns(c, namespace)
        marks = ",".join("?" * len(seqs))
        where = f"seq IN ({marks})"
        params: tuple[Any, ...] = (us, *seqs)
        if namespace is not None:
            where += " AND namespace=?"
            params += (namespace,)
        sql = f"UPDATE memories SET accessed_us=? WHERE {where} RETURNING {COLUMNS}"
        for row in c.execute(sql, params).fetchall():  # fetching all ends the statement
            out[int(row[0])] = row_to_record(row)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, ids: Sequence[str], *, namespace: str) -> list[MemoryRecord]:
        found: dict[str, MemoryRecord] = {}
        for chunk in chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            for row in self._query(
                f"SELECT {COLUMNS} FROM memories WHERE namespace=? AND id IN ({marks})",
                (namespace, *chunk),
            ):
                found[row[1]] = row_to_record(row)
        return [found[i] for i in ids if i in found]

    def vectors_by_seq(self, seqs: Sequence[int]) -> dict[int, bytes]:
        """The stored vectors (raw little-endian float32 blobs) of these keys."""
        marks = ",".join("?" * len(seqs))
        rows = self._query(f"SELECT seq, vector FROM memories WHERE seq IN ({marks})", tuple(seqs))
        return {int(seq): bytes(blob) for seq, blob in rows}

    def get_by_seq(self, seqs: Sequence[int]) -> dict[int, MemoryRecord]:
        out: dict[int, MemoryRecord] = {}
        for chunk in chunks([int(s) for s in seqs]):
            marks = ",".join("?" * len(chunk))
            for row in self._query(
                f"SELECT {COLUMNS} FROM memories WHERE seq IN ({marks})", tuple(chunk)
            ):
                out[int(row[0])] = row_to_record(row)
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
                where.append(NOT_OBSERVATION)  # lets SQLite use the partial importance index
        if after_seq is not None:
            where.append("seq>?")
            params.append(after_seq)
        order = "importance DESC, seq DESC" if by_importance else "seq DESC"
        sql = f"SELECT {COLUMNS} FROM memories WHERE {' AND '.join(where)} ORDER BY {order}"
        if n is not None:
            sql += " LIMIT ?"
            params.append(int(n))
        rows = self._query(sql, params)
        records = [row_to_record(r) for r in rows]
        return records if by_importance else records[::-1]
