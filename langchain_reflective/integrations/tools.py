"""Memory tools for agents: recall memories, save a memory, reflect now.

:func:`create_memory_tools` returns ``StructuredTool``\\ s (sync and async) bound to a
:class:`~langchain_reflective.memory.ReflectiveMemory`. Memory text in their output is fenced as
data (``<memory>...</memory>`` after a line saying it is not instructions), so a stored
"ignore previous instructions" stays a quote.

Whose memories a tool reads and writes (its *namespace*) is, in order:

1. the ``namespace`` given to :func:`create_memory_tools` (a fixed owner);
2. the run's context: ``runtime.context.<namespace_key>`` (attribute or mapping key) when the tool
   runs inside a LangGraph graph or a ``create_agent`` agent invoked with ``context=...``;
3. the run's config: ``config["configurable"][namespace_key]``;
4. the memory stream's default namespace (or an error with ``require_namespace=True``).

:func:`namespace_from_run` implements steps 2-3 and is shared with the agent middleware
(:func:`agent_run_namespace`).
"""

from __future__ import annotations

import contextlib
import contextvars
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.runnables.config import merge_configs
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import BaseModel, Field

from langchain_reflective.errors import InvalidMemoryError, ReflectiveError, StorageError
from langchain_reflective.importance import fence_block
from langchain_reflective.integrations.retriever import ReflectiveRetriever
from langchain_reflective.memory import MEMORY_FENCE_OPEN, MEMORY_PREAMBLE

if TYPE_CHECKING:
    from langchain_reflective.memory import ReflectiveMemory
    from langchain_reflective.records import MemoryRecord

__all__ = [
    "RecallMemoriesInput",
    "ReflectNowInput",
    "SaveMemoryInput",
    "create_memory_tools",
    "namespace_from_run",
]

_FENCE_TAG = MEMORY_FENCE_OPEN.strip("<>")
_MAX_RECALL_K = 50
_RECALL_K = 5
"""``recall_memories``' default ``k`` when ``MemoryConfig.retrieve_k`` is 0."""
_NOT_BLANK = r"\S"  # (a search: some character that is not whitespace)


def _current_run_context() -> Any:
    """The runtime context of the LangGraph run this code executes in, if any."""
    from langgraph.runtime import get_runtime

    try:
        runtime = get_runtime()
    except RuntimeError:  # not inside a runnable
        return None
    return getattr(runtime, "context", None)


def _namespace_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        if "/" in value:  # (an owner is one label of a ReflectiveStore namespace)
            raise ValueError(
                f"the run's memory owner {value!r} contains '/': ReflectiveStore reads "
                "'a/b' as its namespace ('a', 'b'), so this owner would read and write the "
                f"items of owner {value.split('/')[0]!r}; map such ids to ones without '/'"
            )
        if "%" in value:  # (ReflectiveStore escapes a label's '/' as '%2F', its '%' as '%25')
            raise ValueError(
                f"the run's memory owner {value!r} contains '%': ReflectiveStore stores the "
                "namespace ('a/b',) as 'a%2Fb', so such an owner could read and write the "
                "items of a store namespace with '/' in it; map such ids to ones without '%'"
            )
        return value or None
    if isinstance(value, int | uuid.UUID) and not isinstance(value, bool):
        return str(value)
    raise TypeError(
        f"the run's namespace must be a str, int or UUID, got {type(value).__name__}; "
        "pass the user id as a string"
    )


def namespace_from_run(
    key: str = "user_id",
    *,
    context: Any = None,
    config: Mapping[str, Any] | None = None,
) -> str | None:
    """The memory namespace named by a run, or ``None`` when the run names none.

    Looks at ``context`` first (``context.<key>`` or ``context[key]``; the runtime context of a
    LangGraph run, e.g. ``agent.invoke(..., context={"user_id": "alice"})``), then at
    ``config["configurable"][key]`` (e.g. ``config={"configurable": {"user_id": "alice"}}``).
    When ``config`` is ``None`` the current run's config is used (inside a runnable, tool or
    graph node) and its LangGraph runtime context, if any, stands in for ``context``.

    Args:
        key: the context attribute / configurable key holding the owner's id.
        context: a runtime context (dataclass, pydantic model, mapping or ``None``).
        config: a ``RunnableConfig``; defaults to the current one.

    Returns:
        The namespace (ints and UUIDs are converted to strings), or ``None`` (an empty
        string names no one either; the middleware's ``required=True`` refuses such runs).

    Raises:
        TypeError: the value is not a str, int or UUID (a bool is refused too: ``True``
            named the default namespace before, silently).
        ValueError: the value contains ``/``: a :class:`~langchain_reflective.ReflectiveStore`
            over the same stream reads ``"alice/notes"`` as the namespace ``("alice",
            "notes")``, so such an owner would reach owner ``alice``'s store items.
    """
    if config is None:
        config = ensure_config()
        if context is None:
            context = _current_run_context()
    configurable = config.get("configurable") or {}
    if context is not None:
        if isinstance(context, Mapping):
            found = _namespace_value(context.get(key))
        else:
            found = _namespace_value(getattr(context, key, None))
        if found is not None:
            return found
    return _namespace_value(configurable.get(key))


