"""What becomes of a :class:`PostgresBackend` its user never closes: when the garbage collector
frees it, its pools are closed and its threads stopped, as :meth:`PostgresBackend.close` would,
without raising in the thread that happens to free it.

Left to themselves, psycopg_pool's pools close in their own ``__del__``, which joins the pool's
threads. A backend is freed in whatever thread drops its last reference or runs the cycle
collector (any allocation may start one), and that can be one of its own pool's worker threads
or its scheduler: the join of the current thread raised "RuntimeError: cannot join current
thread", which Python reports as an unraisable exception ("Exception ignored in ...
ConnectionPool.__del__"), and the pool's idle connections were left to be closed whenever their
objects were freed. Closing the backend joins more threads of its own (the touch writer, the
local index's loader, a background index build), so the same holds for each of them.

So a backend registers :func:`finalizer`, which hands the closing to a new thread of its own,
which may join them all. Not even on the main thread does it close where it runs: a collection
runs wherever an allocation starts it, perhaps inside a running event loop (which the touch
writer's last writes and the joins would block) or while that thread holds a lock one of the
backend's threads needs to finish (a logging handler's: the join would never return).
Nothing is written to ``warnings`` (no ``ResourceWarning``): an unclosed SQLite store is not
reported either, and a warning turned into an error there would itself be unraisable. At
interpreter exit nothing is done: the exit must not wait for a server (the touch writer's last
writes), and what the process leaves the operating system closes.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from langchain_reflective.backends.postgres.connection import Pools

__all__ = ["finalizer", "held_weakly"]

logger = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

_THREAD = "langchain-reflective-unclosed"
_LEFT: list[tuple[Pools, Sequence[Callable[[], None]]]] = []
"""What a backend freed while no thread could be started any more (the interpreter is exiting)
still holds: kept from being freed on a thread of its own, where its pool's ``__del__`` would
raise."""


def finalizer(
    backend: object, pools: Pools, stops: Sequence[Callable[[], None]]
) -> weakref.finalize[[Pools, Sequence[Callable[[], None]]], object]:
    """Close ``pools`` and call each of ``stops`` (in order, before the pools: the touch writer
    first, it writes its pending touches) once ``backend`` is freed unclosed; none of them may
    refer to ``backend`` (it would never be freed). The backend's ``close`` detaches it."""
    done = weakref.finalize(backend, release, pools, tuple(stops))
    done.atexit = False
    return done


def held_weakly(owner: T, read: Callable[[T], R]) -> Callable[[], R | None]:
    """``read(owner)`` while ``owner`` lives, else ``None``: for a backend's parts that ask the
    backend for something (the local index its dimension). Held strongly, such a callback would
    keep the backend alive from its own finalizer's arguments, and it would never be freed."""
    ref = weakref.ref(owner)

    def call() -> R | None:
        held = ref()
        return None if held is None else read(held)

    return call


def release(pools: Pools, stops: Sequence[Callable[[], None]]) -> None:
    """The finalizer: close on a new thread (see the module docstring); in a forked child,
    only forget the parent's pools (closing them would end the parent's sessions, and its
    threads are not here)."""
    if pools.forked:
        pools.abandon()
        return
    try:
        threading.Thread(target=_close, args=(pools, stops), name=_THREAD, daemon=True).start()
    except RuntimeError:  # ("can't create new thread at interpreter shutdown")
        _LEFT.append((pools, stops))


def _close(pools: Pools, stops: Sequence[Callable[[], None]]) -> None:
    """What :meth:`PostgresBackend.close` does, logging instead of raising (a finalizer's
    exception could only be printed)."""
    try:
        for stop in stops:
            stop()
        pools.abandon()
    except Exception:
        logger.warning("closing a PostgresBackend freed unclosed failed", exc_info=True)
