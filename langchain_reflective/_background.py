"""Background threads of :class:`~langchain_reflective.memory.ReflectiveMemory`: the pending
drain and the per-namespace reflection workers (plus the one-line error summary they log)."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["PendingDrainer", "ReflectionWorkers", "describe_error"]


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
        threading.Thread(target=self._run, name="reflective-pending-drain", daemon=True).start()

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
                target=self._run,
                args=(namespace, job),
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
