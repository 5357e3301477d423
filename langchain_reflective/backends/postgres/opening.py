"""A backend opened off the event loop (``PostgresBackend.afrom_conn_string``), leaving nothing
open behind a caller cancelled meanwhile.

``from_conn_string`` connects once to check the server (up to the connect timeout when it does
not answer) and opens the pool, so its async twin runs it in a worker thread
(:func:`asyncio.to_thread`, as the backend's other twins without native async do). A thread
cannot be stopped, though: cancelled while it runs (a start-up timeout, a shutdown), the caller
would never get the backend the thread goes on to open, and its pool would stay open until the
garbage collector freed it, then be closed wherever that happened, on the event loop too. So
the opening is shielded from the cancellation, and the backend it opens after all is closed at
once, in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol, TypeVar

__all__ = ["opened_in_thread"]

logger = logging.getLogger(__name__)


class _Closable(Protocol):
    def close(self) -> None: ...


B = TypeVar("B", bound=_Closable)


async def opened_in_thread(open_backend: Callable[[], B]) -> B:
    """``open_backend()`` run in a worker thread; cancelled meanwhile, the backend it returns
    after all is closed in a worker thread (what it raises is dropped, as it would be)."""
    opening = asyncio.ensure_future(asyncio.to_thread(open_backend))
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        opening.add_done_callback(_close_unwanted)
        raise


def _close_unwanted(opening: asyncio.Future[B]) -> None:
    """The opening's callback once its caller has gone: close what it opened, off the loop."""
    if opening.cancelled() or opening.exception() is not None:
        return  # (cancelled too, by a loop shutting down: the backend's finalizer closes it)
    backend = opening.result()
    try:
        opening.get_loop().run_in_executor(None, backend.close)
    except RuntimeError:  # (the loop's executor is shut down: the finalizer closes it)
        logger.debug("could not close a backend opened for a cancelled caller", exc_info=True)
