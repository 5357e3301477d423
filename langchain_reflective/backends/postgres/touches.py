"""A Postgres backend's touches: each one ``UPDATE ... RETURNING`` the records, or, when the
local index holds every record a retrieval returns, written on a thread of its own after the
retrieval has returned.

Without a local index, or when it lacks one of the records, a touch is one statement that sets
the access times and returns the records (``queries.TOUCH``): one round trip, ~1-1.4 ms of a
local-index retrieval of 3-4 ms here (docs/benchmarks.md). With the local index, the records a
process has touched before are kept in memory (a memory's content never changes under its key:
an update deletes it and stores a new one), so a retrieval that returns only such records
takes them from there: the local index applies the new access times at once, and the statement
is sent by this module's writer thread while the caller goes on: :data:`GATHER` seconds later,
with every touch the process made meanwhile, one statement per namespace (each memory with the
last access time given to it). Retrievals in quick succession (a web service, a benchmark)
then cost the server one write per namespace and moment instead of one each, and take that
much less CPU from the retrievals that follow (docs/benchmarks.md, "Touches written
together").

What that changes, and what it keeps:

- The process reads its own touches: its reads of records (``get``, ``fetch``, ``recent``,
  ``iter_records``) and its next touch that the local index cannot answer first wait for the
  touches still being written (:meth:`Touches.settle`). Its next retrieval ranks with them.
- Other processes see a touch once the writer's statement commits: :data:`GATHER` seconds and
  a round trip after the retrieval returned (plus the moment the thread waits for the
  interpreter), instead of before it returned. The process's reads that settle (above) and
  :meth:`Touches.close` write the touches gathered at once.
- A memory another process deleted after this retrieval's catch-up can be returned (it was in
  the snapshot the retrieval ranked); without the cache it would be left out.
- A touch the writer cannot write (the server is down past the pool's retry) is logged as a
  warning and lost, as a touch committed just before a server crash may be (touches commit
  without waiting for the WAL flush); the local index drops the namespace, so that its next
  retrieval loads the server's access times again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any

import psycopg

from langchain_reflective.backends.postgres.connection import Pools
from langchain_reflective.backends.postgres.local_index import LocalIndex
from langchain_reflective.backends.postgres.queries import TOUCH, TOUCH_CLOCK
from langchain_reflective.backends.postgres.rows import (
    INT8_ARRAY_OID,
    TEXT_OID,
    TIMESTAMPTZ_ARRAY_OID,
    int_from_binary,
    record_of,
)
from langchain_reflective.backends.postgres.sent import receive_row, send_statement
from langchain_reflective.records import MemoryRecord

__all__ = ["Touches"]

logger = logging.getLogger(__name__)

_THREAD = "langchain-reflective-touch"
GATHER = 0.02
"""Seconds the writer waits after a touch answered in memory before it writes it, together
with the touches made meanwhile (a read of the process's own records, or ``close``, ends the
wait). An access time is a recency signal, decaying by the hour: other processes see it 20 ms
later."""
_CLOCK_TYPES = (TEXT_OID, INT8_ARRAY_OID, TIMESTAMPTZ_ARRAY_OID)
"""The types of :data:`TOUCH_CLOCK`'s parameters."""


