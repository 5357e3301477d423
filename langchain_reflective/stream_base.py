"""The plain half of a memory stream: lifecycle, namespaces, and the reads, deletes and
reflection counter it passes to its backend (validated, never another namespace's); and the
drivers of the stream's flows (:func:`_run`, :func:`_arun`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
from collections.abc import Callable, Generator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from langchain_core.embeddings import Embeddings

from langchain_reflective._closing import Closing
from langchain_reflective.backends.base import BaseMemoryBackend, ReflectionState
from langchain_reflective.errors import InvalidMemoryError, StorageError
from langchain_reflective.records import MemoryRecord, check_identifier, utc
from langchain_reflective.scoring import ScoringConfig

if TYPE_CHECKING:
    from langchain_reflective.backends.sqlite import BaseRecordStore, SQLiteBackend

__all__ = ["StreamBase"]

_BackendCall = tuple[str, tuple[Any, ...], dict[str, Any]]
"""A backend call planned by a stream method: ``(name, args, kwargs)`` for
``backend.<name>(*args, **kwargs)`` (``a<name>`` in the async twin)."""


_Call = tuple[Any, str, tuple[Any, ...], Mapping[str, Any] | None]
"""One call a flow needs: ``(target, name, args, kwargs)`` for ``target.name(*args, **kwargs)``
(``a<name>`` when async). A plain tuple: a flow yields one per step of every add and
retrieval, and a ``NamedTuple``'s constructor is a Python-level call."""

_Flow = Generator[_Call, Any, Any]


def _run(flow: _Flow) -> Any:
    """Drive a flow with sync calls."""
    send = flow.send
    try:
        target, name, args, kwargs = next(flow)
        while True:
            method = getattr(target, name)
            result = method(*args, **kwargs) if kwargs else method(*args)
            target, name, args, kwargs = send(result)
    except StopIteration as done:
        return done.value


_LANDING = frozenset({"put", "replace"})
"""The backend writes of the flows that, once started, run on when their caller is cancelled."""

Landed = asyncio.Future[Any] | concurrent.futures.Future[Any]
"""A future done once a write has landed (or never will): the thread's own future when the
write runs in a worker thread, else the task running it."""

WRITE_STARTED: contextvars.ContextVar[Callable[[Landed], None] | None] = contextvars.ContextVar(
    "reflective_write_started", default=None
)
"""Set by a caller that keeps order itself (``ReflectiveStore`` holds its namespace until a
cancelled write has landed): called with each store write's :data:`Landed` future as it
starts, and a cancellation then goes on at once instead of waiting for the write (see
:func:`_arun`)."""


async def _arun(flow: _Flow) -> Any:
    """Drive a flow with the async twins of the same calls.

    A cancelled run stops at once while it waits for a model: nothing is written. Once a
    store's write (:data:`_LANDING`) has started it runs on (in its worker thread, or on the
    server), and the cancellation waits for it to finish, so a caller that cancelled an add
    (``asyncio.wait_for``) and writes again never has the older write land after the newer
    one; unless :data:`WRITE_STARTED` hands the write to a caller that keeps order itself.
    """
    try:
        call = next(flow)
        while True:
            target, name, args, kwargs = call
            if name in _LANDING:
                result = await _landing(target, name, args, kwargs or {})
            else:
                result = await getattr(target, "a" + name)(*args, **(kwargs or {}))
            call = flow.send(result)
    except StopIteration as done:
        return done.value


