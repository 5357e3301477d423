"""Reflective thinking for ``langchain.agents.create_agent``: :class:`ThinkingMiddleware`.

Needs the ``agents`` extra (``pip install "langchain-reflective[agents]"``).

* **Before the first model call of a turn** (a new user message), the thinking graph runs its
  rounds (``record=False``) on the user's message (whatever its length: only the snapshot
  recorded after the turn is cut to what a memory holds), with the earlier conversation, the
  accumulated summaries of earlier turns and ``recall_context``. Its result is kept in a private
  state key, so the later model calls of the same turn (after tool calls) reuse it: the
  thoughts and the rendered action context (each recalled context cut to a line), not the
  recalled contexts whole. The thinking graph writes no checkpoints of its own (compiled with
  ``checkpointer=False``): the agent's checkpointer saves the agent's steps only.
* **Before every model call of the turn**, the accumulated summaries (within
  ``summary_token_budget``; older ones leave the prompt, never the storage), the turn's thoughts
  and recalled contexts are added to the system message, fenced as data.
* **After the turn**, its snapshot (the user's message, tool calls and results, the answer) and
  an LLM summary citing it are stored (:class:`~langchain_reflective.thinking.ContextMemory`).
  A conversation summary of LangChain's ``SummarizationMiddleware`` is no user message:
  thinking does not run on it, and when it replaced the start of the turn the snapshot holds
  the user's message (kept when thinking ran), a marker line and the messages after it.
  A failed or malformed summary (also one too long to store) is stored as the extractive
  fallback, logged and counted, as in the thinking graph. An error while storing (the store or
  the embedding service failing) does not fail the agent run, whose answer is already written:
  it is logged once (an ERROR of this module's logger naming the namespace, the turn and what
  was not stored) and the run returns its answer. Nothing of that turn is stored (never a
  snapshot without its summary, unless the process dies between the two writes: see
  :class:`~langchain_reflective.thinking.ContextMemory`), and it is not retried later: the
  user's next message starts a new turn, recorded under the number the lost one would have
  had. Only the same turn ending again (a resumed run of the thread, without a new user
  message) tries to record it again.

Whose memory is used comes from the run, as for
:class:`~langchain_reflective.integrations.middleware.MemoryMiddleware`: ``context.<key>``, else
``config["configurable"][key]``, else the stream's namespace (or an error with
``require_namespace=True``). Two users of one agent never see each other's contexts.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.runnables.config import merge_configs
from langgraph.errors import GraphBubbleUp

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
    from langchain.agents.middleware.types import ExtendedModelResponse, OmitFromSchema
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        'ThinkingMiddleware needs LangChain 1.x agents: pip install "langchain-reflective[agents]"'
    ) from exc

from langchain_reflective._llm import (
    Flow,
    Op,
    RetryConfig,
    resolve_chat_model,
    run_async,
    run_sync,
)
from langchain_reflective.integrations.middleware import extend_system_message
from langchain_reflective.integrations.tools import agent_run_namespace
from langchain_reflective.records import MAX_TEXT_CHARS
from langchain_reflective.strategies.base import is_summary
from langchain_reflective.strategies.budget import trim_to_budget
from langchain_reflective.thinking.config import ThinkingConfig
from langchain_reflective.thinking.context import ContextMemory
from langchain_reflective.thinking.graph import build_graph
from langchain_reflective.thinking.prompts import ThinkingPrompts
from langchain_reflective.thinking.state import ThinkingInput
from langchain_reflective.thinking.steps import _Thinker

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langgraph.runtime import Runtime

    from langchain_reflective.stream import MemoryStream

__all__ = ["ThinkingMiddleware", "ThinkingState"]

logger = logging.getLogger(__name__)

THINKING_KEY = "reflective_thinking"
"""Private state key: the current turn's thinking result (and whether it was recorded)."""


class ThinkingState(AgentState[Any]):
    """Agent state with the middleware's private bookkeeping (not part of input or output)."""

    reflective_thinking: NotRequired[
        Annotated[dict[str, Any], OmitFromSchema(input=True, output=True)]
    ]


