"""The settings of the backend's connection pools: checked once where the backend opens its sync
pool (:meth:`PostgresBackend.from_conn_string`), and copied from the sync pool by each event
loop's async pool, so that a pool passed to ``PostgresBackend(pool)`` sets them too."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["PASSED_ON", "async_pool_settings", "sync_pool_settings"]

_SECONDS = "a positive number of seconds"
PASSED_ON: dict[str, str] = {
    "max_lifetime": _SECONDS,
    "max_idle": _SECONDS,
    "reconnect_timeout": _SECONDS,
    "max_waiting": "a whole number, 0 or more (0: no limit)",
    "num_workers": "a whole number, 1 or more",
}
"""The psycopg_pool settings ``pool_kwargs`` may set, and what each takes: plain values that mean
the same to the sync pool and to the async ones (a callback such as ``check`` would need a sync
and an async version)."""
_OWN = ("min_size", "max_size", "timeout")
"""Settings ``from_conn_string`` takes itself."""


def sync_pool_settings(
    *,
    min_size: int,
    max_size: int,
    timeout: float,
    pool_kwargs: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of the sync ``psycopg_pool.ConnectionPool``, checked.

    Raises:
        ValueError: ``max_size`` below 2 or below ``min_size``; ``timeout`` not a positive
            number of seconds; ``pool_kwargs`` sets something other than :data:`PASSED_ON`,
            or a value that setting does not take.
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
    extra = dict(pool_kwargs or {})
    for key, value in extra.items():
        if key in _OWN:
            raise ValueError(f"pool_kwargs cannot set {key!r}: pass {key}=... itself")
        if key not in PASSED_ON:
            raise ValueError(
                f"pool_kwargs cannot set {key!r}: the backend passes on only "
                f"{', '.join(PASSED_ON)} (psycopg_pool settings that mean the same to its sync "
                "and async pools; it sets the connections' kwargs and configure itself)"
            )
        if not _takes(key, value):
            raise ValueError(f"pool_kwargs[{key!r}] must be {PASSED_ON[key]}, got {value!r}")
    return {"min_size": min_size, "max_size": max_size, "timeout": float(timeout), **extra}


def async_pool_settings(pool: Any) -> dict[str, Any]:
    """The keyword arguments of an event loop's ``AsyncConnectionPool``: the sync ``pool``'s
    size, timeout and :data:`PASSED_ON` settings; one connection kept open (a process may run
    many event loops)."""
    copied = {key: getattr(pool, key) for key in PASSED_ON}
    return {"min_size": 1, "max_size": pool.max_size, "timeout": pool.timeout, **copied}


def _seconds(value: object) -> bool:
    """Whether ``value`` is a positive, finite number (not a bool)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _takes(key: str, value: object) -> bool:
    """Whether the :data:`PASSED_ON` setting ``key`` takes ``value``."""
    if PASSED_ON[key] == _SECONDS:
        return _seconds(value)
    lowest = 0 if key == "max_waiting" else 1
    return isinstance(value, int) and not isinstance(value, bool) and value >= lowest