def agent_run_namespace(key: str, runtime: Any, *, required: bool, default: str) -> str:
    """The namespace of an agent middleware's current run: :func:`namespace_from_run` over
    ``runtime.context`` and the run's config, else ``default``.

    Raises:
        ValueError: ``required`` is set and the run names no owner.
    """
    context = runtime.context if runtime is not None else None
    ns = namespace_from_run(key, context=context, config=ensure_config())
    if ns is not None:
        return ns
    if required:
        raise ValueError(
            f"no memory owner for this run: invoke the agent with "
            f"context={{{key!r}: ...}} or config={{'configurable': {{{key!r}: ...}}}}"
        )
    return default


class RecallMemoriesInput(BaseModel):
    """Arguments of ``recall_memories``."""

    query: str = Field(
        min_length=1,
        pattern=_NOT_BLANK,
        description="What to look for in long-term memory, e.g. a topic, a person or a question.",
    )
    k: int | None = Field(
        default=None,
        ge=1,
        le=_MAX_RECALL_K,
        description="How many memories to return (default: a handful).",
    )


class SaveMemoryInput(BaseModel):
    """Arguments of ``save_memory``."""

    text: str = Field(
        min_length=1,
        pattern=_NOT_BLANK,
        description="The fact to remember, as one self-contained sentence "
        "(e.g. 'The user is allergic to peanuts').",
    )
    importance: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="How important it is, from 0 (mundane) to 1 (life-changing); "
        "leave empty to have it rated.",
    )


class ReflectNowInput(BaseModel):
    """``reflect_now`` takes no arguments."""


def _format_documents(docs: Sequence[Document]) -> str:
    """The recalled memories (:meth:`ScoredMemory.to_document`) as fenced data for the model."""
    if not docs:
        return "No memories found."
    items = [
        f"[{datetime.fromisoformat(d.metadata['created_at']):%Y-%m-%d %H:%M}, "
        f"{d.metadata['kind']}, importance {d.metadata['importance']:.1f}] {d.page_content}"
        for d in docs
    ]
    return f"{MEMORY_PREAMBLE}\n{fence_block(items, _FENCE_TAG)}"


def _format_insights(records: Sequence[MemoryRecord]) -> str:
    if not records:
        return "Reflection found no new insights."
    items = [r.text for r in records]
    return f"New insights:\n{MEMORY_PREAMBLE}\n{fence_block(items, _FENCE_TAG)}"


