"""What a forked child may do with a backend its parent opened: nothing but drop it.

A forked child shares its parent's sockets and file descriptors. A Postgres connection used by
both processes mixes their messages (one can read the other's rows, of any namespace), and
closing it in the child ends the parent's session; SQLite forbids carrying a connection to a
file across ``fork()`` (it can corrupt the file). So a backend remembers the process that
opened it: in any other process every use raises :func:`opened_in_parent`'s error -- before it
takes any lock, since a parent thread may have held one at the fork and nothing in the child
would ever release it -- and ``close()`` only forgets it (the parent's connections, files and
threads are left alone).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from langchain_reflective.errors import StorageError

__all__ = ["ProcessGuard", "ProcessLock", "opened_in_parent"]


def opened_in_parent(what: str, pid: int) -> StorageError:
    """The error for using, in process ``os.getpid()``, ``what`` that process ``pid`` opened."""
    return StorageError(
        f"{what} was opened in process {pid}, and this process ({os.getpid()}) is a fork of it: "
        "its connections belong to the parent (shared, they would mix both processes' traffic "
        "to a server, or corrupt a SQLite file). Open the backend (or the MemoryStream) again "
        "in each process after the fork: e.g. in a multiprocessing worker's initializer or "
        "gunicorn's post_fork hook, or start workers with the 'spawn' method."
    )


class ProcessGuard:
    """Remembers the process that made it: :attr:`forked` in any other (a forked child).

    Args:
        what: what it guards, for the error ("the memory file ...").
        guard: ``False`` never reports a fork (e.g. an in-memory store, which is the child's
            own copy).
    """

    __slots__ = ("guard", "pid", "what")

    def __init__(self, what: str, *, guard: bool = True) -> None:
        self.what = what
        self.guard = guard
        self.pid = os.getpid()

    @property
    def forked(self) -> bool:
        """Whether this is a forked child of the process that made the guard (when guarded)."""
        return self.guard and os.getpid() != self.pid

    def check(self) -> None:
        """Raise :func:`opened_in_parent`'s error in a forked child (when guarded)."""
        if self.forked:
            raise opened_in_parent(self.what, self.pid)


class ProcessLock:
    """A re-entrant lock that, in a forked child of the process that made it, raises
    :func:`opened_in_parent`'s error instead of waiting for it (with ``guard``).

    Args:
        what: what the lock guards, for the error ("the memory file ...").
        guard: refuse in a forked child (``False``: a plain re-entrant lock, e.g. for an
            in-memory store, which is the child's own copy).
    """

    __slots__ = ("_lock", "process")

    def __init__(self, what: str, *, guard: bool = True) -> None:
        self._lock = threading.RLock()
        self.process = ProcessGuard(what, guard=guard)
        """The process that made the lock (:attr:`ProcessGuard.forked`)."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.process.check()
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()
