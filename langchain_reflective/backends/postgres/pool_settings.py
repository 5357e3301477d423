"""The settings of the backend's connection pools: checked once where the backend opens its sync
pool (:meth:`PostgresBackend.from_conn_string`), and copied from the sync pool by each event
loop's async pool, so that a pool passed to ``PostgresBackend(pool)`` sets them too."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["async_pool_settings", "sync_pool_settings"]


def sync_pool_settings(*, min_size: int, max_size: int, timeout: float) -> dict[str, Any]:
    """The keyword arguments of the sync ``psycopg_pool.ConnectionPool``, checked.

    Raises:
        ValueError: ``max_size`` below 2 or below ``min_size``; ``timeout`` not a positive
            number of seconds.
    """
    if max_size < 2 or max_size < min_size:
        raise ValueError(
            f"max_size must be at least 2 and at least min_size, got {max_size} "
            "(a reflection holds one connection for its lock while it reads and writes)"
        )
    if not _seconds(timeout):
        raise ValueError(
            f"timeout must be a positive number of seconds (how long a call waits for a "
            f"pooled connection), got {timeout!r}"
        )
    return {"min_size": min_size, "max_size": max_size, "timeout": float(timeout)}


def async_pool_settings(pool: Any) -> dict[str, Any]:
    """The keyword arguments of an event loop's ``AsyncConnectionPool``: the sync ``pool``'s
    size and timeout; one connection kept open (a process may run many event loops)."""
    return {"min_size": 1, "max_size": pool.max_size, "timeout": pool.timeout}


def _seconds(value: object) -> bool:
    """Whether ``value`` is a positive, finite number (not a bool)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