def _kept_of(state: Any) -> dict[str, Any]:
    kept = state.get("reflective_thinking") if state is not None else None
    return dict(kept) if isinstance(kept, dict) else {}


def _latest_user(messages: Sequence[AnyMessage]) -> int | None:
    """Index of the latest user message, or of the conversation summary standing in its place
    (``SummarizationMiddleware`` replaces the turn's first messages with one mid-turn: it is no
    new user message, see :func:`~langchain_reflective.strategies.base.is_summary`)."""
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return i
    return None


SUMMARISED_MARKER = "[... the steps before this point were condensed into a conversation summary]"
"""Snapshot line in place of a conversation summary (``SummarizationMiddleware``): when one
replaced the start of a turn, it follows the user's message the turn began with."""


def turn_context(messages: Sequence[AnyMessage]) -> tuple[str, list[str]]:
    """The snapshot text of a turn (its messages, one labelled line each; a conversation
    summary as :data:`SUMMARISED_MARKER`) and the names of the tools it called."""
    lines: list[str] = []
    tools: list[str] = []
    for m in messages:
        if isinstance(m, HumanMessage) and is_summary(m):
            lines.append(SUMMARISED_MARKER)  # (not the user's: the conversation condensed)
        elif isinstance(m, HumanMessage):
            lines.append(f"User: {m.text}")
        elif isinstance(m, AIMessage):
            if m.text.strip():
                lines.append(f"Assistant: {m.text}")
            for call in m.tool_calls:
                tools.append(call["name"])
                lines.append(f"Tool call: {call['name']}({call.get('args')})")
        elif isinstance(m, ToolMessage):
            lines.append(f"Tool result ({m.name or m.tool_call_id}): {m.text}")
    text = "\n".join(lines)
    if len(text) > MAX_TEXT_CHARS:
        marker = "\n[... cut: the turn was longer than a snapshot holds]"
        text = text[: MAX_TEXT_CHARS - len(marker)] + marker
    return text, list(dict.fromkeys(tools))


