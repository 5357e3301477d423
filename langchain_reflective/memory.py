"""``ReflectiveMemory``: a memory stream that reflects on its own, plus a working context.

It combines a :class:`~langchain_reflective.stream.MemoryStream`, the stream's importance
scorer and the reflection graph (:func:`~langchain_reflective.reflection.create_reflection_graph`):

* every :meth:`ReflectiveMemory.add` updates the namespace's persisted importance counter; when it
  reaches ``reflect_threshold`` (or every ``reflect_every`` adds) a reflection is scheduled in a
  background thread, so ``add`` returns without waiting for the LLM; at most one reflection runs
  per namespace at a time; failures are logged and kept in :attr:`ReflectiveMemory.errors`,
  and make writes skip the namespace's next reflections (8, doubled for each failure in a row,
  until one succeeds: :data:`~langchain_reflective._trigger.BACKOFF_FIRST`);
* :meth:`ReflectiveMemory.enqueue` is the write for a hot path (an agent's turn): it stores the
  texts durably as *pending* in one cheap commit, without embedding or rating them, and returns;
  a background drain completes pending memories in batches (see the guarantee below);
* :meth:`ReflectiveMemory.build_context` renders the working context for a prompt (seed 000's
  ``Context``): top insights, recent observations (low-importance ones left out, never deleted;
  pending ones included), and memories retrieved for the current input, within a token budget,
  fenced as data.

The pending guarantee (``enqueue``):

* when ``enqueue`` returns, the memories are committed to the store's ``pending`` queue (in WAL
  mode with ``synchronous=NORMAL`` a process crash never loses a committed write; power loss
  needs ``synchronous="FULL"``);
* a background drain embeds them (one embedding call per batch of up to ``drain_batch``), rates
  the unrated ones (one importance batch) and moves them into the memories *under the same ids*
  in one transaction per namespace: a memory is either pending or stored, never both, never
  neither, and never stored twice (another process completing it first is detected);
* a pending memory is in the working context's recent observations at once, but retrieval
  (``retrieve``, ``build_context``'s relevant memories, the recall tool) finds it only once it is
  stored; the reflection counter counts it once it is stored;
* if the process stops first, the next ``ReflectiveMemory`` opened on the file completes the
  leftovers in the background; a batch that fails (e.g. the embedding service is down) stays
  queued, is recorded in :attr:`ReflectiveMemory.errors` and is retried at the next ``enqueue``,
  ``flush`` or open;
* one memory that always fails (one the embedding model refuses, one a strict rater cannot rate)
  does not hold up the others, whoever's they are: once the models are seen to work on one other
  memory (embedded and rated, not stored), a failing batch is halved until the failing memory is
  alone and the rest are stored; after ``MemoryConfig.drain_max_attempts`` drains in which it
  failed alone it is quarantined -- still pending, skipped by this process's drains, listed in
  :attr:`ReflectiveMemory.quarantined` (see ``retry_quarantined``, ``discard_quarantined``). When
  nothing completes (an outage), no memory is blamed;
* ``flush()`` waits until nothing is pending and no reflection runs; ``close()`` flushes (up to
  ``shutdown_timeout``) and leaves whatever is still pending in the file for the next open.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langchain_reflective._at_exit import drain_at_exit as _drain_at_exit  # noqa: F401 (tests)
from langchain_reflective._at_exit import track, untrack
from langchain_reflective._background import PendingDrainer
from langchain_reflective._closing import Closing
from langchain_reflective._failures import ERRORS_KEPT, FailureLog  # noqa: F401 (its home once)
from langchain_reflective._trigger import ReflectionTrigger
from langchain_reflective.backends._fork import ProcessGuard
from langchain_reflective.errors import StorageError
from langchain_reflective.memory_config import MemoryConfig, QuarantinedMemory, ReflectionFailure
from langchain_reflective.pending_drain import PendingDrain
from langchain_reflective.records import MemoryRecord
from langchain_reflective.stream import MemoryStream, RetrievalFilter, ScoredMemory
from langchain_reflective.working_context import (
    MEMORY_FENCE_CLOSE,
    MEMORY_FENCE_OPEN,
    MEMORY_PREAMBLE,
    context_window,
    render_working_context,
)

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph.state import CompiledStateGraph

    from langchain_reflective.reflection.config import ReflectionConfig

__all__ = [
    "MEMORY_FENCE_CLOSE",
    "MEMORY_FENCE_OPEN",
    "MEMORY_PREAMBLE",
    "MemoryConfig",
    "QuarantinedMemory",
    "ReflectionFailure",
    "ReflectiveMemory",
]

logger = logging.getLogger(__name__)


def _warn_unused_threshold(reflection: ReflectionConfig | None, config: MemoryConfig) -> None:
    """Warn about a graph threshold the memory would silently ignore: it reflects on its own
    triggers and runs the graph forced (which skips the graph's threshold)."""
    if reflection is None:
        return
    threshold, default = reflection.threshold, type(reflection)().threshold
    if threshold not in (default, config.reflect_threshold):
        warnings.warn(
            f"ReflectionConfig.threshold={threshold!r} does not decide when ReflectiveMemory "
            "reflects: it reflects when the importance summed since the last reflection reaches "
            f"MemoryConfig.reflect_threshold ({config.reflect_threshold!r}; or every "
            "reflect_every adds) and runs the graph forced; set "
            f"MemoryConfig(reflect_threshold={threshold!r}) instead",
            UserWarning,
            stacklevel=3,
        )


class ReflectiveMemory(Closing):
    """A memory stream that reflects in the background and renders a working context.

    Args:
        model: the chat model for reflection (a ``BaseChatModel`` or a ``"provider:model"``
            string); ``None`` stores and retrieves only (``reflect`` raises).
        stream: the memory stream.
        config: triggers, capacities and the context budget.
        reflection: settings of the reflection graph (questions, evidence, prompts, ...).
        graph_kwargs: extra keyword arguments for ``create_reflection_graph`` (e.g. prompts).

    Raises:
        TypeError: ``stream`` is not a :class:`~langchain_reflective.stream.MemoryStream`.
        StorageError: the memory's file or database cannot be read (its pending queue is
            checked at once, to complete memories a stopped process left queued).

    Example:
        .. code-block:: python

            memory = ReflectiveMemory(model, MemoryStream(embeddings, path="memory.db"))
            memory.add("Alice said she is moving to Lisbon in May", namespace="alice")
            print(memory.build_context("Where will Alice live?", namespace="alice"))
            memory.flush()  # wait for background reflections
            memory.close()
    """

    def __init__(
        self,
        model: str | BaseChatModel | None,
        stream: MemoryStream,
        *,
        config: MemoryConfig | None = None,
        reflection: ReflectionConfig | None = None,
        graph_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(stream, MemoryStream):
            raise TypeError(f"stream must be a MemoryStream, got {type(stream).__name__}")
        self.stream = stream
        self.config = config or MemoryConfig()
        self.model = model
        self.reflection_config = reflection
        self._graph_kwargs = dict(graph_kwargs or {})
        _warn_unused_threshold(self._graph_kwargs.get("config") or reflection, self.config)
        self._graph: CompiledStateGraph[Any, Any, Any, Any] | None = None
        self._graph_lock = threading.Lock()
        self._failures = FailureLog(self.config)
        self._trigger = ReflectionTrigger(
            stream,
            self.config,
            can_reflect=lambda: self.model is not None,
            reflect=lambda namespace: self.reflect(namespace=namespace, force=True),
            areflect=lambda namespace: self.areflect(namespace=namespace, force=True),
            failed=lambda ns, exc, detail: self._failures.record(ns, exc, detail=detail),
        )
        self._drainer = PendingDrainer(self._drain)
        self._process = ProcessGuard("this ReflectiveMemory")
        """The process whose threads do the background work (a forked child has none)."""
        self.errors: list[ReflectionFailure] = self._failures.errors
        """The newest :data:`ERRORS_KEPT` background failures (reflections, pending batches),
        oldest first (each also logged as one line)."""
        self._queue = PendingDrain(
            stream, self.config, stored=self._trigger.after_write, failed=self._drain_failed
        )
        track(self)
        if self._pending_count():  # left by a process that stopped first
            self._start_drain()

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Complete pending memories and wait for background reflections (together up to
        ``shutdown_timeout``), then close the stream. Memories still pending stay in the file
        and are completed at the next open."""
        self.flush(timeout=self.config.shutdown_timeout)
        self.stream.close()
        untrack(self)

    async def aclose(self) -> None:
        """Async twin of :meth:`close`, for async code (an async agent, a LangGraph server):
        the stream's backend may hold async connections of this event loop (the Postgres
        backend does), which only a coroutine running in it can close; a plain :meth:`close`
        there leaves them open and warns."""
        await self.aflush(timeout=self.config.shutdown_timeout)
        await self.stream.aclose()
        untrack(self)

    # -- reflection ----------------------------------------------------------------------------

    @property
    def graph(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The compiled reflection graph (built on first use)."""
        if self.model is None:
            raise ValueError(
                "this ReflectiveMemory has no model, so it cannot reflect; pass a chat model"
            )
        with self._graph_lock:
            if self._graph is None:
                from langchain_reflective.reflection import create_reflection_graph

                kwargs = dict(self._graph_kwargs)
                # reflect() from a checkpointed graph's node or tool: the caller's checkpointer
                # would save the run's state (memory texts) where purge() cannot reach it
                kwargs.setdefault("checkpointer", False)
                if self.reflection_config is not None:
                    kwargs.setdefault("config", self.reflection_config)
                self._graph = create_reflection_graph(self.model, self.stream, **kwargs)
            return self._graph

    def _graph_input(
        self, namespace: str | None, force: bool, now: datetime | None
    ) -> dict[str, Any]:
        return {"force": force, "namespace": self.stream.resolve_namespace(namespace), "now": now}

    def _run_config(self, namespace: str, config: RunnableConfig | None) -> RunnableConfig:
        from langchain_core.runnables.config import ensure_config, merge_configs

        # no tags: the graph carries its own (create_reflection_graph), and LangGraph records
        # a tag given by both the graph's and the call's config twice
        ours: RunnableConfig = {"run_name": "reflection", "metadata": {"namespace": namespace}}
        return merge_configs(ensure_config(config), ours) if config else ours

    def reflect(
        self,
        *,
        namespace: str | None = None,
        force: bool = True,
        now: datetime | None = None,
        config: RunnableConfig | None = None,
    ) -> list[MemoryRecord]:
        """Reflect now (in the caller's thread) and return the stored insights.

        Args:
            namespace: whose memories (default: the stream's namespace).
            force: reflect even when the namespace is not due; ``False``: only when it has
                reached this memory's triggers (``MemoryConfig.reflect_threshold`` or
                ``reflect_every``), else return ``[]``.
            now: the clock for the stored reflections.
            config: a runnable config for the graph run (callbacks, tags, metadata).

        Raises:
            ReflectionError: the reflection failed; nothing was written.
        """
        inputs = self._graph_input(namespace, force, now)
        graph = self.graph
        # at most one reflection of a namespace at a time, across threads and processes
        with self.stream.backend.reflection_lock(inputs["namespace"]):
            # a background run whose counter another reflection has just reset, or force=False
            # below this memory's own triggers (MemoryConfig, not the graph's default threshold)
            if (self._trigger.rechecks or not force) and not self._trigger.due(inputs["namespace"]):
                return []
            inputs["force"] = True
            out = graph.invoke(inputs, config=self._run_config(inputs["namespace"], config))
        self._trigger.succeeded(inputs["namespace"])  # (ends a backoff after failures)
        return list(out.get("reflections", []))

    async def areflect(
        self,
        *,
        namespace: str | None = None,
        force: bool = True,
        now: datetime | None = None,
        config: RunnableConfig | None = None,
    ) -> list[MemoryRecord]:
        """Async twin of :meth:`reflect`."""
        inputs = self._graph_input(namespace, force, now)
        # the first use compiles the graph, which reads the nodes' source files (LangChain
        # inspects them): in a worker thread, like the method's other file and database access
        graph = self._graph
        if graph is None:
            graph = await asyncio.to_thread(lambda: self.graph)
        ns = inputs["namespace"]
        async with self.stream.backend.areflection_lock(ns):
            # as reflect: an aadd's inline run (rechecks), or force=False below the triggers
            if (self._trigger.rechecks or not force) and not await asyncio.to_thread(
                self._trigger.due, ns
            ):
                return []
            inputs["force"] = True
            out = await graph.ainvoke(inputs, config=self._run_config(ns, config))
        self._trigger.succeeded(ns)
        return list(out.get("reflections", []))

    def flush(self, timeout: float | None = None) -> bool:
        """Complete pending memories, then wait for background reflections.

        Starts a drain pass if memories are pending (so a batch that failed earlier is retried
        once; quarantined memories are skipped), waits for it and for the reflections it may
        start, all within ``timeout``.

        Returns:
            ``True`` when nothing is pending (in this memory's file) and no reflection runs.
            Quarantined memories are pending: while there are any (:attr:`quarantined`) this is
            ``False``. Failures do not raise here: they are in :attr:`errors` (and the log).
            In a forked child of the process that made this memory, ``False`` at once: the
            background work is the parent's (its threads are not in the child, and its stream
            cannot be used there), so there is nothing to wait for.
        """
        if self._process.forked:
            return False
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        if self._pending_count():
            self._start_drain()
        drained = self._drainer.wait(left())
        reflected = self._trigger.wait(left())
        return drained and reflected and not self._pending_count()

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async twin of :meth:`flush`."""
        return await asyncio.to_thread(self.flush, timeout)

    # -- pending memories ----------------------------------------------------------------------

    def _pending_count(self) -> int:
        """Pending memories in the file; 0 once the stream was closed (nothing to drain)."""
        try:
            return self.stream.backend.count_pending()
        except StorageError:
            return 0

    def _start_drain(self) -> None:
        if self.config.background:
            self._drainer.kick()
        else:
            self._drain()

    def _drain(self) -> None:
        """One pass over the pending queue (:meth:`~langchain_reflective.pending_drain.
        PendingDrain.run`); runs on the drain thread, or inline with ``background=False``."""
        self._queue.run()

    def _drain_failed(self, namespace: str, exc: Exception, what: str | None, level: int) -> None:
        self._failures.record(namespace, exc, "pending", what, level)

    @property
    def quarantined(self) -> list[QuarantinedMemory]:
        """Pending memories this process's drains skip because they kept failing on their own
        (see :attr:`MemoryConfig.drain_max_attempts`), oldest quarantine first.

        They are still pending (counted by ``count_pending``, so :meth:`flush` returns
        ``False`` while they are there). Try them again with :meth:`retry_quarantined` (e.g.
        after fixing the embedding model) or drop them with :meth:`discard_quarantined`.
        """
        return self._queue.quarantined()

    def retry_quarantined(
        self, ids: str | Sequence[str] | None = None, *, namespace: str | None = None
    ) -> int:
        """Release quarantined memories with a fresh attempt count and start a drain; return
        how many were released.

        Args:
            ids: these ids only (default: every quarantined memory).
            namespace: only this namespace's (default: every namespace's; a quarantined
                memory's id is unique only within its namespace, so pass the namespace when
                acting for one user).
        """
        released = self._queue.release(ids, namespace)
        if released and self._pending_count():
            self._start_drain()
        return released

    def discard_quarantined(
        self, ids: str | Sequence[str] | None = None, *, namespace: str | None = None
    ) -> int:
        """Remove quarantined memories from the pending queue for good, without storing them;
        return how many were removed.

        Args:
            ids: these ids only (default: every quarantined memory).
            namespace: only this namespace's (default: every namespace's; a quarantined
                memory's id is unique only within its namespace, so pass the namespace when
                acting for one user).
        """
        return self._queue.discard(ids, namespace)

    async def aretry_quarantined(
        self, ids: str | Sequence[str] | None = None, *, namespace: str | None = None
    ) -> int:
        """Async twin of :meth:`retry_quarantined` (in a worker thread: it reads the queue,
        and with ``background=False`` drains it)."""
        return await asyncio.to_thread(self.retry_quarantined, ids, namespace=namespace)

    async def adiscard_quarantined(
        self, ids: str | Sequence[str] | None = None, *, namespace: str | None = None
    ) -> int:
        """Async twin of :meth:`discard_quarantined` (the delete runs in a worker thread)."""
        return await asyncio.to_thread(self.discard_quarantined, ids, namespace=namespace)

    def enqueue(
        self,
        texts: str | Sequence[str],
        *,
        namespace: str | None = None,
        kinds: str | Sequence[str] = "observation",
        importances: float | Sequence[float | None] | None = None,
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        now: datetime | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        """Store memories durably as *pending* and return at once (the hot-path write).

        One commit of the texts, no embedding and no LLM call; a background drain embeds and
        rates them in batches and stores them under the returned ids, then maybe reflects. See
        the module docs for the exact guarantee. With ``background=False`` the drain runs before
        this returns (as :meth:`add` would). A memory the models keep refusing on its own is
        quarantined after ``drain_max_attempts`` drains instead of holding up the queue (see
        :attr:`quarantined`); the others are completed.

        Args:
            texts: one text or many.
            namespace: whose memories (default: the stream's).
            kinds: the kind per text (or one for all).
            importances: importance in [0, 1] per text (or one for all); ``None`` entries are
                rated by the stream's importance scorer when they are completed.
            metadatas: JSON-serialisable metadata per text (or one for all).
            now: creation time of the memories (default: the current time).
            ids: the memories' ids, one per text (default: new ones).

        Returns:
            The ids the memories have now (pending) and keep once stored.

        Raises:
            InvalidMemoryError: bad text, kind, importance, metadata or id (nothing is queued).
            DuplicateIdError: an id is queued or stored in the namespace already (nothing is
                queued).
        """
        items = self.stream.enqueue(
            texts,
            namespace=namespace,
            kinds=kinds,
            importances=importances,
            metadatas=metadatas,
            now=now,
            ids=ids,
        )
        if items:
            self._start_drain()
        return [item.id for item in items]

    async def aenqueue(
        self,
        texts: str | Sequence[str],
        *,
        namespace: str | None = None,
        kinds: str | Sequence[str] = "observation",
        importances: float | Sequence[float | None] | None = None,
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        now: datetime | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        """Async twin of :meth:`enqueue` (the commit runs in a worker thread)."""
        return await asyncio.to_thread(
            self.enqueue,
            texts,
            namespace=namespace,
            kinds=kinds,
            importances=importances,
            metadatas=metadatas,
            now=now,
            ids=ids,
        )

    @property
    def draining(self) -> bool:
        """Whether the background drain of pending memories is running."""
        return self._drainer.busy()

    @property
    def reflecting(self) -> bool:
        """Whether a background reflection is running."""
        return self._trigger.busy()

    # -- writes and reads ----------------------------------------------------------------------

    def add(
        self,
        texts: str | Sequence[str],
        *,
        namespace: str | None = None,
        kinds: str | Sequence[str] = "observation",
        importances: float | Sequence[float | None] | None = None,
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        now: datetime | None = None,
    ) -> list[MemoryRecord]:
        """Store memories, then maybe start a reflection (in the background by default).

        See :meth:`MemoryStream.add` for the arguments and errors.
        """
        records = self.stream.add(
            texts,
            namespace=namespace,
            kinds=kinds,
            importances=importances,
            metadatas=metadatas,
            now=now,
        )
        self._trigger.after_write(self.stream.resolve_namespace(namespace))
        return records

    async def aadd(
        self,
        texts: str | Sequence[str],
        *,
        namespace: str | None = None,
        kinds: str | Sequence[str] = "observation",
        importances: float | Sequence[float | None] | None = None,
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        now: datetime | None = None,
    ) -> list[MemoryRecord]:
        """Async twin of :meth:`add`."""
        records = await self.stream.aadd(
            texts,
            namespace=namespace,
            kinds=kinds,
            importances=importances,
            metadatas=metadatas,
            now=now,
        )
        await self._trigger.aafter_write(self.stream.resolve_namespace(namespace))
        return records

    def retrieve(
        self,
        query: str,
        *,
        k: int | None = None,
        namespace: str | None = None,
        filter: RetrievalFilter | Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> list[ScoredMemory]:
        """Retrieve memories (see :meth:`MemoryStream.retrieve`); ``k`` defaults to the config."""
        return self.stream.retrieve(
            query,
            k=self.config.retrieve_k if k is None else k,
            namespace=namespace,
            filter=filter,
            now=now,
        )

    async def aretrieve(
        self,
        query: str,
        *,
        k: int | None = None,
        namespace: str | None = None,
        filter: RetrievalFilter | Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> list[ScoredMemory]:
        """Async twin of :meth:`retrieve`."""
        return await self.stream.aretrieve(
            query,
            k=self.config.retrieve_k if k is None else k,
            namespace=namespace,
            filter=filter,
            now=now,
        )

    def purge(self, *, namespace: str | None = None) -> int:
        """Delete every memory of a namespace (after pending reflections finish)."""
        self.flush(timeout=self.config.shutdown_timeout)
        return self.stream.purge(namespace=namespace)

    async def apurge(self, *, namespace: str | None = None) -> int:
        """Async twin of :meth:`purge` (the wait and the delete run in a worker thread)."""
        return await asyncio.to_thread(self.purge, namespace=namespace)

    # -- working context -----------------------------------------------------------------------

    def context_parts(
        self,
        query: str | None = None,
        *,
        namespace: str | None = None,
        now: datetime | None = None,
    ) -> tuple[list[MemoryRecord], list[MemoryRecord], list[ScoredMemory]]:
        """What the working context is made of: top insights, recent observations (low
        importance left out) and the memories retrieved for ``query`` (touched, like any
        retrieval). :meth:`render_context` turns them into text."""
        insights, recent = context_window(self.stream, self.config, namespace)
        relevant: list[ScoredMemory] = []
        if query and query.strip() and self.config.retrieve_k:
            relevant = self.stream.retrieve(
                query, k=self.config.retrieve_k, namespace=namespace, now=now
            )
        return insights, recent, relevant

    async def acontext_parts(
        self,
        query: str | None = None,
        *,
        namespace: str | None = None,
        now: datetime | None = None,
    ) -> tuple[list[MemoryRecord], list[MemoryRecord], list[ScoredMemory]]:
        """Async twin of :meth:`context_parts`."""
        insights, recent = await asyncio.to_thread(
            context_window, self.stream, self.config, namespace
        )
        relevant: list[ScoredMemory] = []
        if query and query.strip() and self.config.retrieve_k:
            relevant = await self.stream.aretrieve(
                query, k=self.config.retrieve_k, namespace=namespace, now=now
            )
        return insights, recent, relevant

    def render_context(
        self,
        insights: Sequence[MemoryRecord],
        recent: Sequence[MemoryRecord],
        relevant: Sequence[ScoredMemory],
        *,
        system: str | None = None,
        budget: int | None = None,
    ) -> str:
        """Render the working context: system text, then the fenced memory block.

        Items are admitted in priority order (relevant memories, insights, recent observations)
        until the token budget (4 characters per token; ``budget``, default
        ``config.token_budget``) is spent; each memory appears once, and one longer than the
        whole budget is shown cut (see ``working_context.render_working_context``).
        """
        return render_working_context(
            insights,
            recent,
            relevant,
            system=system,
            budget=self.config.token_budget if budget is None else max(0, budget),
        )

    def build_context(
        self,
        query: str | None = None,
        *,
        namespace: str | None = None,
        system: str | None = None,
        now: datetime | None = None,
        budget: int | None = None,
    ) -> str:
        """The working context for a prompt (memory text fenced as data).

        Args:
            query: the current input; memories relevant to it are included.
            namespace: whose memories.
            system: system text placed before the memory block.
            now: the clock for retrieval.
            budget: token budget of the memory lines (default: ``config.token_budget``).
        """
        parts = self.context_parts(query, namespace=namespace, now=now)
        return self.render_context(*parts, system=system, budget=budget)

    async def abuild_context(
        self,
        query: str | None = None,
        *,
        namespace: str | None = None,
        system: str | None = None,
        now: datetime | None = None,
        budget: int | None = None,
    ) -> str:
        """Async twin of :meth:`build_context`."""
        parts = await self.acontext_parts(query, namespace=namespace, now=now)
        return self.render_context(*parts, system=system, budget=budget)
