"""The steps of a thinking turn: prepare -> think (one round per step, recall inside) ->
summarize -> store, bound to a model, a context memory and settings (:class:`_Thinker`).

Each step is written once as a generator that ``yield``s its I/O as
:class:`~langchain_reflective._llm.Op` (model calls, stream reads and writes); the
node (a :class:`~langchain_reflective._llm.FlowNode`) only drives it, with sync or async I/O,
as in the reflection graph. ``graph.py`` wires the steps into the graph; the agent middleware
runs ``summarize`` and ``store`` itself after a turn.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from langchain_core.messages import AIMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.runnables.config import merge_configs
from langgraph.constants import TAG_NOSTREAM
from pydantic import BaseModel, Field, ValidationError

from langchain_reflective._llm import (
    Failure,
    Flow,
    FlowNode,
    ModelCall,
    Op,
    guarded,
    load_json,
)
from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.records import MAX_TEXT_CHARS, validate_text
from langchain_reflective.thinking.fallbacks import PLACEHOLDER, extractive_summary
from langchain_reflective.thinking.prompts import (
    fit_summaries,
    format_summaries,
    render_for_action,
)
from langchain_reflective.thinking.state import (
    FallbackDict,
    FallbackKind,
    SnapshotDict,
    SummaryDict,
    ThinkingGraphState,
    ThoughtDict,
)
from langchain_reflective.thinking.tools import (
    CONTINUE_THINKING,
    RECALL_CONTEXT,
    ContinueThinkingArgs,
    RecallContextArgs,
    _shown_missing,
    create_thinking_tools,
)
from langchain_reflective.thinking.turns import TurnTakenError, count_text_tokens, summary_text

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from langchain_reflective.thinking.config import ThinkingConfig
    from langchain_reflective.thinking.context import ContextMemory
    from langchain_reflective.thinking.prompts import ThinkingPrompts

__all__ = ["TurnSummary"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
Update = dict[str, Any]

_STALE_MOVES = 8
"""An assigned turn number that is taken moves on to ``next_turn`` with no bound while
``next_turn`` counts the refused number (is above it): that number was free when read, so each
such refusal is a turn another writer stored meanwhile. A refused number that ``next_turn``
does not count (its id held by a record of another kind, which ``next_turn`` skips and
``record_turn`` refuses; or the refusing records deleted before the read) moves on to the
number after it; this many such moves in a row raise :class:`TurnTakenError`, so the loop is
bounded when no writer makes progress."""
RUN_INPUTS_RESET: dict[str, Any] = {
    "context": "",
    "messages": [],
    "tool_calls": [],
    "record": True,
    "now": None,
}
"""The inputs that apply to one run only, set back to their defaults when the run ends: with a
checkpointer they stayed in the thread's state, and the next run on the thread that did not
give them was not recorded (``record=False``), stored the earlier tool calls and timestamp,
showed the earlier conversation, or thought about the earlier context again. The namespace
stays (the thread's owner), and the turn number left counts as not given (``turn_taken``)."""
_JITTER_STEP = 0.01
_JITTER_MAX = 0.25
"""A turn moving on waits up to ``min(_JITTER_MAX, _JITTER_STEP * moves)`` seconds (random),
so writers that lost the same number do not all try the same next one at once."""


class TurnSummary(BaseModel):
    """Structured answer of the summary call."""

    summary: str = Field(description="One or two sentences: what was done, found or decided.")
    insights: list[str] = Field(default_factory=list, description="Short key facts (at most 5).")


def _usage_tokens(result: Any) -> int | None:
    usage = getattr(result, "usage_metadata", None)
    if not usage:
        return None
    total = usage.get("total_tokens") or (
        usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    )
    return int(total) if total else None


def _unparsed(message: AIMessage) -> list[dict[str, Any]]:
    """The tool calls whose arguments LangChain could not parse (``invalid_tool_calls``), with
    their raw text as arguments: read like the others, each fails validation and takes its
    fallback (it was ignored, so an unreadable ``continue_thinking`` went uncounted)."""
    return [
        {"name": call.get("name"), "args": str(call.get("args") or "(no arguments)")}
        for call in message.invalid_tool_calls
    ]


class _Thinker:
    """The steps of a thinking turn, bound to a model, a context memory and settings."""

    def __init__(
        self,
        model: BaseChatModel,
        memory: ContextMemory,
        config: ThinkingConfig,
        prompts: ThinkingPrompts,
    ) -> None:
        self.memory = memory
        self.config = config
        self.prompts = prompts
        tools = create_thinking_tools(memory, max_recall_contexts=config.max_recall_contexts)
        if not config.enable_recall:
            tools = [t for t in tools if t.name != RECALL_CONTEXT]
        try:
            bound: Any = model.bind_tools(tools)
        except NotImplementedError:
            logger.warning(
                "%s cannot bind tools: thinking takes one round per turn (no continue/recall)",
                type(model).__name__,
            )
            bound = model
        self.think_model = config.retry.apply(bound)
        self.summary_call = ModelCall.build(
            model,
            TurnSummary,
            retry=config.retry,
            structured_output=config.structured_output,
        )
        self.recall_runnable: RunnableLambda[dict[str, Any], Any] = RunnableLambda(
            self._recall, afunc=self._arecall, name="thinking.recall_context"
        )

    # -- helpers ---------------------------------------------------------------------------

    def _recall(self, request: dict[str, Any]) -> Any:
        return self.memory.recall(**request)

    async def _arecall(self, request: dict[str, Any]) -> Any:
        return await self.memory.arecall(**request)

    @staticmethod
    def _fallback(
        state: Mapping[str, Any], kind: FallbackKind, detail: str, round_number: int
    ) -> FallbackDict:
        logger.warning(
            "thinking fallback %s (namespace %r, turn %s, round %s): %s",
            kind,
            state.get("namespace"),
            state.get("turn"),
            round_number,
            detail,
        )
        return FallbackDict(kind=kind, detail=detail, round=round_number)

    @staticmethod
    def _cfg(
        config: RunnableConfig, run_name: str, state: Mapping[str, Any], *, streamed: bool = True
    ) -> RunnableConfig:
        """The config of one model call; ``streamed=False`` (nostream) keeps a call that only
        writes memory (the turn summary) out of LangGraph's ``stream_mode="messages"``, where
        a chat UI would show it as the agent's answer; the thinking rounds stay visible."""
        tags = ["langchain-reflective", run_name] + ([] if streamed else [TAG_NOSTREAM])
        return merge_configs(
            config,
            {
                "run_name": run_name,
                "tags": tags,
                "metadata": {"namespace": state.get("namespace"), "turn": state.get("turn")},
            },
        )

    # -- steps -----------------------------------------------------------------------------

    def prepare(self, state: ThinkingGraphState, config: RunnableConfig) -> Flow[Update]:
        """Check the input (a recorded context must fit a snapshot); find the turn number and
        the summaries of earlier turns."""
        context = state.get("context")
        if not isinstance(context, str) or not context.strip():
            raise InvalidMemoryError("the thinking graph needs a non-empty 'context' string")
        if state.get("record", True) and len(context) > MAX_TEXT_CHARS:
            # the limit of the snapshot; a turn only thought about (the middleware's user
            # message, recorded later as a cut snapshot) stores nothing
            raise InvalidMemoryError(
                f"the context has {len(context):,} characters; a snapshot holds at most "
                f"{MAX_TEXT_CHARS:,}. Pass a shorter context (e.g. the turn's working set)."
            )
        mem = self.memory
        ns = mem.namespace(state.get("namespace"))
        turn = state.get("turn")
        if turn is not None and turn == state.get("turn_taken"):
            turn = None  # (the previous run's, left in a checkpointed thread's state)
        given = turn is not None
        if turn is None:
            turn = yield Op(mem.next_turn, mem.anext_turn, (), {"namespace": ns})
        elif isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
            raise InvalidMemoryError(f"turn must be a positive integer, got {turn!r}")
        recent = yield Op(
            mem.recent_summaries,
            mem.arecent_summaries,
            (self.config.max_summaries,),
            {"namespace": ns},
        )
        earlier = [cast("SummaryDict", s.to_dict()) for s in recent if s.turn < turn]
        return {
            "namespace": ns,
            "turn": turn,
            "turn_assigned": not given,
            "turn_taken": turn,
            "past_summaries": fit_summaries(earlier, self.config.summary_token_budget),
            "thoughts": [],
            "recalled": [],
            "fallbacks": [],
            "round": 0,
            "wants_more": True,
            "thinking_tokens": 0,
            "summary_tokens": 0,
            "llm_calls": 0,
            "stop_reason": "model",
            "summary": None,
            "context_id": None,
        }

    def think(self, state: ThinkingGraphState, config: RunnableConfig) -> Flow[Update]:
        """One round: prompt, model call with the two tools, recall, decision, budgets."""
        cfg = self.config
        number = state.get("round", 0) + 1
        used = state.get("thinking_tokens", 0)
        fallbacks = list(state.get("fallbacks") or [])
        recalled = list(state.get("recalled") or [])
        thoughts = list(state.get("thoughts") or [])
        messages = self.prompts.thinking(
            context=state["context"],
            conversation=state.get("messages") or [],
            summaries=state.get("past_summaries") or [],
            thoughts=thoughts,
            recalled=recalled,
            round_number=number,
            max_rounds=cfg.max_rounds,
            enable_recall=cfg.enable_recall,
        )
        estimate = int(count_tokens_approximately(messages))
        stop: Update = {"wants_more": False, "fallbacks": fallbacks}
        if used + estimate > cfg.thinking_token_budget:
            fallbacks.append(
                self._fallback(
                    state,
                    "budget_exhausted",
                    f"round {number} needs ~{estimate} prompt tokens; {used} of "
                    f"{cfg.thinking_token_budget} already spent",
                    number,
                )
            )
            return {**stop, "stop_reason": "budget"}
        result = yield guarded(
            Op(
                self.think_model.invoke,
                self.think_model.ainvoke,
                (messages,),
                {"config": self._cfg(config, "thinking.round", state)},
            )
        )
        if isinstance(result, Failure):
            fallbacks.append(self._fallback(state, "thinking_failed", str(result), number))
            return {
                **stop,
                "stop_reason": "model_error",
                "llm_calls": state.get("llm_calls", 0) + 1,
            }
        message = result if isinstance(result, AIMessage) else AIMessage(str(result))
        tokens = _usage_tokens(message)
        if tokens is None:
            tokens = estimate + int(count_tokens_approximately([message]))
        decision: ContinueThinkingArgs | None = None
        round_recalled: list[SnapshotDict] = []
        round_missing: list[str] = []
        asked_recall = False
        for call in [*message.tool_calls, *_unparsed(message)]:
            args = call.get("args") or {}  # (a string: arguments that were not even JSON)
            if call["name"] == CONTINUE_THINKING:
                try:
                    decision = ContinueThinkingArgs.model_validate(args)
                except ValidationError as exc:
                    fallbacks.append(
                        self._fallback(
                            state,
                            "malformed_decision",
                            f"unreadable continue_thinking arguments {args!r}: "
                            f"{exc.error_count()} error(s); taken as ready to act",
                            number,
                        )
                    )
            elif call["name"] == RECALL_CONTEXT and cfg.enable_recall:
                asked_recall = True
                try:
                    request = RecallContextArgs.model_validate(args)
                except ValidationError as exc:
                    found: Any = Failure(exc)
                else:
                    found = yield guarded(
                        Op(
                            self.recall_runnable.invoke,
                            self.recall_runnable.ainvoke,
                            (
                                {
                                    "turn_numbers": request.turn_numbers,
                                    "context_ids": request.context_ids,
                                    "keywords": request.keywords,
                                    "limit": cfg.max_recall_contexts,
                                    "namespace": state.get("namespace"),
                                },
                            ),
                            {"config": self._cfg(config, "thinking.recall_context", state)},
                        )
                    )
                if isinstance(found, Failure):
                    fallbacks.append(
                        self._fallback(
                            state,
                            "recall_failed",
                            f"{found}; thinking goes on without it",
                            number,
                        )
                    )
                    continue
                round_missing += found.missing
                have = {r["id"] for r in recalled} | {r["id"] for r in round_recalled}
                round_recalled += [
                    SnapshotDict(**s.to_dict())  # type: ignore[typeddict-item]
                    for s in found.snapshots
                    if s.id not in have
                ]
        wants_more = decision.continue_thinking if decision is not None else asked_recall
        thought = message.text.strip() or (decision.reason if decision else "")
        thoughts.append(
            ThoughtDict(
                round=number,
                thought=thought,
                continue_thinking=wants_more,
                reason=decision.reason if decision else "",
                next_focus=decision.next_focus if decision else None,
                recalled_ids=[r["id"] for r in round_recalled],
                recall_missing=_shown_missing(round_missing),
                tokens=tokens,
            )
        )
        used += tokens
        update: Update = {
            "round": number,
            "thoughts": thoughts,
            "recalled": recalled + round_recalled,
            "thinking_tokens": used,
            "llm_calls": state.get("llm_calls", 0) + 1,
            "fallbacks": fallbacks,
            "wants_more": False,
            "stop_reason": "model",
        }
        if not wants_more:
            return update
        if number >= cfg.max_rounds:
            fallbacks.append(
                self._fallback(
                    state,
                    "rounds_exhausted",
                    f"the model asked for round {number + 1} of at most {cfg.max_rounds}",
                    number,
                )
            )
            return {**update, "stop_reason": "max_rounds"}
        if used >= cfg.thinking_token_budget:
            fallbacks.append(
                self._fallback(
                    state,
                    "budget_exhausted",
                    f"{used} of {cfg.thinking_token_budget} thinking tokens spent",
                    number,
                )
            )
            return {**update, "stop_reason": "budget"}
        return {**update, "wants_more": True}

    def summarize(self, state: ThinkingGraphState, config: RunnableConfig) -> Flow[Update]:
        """One model call for the turn's summary and insights; the extractive fallback when it
        fails or its answer is unusable (no summary, a template placeholder, or a text the
        stream would refuse, e.g. longer than ``MAX_TEXT_CHARS`` with its insights)."""
        fallbacks = list(state.get("fallbacks") or [])
        thoughts = state.get("thoughts") or []
        context = state["context"]
        turn = int(state.get("turn") or 0)
        messages = self.prompts.summary(context=context, thoughts=thoughts, turn=turn)
        estimate = int(count_tokens_approximately(messages))
        parsed: TurnSummary | None = None
        problem: tuple[FallbackKind, str] | None = None
        tokens = estimate
        result = yield guarded(
            Op(
                self.summary_call.runnable.invoke,
                self.summary_call.runnable.ainvoke,
                (messages,),
                {"config": self._cfg(config, "thinking.summary", state, streamed=False)},
            )
        )
        if isinstance(result, Failure):
            problem = ("summary_failed", str(result))
        else:
            parsed, raw = self.summary_call.unpack(result)
            raw_message = result.get("raw") if isinstance(result, Mapping) else result
            tokens = _usage_tokens(raw_message) or estimate + count_text_tokens(raw)
            if parsed is None:
                data = load_json(raw)
                try:
                    parsed = TurnSummary.model_validate(data) if isinstance(data, dict) else None
                except ValidationError:
                    parsed = None
            if parsed is None or not parsed.summary.strip() or PLACEHOLDER.match(parsed.summary):
                parsed = None
                problem = ("summary_malformed", f"no usable summary in {raw[:200]!r}")
        if parsed is not None:
            summary = " ".join(parsed.summary.split())
            insights = [" ".join(i.split()) for i in parsed.insights if i.strip()][:5]
            fallback = False
            try:  # an answer the stream would refuse (too long, a NUL) is malformed too
                validate_text(summary_text(summary, insights))
            except InvalidMemoryError as exc:
                parsed = None
                problem = ("summary_malformed", f"the summary cannot be stored ({exc})")
        if parsed is None:
            assert problem is not None
            fallbacks.append(
                self._fallback(
                    state, problem[0], problem[1] + "; an extractive summary is stored", 0
                )
            )
            summary, insights = extractive_summary(context, thoughts)
            fallback = True
        return {
            "fallbacks": fallbacks,
            "summary_tokens": tokens,
            "llm_calls": state.get("llm_calls", 0) + 1,
            "summary": {
                "id": "",
                "context_id": "",
                "turn": turn,
                "summary": summary,
                "insights": insights,
                "token_count": count_text_tokens(summary_text(summary, insights)),
                "fallback": fallback,
            },
        }

    def store(
        self,
        state: ThinkingGraphState,
        config: RunnableConfig,
        *,
        attempted: list[int] | None = None,
    ) -> Flow[Update]:
        """Store the snapshot and the summary (when recording); assemble the output.

        A turn is stored whole or not at all (:meth:`ContextMemory.record_turn`); an error of
        the stream is raised with nothing of the turn left behind.

        When the turn number was assigned (``turn_assigned``) and another writer of the
        namespace stored that number meanwhile (turns of one user recorded at once), the turn
        takes the next free number, as often as other writers take the numbers it tries (after
        a short random wait, so the writers that lost one number do not all try the next at
        once); the number is only a label in the summary prompt, so the summary stays valid.
        A number the caller gave is never moved: that raises. ``attempted`` (the middleware's)
        receives each number tried, so a failure names the number it was stored as.
        """
        mem = self.memory
        draft = state.get("summary")
        summaries = list(state.get("past_summaries") or [])
        update: Update = {}
        if state.get("record", True) and draft is not None:
            ns = mem.namespace(state.get("namespace"))
            turn = int(state.get("turn") or 0)
            moves = stale = 0
            while True:
                if attempted is not None:
                    attempted.append(turn)
                result = yield guarded(
                    Op(
                        mem.record_turn,
                        mem.arecord_turn,
                        (turn, state["context"], draft["summary"], draft["insights"]),
                        {
                            "tool_calls": list(state.get("tool_calls") or []),
                            "fallback": draft["fallback"],
                            "namespace": ns,
                            "now": state.get("now"),
                        },
                    )
                )
                if not isinstance(result, Failure):
                    break
                # "taken" means records of that number exist (TurnTakenError: raised only then,
                # with nothing of this turn written); a failed write of this turn's own is
                # undone by record_turn and raised here, never a reason to move
                if not (
                    state.get("turn_assigned", False) and isinstance(result.error, TurnTakenError)
                ):
                    raise result.error
                latest = yield Op(mem.next_turn, mem.anext_turn, (), {"namespace": ns})
                # (counted: another writer stored it, progress; not counted: see _STALE_MOVES)
                stale = 0 if latest > turn else stale + 1
                if stale >= _STALE_MOVES:
                    raise result.error
                moves += 1
                wait = random.uniform(0.0, min(_JITTER_MAX, _JITTER_STEP * moves))
                yield Op(time.sleep, asyncio.sleep, (wait,))
                turn = max(turn + 1, latest)  # (an imported turn may be the newest stored)
            _, stored = result
            current = SummaryDict(**stored.to_dict())  # type: ignore[typeddict-item]
            summaries = fit_summaries([*summaries, current], self.config.summary_token_budget)
            update = {
                "turn": turn,
                "turn_taken": turn,
                "summary": current,
                "context_id": stored.context_id,
            }
        return {**update, **self.output(state, summaries), **RUN_INPUTS_RESET}

    def output(self, state: Mapping[str, Any], summaries: list[SummaryDict]) -> Update:
        """The output keys built from the state and the summaries to inject."""
        fallbacks = state.get("fallbacks") or []
        return {
            "summaries": summaries,
            "accumulated_summaries": "\n".join(format_summaries(summaries)),
            "action_context": render_for_action(
                summaries=summaries,
                thoughts=state.get("thoughts") or [],
                recalled=state.get("recalled") or [],
                max_item_chars=self.prompts.max_item_chars,
            ),
            "fallback_counts": dict(Counter(f["kind"] for f in fallbacks)),
        }

    # -- nodes -----------------------------------------------------------------------------

    def node(self, stage: str, step: Callable[[Any, RunnableConfig], Flow[Update]]) -> FlowNode:
        """A node with a sync and an async body driving ``step`` (no run of its own:
        LangGraph's run of the node is the step's run)."""
        return FlowNode(f"thinking.{stage}", step)