class ThinkingMiddleware(AgentMiddleware[ThinkingState, Any]):
    """Give a ``create_agent`` agent seed 004's reflective thinking (see the module docs).

    Args:
        model: the model that thinks and summarises (may differ from the agent's).
        stream: the memory stream (or a :class:`ContextMemory` over one) holding the contexts.
        max_rounds: most thinking rounds per turn.
        thinking_token_budget: tokens the rounds of a turn may spend.
        enable_recall: offer ``recall_context`` while thinking.
        max_recall_contexts: most contexts one recall returns.
        summary_token_budget: tokens the accumulated summaries may take in a prompt.
        conversation_token_budget: tokens of earlier conversation shown to the thinking model
            (the newest messages that fit; 0: none).
        namespace_key: the runtime-context attribute / ``configurable`` key holding the owner.
        require_namespace: raise ``ValueError`` when a run names no owner.
        retry: retries of transient model errors.
        structured_output: summaries via structured output (``None``: when supported).
        prompts: custom prompts.

    Raises:
        ValueError: an empty ``namespace_key``, a ``conversation_token_budget`` that is not an
            integer >= 0, or a bad thinking setting (:class:`ThinkingConfig`).

    Example:
        .. code-block:: python

            from langchain.agents import create_agent
            from langchain_reflective.thinking.middleware import ThinkingMiddleware

            agent = create_agent(model, middleware=[ThinkingMiddleware(model, stream)])
            agent.invoke({"messages": [{"role": "user", "content": "Profile main.ts"}]},
                         context={"user_id": "alice"})
    """

    state_schema = ThinkingState

    def __init__(
        self,
        model: str | BaseChatModel,
        stream: MemoryStream | ContextMemory,
        *,
        max_rounds: int = 3,
        thinking_token_budget: int = 10_000,
        enable_recall: bool = True,
        max_recall_contexts: int = 3,
        summary_token_budget: int | None = 2_000,
        conversation_token_budget: int = 2_000,
        namespace_key: str = "user_id",
        require_namespace: bool = False,
        retry: RetryConfig | None = None,
        structured_output: bool | None = None,
        prompts: ThinkingPrompts | None = None,
    ) -> None:
        if not namespace_key:
            raise ValueError("namespace_key must be a non-empty string")
        budget = conversation_token_budget
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(
                f"conversation_token_budget must be an integer >= 0 (tokens), got {budget!r}"
            )
        super().__init__()
        self.memory = stream if isinstance(stream, ContextMemory) else ContextMemory(stream)
        self.config = ThinkingConfig(
            max_rounds=max_rounds,
            thinking_token_budget=thinking_token_budget,
            enable_recall=enable_recall,
            max_recall_contexts=max_recall_contexts,
            summary_token_budget=summary_token_budget,
            retry=retry or RetryConfig(),
            structured_output=structured_output,
        )
        self.conversation_token_budget = conversation_token_budget
        self.namespace_key = namespace_key
        self.require_namespace = require_namespace
        self._thinker = _Thinker(
            resolve_chat_model(model), self.memory, self.config, prompts or ThinkingPrompts()
        )
        # (run inside a node: with the agent's checkpointer it would write a checkpoint of its
        # own per step, each holding the recalled contexts; the agent's own state keeps what
        # the turn needs)
        self.graph = build_graph(self._thinker, checkpointer=False, name="thinking")

    # -- namespace -----------------------------------------------------------------------------

    def resolve_namespace(self, runtime: Runtime[Any] | None) -> str:
        """The namespace of the current run.

        Raises:
            ValueError: ``require_namespace`` is set and the run names no owner.
        """
        return agent_run_namespace(
            self.namespace_key,
            runtime,
            required=self.require_namespace,
            default=self.memory.stream.namespace,
        )

    # -- thinking before the first model call of a turn ----------------------------------------

    def _graph_input(
        self, state: ThinkingState, runtime: Runtime[Any] | None
    ) -> tuple[ThinkingInput, HumanMessage] | None:
        messages = state["messages"]
        i = _latest_user(messages)
        if i is None:
            return None
        user = messages[i]
        if is_summary(user):
            return None  # the turn's user message, thought about before it was summarised
        done = _kept_of(state)
        if user.id is not None and done.get("message_id") == user.id:
            return None  # already thought about this turn
        earlier = trim_to_budget(
            [m for m in messages[:i] if not isinstance(m, SystemMessage)],
            self.conversation_token_budget,
        )
        inputs = ThinkingInput(
            context=f"User: {user.text}",
            messages=earlier,  # type: ignore[typeddict-item]
            namespace=self.resolve_namespace(runtime),
            record=False,
        )
        return inputs, HumanMessage(user.text, id=user.id)

    @staticmethod
    def _kept(out: dict[str, Any], user: HumanMessage, namespace: str) -> dict[str, Any]:
        return {
            THINKING_KEY: {
                "message_id": user.id or "",
                "user_text": user.text,  # a summary may replace the message before the turn ends
                "namespace": namespace,
                "turn": out.get("turn"),
                "thoughts": out.get("thoughts") or [],
                "action_context": out.get("action_context") or "",
                "stop_reason": out.get("stop_reason"),
                "fallbacks": out.get("fallbacks") or [],
                "llm_calls": out.get("llm_calls", 0),
                "recorded": False,
            }
        }

    @staticmethod
    def _run_config(inputs: ThinkingInput) -> RunnableConfig:
        """The current run's config, plus the namespace thought about in the ``thinking`` run's
        metadata (the graph's own metadata names only the stream's default namespace)."""
        return merge_configs(ensure_config(), {"metadata": {"namespace": inputs.get("namespace")}})

    def before_model(self, state: ThinkingState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Think (once per user message) before the model call."""
        found = self._graph_input(state, runtime)
        if found is None:
            return None
        inputs, user = found
        out = self.graph.invoke(inputs, self._run_config(inputs))
        return self._kept(dict(out), user, inputs.get("namespace") or "")

    async def abefore_model(
        self, state: ThinkingState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`before_model`."""
        found = self._graph_input(state, runtime)
        if found is None:
            return None
        inputs, user = found
        out = await self.graph.ainvoke(inputs, self._run_config(inputs))
        return self._kept(dict(out), user, inputs.get("namespace") or "")

    # -- injection -----------------------------------------------------------------------------

    @staticmethod
    def _with(request: ModelRequest[Any]) -> ModelRequest[Any]:
        kept = _kept_of(request.state)
        context = kept.get("action_context") or ""
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
        """Add the turn's thinking (summaries, thoughts, recalled contexts) to the system
        message, then call the model."""
        return handler(self._with(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Async twin of :meth:`wrap_model_call`."""
        return await handler(self._with(request))

    # -- recording after the turn --------------------------------------------------------------

    def _record_state(self, state: ThinkingState) -> dict[str, Any] | None:
        kept = _kept_of(state)
        messages = state["messages"]
        i = _latest_user(messages)
        if not kept or kept.get("recorded") or i is None:
            return None
        turn: list[AnyMessage] = list(messages[i:])
        if is_summary(messages[i]):
            # a summary replaced the user's message (and maybe the first steps) mid-turn: the
            # message thought about, then the summary's marker and what followed it
            turn.insert(0, HumanMessage(kept.get("user_text") or ""))
        elif messages[i].id is not None and kept.get("message_id") != messages[i].id:
            return None
        context, tools = turn_context(turn)
        ns = kept["namespace"]
        return {
            "context": context,
            "tool_calls": tools,
            "namespace": ns,
            "turn": 0,  # set by _record: the namespace's next turn at recording time
            "turn_assigned": True,  # so a number another writer takes meanwhile moves on
            "thoughts": kept.get("thoughts") or [],
            "recalled": [],  # (shown in the action context only, which is not rebuilt here)
            "fallbacks": kept.get("fallbacks") or [],
            "past_summaries": [],
            "llm_calls": kept.get("llm_calls", 0),
            "record": True,
        }

    def _recorded(self, state: ThinkingState, update: dict[str, Any]) -> dict[str, Any]:
        kept = _kept_of(state)
        if update.get("record_error"):  # logged by _record; the same turn may end again
            kept.update(recorded=False, record_error=update["record_error"])
            return {THINKING_KEY: kept}
        kept.pop("record_error", None)
        kept.update(
            recorded=True,
            turn=update["turn"],
            summary=update.get("summary"),
            context_id=update.get("context_id"),
            fallbacks=update.get("fallbacks") or [],
            fallback_counts=update.get("fallback_counts") or {},
            llm_calls=update.get("llm_calls", 0),
        )
        return {THINKING_KEY: kept}

    def _record(self, st: dict[str, Any]) -> Flow[dict[str, Any]]:
        """Number, summarise and store the turn (the thinking graph's own steps): one flow for
        :meth:`after_agent` and :meth:`aafter_agent`. A failure is logged once and returned
        as ``record_error`` (nothing of the turn is stored), so the run keeps its answer."""
        mem, ns = self.memory, st["namespace"]
        tried: list[int] = []
        try:
            st["turn"] = yield Op(mem.next_turn, mem.anext_turn, (), {"namespace": ns})
            config = ensure_config()
            st.update((yield from self._thinker.summarize(st, config)))  # type: ignore[arg-type]
            stored = self._thinker.store(st, config, attempted=tried)  # type: ignore[arg-type]
            st.update((yield from stored))
        except GraphBubbleUp:
            raise
        except Exception as exc:
            logger.error(
                "ThinkingMiddleware could not record turn %s of namespace %r (%s: %s): its "
                "snapshot (%d characters: the user's message, %d tool calls and the answer) "
                "and its summary were not stored; the agent's answer is returned. The turn is "
                "not retried: the next user message starts a new one.",
                tried[-1] if tried else st.get("turn") or "?",
                ns,
                type(exc).__name__,
                exc,
                len(st["context"]),
                len(st.get("tool_calls") or []),
                exc_info=exc,
            )
            return {"record_error": f"{type(exc).__name__}: {exc}"}
        return st

    def after_agent(self, state: ThinkingState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Store the turn's snapshot and its summary."""
        st = self._record_state(state)
        if st is None:
            return None
        return self._recorded(state, run_sync(self._record(st)))

    async def aafter_agent(
        self, state: ThinkingState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async twin of :meth:`after_agent`."""
        st = self._record_state(state)
        if st is None:
            return None
        return self._recorded(state, await run_async(self._record(st)))
