"""The :class:`~langchain_reflective.memory.ReflectiveMemory` objects still open, and what the
interpreter's exit does with them: each is flushed (its pending memories completed, its
background reflections waited for), up to its ``MemoryConfig.shutdown_timeout``, all of them
together within the longest one.

The flush runs among :mod:`threading`'s exit hooks (the ones run before the interpreter joins
its threads), not as an :mod:`atexit` function: by the time :mod:`atexit` functions run,
:mod:`concurrent.futures` has stopped taking work (its own hook, also one of threading's,
refuses every new task), and a reflection still running needs it (LangGraph runs parallel
branches in a thread pool, LangChain batches too): it failed at once with "cannot schedule new
futures after interpreter shutdown", so the wait promised by ``shutdown_timeout`` never held.
Threading's hooks run newest first, and :mod:`concurrent.futures.thread` is imported (and its
hook registered) before this one is, so the flush runs while it still takes work. Where that
hook cannot be registered (an interpreter without ``threading._register_atexit``) the flush is
an :mod:`atexit` function, as before.

When the time is up the exit goes on, and the work still running is abandoned (nothing of a
reflection is written unless it completes). One wait is not the package's to bound: a model
call already running in a thread pool then (the insights step's parallel branches run in
LangGraph's) holds the exit until it returns, because Python waits for its pools' threads at
exit; a request timeout on the chat model bounds it.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401 -- its exit hook must be registered before ours
import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langchain_reflective.memory import ReflectiveMemory

__all__ = ["drain_at_exit", "track", "untrack"]

logger = logging.getLogger("langchain_reflective.memory")

_LIVE: weakref.WeakSet[ReflectiveMemory] = weakref.WeakSet()
"""The memories made and not yet closed (weakly: a memory dropped unclosed is not kept)."""


def track(memory: ReflectiveMemory) -> None:
    """Flush ``memory`` at exit unless it is closed first."""
    _LIVE.add(memory)


def untrack(memory: ReflectiveMemory) -> None:
    """``memory`` was closed: nothing of it to flush at exit."""
    _LIVE.discard(memory)


def drain_at_exit() -> None:  # pragma: no cover - runs at interpreter exit
    """Flush every live memory, each for at most its ``shutdown_timeout`` from the start of
    the exit (so the exit waits for the longest one, not for their sum). A flush that raises
    is logged and the next memory flushed: Python calls :mod:`threading`'s exit hooks without
    a ``try``, so an exception here would skip the later memories, the later hooks
    (:mod:`concurrent.futures`') and the join of the threads still running."""
    start = time.monotonic()
    for memory in list(_LIVE):
        left = memory.config.shutdown_timeout - (time.monotonic() - start)
        try:
            memory.flush(timeout=max(0.0, left))
        except Exception:
            logger.exception("flushing a ReflectiveMemory at exit failed")


def _register() -> None:
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is not None:
            register(drain_at_exit)
            return
    except RuntimeError:  # imported while the interpreter is already shutting down
        return
    atexit.register(drain_at_exit)


_register()
