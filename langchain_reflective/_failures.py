"""The failures of :class:`~langchain_reflective.memory.ReflectiveMemory`'s background work
(reflections, pending batches): each is logged as one line with its cause and kept, with its
traceback, in :attr:`ReflectiveMemory.errors` (the newest :data:`ERRORS_KEPT`)."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Literal

from langchain_reflective._background import describe_error
from langchain_reflective.memory_config import MemoryConfig, ReflectionFailure

__all__ = ["ERRORS_KEPT", "FailureLog"]

logger = logging.getLogger("langchain_reflective.memory")

ERRORS_KEPT = 100
"""How many background failures :attr:`ReflectiveMemory.errors` keeps (the newest): a
long-running process whose reflections or pending batches keep failing (an outage) must not
grow it without bound. Every failure is also logged."""


class FailureLog:
    """Records a memory's failures: a log line each, and the newest in :attr:`errors`."""

    def __init__(self, config: MemoryConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self.errors: list[ReflectionFailure] = []
        """The newest :data:`ERRORS_KEPT` failures, oldest first (the list is only ever
        changed in place: a caller may hold it)."""

    def record(
        self,
        namespace: str,
        exc: Exception,
        stage: Literal["reflection", "pending"] = "reflection",
        what: str | None = None,
        level: int = logging.ERROR,
        *,
        detail: str | None = None,
    ) -> None:
        """Log one line with the cause; keep the exception (and its traceback) in ``errors``.

        ``what`` replaces the stage's standard description of what failed; ``detail`` is said
        after the cause (what happens next, e.g. a backoff).
        """
        if what is None and stage == "reflection":
            what = (
                f"{'background ' if self._config.background else ''}reflection for namespace "
                f"{namespace!r} failed"
            )
            if "nothing was written" not in str(exc):  # (a step's error says so itself)
                what += "; nothing was written"
        elif what is None:
            what = (
                f"completing pending memories of namespace {namespace!r} failed; they stay "
                "queued and are retried at the next enqueue, flush or open"
            )
        cause = describe_error(exc) + (f"; {detail}" if detail else "")
        logger.log(level, "%s: %s (details in ReflectiveMemory.errors)", what, cause)
        logger.debug("%s", what, exc_info=exc)
        with self._lock:
            self.errors.append(ReflectionFailure(namespace, exc, datetime.now(UTC), stage))
            del self.errors[:-ERRORS_KEPT]  # (in place: a caller may hold the list)