def _from_storage(exc: BaseException) -> bool:
    """Whether the storage failed underneath ``exc`` (the reflection graph wraps its steps'
    errors in ``ReflectionError``)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, StorageError):
            return True
        cause = cause.__cause__
    return False


@contextlib.contextmanager
def _told_to_model() -> Iterator[None]:
    """A text the memory refuses (a NUL character, too long) becomes the tool's answer, so the
    model can correct its call instead of the agent run failing (blank arguments are refused
    by the tools' schemas already); storage and model failures still raise."""
    try:
        yield
    except InvalidMemoryError as exc:
        raise ToolException(f"invalid argument: {exc}") from exc


_TURN_OWNER: contextvars.ContextVar[tuple[int, str] | None] = contextvars.ContextVar(
    "reflective_memory_tool_owner", default=None
)
"""While a memory middleware runs one of its own memory tools: (the toolkit's id, the turn's
owner), which the tool acts for (:func:`acting_for`)."""


@contextlib.contextmanager
def acting_for(tool: BaseTool, namespace: str) -> Iterator[None]:
    """While open, ``tool`` (one of :func:`create_memory_tools`' without a fixed
    ``namespace``) acts for ``namespace`` instead of the owner its run names: the agent
    middleware that gave the agent the tools passes the turn's owner, which a run resumed
    after an interrupt without its ``context`` does not name."""
    kit = _toolkit(tool)
    if kit is None:
        yield
        return
    token = _TURN_OWNER.set((id(kit), namespace))
    try:
        yield
    finally:
        _TURN_OWNER.reset(token)


def _toolkit(tool: BaseTool) -> _MemoryToolkit | None:
    """The toolkit behind one of :func:`create_memory_tools`' tools (``None``: another tool)."""
    kit = getattr(getattr(tool, "func", None), "__self__", None)
    return kit if isinstance(kit, _MemoryToolkit) else None


def reads_owner_as(
    tool: BaseTool, memory: ReflectiveMemory, namespace_key: str, *, required: bool
) -> bool:
    """Whether ``tool`` is one of :func:`create_memory_tools`' tools of ``memory`` that reads
    its owner from the run as a middleware of ``memory`` does (no fixed ``namespace``, the same
    ``namespace_key``; a tool that requires an owner only when the middleware does too, so a
    run naming none is not given the default namespace the tool refuses): such a tool may act
    for the turn's owner the middleware kept (:func:`acting_for`)."""
    kit = _toolkit(tool)
    return (
        kit is not None
        and kit.memory is memory
        and kit.namespace is None
        and kit.namespace_key == namespace_key
        and (required or not kit.require_namespace)
    )


class _MemoryToolkit:
    """The state shared by the three tools: the memory and how to find the namespace."""

    def __init__(
        self,
        memory: ReflectiveMemory,
        *,
        namespace: str | None,
        namespace_key: str,
        require_namespace: bool,
    ) -> None:
        self.memory = memory
        self.namespace = namespace
        self.namespace_key = namespace_key
        self.require_namespace = require_namespace
        self.retriever = ReflectiveRetriever(memory_stream=memory.stream)
        """What ``recall_memories`` searches with (``k`` and the namespace given per call)."""

    def resolve(self) -> str:
        owner = _TURN_OWNER.get()
        if self.namespace is None and owner is not None and owner[0] == id(self):
            return owner[1]  # (the turn's owner, kept by the middleware: see acting_for)
        ns = self.namespace or namespace_from_run(self.namespace_key)
        if ns is None:
            if self.require_namespace:
                raise ToolException(
                    f"no memory owner: run the agent with context {{{self.namespace_key!r}: ...}} "
                    f"or config['configurable'][{self.namespace_key!r}]"
                )
            ns = self.memory.stream.namespace
        return ns

    # recall ----------------------------------------------------------------------------------

    def _search(self, k: int | None) -> tuple[dict[str, Any], RunnableConfig]:
        """The retriever's arguments and config: the search is a ``retriever`` run inside the
        tool's run (as LangSmith shows any retriever), with the namespace it read."""
        ns = self.resolve()
        if k is None:  # (retrieve_k may be 0: no memories in the context, the tool instead)
            k = self.memory.config.retrieve_k or _RECALL_K
        args = {"k": k, "namespace": ns}
        return args, merge_configs(ensure_config(), {"metadata": {"namespace": ns}})

    def recall(self, query: str, k: int | None = None) -> tuple[str, list[Document]]:
        args, config = self._search(k)
        with _told_to_model():
            docs = self.retriever.invoke(query, config, **args)
        return _format_documents(docs), docs

    async def arecall(self, query: str, k: int | None = None) -> tuple[str, list[Document]]:
        args, config = self._search(k)
        with _told_to_model():
            docs = await self.retriever.ainvoke(query, config, **args)
        return _format_documents(docs), docs

    # save ------------------------------------------------------------------------------------

    @staticmethod
    def _saved(ids: Sequence[str]) -> str:
        (memory_id,) = ids
        return (
            f"Saved to long-term memory (id {memory_id}); it can be recalled once it is "
            "indexed, in a moment."
        )

    def save(self, text: str, importance: float | None = None) -> str:
        with _told_to_model():
            ids = self.memory.enqueue(
                text, namespace=self.resolve(), importances=importance, metadatas={"source": "tool"}
            )
        return self._saved(ids)

    async def asave(self, text: str, importance: float | None = None) -> str:
        with _told_to_model():
            ids = await self.memory.aenqueue(
                text, namespace=self.resolve(), importances=importance, metadatas={"source": "tool"}
            )
        return self._saved(ids)

    # reflect ---------------------------------------------------------------------------------

    def reflect(self) -> str:
        ns = self.resolve()
        try:
            records = self.memory.reflect(namespace=ns, force=True)
        except ReflectiveError as exc:
            if _from_storage(exc):  # (as the other tools' storage failures: it raises)
                raise
            raise ToolException(f"reflection failed: {exc}") from exc
        return _format_insights(records)

    async def areflect(self) -> str:
        ns = self.resolve()
        try:
            records = await self.memory.areflect(namespace=ns, force=True)
        except ReflectiveError as exc:
            if _from_storage(exc):  # (as the other tools' storage failures: it raises)
                raise
            raise ToolException(f"reflection failed: {exc}") from exc
        return _format_insights(records)


def create_memory_tools(
    memory: ReflectiveMemory,
    *,
    namespace: str | None = None,
    namespace_key: str = "user_id",
    require_namespace: bool = False,
    tags: Sequence[str] = ("langchain-reflective", "memory"),
) -> list[BaseTool]:
    """Tools that let an agent use its long-term memory.

    * ``recall_memories(query, k=None)``: the memories that best match ``query`` (relevance,
      recency, importance), fenced as data. The tool message's ``artifact`` holds them as
      ``Document``\\ s with every score in the metadata. The search runs through a
      :class:`~langchain_reflective.integrations.retriever.ReflectiveRetriever`, so traces show
      a ``retriever`` run (the documents, the namespace read) inside the tool's run.
    * ``save_memory(text, importance=None)``: store a fact. It is written durably as pending
      (one commit, no LLM call) and embedded and rated in the background (see
      :meth:`ReflectiveMemory.enqueue`): recallable a moment later. May start a background
      reflection.
    * ``reflect_now()``: reflect on recent memories now and return the new insights. Only
      included when ``memory`` has a chat model.

    Every tool has a sync and an async implementation. Errors the model can act on (no owner,
    an argument the memory refuses, a failed reflection) come back as the tool's answer
    (``handle_tool_error=True``); storage failures raise.

    Args:
        memory: the memory the tools use.
        namespace: a fixed owner; ``None`` takes it from each run (see the module docs).
        namespace_key: the run context attribute / configurable key holding the owner's id.
        require_namespace: fail a call whose run names no owner instead of falling back to the
            stream's default namespace (recommended for multi-user agents).
        tags: tags of the tools' runs (LangSmith).

    Returns:
        ``[recall_memories, save_memory]`` plus ``reflect_now`` when the memory can reflect.

    Example:
        .. code-block:: python

            from langchain.agents import create_agent

            tools = create_memory_tools(memory)
            agent = create_agent(model, tools=tools)
            agent.invoke({"messages": [("user", "What do I like?")]}, context={"user_id": "alice"})
    """
    kit = _MemoryToolkit(
        memory,
        namespace=namespace,
        namespace_key=namespace_key,
        require_namespace=require_namespace,
    )
    metadata: dict[str, Any] = {"namespace_key": namespace_key}
    if namespace is not None:
        metadata["namespace"] = namespace
    common: dict[str, Any] = {
        "tags": list(tags),
        "metadata": metadata,
        "handle_tool_error": True,
    }
    tools: list[BaseTool] = [
        StructuredTool.from_function(
            func=kit.recall,
            coroutine=kit.arecall,
            name="recall_memories",
            description=(
                "Search your long-term memory of past conversations and events. Use it when "
                "earlier information about the user could help. Returns the best-matching "
                "memories, newest facts with dates."
            ),
            args_schema=RecallMemoriesInput,
            response_format="content_and_artifact",
            **common,
        ),
        StructuredTool.from_function(
            func=kit.save,
            coroutine=kit.asave,
            name="save_memory",
            description=(
                "Save one fact to long-term memory so it can be recalled in later "
                "conversations (preferences, plans, important events)."
            ),
            args_schema=SaveMemoryInput,
            **common,
        ),
    ]
    if memory.model is not None:
        tools.append(
            StructuredTool.from_function(
                func=kit.reflect,
                coroutine=kit.areflect,
                name="reflect_now",
                description=(
                    "Reflect on recent memories now: derive high-level insights about the "
                    "user from them and store the insights. Returns the new insights."
                ),
                args_schema=ReflectNowInput,
                **common,
            )
        )
    return tools
