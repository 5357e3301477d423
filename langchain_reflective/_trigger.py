"""When :class:`~langchain_reflective.memory.ReflectiveMemory` reflects after a write: the
namespace's persisted counter against the configured triggers, and running the due reflection
on a background thread (one per namespace at a time) or inline, with failures recorded, never
raised into the write that stored the memory, and backed off (:data:`BACKOFF_FIRST`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from langchain_reflective._background import ReflectionWorkers, describe_error
from langchain_reflective._llm import Flow, Op, run_async, run_sync, threaded
from langchain_reflective.backends.types import ReflectionState
from langchain_reflective.errors import StorageError
from langchain_reflective.memory_config import MemoryConfig
from langchain_reflective.stream import MemoryStream

__all__ = ["BACKOFF_FIRST", "BACKOFF_KEPT", "BACKOFF_MAX", "ReflectionTrigger"]

logger = logging.getLogger("langchain_reflective.memory")

BACKOFF_FIRST = 8
"""After a reflection that a write started fails, the next this many reflections that writes
would start for its namespace (writes that find it due) are skipped; each further failure in a
row doubles the number, up to :data:`BACKOFF_MAX`. A reflection of the namespace that succeeds
ends it (``ReflectiveMemory.reflect()``, which is never held back, or one another process ran:
the counter was reset since). Counted in writes, not seconds: the cost of an error that stays
follows the traffic (at most one reflection's model calls per :data:`BACKOFF_MAX` writes),
and a reflection is not put off longer than its namespace's writes warrant. Without it an
error that never goes away (a model that cannot answer, an exhausted quota) cost a whole
reflection's model calls again at every write."""

BACKOFF_MAX = 512
"""The most reflections skipped after failures in a row."""

BACKOFF_KEPT = 4096
"""The most namespaces a memory keeps a backoff for: the ones whose reflections failed last.
With a namespace per user and an outage that lasts, the table otherwise grew by one entry
per namespace for the life of the process; a namespace dropped from it reflects again at its
next due write (one reflection's model calls) and, if that fails, backs off again from
:data:`BACKOFF_FIRST`."""


@dataclass(slots=True)
class _Backoff:
    failures: int
    """Failed reflections in a row."""
    skip: int
    """Reflections still to skip."""
    generation: int | None
    """The counter's generation the failed run read (a different one: another reflection of
    the namespace succeeded since)."""


_RECHECKING: ContextVar[object | None] = ContextVar("reflective_rechecking", default=None)
"""The trigger whose reflection runs in this context (a worker thread's, or an ``aadd``
task's): that reflection checks :meth:`ReflectionTrigger.due` again under the lock."""


class ReflectionTrigger:
    """Decides after each write whether a namespace is due and runs its reflection.

    Args:
        stream: whose counters to read.
        config: the triggers (``reflect_threshold``, ``reflect_every``) and ``background``.
        can_reflect: whether a reflection can run at all (a model is set).
        reflect: runs one reflection of a namespace (forced: the trigger checked the counter).
        areflect: its async twin (``aadd``'s inline reflections).
        failed: records a failed reflection (the write that triggered it has succeeded) and
            the backoff it starts (a sentence, also added to the exception's notes).
    """

    def __init__(
        self,
        stream: MemoryStream,
        config: MemoryConfig,
        *,
        can_reflect: Callable[[], bool],
        reflect: Callable[[str], object],
        areflect: Callable[[str], Awaitable[object]],
        failed: Callable[[str, Exception, str], None],
    ) -> None:
        self._stream = stream
        self._config = config
        self._can_reflect = can_reflect
        self._reflect = reflect
        self._areflect = areflect
        self._failed = failed
        self._workers = ReflectionWorkers()
        self._lock = threading.Lock()
        self._backoff: dict[str, _Backoff] = {}

    def due(self, namespace: str) -> bool:
        """Whether ``namespace``'s counter reached a trigger (and a reflection can run)."""
        return self._can_reflect() and self._due(self._stream.reflection_state(namespace))

    def _due(self, state: ReflectionState) -> bool:
        config = self._config
        by_importance = config.reflect_threshold > 0 and (
            state.importance_sum >= config.reflect_threshold
        )
        by_count = config.reflect_every > 0 and state.adds_since >= config.reflect_every
        return by_importance or by_count

    def due_after_write(self, namespace: str) -> ReflectionState | None:
        """The namespace's counter if it is :meth:`due` after a write and not backing off
        after failures, else ``None``. The memory is stored, so a failed read of the counter
        (the stream closed meanwhile) must not fail the write (a retry would store it twice);
        no reflection starts, the counter keeps the namespace due for the next write."""
        try:
            if not self._can_reflect():
                return None
            state = self._stream.reflection_state(namespace)
        except StorageError as exc:
            logger.warning("no reflection check for %r: %s", namespace, describe_error(exc))
            return None
        if self._due(state) and not self._held_back(namespace, state.generation, skip=True):
            return state
        return None

    def _held_back(self, namespace: str, generation: int | None, *, skip: bool) -> bool:
        """Whether ``namespace`` backs off; ``skip``: a reflection is skipped (counted)."""
        with self._lock:
            backoff = self._backoff.get(namespace)
            if backoff is None:
                return False
            if backoff.generation is not None and generation != backoff.generation:
                del self._backoff[namespace]  # another reflection of it succeeded since
                return False
            if backoff.skip <= 0:
                return False
            if skip:
                backoff.skip -= 1
            return True

    def failed(self, namespace: str, exc: Exception, generation: int | None = None) -> None:
        """Record a failed reflection that a write started, and back off: writes skip the
        next :data:`BACKOFF_FIRST` reflections of ``namespace``, doubled for each failure in
        a row (up to :data:`BACKOFF_MAX`), unless one succeeds meanwhile. ``generation``: the
        counter's, as the failed run read it. Kept for the :data:`BACKOFF_KEPT` namespaces
        that failed last."""
        with self._lock:
            failures = 1 + (
                backoff.failures if (backoff := self._backoff.pop(namespace, None)) else 0
            )
            skip = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** min(failures - 1, 32))
            self._backoff[namespace] = _Backoff(failures, skip, generation)  # (the newest last)
            while len(self._backoff) > BACKOFF_KEPT:  # drop the oldest failures' (see there)
                del self._backoff[next(iter(self._backoff))]
        detail = (
            f"backing off: writes skip the next {skip} reflection{'s' if skip != 1 else ''} of "
            f"{namespace!r} ({failures} failure{'s' if failures > 1 else ''} in a row; "
            "reflect() runs one)"
        )
        exc.add_note(detail)
        self._failed(namespace, exc, detail)

    def succeeded(self, namespace: str) -> None:
        """A reflection of ``namespace`` completed: writes start them again as due."""
        with self._lock:
            self._backoff.pop(namespace, None)

    @property
    def rechecks(self) -> bool:
        """Whether the current thread or task runs a reflection this trigger started, which
        must check :meth:`due` again under the reflection lock (another one may have just reset
        the counter)."""
        return _RECHECKING.get() is self

    @contextlib.contextmanager
    def rechecking(self) -> Iterator[None]:
        """Mark the reflection run inside as this trigger's (see :attr:`rechecks`): the runs
        of :meth:`run_due` (background) and the inline ones after a write."""
        token = _RECHECKING.set(self)
        try:
            yield
        finally:
            _RECHECKING.reset(token)

    def run_due(self, namespace: str) -> None:
        """Reflect on ``namespace`` if it is (still) due; record a failure instead of raising."""
        with self.rechecking():
            generation = None
            try:  # re-check here: a reflection that just finished may have reset the counter
                state = self._stream.reflection_state(namespace)
                generation = state.generation
                # (held back: a re-run asked for while a reflection that then failed ran)
                if self._held_back(namespace, generation, skip=False):
                    return
                if self._can_reflect() and self._due(state):
                    self._reflect(namespace)
            except Exception as exc:  # (the check too: an exception would escape the thread)
                self.failed(namespace, exc, generation)

    def after_write(self, namespace: str) -> None:
        """Start ``namespace``'s reflection if it is due: on a background thread by default,
        else inline (its failure is recorded, not raised: the memory is stored, and a caller
        that retried the write would store it twice)."""
        if not self._config.background:
            run_sync(self._inline(namespace))
        elif self.due_after_write(namespace) is not None:
            self._workers.submit(namespace, lambda: self.run_due(namespace))

    async def aafter_write(self, namespace: str) -> None:
        """Async twin of :meth:`after_write` (``aadd``): the counter is read in a worker
        thread, not on the event loop, and an inline reflection runs as a task of the loop."""
        if self._config.background:
            await asyncio.to_thread(self.after_write, namespace)
        else:
            await run_async(self._inline(namespace))

    def _inline(self, namespace: str) -> Flow[None]:
        """An inline reflection after a write, for both worlds: the counter read once, then
        the reflection, which checks it again under the reflection lock; a failure is recorded
        with the generation the check read (so another process's reflection since ends the
        backoff here too), not raised."""
        state = yield Op(self.due_after_write, threaded(self.due_after_write), (namespace,))
        if state is None:
            return
        try:
            with self.rechecking():
                yield Op(self._reflect, self._areflect, (namespace,))
        except Exception as exc:
            self.failed(namespace, exc, state.generation)  # (recorded, and backed off)

    def busy(self) -> bool:
        """Whether a background reflection is running."""
        return self._workers.busy()

    def wait(self, timeout: float | None) -> bool:
        """Wait for the background reflections; ``False`` if some still run after ``timeout``."""
        return self._workers.wait(timeout)
