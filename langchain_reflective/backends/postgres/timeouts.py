"""The users' timeouts (``statement_timeout``, ``lock_timeout``, ...) and the package's own long
work, which runs without them (split out of ``connection.py``)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import psycopg

__all__ = [
    "bound_lock_waits",
    "session_setting",
    "unbounded",
    "unbounded_transaction",
    "users_timeouts",
]


@contextlib.contextmanager
def session_setting(conn: psycopg.Connection[Any], name: str, value: str) -> Iterator[None]:
    """The setting ``name`` at ``value`` on ``conn`` (an autocommit connection, outside a
    transaction) for the block, then the connection's own value again (it may go back to a
    pool). The package's own long work runs with ``statement_timeout`` and ``lock_timeout`` at
    ``"0"``: timeouts set for the role, the database or the connection bound the calls users
    make, not an index build (23 s at 1M memories here; a cancelled one would be retried, and
    cancelled, every 10 s) or a lock wait bounded by its own ``timeout``."""
    row = conn.execute(  # (one round trip: the select list runs in order)
        "SELECT current_setting(%s), set_config(%s, %s, false)", (name, name, value)
    ).fetchone()
    try:
        yield
    finally:
        if not conn.closed:  # (a connection lost meanwhile is discarded by its pool)
            conn.execute("SELECT set_config(%s, %s, false)", (name, row[0] if row else value))


_USERS_TIMEOUTS = (
    ("statement_timeout", 0),
    ("lock_timeout", 0),
    ("idle_in_transaction_session_timeout", 0),
    ("transaction_timeout", 170000),
    ("idle_session_timeout", 140000),
)
"""Timeouts a role, a database or a connection may set, and the server version that has each.
They bound the calls users make; the package's own long work is exempt: building the vector
index (23 s at 1M memories here; a cancelled build would be retried, and cancelled, every
10 s), setting up or migrating the schema, the local index's load (one snapshot read in
chunks, with this process's work between them: idle in the transaction), waiting for a lock
under its own ``timeout``, holding a lock idle through a reflection's model calls.
``transaction_timeout`` (Postgres 17+) and ``idle_session_timeout`` (14+) end the session."""


def users_timeouts(conn: Any) -> list[str]:
    """The names of :data:`_USERS_TIMEOUTS` that ``conn``'s server has."""
    version = conn.info.server_version
    return [name for name, since in _USERS_TIMEOUTS if version >= since]


@contextlib.contextmanager
def unbounded(conn: psycopg.Connection[Any], **values: str) -> Iterator[None]:
    """None of the users' timeouts (:data:`_USERS_TIMEOUTS`) on ``conn`` (autocommit, outside
    a transaction) for the block, except those ``values`` sets, then the connection's own
    again."""
    with contextlib.ExitStack() as stack:
        for name in users_timeouts(conn):
            stack.enter_context(session_setting(conn, name, values.get(name, "0")))
        yield


def unbounded_transaction(conn: psycopg.Connection[Any]) -> None:
    """None of the users' timeouts (:data:`_USERS_TIMEOUTS`) for the rest of the caller's
    transaction on ``conn`` (``SET LOCAL``)."""
    conn.execute("; ".join(f"SET LOCAL {name} = 0" for name in users_timeouts(conn)))


def bound_lock_waits(conn: psycopg.Connection[Any], seconds: float) -> bool:
    """``lock_timeout`` at ``seconds`` for the rest of the caller's transaction on ``conn``
    unless the user set one (the role, the database or the connection); whether it was set."""
    wait = str(max(1, math.ceil(seconds * 1000)))
    return bool(
        conn.execute(
            "SELECT set_config('lock_timeout', %s, true) "
            "WHERE current_setting('lock_timeout') = '0'",
            (wait,),
        ).fetchone()
    )
