"""The reflection counter and namespace generations, kept in the ``counters`` table.

Per namespace the row holds the counter *folded up to* ``counted_seq``; memories with a larger
``seq`` count on top of it, read from the rows themselves, so adding a memory writes only its
row (see the schema notes in :mod:`~langchain_reflective.backends.sqlite.schema`). The row also
counts deletes, purges and resets (the "bumps") that, with the newest ``seq``, make a
namespace's cache generation, and the resets alone (``reflection_generation``: the counter's
version, which a reflection's conditional reset compares, see ``CounterUpdate.consumed``).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Literal

from langchain_reflective.backends.base import CounterUpdate, ReflectionState
from langchain_reflective.backends.sqlite.connection import SQLiteConnection
from langchain_reflective.backends.sqlite.schema import from_us, to_us
from langchain_reflective.errors import ReflectionConflictError
from langchain_reflective.records import REFLECTION, MemoryRecord

__all__ = ["CounterTable", "counts_itself"]

_FOLD_ROWS = 512
"""The reflection counter is folded into the counters row once a namespace's unfolded range
(``seq`` distance past ``counted_seq``) exceeds this, so reading the counter scans at most about
this many rows. Checked by writers: after a single add (one extra transaction per this many
adds) and inside batch inserts."""

_GENERATION_STRIDE = 1 << 40
"""``generation = bumps * _GENERATION_STRIDE + newest seq``: sequence numbers stay far below."""


def counts_itself(record: MemoryRecord, counter: CounterUpdate | None) -> bool:
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


class CounterTable(SQLiteConnection):
    """The counters of a :class:`~langchain_reflective.backends.sqlite.store.SQLiteRecordStore`
    (a connection with the counters rows it read cached)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        synchronous: Literal["OFF", "NORMAL", "FULL"] = "NORMAL",
        timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        self._counters: dict[str, tuple[int, int]] = {}
        """Per namespace ``(bumps, counted_seq)`` as of ``_data_version`` (see ``_counter_row``);
        cleared when another connection wrote or a transaction of ours rolled back."""
        self._unfolded: dict[str, tuple[int, int, int, float, int]] = {}
        """Per namespace, what :meth:`reflection_state` summed last: ``(bumps, counted_seq,
        newest seq summed, importance, rows)``; valid while bumps and ``counted_seq`` are."""
        super().__init__(path, synchronous=synchronous, timeout=timeout, read_only=read_only)
        self.last_generation = 0
        """The generation returned by the last write (see :meth:`generation`)."""

    def _on_stale(self) -> None:
        self._counters.clear()

    @staticmethod
    def _fold_due(newest: int, counted: int) -> bool:
        """Whether a namespace's unfolded range is long enough to fold (see ``_FOLD_ROWS``)."""
        return newest - counted > _FOLD_ROWS

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

    def _total(self, c: sqlite3.Connection, namespace: str, upto: int) -> tuple[float, int]:
        """The counter over the namespace's rows up to ``upto`` (inside a transaction)."""
        row = c.execute(
            "SELECT COALESCE(c.importance_sum, 0), COALESCE(c.adds, 0), "
            "COALESCE(SUM(CASE WHEN m.kind <> 'reflection' THEN m.importance ELSE 0 END), 0), "
            "COUNT(m.seq) FROM (SELECT ?1 AS ns) AS q "
            "LEFT JOIN counters AS c ON c.namespace = q.ns "
            "LEFT JOIN memories AS m ON m.namespace = q.ns "
            "AND m.seq > COALESCE(c.counted_seq, 0) AND m.seq <= ?2",
            (namespace, upto),
        ).fetchone()
        return float(row[0]) + float(row[2]), int(row[1]) + int(row[3])

    def _newest_seq(self, c: sqlite3.Connection, namespace: str) -> int:
        row = c.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM memories WHERE namespace=?", (namespace,)
        ).fetchone()
        return int(row[0])

    def _apply_counter(
        self, c: sqlite3.Connection, update: CounterUpdate, below: int | None = None
    ) -> None:
        """Apply ``update``; ``below`` is the first seq this transaction inserted, if any."""
        ns = update.namespace
        if update.reset_at is not None:
            expected = update.consumed.generation if update.consumed is not None else None
            if expected is not None:
                self._check_generation(c, ns, expected)
            # rows inserted in this transaction (e.g. the reflection that resets the counter)
            # are left out of the new count; of the older ones, only what the reflection
            # consumed (all without ``consumed``): rows stored while it ran keep counting
            newest = self._newest_seq(c, ns)
            left = (0.0, 0)
            if update.consumed is not None:
                imp, n = self._total(c, ns, newest if below is None else below - 1)
                left = (
                    max(0.0, imp - update.consumed.importance_sum),
                    max(0, n - update.consumed.adds_since),
                )
            bumps = self._bump(c, ns)
            c.execute(
                "UPDATE counters SET importance_sum=?, adds=?, last_reflection_us=?, "
                "last_reflection_seq=?, counted_seq=?, "
                "reflection_generation = reflection_generation + 1 WHERE namespace=?",
                (*left, to_us(update.reset_at), newest, newest, ns),
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

    @staticmethod
    def _check_generation(c: sqlite3.Connection, namespace: str, expected: int) -> None:
        """Refuse a conditional reset whose generation is no longer the namespace's (inside
        the write transaction, so no other reset can come between the check and the write)."""
        row = c.execute(
            "SELECT reflection_generation FROM counters WHERE namespace=?", (namespace,)
        ).fetchone()
        current = int(row[0]) if row else 0
        if current != expected:
            raise ReflectionConflictError(
                f"the reflection counter of namespace {namespace!r} was reset since it was read "
                f"(generation {expected}, now {current}): another reflection was stored "
                "meanwhile, so this one stored nothing"
            )

    def update_counter(self, update: CounterUpdate) -> None:
        with self._transaction() as c:
            self._apply_counter(c, update)

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
                "COALESCE(c.reflection_generation, 0), "
                "COALESCE(c.generation, 0), COALESCE(c.counted_seq, 0), "
                "COALESCE(SUM(CASE WHEN m.kind <> 'reflection' THEN m.importance ELSE 0 END), 0), "
                "COUNT(m.seq), MAX(m.seq) FROM (SELECT ?1 AS ns) AS q "
                "LEFT JOIN counters AS c ON c.namespace = q.ns "
                "LEFT JOIN memories AS m ON m.namespace = q.ns AND m.seq > CASE "
                "WHEN COALESCE(c.generation, 0) = ?2 AND COALESCE(c.counted_seq, 0) = ?3 THEN ?4 "
                "ELSE COALESCE(c.counted_seq, 0) END",
                (namespace, bumps, counted, upto),
            )
            imp, adds, last, resets, now_bumps, now_counted, new_imp, new_n, newest = rows[0]
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
            generation=int(resets),
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
