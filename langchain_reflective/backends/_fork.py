"""What a forked child may do with a backend its parent opened: nothing but drop it.

A forked child shares its parent's sockets and file descriptors. A Postgres connection used by
both processes mixes their messages (one can read the other's rows, of any namespace), and
closing it in the child ends the parent's session; SQLite forbids carrying a connection to a
file across ``fork()`` (it can corrupt the file). So a backend remembers the process that
opened it: in any other process every use raises :func:`opened_in_parent`'s error, and
``close()`` only forgets it (the parent's connections, files and threads are left alone).
"""

from __future__ import annotations

import os

from langchain_reflective.errors import StorageError

__all__ = ["opened_in_parent"]


def opened_in_parent(what: str, pid: int) -> StorageError:
    """The error for using, in process ``os.getpid()``, ``what`` that process ``pid`` opened."""
    return StorageError(
        f"{what} was opened in process {pid}, and this process ({os.getpid()}) is a fork of it: "
        "its connections belong to the parent (shared, they would mix both processes' traffic "
        "to a server, or corrupt a SQLite file). Open the backend (or the MemoryStream) again "
        "in each process after the fork: e.g. in a multiprocessing worker's initializer or "
        "gunicorn's post_fork hook, or start workers with the 'spawn' method."
    )
