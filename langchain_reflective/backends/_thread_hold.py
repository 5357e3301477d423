"""A sync context manager entered and exited from async code on one thread of its own.

``asyncio.to_thread(manager.__enter__)`` and, later, ``asyncio.to_thread(manager.__exit__)``
may run on two different worker threads. A lock that remembers the thread that took it
breaks then: :mod:`filelock` keeps its holders per thread, so a release from another thread
left the taking thread's entry behind, and the next reflection lock taken on that worker
thread raised ``RuntimeError("Deadlock: ... already held by a different FileLock instance in
this thread")`` instead of waiting. :func:`held_on_own_thread` runs ``__enter__`` and
``__exit__`` on one short-lived thread; a caller cancelled while waiting for ``__enter__``
releases what that thread takes as soon as it has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

__all__ = ["held_on_own_thread"]

_ExitArgs = tuple[type[BaseException] | None, BaseException | None, TracebackType | None]


@contextlib.asynccontextmanager
async def held_on_own_thread(
    manager: contextlib.AbstractContextManager[Any], *, name: str
) -> AsyncIterator[None]:
    """Hold ``manager`` for the ``async with`` block, entering and exiting it on one thread.

    Exceptions of ``__enter__`` and ``__exit__`` are raised here; an exception of the block
    is passed to ``__exit__`` (which may suppress it, as ``with`` would let it).
    """
    hold = _Hold(manager, name)
    await hold.enter()
    try:
        yield
    except BaseException as exc:
        if not await hold.exit((type(exc), exc, exc.__traceback__)):
            raise
    else:
        await hold.exit((None, None, None))


class _Hold:
    def __init__(self, manager: contextlib.AbstractContextManager[Any], name: str) -> None:
        self._manager = manager
        self._loop = asyncio.get_running_loop()
        self._entered: asyncio.Future[None] = self._loop.create_future()
        self._exited: asyncio.Future[bool] = self._loop.create_future()
        self._exit_args: _ExitArgs = (None, None, None)
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    async def enter(self) -> None:
        self._thread.start()
        try:
            await self._entered
        except asyncio.CancelledError:
            self._release.set()  # (the thread releases what it takes, if it takes it)
            raise

    async def exit(self, args: _ExitArgs) -> bool:
        self._exit_args = args
        self._release.set()
        return await asyncio.shield(self._exited)

    def _run(self) -> None:
        try:
            self._manager.__enter__()
        except BaseException as exc:
            self._settle(self._entered, exc=exc)
            return
        self._settle(self._entered, value=None)
        self._release.wait()
        try:
            suppressed = bool(self._manager.__exit__(*self._exit_args))
        except BaseException as exc:
            self._settle(self._exited, exc=exc)
        else:
            self._settle(self._exited, value=suppressed)

    def _settle(
        self, future: asyncio.Future[Any], *, value: Any = None, exc: BaseException | None = None
    ) -> None:
        def settle() -> None:
            if future.done():  # (the waiter was cancelled)
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(value)

        with contextlib.suppress(RuntimeError):  # (the loop is closed: nobody waits)
            self._loop.call_soon_threadsafe(settle)
