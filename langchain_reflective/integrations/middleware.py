"""Memory for ``langchain.agents.create_agent``: :class:`MemoryMiddleware` runs any memory strategy.

Needs the ``agents`` extra (``pip install "langchain-reflective[agents]"``).

Before every model call the middleware asks its strategy
(:class:`~langchain_reflective.strategies.base.BaseMemoryStrategy`) for the context of the
current run's namespace and adds it to the request's system message, fenced as data
(:func:`~langchain_reflective.strategies.render.format_context`). Nothing is written to the
agent state, so the context is never persisted twice and is rebuilt fresh for each call.

After the agent finishes a turn, the user's message and the agent's final answer are committed
to the strategy as one :class:`~langchain_reflective.strategies.base.Observation` (a message
already committed, e.g. when a run resumes without a new user message, is not committed again).
Its metadata names the thread and the messages (``thread_id``, ``query_message_id``,
``reply_message_id``). A thread re-run from an earlier checkpoint (LangGraph time travel: a
"regenerate") forks a state that does not say its user message was committed, so the turn is
committed again, with the same user message and a new answer: the built-in strategies keep
each message once per namespace (by its thread, id and text) and store only the new answer
(docs/MEMORY.md, "A message committed again"). An edited message (LangGraph's edit: the same id
with new text, written with ``update_state``, then a re-run) is another message: it is stored
with its new answer. A message without an id (a state built by hand) is committed each time,
as before.

:class:`ReflectiveMemoryMiddleware` is this middleware with a
:class:`~langchain_reflective.memory.ReflectiveMemory` (its working context, background
reflection and, optionally, its memory tools).

Whose memories are used (the *namespace*) comes from the run: ``context.<namespace_key>`` (a
dataclass/pydantic attribute or a mapping key) when the agent is invoked with ``context=...``,
else ``config["configurable"][namespace_key]``, else the strategy's default namespace
(or an error with ``require_namespace=True``). Two users of one agent never see each other's
memories.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda, ensure_config

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
        ToolCallRequest,
    )
    from langchain.agents.middleware.types import ExtendedModelResponse, OmitFromSchema
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        'MemoryMiddleware needs LangChain 1.x agents: pip install "langchain-reflective[agents]"'
    ) from exc

from langchain_reflective.integrations.tools import (
    acting_for,
    agent_run_namespace,
    create_memory_tools,
    namespace_from_run,
    reads_owner_as,
)
from langchain_reflective.memory import ReflectiveMemory
from langchain_reflective.records import storable_text
from langchain_reflective.strategies.base import (
    BaseMemoryStrategy,
    Observation,
    check_budget,
    is_summary,
)
from langchain_reflective.strategies.reflective import ReflectiveMemoryStrategy
from langchain_reflective.strategies.render import format_context

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool
    from langgraph.runtime import Runtime
    from langgraph.types import Command

__all__ = ["MemoryMiddleware", "MemoryState", "ReflectiveMemoryMiddleware", "ReflectiveMemoryState"]

logger = logging.getLogger(__name__)

RECORDED_KEY = "reflective_memory_recorded"
"""Private state key: per middleware (its ``name``), ids of the messages of the last turn it
recorded (avoids recording twice; two memory middlewares in one agent each record). A list:
written before it was kept per middleware."""
ASKED_KEY = "reflective_memory_asked"
"""Private state key: the run's user message (``id``, ``text``), read when the run starts, in
case a ``SummarizationMiddleware`` replaces it with a summary before the turn is recorded."""
OWNER_KEY = "reflective_memory_owner"
"""Private state key: per middleware (its ``name``), the namespace of the turn, resolved when
the run starts: a run resumed after an interrupt (``Command(resume=...)``) without the
``context`` it started with still reads and records the turn's owner, not the default."""


class MemoryState(AgentState[Any]):
    """Agent state with the middleware's private bookkeeping (not part of input or output)."""

    reflective_memory_recorded: NotRequired[
        Annotated[dict[str, list[str]] | list[str], OmitFromSchema(input=True, output=True)]
    ]
    reflective_memory_asked: NotRequired[
        Annotated[dict[str, str], OmitFromSchema(input=True, output=True)]
    ]
    reflective_memory_owner: NotRequired[
        Annotated[dict[str, str], OmitFromSchema(input=True, output=True)]
    ]


ReflectiveMemoryState = MemoryState
"""The state schema's former name (the state key is unchanged)."""


@dataclass(frozen=True, slots=True)
class _Turn:
    observation: Observation | None
    """What is new in the turn (``None``: nothing)."""
    message_ids: list[str]


def extend_system_message(system: SystemMessage | None, context: str) -> SystemMessage:
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


