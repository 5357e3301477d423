"""The write locks of ReflectiveStore: within a process, batches that write to one namespace
take turns, sync and async callers alike."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from langgraph.store.base import Op, PutOp

__all__ = ["NamespaceLock", "acquire", "caller_method"]


@dataclass(slots=True)
class NamespaceLock:
    """The lock that puts to one namespace take in turn (:meth:`ReflectiveStore._write_locks`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    loop: asyncio.AbstractEventLoop | None = None
    """The event loop of the async batch holding it (``None``: free, or held by a sync one)."""

    def hold(self, method: str) -> None:
        """Take the lock for a sync batch, waiting for its holder, unless the holder is an
        async batch of the event loop this thread runs: that one cannot resume while this
        thread waits, so waiting would be forever."""
        if self.lock.acquire(blocking=False):
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and self.loop is running:
            raise asyncio.InvalidStateError(
                f"ReflectiveStore.{method}(...) was called synchronously inside the event loop "
                f"while an async call in the same loop writes that namespace: it would wait "
                f"forever. Use `await store.a{method}(...)` in async code."
            )
        self.lock.acquire()


async def acquire(lock: threading.Lock) -> None:
    """Acquire ``lock`` without blocking the event loop or a worker thread.

    Polling (1 to 20 ms) rather than ``to_thread(lock.acquire)``: threads parked on the lock
    could fill the default executor that the lock's holder needs to finish, and a cancelled
    waiter holds nothing.
    """
    delay = 0.001
    while not lock.acquire(blocking=False):
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)


def caller_method(ops: Sequence[Op]) -> str:
    """The ``BaseStore`` method a batch most likely came from, for an error message."""
    if len(ops) == 1 and isinstance(ops[0], PutOp):
        return "put" if ops[0].value is not None else "delete"
    return "batch"
