"""psycopg_pool's log of a Postgres outage, quieted for this package's pools: the pool logs a
warning per reconnection attempt for as long as the server is down, and one per outage says
all there is to say (moved from ``connection.py``, which still re-exports its names)."""

from __future__ import annotations

import logging
import threading

__all__ = ["outage_over", "quiet_reconnects"]


class _QuietReconnects(logging.Filter):
    """Lets one of psycopg_pool's "error connecting in 'langchain-reflective...'" warnings
    through per outage (it repeats one per attempt, with a growing backoff, for as long as the
    server is down); the next connection the backend opens ends the outage. Records of other
    applications' pools pass untouched. Installed on psycopg_pool's logger by
    :func:`quiet_reconnects` when this package opens its first pool, not on import."""

    def __init__(self) -> None:
        super().__init__()
        self.reported = False

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.msg != "error connecting in %r: %s" or not args:
            return True
        if not str(args[0]).startswith("langchain-reflective"):
            return True  # (another application's pool)
        if self.reported:
            return False
        self.reported = True
        return True


_QUIET = _QuietReconnects()
_QUIET_LOCK = threading.Lock()


def quiet_reconnects() -> None:
    """Install the filter (:class:`_QuietReconnects`) on psycopg_pool's logger, once per
    process; called just before this package opens a pool of its own. Importing this module
    (or ``connection.py``) changes no logging or warning configuration."""
    pool_logger = logging.getLogger("psycopg.pool")
    with _QUIET_LOCK:
        if _QUIET not in pool_logger.filters:
            pool_logger.addFilter(_QUIET)


def outage_over() -> None:
    """A connection opened: the next outage's first warning is let through again."""
    _QUIET.reported = False
