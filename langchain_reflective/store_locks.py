"""The write turns of ReflectiveStore: within a process, batches that write to one namespace of
one :class:`~langchain_reflective.stream.MemoryStream` take turns, sync and async callers alike,
whichever ``ReflectiveStore`` object over that stream they go through.

Each stream has one :class:`LockTable` (:func:`lock_table`, kept while the stream object lives).
A table holds a :class:`NamespaceLock` only while some batch holds or waits for it, so it does
not grow with the namespaces ever written. A batch takes its locks through a :class:`Turn`, in a
fixed order (no deadlock), and releases them once; an async batch cancelled while a write of
the stream is in flight hands its turn to that write (:meth:`Turn.defer_to`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import Op, PutOp

__all__ = ["LockTable", "NamespaceLock", "Turn", "acquire", "caller_method", "lock_table"]


@dataclass(slots=True, eq=False)
class NamespaceLock:
    """The lock that puts to one namespace take in turn."""

    name: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    loop: asyncio.AbstractEventLoop | None = None
    """The event loop of the async batch holding it (``None``: free, or held by a sync one)."""
    users: int = 0
    """How many batches hold or wait for it (changed under its table's mutex)."""

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


class LockTable:
    """The namespace locks of one stream; an entry lives while a batch holds or waits for it."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._entries: dict[str, NamespaceLock] = {}

    def __len__(self) -> int:
        with self._mutex:
            return len(self._entries)

    def take(self, names: Iterable[str]) -> list[NamespaceLock]:
        """The entries of ``names``, sorted, each in use until :meth:`give_back`."""
        with self._mutex:
            entries = []
            for name in sorted(set(names)):
                entry = self._entries.get(name)
                if entry is None:
                    entry = self._entries[name] = NamespaceLock(name)
                entry.users += 1
                entries.append(entry)
            return entries

    def give_back(self, entries: Iterable[NamespaceLock]) -> None:
        """End the use of ``entries`` (released, or never acquired); forget the unused ones."""
        with self._mutex:
            for entry in entries:
                entry.users -= 1
                if entry.users == 0 and self._entries.get(entry.name) is entry:
                    del self._entries[entry.name]


_TABLES: weakref.WeakKeyDictionary[Any, LockTable] = weakref.WeakKeyDictionary()
_TABLES_MUTEX = threading.Lock()


def lock_table(stream: object) -> LockTable:
    """The lock table of ``stream`` (one per stream object, shared by every store over it)."""
    with _TABLES_MUTEX:
        table = _TABLES.get(stream)
        if table is None:
            table = _TABLES[stream] = LockTable()
        return table


class Turn:
    """The locks of the namespaces one batch writes: taken in a fixed order, released once."""

    def __init__(self, table: LockTable, names: Iterable[str]) -> None:
        self._table = table
        self.entries = table.take(names)
        self._held: list[NamespaceLock] = []
        self._deferred = False
        self._released = False

    def hold(self, method: str) -> None:
        """Take every lock for a sync batch (see :meth:`NamespaceLock.hold`)."""
        for entry in self.entries:
            entry.hold(method)
            self._held.append(entry)

    async def ahold(self) -> None:
        """Take every lock for an async batch, without blocking the event loop."""
        for entry in self.entries:
            await acquire(entry.lock)
            entry.loop = asyncio.get_running_loop()  # (no await since the acquire)
            self._held.append(entry)

    def release(self) -> None:
        """Release the locks and end their use, unless :meth:`defer_to` handed them on."""
        if not self._deferred:
            self._release()

    def defer_to(self, write: asyncio.Future[Any] | concurrent.futures.Future[Any]) -> None:
        """Keep the locks until ``write`` (a write of the cancelled batch) has finished.

        Cancelling the batch does not stop a write already running in a worker thread: were
        the locks released at once, a later write of the namespace could land before it. For
        such a write ``write`` is the thread's own future (done in that thread, which then
        releases the locks), not the task awaiting it: the event loop's teardown cancels that
        task while the thread still writes.
        """
        self._deferred = True

        def finished(done: asyncio.Future[Any] | concurrent.futures.Future[Any]) -> None:
            if not done.cancelled():
                done.exception()  # (retrieved: its batch was cancelled, nobody awaits it)
            self._release()

        write.add_done_callback(finished)

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        for entry in reversed(self._held):
            entry.loop = None
            entry.lock.release()
        self._table.give_back(self.entries)


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