def _asked(messages: Sequence[AnyMessage]) -> dict[str, str] | None:
    """The latest user message of ``messages`` for :data:`ASKED_KEY` (``None``: none)."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage) and not is_summary(message):
            return {"id": message.id or "", "text": message.text}
    return None


def _with_asked(
    messages: Sequence[AnyMessage], asked: Mapping[str, str] | None
) -> list[AnyMessage]:
    """``messages``, with the run's user message (:data:`ASKED_KEY`) back after the latest
    conversation summary when a ``SummarizationMiddleware`` replaced it mid-turn: the strategy
    finds the memories relevant to what the user asked, not to nothing (or to an older
    message)."""
    out = list(messages)
    if not asked or not asked.get("text"):
        return out
    at = next((i for i in range(len(out) - 1, -1, -1) if isinstance(out[i], HumanMessage)), None)
    if at is None or not is_summary(out[at]):
        return out  # (the user's message is still there, or no summary stands for it)
    if asked.get("id") and any(m.id == asked["id"] for m in out):
        return out
    out.insert(at + 1, HumanMessage(asked["text"], id=asked.get("id") or None))
    return out


def _latest_turn(
    messages: Sequence[AnyMessage], structured: Any = None, asked: Mapping[str, str] | None = None
) -> tuple[HumanMessage, AIMessage | None] | None:
    """The latest user message and the final answer after it (``None``: no user message).

    A conversation summary (``SummarizationMiddleware``) in the user message's place stands
    for ``asked``, the run's user message as it started (an empty one if unknown). When the
    agent ended on structured output (no text answer), the answer is the structured response
    as JSON, under the id of the turn's last model message (so a re-run does not record it
    twice).
    """
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, HumanMessage):
            if is_summary(message):
                known = asked or {}
                message = HumanMessage(known.get("text", ""), id=known.get("id") or None)
            after = messages[i + 1 :]
            answer = next(
                (
                    m
                    for m in reversed(after)
                    if isinstance(m, AIMessage) and not m.tool_calls and m.text.strip()
                ),
                None,
            )
            if answer is None and structured is not None:
                last = next((m for m in reversed(after) if isinstance(m, AIMessage)), None)
                if last is not None:
                    answer = AIMessage(_structured_text(structured), id=last.id)
            return message, answer
    return None


class MemoryMiddleware(AgentMiddleware[MemoryState, Any]):
    """Give a ``create_agent`` agent a memory: any :class:`BaseMemoryStrategy`.

    Args:
        strategy: the memory strategy (a ``ReflectiveMemory`` is wrapped in a
            :class:`~langchain_reflective.strategies.reflective.ReflectiveMemoryStrategy`).
        budget: token budget of each context (``None``: the strategy's own limits).
        namespace_key: the runtime-context attribute / ``configurable`` key holding the owner's
            id (user, tenant, agent).
        require_namespace: raise ``ValueError`` when a run names no owner instead of using the
            strategy's default namespace (recommended for multi-user agents).
        inject: add the context to the system message before each model call.
        record: commit the user's message and the final answer after each turn.
        tools: extra tools the agent gets with this middleware.
        user_prefix: label of remembered user messages in the context (and, for a
            ``ReflectiveMemory``, prefix of a stored user message).
        assistant_prefix: label (and stored prefix) of remembered answers.
        name: the middleware's name (default: its class name); give each a name of its own
            to put two memory middlewares in one agent (``create_agent`` refuses two of one
            name), e.g. a short-term ``WindowMemory`` beside a long-term memory.

    Example:
        .. code-block:: python

            from langchain.agents import create_agent
            from langchain_reflective import MemoryMiddleware, WindowMemory

            agent = create_agent(model, middleware=[MemoryMiddleware(WindowMemory(capacity=20))])
            agent.invoke(
                {"messages": [{"role": "user", "content": "I moved to Lisbon."}]},
                context={"user_id": "alice"},
            )
    """

    state_schema = MemoryState

    def __init__(
        self,
        strategy: BaseMemoryStrategy | ReflectiveMemory,
        *,
        budget: int | None = None,
        namespace_key: str = "user_id",
        require_namespace: bool = False,
        inject: bool = True,
        record: bool = True,
        tools: Sequence[BaseTool] = (),
        user_prefix: str = "User: ",
        assistant_prefix: str = "Assistant: ",
        name: str | None = None,
    ) -> None:
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError("name must be a non-empty string")
        self._name = name
        if isinstance(strategy, ReflectiveMemory):
            strategy = ReflectiveMemoryStrategy(
                strategy, user_prefix=user_prefix, assistant_prefix=assistant_prefix
            )
        if not isinstance(strategy, BaseMemoryStrategy):
            raise TypeError(f"strategy must be a BaseMemoryStrategy, got {type(strategy).__name__}")
        if not namespace_key:
            raise ValueError("namespace_key must be a non-empty string")
        super().__init__()
        self.strategy = strategy
        self.budget = check_budget(budget)
        self.namespace_key = namespace_key
        self.require_namespace = require_namespace
        self.inject = inject
        self.record = record
        self.user_prefix = user_prefix
        self.assistant_prefix = assistant_prefix
        self.tools = list(tools)
        self._context_runnable: RunnableLambda[dict[str, Any], str] = RunnableLambda(
            self._context, afunc=self._acontext, name=strategy.context_run_name
        )

    @property
    def name(self) -> str:
        """The middleware's name: the ``name`` given, else the class name."""
        return self._name or type(self).__name__

    # -- namespace -----------------------------------------------------------------------------

    def resolve_namespace(self, runtime: Runtime[Any] | None) -> str:
        """The namespace of the current run (see the module docs for the order).

        Raises:
            ValueError: ``require_namespace`` is set and the run names no owner.
        """
        return agent_run_namespace(
            self.namespace_key,
            runtime,
            required=self.require_namespace,
            default=self.strategy.default_namespace,
        )

    def _turn_namespace(self, state: Mapping[str, Any], runtime: Any) -> str:
        """The namespace the turn started with (:data:`OWNER_KEY`), else the run's. A resumed
        run that names another owner still serves the turn's (logged: the thread holds that
        owner's conversation)."""
        kept = (state.get(OWNER_KEY) or {}).get(self.name)
        if not isinstance(kept, str):
            return self.resolve_namespace(runtime)
        named = namespace_from_run(
            self.namespace_key,
            context=runtime.context if runtime is not None else None,
            config=ensure_config(),
        )
        if named is not None and named != kept:
            logger.warning(
                "%s: this run names the owner %r, but its turn started as %r's; the turn's "
                "memory stays %r's",
                self.name,
                named,
                kept,
                kept,
            )
        return kept

    # -- context injection ---------------------------------------------------------------------

    def _format(self, messages: Sequence[Any]) -> str:
        return format_context(
            messages, user_prefix=self.user_prefix, assistant_prefix=self.assistant_prefix
        )

    def _context(self, inputs: dict[str, Any]) -> str:
        return self._format(
            self.strategy.context(
                inputs["messages"], budget=self.budget, namespace=inputs["namespace"]
            )
        )

    async def _acontext(self, inputs: dict[str, Any]) -> str:
        return self._format(
            await self.strategy.acontext(
                inputs["messages"], budget=self.budget, namespace=inputs["namespace"]
            )
        )

    def _context_call(self, request: ModelRequest[Any]) -> tuple[dict[str, Any], RunnableConfig]:
        namespace = self._turn_namespace(request.state, request.runtime)
        config: RunnableConfig = {
            "run_name": self.strategy.context_run_name,
            "tags": ["langchain-reflective", "memory-context"],
            "metadata": {
                "namespace": namespace,
                "budget": self.budget,
                **self.strategy.trace_metadata(),
            },
        }
        asked = request.state.get("reflective_memory_asked")
        messages = _with_asked(request.messages, asked if isinstance(asked, Mapping) else None)
        return {"messages": messages, "namespace": namespace}, config

    @staticmethod
    def _with(request: ModelRequest[Any], context: str) -> ModelRequest[Any]:
        if not context:
            return request
        return request.override(
            system_message=extend_system_message(request.system_message, context)
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Add the strategy's context to the system message, then call the model."""
        if not self.inject:
            return handler(request)
        inputs, config = self._context_call(request)
        return handler(self._with(request, self._context_runnable.invoke(inputs, config)))

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
        return await handler(self._with(request, context))

    # -- memory tools ---------------------------------------------------------------------------

    def _acting(self, request: ToolCallRequest) -> contextlib.AbstractContextManager[None]:
        """One of this middleware's memory tools, or a memory tool of its ``ReflectiveMemory``
        given to the agent beside it (``tools=create_memory_tools(memory)``) that reads the
        owner as it does, acts for the turn's owner (a resumed run may not name it); any other
        tool runs as it is."""
        tool = request.tool
        if tool is None:
            return contextlib.nullcontext()
        mine = any(tool is own for own in self.tools)
        memory = (
            self.strategy.memory if isinstance(self.strategy, ReflectiveMemoryStrategy) else None
        )
        if not mine and not (
            memory is not None
            and reads_owner_as(tool, memory, self.namespace_key, required=self.require_namespace)
        ):
            return contextlib.nullcontext()
        return acting_for(tool, self._turn_namespace(request.state, request.runtime))

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool; this middleware's memory tools act for the turn's owner."""
        with self._acting(request):
            return handler(request)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async twin of :meth:`wrap_tool_call`."""
        with self._acting(request):
            return await handler(request)

    # -- recording -----------------------------------------------------------------------------

    def _turn(self, state: MemoryState, runtime: Runtime[Any] | None) -> _Turn | None:
        """The unrecorded part of the last turn as an observation, and its message ids."""
        found = _latest_turn(
            state["messages"],
            state.get("structured_response"),
            state.get("reflective_memory_asked"),
        )
        if found is None:
            return None
        question, answer = found
        recorded = state.get("reflective_memory_recorded") or ()
        done = set(recorded.get(self.name) or () if isinstance(recorded, Mapping) else recorded)
        message_ids = [m.id or "" for m in (question, answer) if m is not None]

        def new_text(message: AnyMessage | None) -> str:
            if message is None or (message.id and message.id in done):
                return ""
            return storable_text(message.text.strip())  # (never fail a run that answered)

        query, reply = new_text(question), new_text(answer)
        if not query and not reply:
            return _Turn(None, message_ids)
        thread_id = (ensure_config().get("configurable") or {}).get("thread_id")
        metadata: dict[str, Any] = {"source": "agent"}
        if thread_id is not None:
            metadata["thread_id"] = str(thread_id)
        if query and question.id:
            metadata["query_message_id"] = question.id
        if reply and answer is not None and answer.id:
            metadata["reply_message_id"] = answer.id
        observation = Observation(
            query,
            reply,
            namespace=self._turn_namespace(state, runtime),
            created_at=datetime.now(UTC),
            metadata=metadata,
        )
        return _Turn(observation, message_ids)

    def _recorded(self, state: MemoryState, turn: _Turn) -> dict[str, Any]:
        """The state update that marks ``turn`` recorded by this middleware (others' entries
        kept: the after-agent hooks run one after the other)."""
        recorded = state.get("reflective_memory_recorded")
        entries = dict(recorded) if isinstance(recorded, Mapping) else {}
        entries[self.name] = [i for i in turn.message_ids if i]
        return {RECORDED_KEY: entries}

    def commit_turn(self, observation: Observation) -> None:
        """Record one finished turn: the single place the middleware writes to the strategy."""
        self.strategy.commit(observation)

    async def acommit_turn(self, observation: Observation) -> None:
        """Async twin of :meth:`commit_turn`."""
        await self.strategy.acommit(observation)

    def before_agent(self, state: MemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Note the turn's owner (a resumed run may not name it; a run that must name an owner
        and names none fails here, before any model call) and its user message (a summary
        may replace it before the turn ends)."""
        if not (self.record or self.inject):
            return None
        owners = dict(state.get("reflective_memory_owner") or {})
        owners[self.name] = self.resolve_namespace(runtime)
        update: dict[str, Any] = {OWNER_KEY: owners}
        asked = _asked(state["messages"])  # (recorded, and the query after a summary)
        if asked is not None:
            update[ASKED_KEY] = asked
        return update

    async def abefore_agent(
        self, state: MemoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`before_agent`."""
        return self.before_agent(state, runtime)

    def after_agent(self, state: MemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Commit the turn's user message and final answer to the strategy."""
        if not self.record or (turn := self._turn(state, runtime)) is None:
            return None
        if turn.observation is not None:
            self.commit_turn(turn.observation)
        return self._recorded(state, turn)

    async def aafter_agent(
        self, state: MemoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`after_agent`."""
        if not self.record or (turn := self._turn(state, runtime)) is None:
            return None
        if turn.observation is not None:
            await self.acommit_turn(turn.observation)
        return self._recorded(state, turn)


class ReflectiveMemoryMiddleware(MemoryMiddleware):
    """Give a ``create_agent`` agent a long-term memory that reflects.

    :class:`MemoryMiddleware` with a
    :class:`~langchain_reflective.memory.ReflectiveMemory`: before each model call the memory's
    working context (top insights, recent observations, memories relevant to the latest user
    message; fenced as data) is added to the system message; after each turn the user's
    message and the final answer are stored as ``observation`` memories, which may start a
    background reflection (see :class:`~langchain_reflective.memory.MemoryConfig`).

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
        name: the middleware's name (default: its class name), as for
            :class:`MemoryMiddleware`.

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
        name: str | None = None,
    ) -> None:
        if not isinstance(memory, ReflectiveMemory):
            raise TypeError(f"memory must be a ReflectiveMemory, got {type(memory).__name__}")
        super().__init__(
            memory,
            namespace_key=namespace_key,
            require_namespace=require_namespace,
            inject=inject,
            record=record,
            user_prefix=user_prefix,
            assistant_prefix=assistant_prefix,
            name=name,
        )
        self.memory = memory
        if include_tools:
            self.tools = create_memory_tools(
                memory, namespace_key=namespace_key, require_namespace=require_namespace
            )