class Touches:
    """Writes a backend's touches (see the module docstring).

    Args:
        pools: the backend's connection pools.
        local: the backend's local index (``None``: every touch is one statement, answered
            before it returns).
    """

    def __init__(self, pools: Pools, local: LocalIndex | None) -> None:
        self._pools = pools
        self._local = local
        self._lock = threading.Lock()
        self._last: Future[None] | None = None
        """The last round given to the writer (it writes them in order)."""
        self._round: _Round | None = None
        """The round still gathering touches (its wait not over), if any."""
        self._writer: ThreadPoolExecutor | None = None

    def touch(self, namespace: str, keys: Sequence[int], when: datetime) -> dict[int, MemoryRecord]:
        """Set the access time of ``keys`` to ``when`` and return their records (see
        ``BaseMemoryBackend.touch``)."""
        if not keys:
            return {}
        ints = [int(k) for k in keys]
        held = self._behind(namespace, ints, when)
        if held is not None:
            return held
        self.settle()  # (in order: an earlier touch of these memories must not land after it)
        return self._touched(namespace, self._pools.rows(TOUCH, _params(namespace, ints, when)))

    async def atouch(
        self, namespace: str, keys: Sequence[int], when: datetime
    ) -> dict[int, MemoryRecord]:
        """Async twin of :meth:`touch` (the statement on this event loop's pool)."""
        if not keys:
            return {}
        ints = [int(k) for k in keys]
        held = self._behind(namespace, ints, when)  # (never waits: see LocalIndex.held)
        if held is not None:
            return held
        if self.pending:
            await asyncio.to_thread(self.settle)
        params = _params(namespace, ints, when)

        async def run(conn: psycopg.AsyncConnection[Any]) -> list[Any]:
            return await (await conn.execute(TOUCH, params)).fetchall()

        return self._touched(namespace, await self._pools.aretrying(run))

    @property
    def pending(self) -> bool:
        """Whether a touch is still being written."""
        last = self._last
        return last is not None and not last.done()

    def settle(self) -> None:
        """Write the touches gathered now, and wait until every touch given to the writer has
        been written (or given up). In a forked child it raises ``StorageError`` first: the
        parent's writer thread is not there to write them (and may have held the lock)."""
        self._pools.check_process()
        with self._lock:
            gathering, last = self._round, self._last
        if gathering is not None:
            gathering.now.set()
        if last is not None:
            last.result()  # (the writer logs its failures; it raises none)

    def close(self) -> None:
        """Write the touches still pending, then stop the writer. Idempotent."""
        with self._lock:
            writer, self._writer = self._writer, None
            gathering = self._round
        if gathering is not None:
            gathering.now.set()
        if writer is not None:
            writer.shutdown(wait=True)

    def _behind(
        self, namespace: str, keys: list[int], when: datetime
    ) -> dict[int, MemoryRecord] | None:
        """The records from the local index, their touch gathered for the writer; ``None``
        when the local index cannot answer (then nothing was done)."""
        if self._local is None:
            return None
        records = self._local.held(namespace, keys, when)
        if records is None:
            return None
        with self._lock:
            gathering = self._round
            if gathering is None:
                if self._writer is None:
                    self._writer = ThreadPoolExecutor(1, thread_name_prefix=_THREAD)
                gathering = _Round()
                try:  # (submitted first: a round no writer takes must gather no touches)
                    self._last = self._writer.submit(self._write_round, gathering)
                except RuntimeError:  # no new work now: the interpreter is exiting
                    gathering = None
                else:
                    self._round = gathering
            if gathering is not None:
                stamps = gathering.touches.setdefault(namespace, {})
                for key in keys:
                    stamps.pop(key, None)  # (the last time given wins, as on the local index)
                    stamps[key] = when
        if gathering is None:  # written here, after the rounds before it
            self.settle()
            self._write(namespace, dict.fromkeys(keys, when))
        return records

    def _write_round(self, gathering: _Round) -> None:
        """The writer thread's work: wait :data:`GATHER` seconds (or until told to write
        now), then write the round's touches, one statement per namespace."""
        gathering.now.wait(GATHER)
        with self._lock:
            if self._round is gathering:
                self._round = None  # touches from now on go to the next round
        for namespace, stamps in gathering.touches.items():
            self._write(namespace, stamps)

    def _write(self, namespace: str, stamps: dict[int, datetime]) -> None:
        """One namespace's touches of a round (each memory's last access time, by key): the
        statement returns only the clock, and is sent and read with libpq's own calls
        (``sent.py``), which wait without the interpreter's lock, so the thread takes little
        from the caller's next retrieval."""
        params = [
            namespace.encode(),
            ("{" + ",".join(map(str, stamps)) + "}").encode(),
            ("{" + ",".join(f'"{w.isoformat()}"' for w in stamps.values()) + "}").encode(),
        ]

        def write(conn: psycopg.Connection[Any]) -> list[bytes | None] | None:
            send_statement(conn, TOUCH_CLOCK, params, _CLOCK_TYPES)
            return receive_row(conn)

        try:
            row = self._pools.retrying(write)
        except Exception:
            logger.warning(
                "could not write the access time of %d memories of namespace %r (touches "
                "written after their retrievals); the local index loads the namespace again",
                len(stamps),
                namespace,
                exc_info=True,
            )
            if self._local is not None:
                self._local.forget(namespace)
            return
        clock = None if row is None else int_from_binary(row[0])
        if clock is None or self._local is None:
            return
        try:
            self._local.own_clock(namespace, clock, stamps)
        except Exception:  # (the writer raises nothing: settle() would raise it into a read)
            logger.warning(
                "could not apply the access times of %d memories of namespace %r to the local "
                "index after writing them; it loads the namespace again",
                len(stamps),
                namespace,
                exc_info=True,
            )
            self._local.forget(namespace)

    def _touched(self, namespace: str, rows: list[Any]) -> dict[int, MemoryRecord]:
        """A touch's records (rows: its clock, then the record), applied to the local index."""
        records = dict(record_of(r[1:]) for r in rows)
        if self._local is not None and rows:
            self._local.own_touch(namespace, int(rows[0][0]), records)
        return records


class _Round:
    """The touches the writer writes together: each namespace's keys with their access times
    (the last one given), and the event that ends its wait."""

    __slots__ = ("now", "touches")

    def __init__(self) -> None:
        self.touches: dict[str, dict[int, datetime]] = {}
        self.now = threading.Event()


def _params(namespace: str, keys: list[int], when: datetime) -> dict[str, Any]:
    return {"when": when, "ns": namespace, "keys": keys}
