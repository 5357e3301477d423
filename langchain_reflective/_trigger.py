"""When :class:`~langchain_reflective.memory.ReflectiveMemory` reflects after a write: the
namespace's persisted counter against the configured triggers, and running the due reflection
on a background thread (one per namespace at a time) or inline, with failures recorded, never
raised into the write that stored the memory."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from langchain_reflective._background import ReflectionWorkers, describe_error
from langchain_reflective.errors import StorageError
from langchain_reflective.memory_config import MemoryConfig
from langchain_reflective.stream import MemoryStream

__all__ = ["ReflectionTrigger"]

logger = logging.getLogger("langchain_reflective.memory")

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
        failed: records a failed reflection (the write that triggered it has succeeded).
    """

    def __init__(
        self,
        stream: MemoryStream,
        config: MemoryConfig,
        *,
        can_reflect: Callable[[], bool],
        reflect: Callable[[str], object],
        failed: Callable[[str, Exception], None],
    ) -> None:
        self._stream = stream
        self._config = config
        self._can_reflect = can_reflect
        self._reflect = reflect
        self._failed = failed
        self._workers = ReflectionWorkers()

    def due(self, namespace: str) -> bool:
        """Whether ``namespace``'s counter reached a trigger (and a reflection can run)."""
        if not self._can_reflect():
            return False
        state = self._stream.reflection_state(namespace)
        config = self._config
        by_importance = config.reflect_threshold > 0 and (
            state.importance_sum >= config.reflect_threshold
        )
        by_count = config.reflect_every > 0 and state.adds_since >= config.reflect_every
        return by_importance or by_count

    def due_after_write(self, namespace: str) -> bool:
        """:meth:`due` after a write: the memory is stored, so a failed read of the counter
        (the stream closed meanwhile) must not fail the write (a retry would store it twice);
        no reflection starts, the counter keeps the namespace due for the next write."""
        try:
            return self.due(namespace)
        except StorageError as exc:
            logger.warning("no reflection check for %r: %s", namespace, describe_error(exc))
            return False

    @property
    def rechecks(self) -> bool:
        """Whether the current thread or task runs a reflection this trigger started, which
        must check :meth:`due` again under the reflection lock (another one may have just reset
        the counter)."""
        return _RECHECKING.get() is self

    @contextlib.contextmanager
    def rechecking(self) -> Iterator[None]:
        """Mark the reflection run inside as this trigger's (see :attr:`rechecks`): the sync
        runs of :meth:`run_due`, and ``ReflectiveMemory.aadd``'s inline async one."""
        token = _RECHECKING.set(self)
        try:
            yield
        finally:
            _RECHECKING.reset(token)

    def run_due(self, namespace: str) -> None:
        """Reflect on ``namespace`` if it is (still) due; record a failure instead of raising."""
        with self.rechecking():
            try:  # re-check here: a reflection that just finished may have reset the counter
                if self.due(namespace):
                    self._reflect(namespace)
            except Exception as exc:  # (the check too: an exception would escape the thread)
                self._failed(namespace, exc)

    def after_write(self, namespace: str) -> None:
        """Start ``namespace``'s reflection if it is due: on a background thread by default,
        else inline (its failure is recorded, not raised: the memory is stored, and a caller
        that retried the write would store it twice)."""
        if not self.due_after_write(namespace):
            return
        if self._config.background:
            self._workers.submit(namespace, lambda: self.run_due(namespace))
        else:
            self.run_due(namespace)

    def busy(self) -> bool:
        """Whether a background reflection is running."""
        return self._workers.busy()

    def wait(self, timeout: float | None) -> bool:
        """Wait for the background reflections; ``False`` if some still run after ``timeout``."""
        return self._workers.wait(timeout)
