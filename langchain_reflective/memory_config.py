"""The settings of :class:`~langchain_reflective.memory.ReflectiveMemory`, the record of a
background job that failed and of a pending memory set aside (all importable from
``langchain_reflective.memory``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from langchain_reflective.backends.types import PendingMemory

__all__ = ["MemoryConfig", "QuarantinedMemory", "ReflectionFailure"]


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """Behaviour of :class:`ReflectiveMemory` (defaults follow the paper and seed 000)."""

    reflect_threshold: float = 15.0
    """Reflect when the importance (0-1 units) summed since the last reflection reaches this
    (the paper's 150 on the 1-10 scale). ``0`` disables the importance trigger."""
    reflect_every: int = 0
    """Also reflect after every N adds (seed 000 ``ReflectEvery``); 0 disables it."""
    recent_capacity: int = 20
    """Most recent observations considered for the working context."""
    insight_capacity: int = 10
    """Most important reflections shown in the working context."""
    eviction_threshold: float = 0.3
    """Recent observations below this importance (in [0, 1]) are left out of the working
    context (they stay in the stream and can still be retrieved)."""
    retrieve_k: int = 5
    """Memories retrieved for the current input in the working context."""
    token_budget: int = 1500
    """Approximate token budget of the memory block (4 characters per token; an integer >= 1)."""
    background: bool = True
    """Reflect, and complete pending memories, in background threads (``add`` and ``enqueue``
    never wait for them); ``False`` does both inline, before the call returns."""
    shutdown_timeout: float = 30.0
    """At interpreter exit, wait this long for running reflections (and the pending memories
    still to complete) before leaving. A model call already running in LangGraph's worker
    threads when the time runs out still holds the exit until it returns: give the chat model
    a request timeout to bound that too."""
    drain_batch: int = 64
    """Pending memories (see :meth:`ReflectiveMemory.enqueue`) completed per batch: one
    embedding call and one importance batch each."""
    drain_max_attempts: int = 3
    """A pending memory that fails on its own this many times (in as many drains) while other
    memories are completed -- one the embedding model always refuses (too long for its
    context), one a strict rater cannot rate -- is quarantined: it stays pending, later drains
    of this process skip it, a warning names it, and :attr:`ReflectiveMemory.quarantined` lists
    it for :meth:`~ReflectiveMemory.retry_quarantined` or
    :meth:`~ReflectiveMemory.discard_quarantined`. Failures while nothing can be completed (the
    model is down for everyone) do not count. The count is kept in memory: a new process tries
    such a memory again."""

    def __post_init__(self) -> None:
        for name in ("drain_batch", "drain_max_attempts", "token_budget"):
            _integer(name, getattr(self, name), minimum=1)
        for name in ("reflect_every", "recent_capacity", "insight_capacity", "retrieve_k"):
            _integer(name, getattr(self, name), minimum=0)
        _number("reflect_threshold", self.reflect_threshold, "a finite number >= 0")
        _number("shutdown_timeout", self.shutdown_timeout, "a finite number of seconds >= 0")
        _number("eviction_threshold", self.eviction_threshold, "an importance in [0, 1]", top=1)
        if not isinstance(self.background, bool):
            raise ValueError(f"background must be True or False, got {self.background!r}")


def _integer(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _number(name: str, value: object, what: str, *, top: float = math.inf) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= top
    ):
        raise ValueError(f"{name} must be {what}, got {value!r}")


@dataclass(frozen=True, slots=True)
class ReflectionFailure:
    """A background job that failed: a reflection (nothing was written) or the completion of a
    batch of pending memories (they stay queued and are retried)."""

    namespace: str
    error: BaseException
    at: datetime
    stage: Literal["reflection", "pending"] = "reflection"
    """What failed: a ``"reflection"``, or completing ``"pending"`` memories."""


@dataclass(frozen=True, slots=True)
class QuarantinedMemory:
    """A pending memory the drain set aside: it failed on its own ``attempts`` times while other
    memories were completed (see :attr:`MemoryConfig.drain_max_attempts`). It is still pending
    (in the file, in the working context's recent observations), not retrievable, and skipped by
    this process's drains until :meth:`ReflectiveMemory.retry_quarantined`."""

    item: PendingMemory
    error: BaseException
    """The last failure."""
    attempts: int
    at: datetime
    """When it was quarantined."""
