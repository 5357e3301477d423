"""The :class:`~langchain_reflective.memory.ReflectiveMemory` objects still open, and what the
interpreter's exit does with them: each is flushed (its pending memories completed, its
background reflections waited for), up to its ``MemoryConfig.shutdown_timeout``."""

from __future__ import annotations

import atexit
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langchain_reflective.memory import ReflectiveMemory

__all__ = ["drain_at_exit", "track", "untrack"]

_LIVE: weakref.WeakSet[ReflectiveMemory] = weakref.WeakSet()
"""The memories made and not yet closed (weakly: a memory dropped unclosed is not kept)."""


def track(memory: ReflectiveMemory) -> None:
    """Flush ``memory`` at exit unless it is closed first."""
    _LIVE.add(memory)


def untrack(memory: ReflectiveMemory) -> None:
    """``memory`` was closed: nothing of it to flush at exit."""
    _LIVE.discard(memory)


@atexit.register
def drain_at_exit() -> None:  # pragma: no cover - runs at interpreter exit
    for memory in list(_LIVE):
        memory.flush(timeout=memory.config.shutdown_timeout)
