"""Long-term memory for ``langchain.agents.create_agent``: :class:`ReflectiveMemoryMiddleware`.

Needs the ``agents`` extra (``pip install "langchain-reflective[agents]"``).

Before every model call the middleware adds the *working context* of
:meth:`ReflectiveMemory.build_context` (top insights, recent observations, memories relevant to
the latest user message; fenced as data) to the request's system message. Nothing is written to
the agent state, so the context is never persisted twice and is rebuilt fresh for each call.

After the agent finishes a turn, the user's message and the agent's final answer (or, when the
agent ends on structured output, the structured response as JSON) are written as *pending*
``observation`` memories with :meth:`ReflectiveMemory.enqueue`: one cheap commit, no embedding
and no LLM call on the turn's path. They are in the next turn's recent observations at once;
embedding, importance rating and any reflection they trigger happen in the background (see
:mod:`langchain_reflective.memory` for the exact guarantee).

Whose memories are used (the *namespace*) comes from the run: ``context.<namespace_key>`` (a
dataclass/pydantic attribute or a mapping key) when the agent is invoked with ``context=...``,
else ``config["configurable"][namespace_key]``, else the memory stream's default namespace
(or an error with ``require_namespace=True``). Two users of one agent never see each other's
memories.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda, ensure_config

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
    from langchain.agents.middleware.types import ExtendedModelResponse, OmitFromSchema
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "ReflectiveMemoryMiddleware needs LangChain 1.x agents: "
        'pip install "langchain-reflective[agents]"'
    ) from exc

from langchain_reflective.integrations.tools import create_memory_tools, namespace_from_run
from langchain_reflective.memory import ReflectiveMemory

if TYPE_CHECKING:
    from langgraph.runtime import Runtime

__all__ = ["ReflectiveMemoryMiddleware", "ReflectiveMemoryState"]

RECORDED_KEY = "reflective_memory_recorded"
"""Private state key: ids of the messages of the last recorded turn (avoids recording twice)."""


class ReflectiveMemoryState(AgentState[Any]):
    """Agent state with the middleware's private bookkeeping (not part of input or output)."""

    reflective_memory_recorded: NotRequired[
        Annotated[list[str], OmitFromSchema(input=True, output=True)]
    ]


@dataclass(frozen=True, slots=True)
class _Turn:
    texts: list[str]
    metadatas: list[dict[str, Any]]
    message_ids: list[str]


def _latest_user_text(messages: Sequence[AnyMessage]) -> str | None:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            text = message.text.strip()
            return text or None
    return None


