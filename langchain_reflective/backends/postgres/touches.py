"""A Postgres backend's touches: each one ``UPDATE ... RETURNING`` the records, or, when the
local index holds every record a retrieval returns, written on a thread of its own after the
retrieval has returned.

Without a local index, or when it lacks one of the records, a touch is one statement that sets
the access times and returns the records (``queries.TOUCH``): one round trip, ~1-1.4 ms of a
local-index retrieval of 3-4 ms here (docs/benchmarks.md). With the local index, the records a
process has touched before are kept in memory (a memory's content never changes under its key:
an update deletes it and stores a new one), so a retrieval that returns only such records
takes them from there: the local index applies the new access times at once, and the statement
is sent by this module's writer thread while the caller goes on.

What that changes, and what it keeps:

- The process reads its own touches: its reads of records (``get``, ``fetch``, ``recent``,
  ``iter_records``) and its next touch that the local index cannot answer first wait for the
  touches still being written (:meth:`Touches.settle`). Its next retrieval ranks with them.
- Other processes see a touch once the writer's statement commits: a round trip after the
  retrieval returned (plus the moment the thread waits for the interpreter), instead of
  before it returned.
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
    TIMESTAMPTZ_OID,
    int_from_binary,
    record_of,
)
from langchain_reflective.backends.postgres.sent import receive_row, send_statement
from langchain_reflective.records import MemoryRecord

__all__ = ["Touches"]

logger = logging.getLogger(__name__)

_THREAD = "langchain-reflective-touch"
_CLOCK_TYPES = (TEXT_OID, INT8_ARRAY_OID, TIMESTAMPTZ_OID)
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
        """The touch the writer was given last (it writes them in order)."""
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
        """Wait until every touch given to the writer has been written (or given up)."""
        last = self._last
        if last is not None:
            last.result()  # (the writer logs its failures; it raises none)

    def close(self) -> None:
        """Write the touches still pending, then stop the writer. Idempotent."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True)

    def _behind(
        self, namespace: str, keys: list[int], when: datetime
    ) -> dict[int, MemoryRecord] | None:
        """The records from the local index, their touch handed to the writer; ``None`` when
        the local index cannot answer (then nothing was done)."""
        if self._local is None:
            return None
        records = self._local.held(namespace, keys, when)
        if records is None:
            return None
        with self._lock:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix=_THREAD)
            self._last = self._writer.submit(self._write, namespace, keys, when)
        return records

    def _write(self, namespace: str, keys: list[int], when: datetime) -> None:
        """The writer thread's statement for a touch the local index answered: it returns only
        the clock, and is sent and read with libpq's own calls (``sent.py``), which wait
        without the interpreter's lock, so the thread takes little from the caller's next
        retrieval."""
        params = [
            namespace.encode(),
            ("{" + ",".join(map(str, keys)) + "}").encode(),
            when.isoformat().encode(),
        ]

        def write(conn: psycopg.Connection[Any]) -> list[bytes | None] | None:
            send_statement(conn, TOUCH_CLOCK, params, _CLOCK_TYPES)
            return receive_row(conn)

        try:
            row = self._pools.retrying(write)
        except Exception:
            logger.warning(
                "could not write the access time of %d memories of namespace %r (a touch "
                "written after its retrieval); the local index loads the namespace again",
                len(keys),
                namespace,
                exc_info=True,
            )
            if self._local is not None:
                self._local.forget(namespace)
            return
        clock = None if row is None else int_from_binary(row[0])
        if clock is not None and self._local is not None:
            self._local.own_clock(namespace, clock)

    def _touched(self, namespace: str, rows: list[Any]) -> dict[int, MemoryRecord]:
        """A touch's records (rows: its clock, then the record), applied to the local index."""
        records = dict(record_of(r[1:]) for r in rows)
        if self._local is not None and rows:
            self._local.own_touch(namespace, int(rows[0][0]), records)
        return records


def _params(namespace: str, keys: list[int], when: datetime) -> dict[str, Any]:
    return {"when": when, "ns": namespace, "keys": keys}
