"""The thinking graph: prepare -> think (one round per step, recall inside) -> summarize -> store.

The steps are written in ``steps.py`` (:class:`~langchain_reflective.thinking.steps._Thinker`),
each once for sync and async I/O; this module wires them into a compiled ``StateGraph``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langgraph.graph import END, START, StateGraph

from langchain_reflective._llm import RetryConfig, resolve_chat_model
from langchain_reflective.thinking.config import ThinkingConfig
from langchain_reflective.thinking.context import ContextMemory
from langchain_reflective.thinking.prompts import ThinkingPrompts
from langchain_reflective.thinking.state import ThinkingGraphState, ThinkingInput, ThinkingOutput
from langchain_reflective.thinking.steps import TurnSummary, _Thinker

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langgraph.graph.state import CompiledStateGraph
    from langgraph.types import Checkpointer

    from langchain_reflective.stream import MemoryStream

__all__ = ["TurnSummary", "create_thinking_graph"]


def route_after_think(state: ThinkingGraphState) -> str:
    """Another round, the summary (when recording), or straight to the output."""
    if state.get("wants_more"):
        return "think"
    return "summarize" if state.get("record", True) else "store"


def create_thinking_graph(
    model: str | BaseChatModel,
    stream: MemoryStream | ContextMemory,
    *,
    max_rounds: int = 5,
    thinking_token_budget: int = 10_000,
    enable_recall: bool = True,
    max_recall_contexts: int = 3,
    summary_token_budget: int | None = 2_000,
    max_summaries: int = 200,
    retry: RetryConfig | None = None,
    structured_output: bool | None = None,
    prompts: ThinkingPrompts | None = None,
    checkpointer: Checkpointer = None,
    name: str = "thinking",
) -> CompiledStateGraph[ThinkingGraphState, None, ThinkingInput, ThinkingOutput]:
    """Build seed 004's reflective thinking phase as a LangGraph graph over a memory stream.

    Steps (nodes; in a trace each is one run named after the node, e.g. ``think``, inside
    the graph's ``thinking`` run, with its model calls and recalls inside it):

    1. ``prepare``: the turn number (the namespace's next one unless given) and the accumulated
       summaries of earlier turns (the newest that fit ``summary_token_budget``).
    2. ``think``, once per round: the prompt holds the conversation, the current context, the
       accumulated summaries, the earlier rounds and the recalled contexts (all fenced as data);
       the model is bound to ``continue_thinking(continue_thinking, reason, next_focus)`` and
       ``recall_context(turn_numbers, context_ids, keywords)``. A recall runs at once
       (``thinking.recall_context``) and its contexts are shown in the next round. Thinking
       stops when the model says it is ready (or calls no tool), after ``max_rounds``, or when
       ``thinking_token_budget`` is spent (usage metadata, else estimated).
    3. ``summarize``: one call for the turn's summary and insights (JSON).
    4. ``store``: the snapshot, then the summary citing it, go into the stream (whole or not
       at all: a failed summary add deletes the snapshot).

    Fallbacks, each logged and counted in ``fallbacks``/``fallback_counts``: a failed or
    malformed summary (one the stream would refuse, e.g. longer than ``MAX_TEXT_CHARS`` with
    its insights, is malformed) becomes an extractive summary marked ``fallback``; a failed
    recall is skipped; an exhausted round or token budget, or a failed thinking call, forces the
    action phase. Errors of the stream (e.g. storage) are raised.

    Example:
        .. code-block:: python

            graph = create_thinking_graph(model, stream, max_rounds=3)
            out = graph.invoke({"context": "Files: main.ts, utils.ts"})
            print(out["thoughts"], out["accumulated_summaries"])

    Args:
        model: The chat model (tool calling), or a ``"provider:model"`` string.
        stream: The memory stream (or a :class:`ContextMemory` over one) holding the contexts.
        max_rounds: Most rounds per turn (at most 20: one graph step each).
        thinking_token_budget: Tokens the rounds may spend.
        enable_recall: Offer ``recall_context``.
        max_recall_contexts: Most contexts one recall returns.
        summary_token_budget: Tokens the accumulated summaries may take in a prompt; one
            summary takes at most a quarter of it (cut with a marker; stored whole), so the
            newest four always fit (:func:`~langchain_reflective.thinking.prompts.fit_summaries`).
        max_summaries: Newest summaries considered for that budget.
        retry: Retries of transient model errors.
        structured_output: Summaries via structured output (``None``: when supported).
        prompts: Custom prompts (:class:`ThinkingPrompts`).
        checkpointer: Passed to ``compile``; leave ``None`` inside a parent graph. On a
            checkpointed thread each run's ``context``, ``messages``, ``tool_calls``, ``record``
            and ``now`` are reset when it ends; ``namespace`` stays (see :class:`ThinkingInput`).
        name: The compiled graph's name (its run name in traces).

    Returns:
        A compiled ``StateGraph`` with input :class:`ThinkingInput` (``context``, ``messages``,
        ``tool_calls``, ``namespace``, ``turn``, ``record``, ``now``) and output
        :class:`ThinkingOutput` (``thoughts``, ``recalled``, ``summaries``,
        ``accumulated_summaries``, ``action_context``, ``stop_reason``, ``fallbacks``, ...),
        alone or as a node of a parent graph, sync or async.
    """
    config = ThinkingConfig(
        max_rounds=max_rounds,
        thinking_token_budget=thinking_token_budget,
        enable_recall=enable_recall,
        max_recall_contexts=max_recall_contexts,
        summary_token_budget=summary_token_budget,
        max_summaries=max_summaries,
        retry=retry or RetryConfig(),
        structured_output=structured_output,
    )
    memory = stream if isinstance(stream, ContextMemory) else ContextMemory(stream)
    thinker = _Thinker(resolve_chat_model(model), memory, config, prompts or ThinkingPrompts())
    return build_graph(thinker, checkpointer=checkpointer, name=name)


def build_graph(
    thinker: _Thinker, *, checkpointer: Checkpointer = None, name: str = "thinking"
) -> CompiledStateGraph[ThinkingGraphState, None, ThinkingInput, ThinkingOutput]:
    """Wire a thinker's steps into the compiled graph (see :func:`create_thinking_graph`)."""
    builder = StateGraph(
        ThinkingGraphState, input_schema=ThinkingInput, output_schema=ThinkingOutput
    )
    builder.add_node("prepare", thinker.node("prepare", thinker.prepare))
    builder.add_node("think", thinker.node("think", thinker.think))
    builder.add_node("summarize", thinker.node("summarize", thinker.summarize))
    builder.add_node("store", thinker.node("store", thinker.store))
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "think")
    builder.add_conditional_edges("think", route_after_think, ["think", "summarize", "store"])
    builder.add_edge("summarize", "store")
    builder.add_edge("store", END)
    graph = builder.compile(checkpointer=checkpointer, name=name)
    return graph.with_config(
        tags=["langchain-reflective", "thinking"],
        metadata={
            "ls_component": "thinking",
            "default_namespace": thinker.memory.stream.namespace,
        },
    )