async def _landing(target: Any, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """``await target.a<name>(*args, **kwargs)``, which a cancellation does not stop (see
    :func:`_arun`); a second cancellation stops the wait for it, not the write.

    Handed to a caller (:data:`WRITE_STARTED`), a backend's default async twin (the sync
    method in a worker thread) runs through :func:`in_worker_thread`, so the caller's
    :data:`Landed` future is the thread's: the event loop's teardown cancels the task that
    awaits the thread, not the thread itself."""
    handed = WRITE_STARTED.get()
    method = getattr(target, "a" + name)
    if handed is not None and getattr(method, "__func__", None) is getattr(
        BaseMemoryBackend, "a" + name, None
    ):
        landed: concurrent.futures.Future[Any] = concurrent.futures.Future()
        task = asyncio.ensure_future(in_worker_thread(landed, getattr(target, name), args, kwargs))
        handed(landed)
    else:
        task = asyncio.ensure_future(method(*args, **kwargs))
        if handed is not None:
            handed(task)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if handed is not None:
            task.add_done_callback(_retrieved)  # (nobody awaits it now)
        elif not task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(task)
        raise


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def in_worker_thread(
    landed: concurrent.futures.Future[Any],
    function: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
) -> Any:
    """``await asyncio.to_thread(function, *args, **kwargs)``, with ``landed`` done (result,
    exception, or cancelled if the call never started) once the call has ended in its thread.

    Cancelling the awaiting task (as ``asyncio.run`` does to every task left when its coroutine
    returns) does not stop a call already running in its thread: ``landed`` is then done when
    that call returns, and is the future to wait on for the write to have landed."""

    def run() -> Any:
        if not landed.set_running_or_notify_cancel():
            return None  # (cancelled before it started: it never runs)
        try:
            result = function(*args, **(kwargs or {}))
        except BaseException as exc:
            landed.set_exception(exc)
            raise
        landed.set_result(result)
        return result

    try:
        return await asyncio.to_thread(run)
    except BaseException:
        landed.cancel()  # (refused once the call runs: then done when it returns)
        raise


class StreamBase(Closing):
    """What :class:`~langchain_reflective.stream.MemoryStream` does besides its two flows."""

    embeddings: Embeddings
    """The embedding model."""
    namespace: str
    """The default namespace for reads and writes."""
    scoring: ScoringConfig
    """How retrieval ranks memories (per call: ``scoring=``)."""
    embedding_model: str
    """The identity stored with the memories."""
    path: Path | None
    """The SQLite file of the ``path=`` shortcut (``None`` otherwise)."""
    _backend: BaseMemoryBackend
    _closed: bool

    # -- lifecycle -----------------------------------------------------------------------------

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        """The stream itself: it is a handle on its storage (an open file or a connection
        pool), so a deep copy of what holds it (``retriever.model_copy(deep=True)``,
        ``copy.deepcopy``) shares it, as a copy of a database connection would."""
        return self

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a {type(self).__name__} holds an open file or database connection and cannot be "
            "serialized; pass the file path or connection string and open a stream where it is "
            "needed"
        )

    def close(self) -> None:
        """Close the backend (the SQLite backend writes its vector-index caches). Idempotent.

        In async code use :meth:`aclose` (or ``async with``): a backend's async connections
        belong to the event loop that opened them, and only a coroutine running in that loop
        can close them."""
        if self._closed:
            return
        self._closed = True
        self._backend.close()

    async def aclose(self) -> None:
        """Async twin of :meth:`close`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._backend.aclose()

    @property
    def backend(self) -> BaseMemoryBackend:
        """Where the memories live."""
        return self._backend

    @property
    def store(self) -> BaseRecordStore:
        """The SQLite backend's record layer (only with the SQLite backend)."""
        store: BaseRecordStore | None = getattr(self._backend, "store", None)
        if store is None:
            raise AttributeError(f"{type(self._backend).__name__} has no SQLite record store")
        return store

    def _sqlite(self) -> SQLiteBackend:
        from langchain_reflective.backends.sqlite import SQLiteBackend

        if not isinstance(self._backend, SQLiteBackend):
            raise AttributeError("only the SQLite backend has exact_limit / ann_* settings")
        return self._backend

    @property
    def exact_limit(self) -> int | None:
        """The SQLite backend's ``exact_limit`` (settable)."""
        return self._sqlite().exact_limit

    @exact_limit.setter
    def exact_limit(self, value: int | None) -> None:
        self._sqlite().exact_limit = value

    @property
    def ann_candidates(self) -> int:
        """The SQLite backend's ``ann_candidates``."""
        return self._sqlite().ann_candidates

    @property
    def ann_nprobe(self) -> int:
        """The SQLite backend's ``ann_nprobe``."""
        return self._sqlite().ann_nprobe

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("the memory stream is closed")

    def resolve_namespace(self, namespace: str | None = None) -> str:
        """The namespace a call with ``namespace`` reads or writes (default: the stream's).

        Raises:
            InvalidMemoryError: an empty or non-string namespace.
        """
        return self._ns(namespace)

    def _ns(self, namespace: str | None, *, writing: bool = False) -> str:
        """The namespace a call reads (or, ``writing``, stores into), checked; only a write
        holds it to the length limit (older files may hold longer namespaces)."""
        ns = self.namespace if namespace is None else namespace
        if not isinstance(ns, str) or not ns:
            raise InvalidMemoryError("namespace must be a non-empty string")
        return check_identifier(ns, "namespace", writing=writing)

    # -- reads and deletes ---------------------------------------------------------------------
    #
    # Each call below is planned once (``_plan_*``: the checks, then the backend method and its
    # arguments); the sync method performs the plan with the backend's method, its async twin
    # awaits the backend's ``a*`` twin of the same method.

    def _call(self, plan: _BackendCall) -> Any:
        name, args, kwargs = plan
        return getattr(self._backend, name)(*args, **kwargs)

    async def _acall(self, plan: _BackendCall) -> Any:
        name, args, kwargs = plan
        return await getattr(self._backend, "a" + name)(*args, **kwargs)

    @staticmethod
    def _ids(ids: object) -> list[str]:
        """One id or a sequence of ids, as a list of strings.

        Raises:
            InvalidMemoryError: anything else (numbers, ``None``, mappings, ...).
        """
        if isinstance(ids, str):
            ids = [ids]
        if isinstance(ids, Sequence | set | frozenset) and all(isinstance(i, str) for i in ids):
            return [check_identifier(i, "id", writing=False) for i in ids]
        raise InvalidMemoryError(
            f"ids must be a string or a sequence of strings, got {type(ids).__name__}"
        )

    def _plan_ids(self, name: str, ids: object, namespace: str | None) -> _BackendCall:
        self._check_open()
        return name, (self._ns(namespace), self._ids(ids)), {}

    def get(self, ids: str | Sequence[str], *, namespace: str | None = None) -> list[MemoryRecord]:
        """Records with these ids in the namespace, in the order given (unknown ids skipped)."""
        found: list[MemoryRecord] = self._call(self._plan_ids("get", ids, namespace))
        return found

    async def aget(
        self, ids: str | Sequence[str], *, namespace: str | None = None
    ) -> list[MemoryRecord]:
        """Async twin of :meth:`get`."""
        found: list[MemoryRecord] = await self._acall(self._plan_ids("get", ids, namespace))
        return found

    def _kinds(self, kinds: Sequence[str] | None) -> list[str] | None:
        if kinds is None:
            return None
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if not all(isinstance(k, str) and k for k in kinds):
            raise InvalidMemoryError("kinds must be non-empty strings")
        return [check_identifier(k, "kind", writing=False) for k in kinds]

    def _plan_recent(
        self,
        n: int | None,
        namespace: str | None,
        kinds: Sequence[str] | None,
        since_last_reflection: bool,
    ) -> _BackendCall:
        self._check_open()
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise InvalidMemoryError(f"n must be a non-negative integer or None, got {n!r}")
        ns = self._ns(namespace)
        kwargs = {
            "n": n,
            "kinds": self._kinds(kinds),
            "since_last_reflection": since_last_reflection,
        }
        return "recent", (ns,), kwargs

    def recent(
        self,
        n: int | None = None,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        since_last_reflection: bool = False,
    ) -> list[MemoryRecord]:
        """The newest ``n`` records (all when ``None``), oldest first.

        Args:
            n: how many.
            namespace: which namespace (default: the stream's).
            kinds: only these kinds.
            since_last_reflection: only records added after the last reflection.

        Raises:
            InvalidMemoryError: a negative or non-integer ``n``, a bad namespace or kind.
        """
        plan = self._plan_recent(n, namespace, kinds, since_last_reflection)
        found: list[MemoryRecord] = self._call(plan)
        return found

    async def arecent(
        self,
        n: int | None = None,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        since_last_reflection: bool = False,
    ) -> list[MemoryRecord]:
        """Async twin of :meth:`recent`."""
        plan = self._plan_recent(n, namespace, kinds, since_last_reflection)
        found: list[MemoryRecord] = await self._acall(plan)
        return found

    def _plan_most_important(
        self, n: int, namespace: str | None, kinds: Sequence[str] | None
    ) -> _BackendCall:
        self._check_open()
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidMemoryError(f"n must be a non-negative integer, got {n!r}")
        return "most_important", (self._ns(namespace), n), {"kinds": self._kinds(kinds)}

    def most_important(
        self,
        n: int,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[MemoryRecord]:
        """The ``n`` most important records (most important first; newer first among equals).

        One indexed query, however many records the namespace holds (the working context asks
        for the top insights before every model call).

        Raises:
            InvalidMemoryError: a negative or non-integer ``n``, a bad namespace or kind.
        """
        found: list[MemoryRecord] = self._call(self._plan_most_important(n, namespace, kinds))
        return found

    async def amost_important(
        self,
        n: int,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[MemoryRecord]:
        """Async twin of :meth:`most_important`."""
        plan = self._plan_most_important(n, namespace, kinds)
        found: list[MemoryRecord] = await self._acall(plan)
        return found

    def delete(self, ids: str | Sequence[str], *, namespace: str | None = None) -> int:
        """Delete records by id; return how many were deleted."""
        deleted: int = self._call(self._plan_ids("delete", ids, namespace))
        return deleted

    async def adelete(self, ids: str | Sequence[str], *, namespace: str | None = None) -> int:
        """Async twin of :meth:`delete`."""
        deleted: int = await self._acall(self._plan_ids("delete", ids, namespace))
        return deleted

    def discard_pending(self, ids: str | Sequence[str], *, namespace: str | None = None) -> int:
        """Remove queued memories by id without storing them; return how many were removed.

        For a memory that can never be completed (e.g. one the embedding model always refuses;
        see ``ReflectiveMemory.quarantined``). Ids of other namespaces and ids no longer
        queued are ignored.
        """
        removed: int = self._call(self._plan_ids("discard_pending", ids, namespace))
        return removed

    async def adiscard_pending(
        self, ids: str | Sequence[str], *, namespace: str | None = None
    ) -> int:
        """Async twin of :meth:`discard_pending`."""
        removed: int = await self._acall(self._plan_ids("discard_pending", ids, namespace))
        return removed

    def _plan_namespace(self, name: str, namespace: str | None) -> _BackendCall:
        self._check_open()
        return name, (self._ns(namespace),), {}

    def purge(self, *, namespace: str | None = None) -> int:
        """Delete every memory of a namespace and reset its reflection counter."""
        deleted: int = self._call(self._plan_namespace("purge", namespace))
        return deleted

    async def apurge(self, *, namespace: str | None = None) -> int:
        """Async twin of :meth:`purge`."""
        deleted: int = await self._acall(self._plan_namespace("purge", namespace))
        return deleted

    def count(self, *, namespace: str | None = None) -> int:
        """Number of memories in a namespace (default: the stream's)."""
        counted: int = self._call(self._plan_namespace("count", namespace))
        return counted

    async def acount(self, *, namespace: str | None = None) -> int:
        """Async twin of :meth:`count`."""
        counted: int = await self._acall(self._plan_namespace("count", namespace))
        return counted

    def __len__(self) -> int:
        return self.count()

    def _plan_namespaces(self) -> _BackendCall:
        self._check_open()
        return "namespaces", (), {}

    def namespaces(self) -> list[str]:
        """Namespaces that hold memories (for administration; reads stay per namespace)."""
        names: list[str] = self._call(self._plan_namespaces())
        return names

    async def anamespaces(self) -> list[str]:
        """Async twin of :meth:`namespaces`."""
        names: list[str] = await self._acall(self._plan_namespaces())
        return names

    # -- reflection counter --------------------------------------------------------------------

    def reflection_state(self, namespace: str | None = None) -> ReflectionState:
        """The persisted importance sum / add count since the last reflection."""
        state: ReflectionState = self._call(self._plan_namespace("reflection_state", namespace))
        return state

    async def areflection_state(self, namespace: str | None = None) -> ReflectionState:
        """Async twin of :meth:`reflection_state`."""
        plan = self._plan_namespace("reflection_state", namespace)
        state: ReflectionState = await self._acall(plan)
        return state

    def _plan_mark_reflected(
        self, namespace: str | None, now: datetime | None, consumed: ReflectionState | None
    ) -> _BackendCall:
        self._check_open()
        when = utc(now) if now is not None else datetime.now(UTC)
        return "mark_reflected", (self._ns(namespace, writing=True), when, consumed), {}

    def mark_reflected(
        self,
        *,
        namespace: str | None = None,
        now: datetime | None = None,
        consumed: ReflectionState | None = None,
    ) -> None:
        """Reset the reflection counter of a namespace; with ``consumed`` (the counter as a
        reflection read it before it began) take off only that much, so memories stored while
        it ran keep counting.

        Raises:
            ReflectionConflictError: ``consumed`` carries a ``generation`` and another reset
                came since it was read; nothing was written.
        """
        self._call(self._plan_mark_reflected(namespace, now, consumed))

    async def amark_reflected(
        self,
        *,
        namespace: str | None = None,
        now: datetime | None = None,
        consumed: ReflectionState | None = None,
    ) -> None:
        """Async twin of :meth:`mark_reflected`."""
        await self._acall(self._plan_mark_reflected(namespace, now, consumed))
