"""A statement sent to the server at once and its row read later, so that the server runs it
while the process does other work (libpq's asynchronous calls on a pooled psycopg connection).

The local index sends its catch-up statement this way and ranks on what it holds meanwhile
(``local_index.LocalIndex._catch_up``): the statement's round trip, which costs ~0.2 ms more
than an empty one once the process has been busy for a millisecond (the server's process has
gone to sleep by then), is spent while the ranking runs, instead of before it.

Between :func:`send_statement` and :func:`receive_row` the connection is busy: nothing else
may use it. A connection handed back to the pool while busy (the caller failed in between
and did not read the row) is closed by the pool, not reused.
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq

__all__ = ["receive_row", "send_statement"]

_POLL = getattr(select, "poll", None)


def send_statement(
    conn: psycopg.Connection[Any], sql: bytes, params: Sequence[bytes], types: Sequence[int]
) -> None:
    """Send one statement on ``conn`` and return without waiting for its result.

    Args:
        conn: an idle connection; busy until :func:`receive_row` has read the result.
        sql: the statement, with ``$1``-style parameters.
        params: each parameter's value in text form (``str(n).encode()`` for a number).
        types: each parameter's type OID (``rows.TEXT_OID``, ``rows.INT8_OID``).

    Raises:
        psycopg.OperationalError: the statement could not be sent (the connection is lost).
    """
    pgconn = conn.pgconn
    pgconn.send_query_params(
        sql, list(params), param_types=list(types), result_format=pq.Format.BINARY
    )
    while pgconn.flush():  # (psycopg's connections do not block: the rest as the socket takes it)
        _wait(pgconn.socket, writing=True)


def receive_row(conn: psycopg.Connection[Any]) -> list[bytes | None] | None:
    """The first row of the statement :func:`send_statement` sent on ``conn``, waiting for it
    (the wait releases the GIL); the connection is idle again afterwards.

    Returns:
        Each value as the server sent it in binary (``None`` for ``NULL``), or ``None`` when
        the statement returned no rows.

    Raises:
        psycopg.Error: the server's error for the statement (its SQLSTATE's class, with the
            diagnostics), or ``psycopg.OperationalError`` when the connection was lost.
    """
    pgconn = conn.pgconn
    results: list[pq.abc.PGresult] = []
    while True:
        pgconn.consume_input()
        while not pgconn.is_busy():  # (get_result would not block)
            result = pgconn.get_result()
            if result is None:  # the statement is done
                return _first_row(conn, results)
            results.append(result)
        _wait(pgconn.socket, writing=False)


def _first_row(conn: psycopg.Connection[Any], results: list[Any]) -> list[bytes | None] | None:
    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            state = result.error_field(pq.DiagnosticField.SQLSTATE)
            cls: type[psycopg.Error] = psycopg.DatabaseError
            if state:
                with contextlib.suppress(KeyError):  # (a SQLSTATE this psycopg does not know)
                    cls = psycopg.errors.lookup(state.decode())
            message = (result.error_message or b"").decode("utf-8", "replace").strip()
            raise cls(message, info=result, encoding=conn.info.encoding)
    if not results or results[0].status != pq.ExecStatus.TUPLES_OK:
        status = results[0].status if results else None
        raise psycopg.InterfaceError(f"the statement returned no rows to read (status {status})")
    result = results[0]
    if result.ntuples == 0:
        return None
    return [result.get_value(0, col) for col in range(result.nfields)]


def _wait(fd: int, *, writing: bool) -> None:
    """Until the socket ``fd`` can be written (``writing``) or read, or has failed (the next
    libpq call then reports why)."""
    if _POLL is None:  # (Windows)
        select.select([], [fd], [fd]) if writing else select.select([fd], [], [fd])
        return
    poller = _POLL()
    poller.register(fd, select.POLLOUT if writing else select.POLLIN)
    poller.poll()