def _structured_text(value: Any) -> str:
    """A structured response (pydantic model, dataclass, mapping, ...) as compact JSON."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _with_context(system: SystemMessage | None, context: str) -> SystemMessage:
    """``system`` extended with ``context`` (content blocks and message fields kept)."""
    if system is None:
        return SystemMessage(content=context)
    content = system.content
    if isinstance(content, str):
        merged: str | list[str | dict[str, Any]] = (
            f"{content}\n\n{context}" if content.strip() else context
        )
    else:
        merged = [*content, {"type": "text", "text": context}]
    return system.model_copy(update={"content": merged})


class ReflectiveMemoryMiddleware(AgentMiddleware[ReflectiveMemoryState, Any]):
    """Give a ``create_agent`` agent a long-term memory that reflects.

    Args:
        memory: the :class:`~langchain_reflective.memory.ReflectiveMemory` to read and write.
        namespace_key: the runtime-context attribute / ``configurable`` key holding the owner's
            id (user, tenant, agent).
        require_namespace: raise ``ValueError`` when a run names no owner instead of using the
            stream's default namespace (recommended for multi-user agents).
        inject: add the working context to the system message before each model call.
        record: store the user's message and the final answer after each turn.
        include_tools: also give the agent the memory tools of
            :func:`~langchain_reflective.integrations.tools.create_memory_tools`
            (``recall_memories``, ``save_memory``, ``reflect_now``), bound to the same namespace.
        user_prefix: prefix of a recorded user message.
        assistant_prefix: prefix of a recorded answer.

    Example:
        .. code-block:: python

            from langchain.agents import create_agent
            from langchain_reflective import MemoryStream, ReflectiveMemory
            from langchain_reflective.integrations.middleware import ReflectiveMemoryMiddleware

            memory = ReflectiveMemory(model, MemoryStream(embeddings, path="memory.db"))
            agent = create_agent(model, middleware=[ReflectiveMemoryMiddleware(memory)])
            agent.invoke(
                {"messages": [{"role": "user", "content": "I moved to Lisbon."}]},
                context={"user_id": "alice"},
            )
    """

    state_schema = ReflectiveMemoryState

    def __init__(
        self,
        memory: ReflectiveMemory,
        *,
        namespace_key: str = "user_id",
        require_namespace: bool = False,
        inject: bool = True,
        record: bool = True,
        include_tools: bool = False,
        user_prefix: str = "User: ",
        assistant_prefix: str = "Assistant: ",
    ) -> None:
        if not isinstance(memory, ReflectiveMemory):
            raise TypeError(f"memory must be a ReflectiveMemory, got {type(memory).__name__}")
        if not namespace_key:
            raise ValueError("namespace_key must be a non-empty string")
        super().__init__()
        self.memory = memory
        self.namespace_key = namespace_key
        self.require_namespace = require_namespace
        self.inject = inject
        self.record = record
        self.user_prefix = user_prefix
        self.assistant_prefix = assistant_prefix
        self.tools = (
            create_memory_tools(
                memory, namespace_key=namespace_key, require_namespace=require_namespace
            )
            if include_tools
            else []
        )
        self._context_runnable: RunnableLambda[dict[str, Any], str] = RunnableLambda(
            self._build_context, afunc=self._abuild_context, name="reflective_memory_context"
        )

    # -- namespace -----------------------------------------------------------------------------

    def resolve_namespace(self, runtime: Runtime[Any] | None) -> str:
        """The namespace of the current run (see the module docs for the order).

        Raises:
            ValueError: ``require_namespace`` is set and the run names no owner.
        """
        context = runtime.context if runtime is not None else None
        ns = namespace_from_run(self.namespace_key, context=context, config=ensure_config())
        if ns is None:
            if self.require_namespace:
                raise ValueError(
                    f"no memory owner for this run: invoke the agent with "
                    f"context={{{self.namespace_key!r}: ...}} or "
                    f"config={{'configurable': {{{self.namespace_key!r}: ...}}}}"
                )
            ns = self.memory.stream.namespace
        return ns

    # -- context injection ---------------------------------------------------------------------

    def _build_context(self, inputs: dict[str, Any]) -> str:
        return self.memory.build_context(inputs["query"], namespace=inputs["namespace"])

    async def _abuild_context(self, inputs: dict[str, Any]) -> str:
        return await self.memory.abuild_context(inputs["query"], namespace=inputs["namespace"])

    def _context_call(self, request: ModelRequest[Any]) -> tuple[dict[str, Any], RunnableConfig]:
        namespace = self.resolve_namespace(request.runtime)
        scoring = self.memory.stream.scoring
        config: RunnableConfig = {
            "run_name": "reflective_memory_context",
            "tags": ["langchain-reflective", "memory-context"],
            "metadata": {
                "namespace": namespace,
                "k": self.memory.config.retrieve_k,
                "scoring": scoring.name,
                "weights": {
                    "relevance": scoring.relevance_weight,
                    "lexical": scoring.lexical_weight,
                    "recency": scoring.recency_weight,
                    "importance": scoring.importance_weight,
                },
            },
        }
        return {"query": _latest_user_text(request.messages), "namespace": namespace}, config

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Add the working context to the system message, then call the model."""
        if not self.inject:
            return handler(request)
        inputs, config = self._context_call(request)
        context = self._context_runnable.invoke(inputs, config)
        return handler(
            request.override(system_message=_with_context(request.system_message, context))
        )

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Async twin of :meth:`wrap_model_call`."""
        if not self.inject:
            return await handler(request)
        inputs, config = self._context_call(request)
        context = await self._context_runnable.ainvoke(inputs, config)
        return await handler(
            request.override(system_message=_with_context(request.system_message, context))
        )

    # -- recording -----------------------------------------------------------------------------

    def _turn(self, state: ReflectiveMemoryState) -> _Turn | None:
        """The unrecorded part of the last turn: its user message and final answer."""
        messages = state["messages"]
        start = None
        for i in range(len(messages) - 1, -1, -1):
            if isinstance(messages[i], HumanMessage):
                start = i
                break
        if start is None:
            return None
        answer: AnyMessage | None = next(
            (
                m
                for m in reversed(messages[start + 1 :])
                if isinstance(m, AIMessage) and not m.tool_calls and m.text.strip()
            ),
            None,
        )
        structured = state.get("structured_response")
        if answer is None and structured is not None:
            # ended on structured output (tool strategy): record the structured answer, under
            # the id of the turn's last model message (so a re-run does not record it twice)
            last = next(
                (m for m in reversed(messages[start + 1 :]) if isinstance(m, AIMessage)), None
            )
            if last is not None:
                answer = AIMessage(_structured_text(structured), id=last.id)
        done = set(state.get("reflective_memory_recorded") or ())
        thread_id = (ensure_config().get("configurable") or {}).get("thread_id")
        extra = {"thread_id": str(thread_id)} if thread_id is not None else {}
        turn = _Turn([], [], [])
        for message, role, prefix in (
            (messages[start], "user", self.user_prefix),
            (answer, "assistant", self.assistant_prefix),
        ):
            if message is None:
                continue
            text = message.text.strip()
            message_id = message.id or ""
            turn.message_ids.append(message_id)
            if not text or (message_id and message_id in done):
                continue
            turn.texts.append(f"{prefix}{text}")
            meta: dict[str, Any] = {"role": role, "source": "agent", **extra}
            if message_id:
                meta["message_id"] = message_id
            turn.metadatas.append(meta)
        return turn

    def after_agent(
        self, state: ReflectiveMemoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Write the turn's user message and final answer as pending observations (no LLM call:
        see :meth:`ReflectiveMemory.enqueue`)."""
        if not self.record or (turn := self._turn(state)) is None:
            return None
        if turn.texts:
            self.memory.enqueue(
                turn.texts,
                namespace=self.resolve_namespace(runtime),
                metadatas=turn.metadatas,
            )
        return {RECORDED_KEY: [i for i in turn.message_ids if i]}

    async def aafter_agent(
        self, state: ReflectiveMemoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`after_agent`."""
        if not self.record or (turn := self._turn(state)) is None:
            return None
        if turn.texts:
            await self.memory.aenqueue(
                turn.texts,
                namespace=self.resolve_namespace(runtime),
                metadatas=turn.metadatas,
            )
        return {RECORDED_KEY: [i for i in turn.message_ids if i]}
