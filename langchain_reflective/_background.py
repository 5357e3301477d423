"""Background threads of :class:`~langchain_reflective.memory.ReflectiveMemory`: the pending
drain and the per-namespace reflection workers (plus the one-line error summary they log).

Both threads run in :func:`background_context`: the caller's tracing follows the work, so in
LangSmith a background reflection or rating is a child of the run that started it (the agent
step, the tool call), not an unrelated trace, or no trace at all when tracing was switched on
by a context manager."""

from __future__ import annotations

import contextvars
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

__all__ = ["PendingDrainer", "ReflectionWorkers", "background_context", "describe_error"]

BACKGROUND_TAG = "background"
"""Tag of every run started on a background thread: a trace shows what ran after its call."""

_RUN_POSITION_KEYS = ("langgraph_", "checkpoint_ns")
"""Metadata prefixes that place a run in the caller's graph step; background work is not."""


def background_context() -> contextvars.Context:
    """A copy of the caller's context for work handed to a background thread, as LangChain's
    own executors copy it, with the caller's runnable config reduced to its tracing.

    Tracing switched on by a context (``tracing_context``, ``tracing_v2_enabled``, a configure
    hook) applies in the thread too, and the runs started there are children of the caller's
    current run, with its inheritable tags and metadata (a user id, a session, a thread id),
    tagged ``background``.
    The rest of the caller's config stays behind: its graph has moved on (its checkpointer, its
    store, its ``stream_mode`` handlers), so background work must not run as a part of it.
    """
    from langchain_core.runnables.config import var_child_runnable_config

    context = contextvars.copy_context()
    context.run(
        var_child_runnable_config.set, _tracing_config(context.get(var_child_runnable_config))
    )
    return context


def _tracing_config(config: RunnableConfig | None) -> RunnableConfig | None:
    """``config``'s tracers under its current run, and the :data:`BACKGROUND_TAG`."""
    from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager, CallbackManager
    from langchain_core.tracers.base import BaseTracer

    callbacks = (config or {}).get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        handlers, parent = list(callbacks.inheritable_handlers), callbacks.parent_run_id
        tags, metadata = list(callbacks.inheritable_tags), dict(callbacks.inheritable_metadata)
    else:
        handlers, parent, tags, metadata = list(callbacks or []), None, [], {}
    # a tracer records runs; a streaming handler (astream_log, astream_events, LangGraph's
    # stream modes) feeds the caller's stream, which is finished by the time this work runs
    tracers: list[BaseCallbackHandler] = [
        h for h in handlers if isinstance(h, BaseTracer) and not hasattr(h, "tap_output_iter")
    ]
    if BACKGROUND_TAG not in tags:  # work started by background work (a drain's reflection)
        tags = [*tags, BACKGROUND_TAG]
    metadata = {k: v for k, v in metadata.items() if not k.startswith(_RUN_POSITION_KEYS)}
    if not tracers:  # a tracer configured from the environment starts a trace with these
        return {"tags": tags, "metadata": metadata}
    manager = CallbackManager(
        tracers,
        tracers,
        parent_run_id=parent,
        tags=tags,
        inheritable_tags=tags,
        metadata=metadata,
        inheritable_metadata=metadata,
    )
    return {"callbacks": manager}


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message``, plus the root cause's when it differs."""

    def describe(e: BaseException) -> str:
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__

    root = exc
    seen = {id(exc)}
    while (nxt := root.__cause__ or root.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        root = nxt
    line = describe(exc)
    if root is not exc and (cause := describe(root)) not in line:
        line += f" (caused by {cause})"
    return line


class PendingDrainer:
    """Completes pending memories on a background thread; one pass at a time, re-run on request.

    The thread exists only while there is work: :meth:`kick` starts it (or asks the running one
    for another pass) and it ends when no pass was asked for meanwhile.
    """

    def __init__(self, drain: Any) -> None:
        self._drain = drain
        self._cond = threading.Condition()
        self._requested = False
        self._busy = False

    def kick(self) -> None:
        with self._cond:
            self._requested = True
            if self._busy:
                return
            self._busy = True
        threading.Thread(
            target=background_context().run,
            args=(self._run,),
            name="reflective-pending-drain",
            daemon=True,
        ).start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._requested:  # done: checked and cleared under one lock hold
                    self._busy = False
                    self._cond.notify_all()
                    return
                self._requested = False
            try:
                self._drain()
            except BaseException:  # pragma: no cover - _drain records its own failures
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
                raise

    def busy(self) -> bool:
        with self._cond:
            return self._busy

    def wait(self, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy, timeout=timeout)


class ReflectionWorkers:
    """Per-namespace background reflections: one at a time, re-run when asked meanwhile."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._running: set[str] = set()
        self._again: set[str] = set()
        self._threads: set[threading.Thread] = set()

    def submit(self, namespace: str, job: Any) -> None:
        with self._lock:
            if namespace in self._running:
                self._again.add(namespace)
                return
            self._running.add(namespace)
            thread = threading.Thread(
                target=background_context().run,  # (a re-run asked meanwhile runs in it too)
                args=(self._run, namespace, job),
                name="reflective-reflection",  # namespaces can be user ids: not in thread names
                daemon=True,
            )
            self._threads.add(thread)
        thread.start()

    def _run(self, namespace: str, job: Any) -> None:
        try:
            while True:
                job()
                with self._lock:
                    if namespace not in self._again:
                        break
                    self._again.discard(namespace)
        finally:
            with self._lock:
                self._running.discard(namespace)
                self._threads.discard(threading.current_thread())
                self._idle.notify_all()

    def busy(self) -> bool:
        with self._lock:
            return bool(self._running)

    def wait(self, timeout: float | None) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: not self._running, timeout=timeout)
