"""The reflection graph: gate -> questions -> one branch per question -> condense -> store.

Each step is written once, as a generator that ``yield``s its I/O (model calls, stream reads
and writes) as :class:`~langchain_reflective._llm.Op`; the node (a
:class:`~langchain_reflective._llm.FlowNode`) only drives the generator, with sync or async I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs
from langgraph.constants import TAG_NOSTREAM
from langgraph.errors import GraphBubbleUp
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send
from pydantic import BaseModel, Field

from langchain_reflective._llm import (
    Flow,
    FlowNode,
    ModelCall,
    Op,
    fence_block,
    neutralise,
    resolve_chat_model,
    threaded,
)
from langchain_reflective.backends.types import ReflectionState
from langchain_reflective.completion import (
    CompletionCall,
    condense_document,
    insights_document,
    insights_schema,
    questions_document,
    questions_schema,
    resolve_prompt_style,
    subjects,
)
from langchain_reflective.errors import (
    InvalidMemoryError,
    ReflectionConflictError,
    ReflectionError,
)
from langchain_reflective.records import REFLECTION, MemoryRecord, storable_text, utc
from langchain_reflective.reflection.config import ReflectionConfig
from langchain_reflective.reflection.parsing import (
    Insight,
    format_insights,
    map_citations,
    parse_insights,
    parse_questions,
)
from langchain_reflective.reflection.prompts import ReflectionPrompts, Stage
from langchain_reflective.reflection.state import (
    InsightBranch,
    QuestionInsights,
    ReflectionGraphState,
    ReflectionInput,
    ReflectionOutput,
)

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langgraph.types import Checkpointer

    from langchain_reflective.stream import MemoryStream

__all__ = [
    "CitedInsight",
    "InsightList",
    "QuestionList",
    "ReflectionGraph",
    "create_reflection_graph",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")
Update = dict[str, Any]


class QuestionList(BaseModel):
    """Structured answer of the question step."""

    questions: list[str] = Field(description="High-level questions, most salient first.")


class CitedInsight(BaseModel):
    """One insight and the statement numbers it cites."""

    insight: str = Field(description="The insight; name the subjects explicitly.")
    evidence: list[int] = Field(description="Numbers of the statements that support it.")


class InsightList(BaseModel):
    """Structured answer of the insight and condense steps."""

    insights: list[CitedInsight] = Field(description="One entry per insight.")


class _Reflection:
    """The steps of a reflection, bound to a model, a stream and settings."""

    def __init__(
        self,
        model: BaseChatModel,
        stream: MemoryStream,
        config: ReflectionConfig,
        prompts: ReflectionPrompts | None,
    ) -> None:
        self.stream = stream
        self.config = config
        self.prompts = prompts or ReflectionPrompts()
        self.style = resolve_prompt_style(
            model, config.prompt_style, custom_prompts=prompts is not None
        )
        retry, structured = config.retry, config.structured_output
        self.calls: dict[str, ModelCall[Any] | CompletionCall]
        """The call of the question step and of the insight and condense steps."""
        if self.style == "completion":
            completion = CompletionCall.build(model, retry=retry, structured_output=structured)
            self.calls = {"questions": completion, "insights": completion}
        else:
            build = ModelCall.build
            self.calls = {
                "questions": build(model, QuestionList, retry=retry, structured_output=structured),
                "insights": build(model, InsightList, retry=retry, structured_output=structured),
            }

    # -- helpers ---------------------------------------------------------------------------

    def _ask(
        self,
        call: ModelCall[Any] | CompletionCall,
        stage: Stage,
        request: Any,
        config: RunnableConfig,
        namespace: str,
    ) -> Op[Any]:
        cfg = merge_configs(
            config,
            {
                # named for the stage: otherwise LangSmith shows the retry or structured-output
                # wrapper as "RunnableSequence" or as the model's class name
                "run_name": f"reflection.{stage}.model",
                # nostream: questions and insights are the memory's own structured calls,
                # not a parent graph's chat output (stream_mode="messages")
                "tags": ["langchain-reflective", f"reflection.{stage}", TAG_NOSTREAM],
                "metadata": {
                    "namespace": namespace,
                    "reflection_stage": stage,
                    "prompt_style": self.style,
                },
            },
        )
        return Op(call.runnable.invoke, call.runnable.ainvoke, (request,), {"config": cfg})

    def _request(
        self, stage: Stage, *, document: str, schema: dict[str, Any], **values: Any
    ) -> tuple[ModelCall[Any] | CompletionCall, Any]:
        """The call and input of ``stage``: the few-shot ``document`` under ``schema`` on the
        completion path, the stage's chat prompt filled with ``values`` otherwise."""
        call = self.calls["questions" if stage == "questions" else "insights"]
        if isinstance(call, CompletionCall):
            return call, call.request(document, schema)
        return call, self.prompts.format(stage, **values)

    def _insight_pairs(self, result: Any) -> tuple[list[tuple[str, list[int]]], str]:
        parsed, raw = self.calls["insights"].unpack(result)
        pairs: list[tuple[str, list[int]]] = []
        # citations past the statements shown are kept here: map_citations sets them apart
        # (Insight.dropped) and _cited logs them, so an insight dropped for them says so
        if parsed is not None:
            pairs = parse_insights(parsed.model_dump_json())
        if not pairs:
            pairs = parse_insights(raw)
        # stored as memories: one with a NUL, a lone surrogate (a JSON "\ud83d") or too long
        # for a memory would fail the whole store step, so each is made storable
        return [(storable_text(text), cited) for text, cited in pairs], raw

    def _cited(self, stage: Stage, pairs: list[tuple[str, list[int]]], ids: list[str]) -> Any:
        """``map_citations`` of ``pairs``, not lost without a trace: insights dropped for citing
        no shown statement are logged (one warning per step) with what they cited (numbers past
        the statements shown, or nothing); citations of statements not shown that a kept
        insight made are logged at INFO (:attr:`Insight.dropped`)."""
        resolved = map_citations(pairs, ids, keep_without_evidence=True)
        keep_all = self.config.keep_insights_without_evidence
        kept = resolved if keep_all else [i for i in resolved if i.evidence]
        miscited = [i for i in kept if i.dropped]
        if miscited:
            logger.info(
                "reflection %s step: %d insight(s) kept, citations of statements not shown "
                "(only 1-%d were) ignored: %r",
                stage,
                len(miscited),
                len(ids),
                [_described(i) for i in miscited[:5]],
            )
        dropped = [] if keep_all else [i for i in resolved if not i.evidence]
        if dropped:
            logger.warning(
                "reflection %s step: %d insight(s) dropped, citing none of the %d statements "
                "shown: %r",
                stage,
                len(dropped),
                len(ids),
                [_described(i) for i in dropped[:5]],
            )
        return kept

    def _unusable(self, stage: Stage, raw: str) -> None:
        if self.config.strict:
            raise ReflectionError(
                f"the model's answer to the {stage} step is unusable (strict mode): {raw[:300]!r}"
            )
        # (a model that never answers in a usable form would otherwise never reflect, unseen)
        logger.warning(
            "reflection %s step: the model's answer is unusable (%d chars): %r",
            stage,
            len(raw),
            raw[:200],
        )

    # -- steps -----------------------------------------------------------------------------

    def gate(self, state: ReflectionGraphState, config: RunnableConfig) -> Flow[Update]:
        """Read the counter; go on when it reached the threshold (or when forced)."""
        ns = state.get("namespace") or self.stream.namespace
        if not isinstance(ns, str):  # (e.g. a parent graph's own namespace key: a tuple)
            raise InvalidMemoryError(
                "the namespace reflected on must be a non-empty string (a memory namespace, "
                f"e.g. 'alice'), got {ns!r:.80} ({type(ns).__name__}); run as a node, the "
                "reflection graph takes the parent graph's 'namespace' key"
            )
        raw_now = state.get("now")
        now = utc(raw_now) if raw_now is not None else datetime.now(UTC)
        st = self.stream
        counter = yield Op(st.reflection_state, threaded(st.reflection_state), (ns,))
        total = float(counter.importance_sum)
        update: Update = {
            "namespace": ns,
            "run_now": now,  # (not written to ``now``: a thread's next run would take it as given)
            "importance_sum": total,
            "adds_since": int(counter.adds_since),
            "reflection_generation": counter.generation,
            "questions": [],
            "reflections": [],
            "reflection_ids": [],
            "recent": [],
            "branches": None,
            "condensed": [],
            "skipped": None,
        }
        if state.get("force"):
            update["force"] = False  # (one run's: a checkpointed thread's next run is not forced)
        elif total < self.config.threshold:
            return {**update, "skipped": "below_threshold"}
        recent = yield Op(
            st.recent, threaded(st.recent), (self.config.recent_window,), {"namespace": ns}
        )
        if not recent:
            return {**update, "skipped": "no_memories"}
        return {**update, "recent": [r.text for r in recent]}

    def questions(self, state: ReflectionGraphState, config: RunnableConfig) -> Flow[Update]:
        """Ask ``n_questions`` high-level questions about the recent memories."""
        ns, n = state["namespace"] or self.stream.namespace, self.config.n_questions
        recent, max_chars = state.get("recent", []), self.config.max_chars
        call, request = self._request(
            "questions",
            document=questions_document(recent, n, max_chars=max_chars),
            schema=questions_schema(n, subjects(recent)),
            statements=fence_block(recent, "statements", max_chars=max_chars),
            n_questions=n,
        )
        result = yield self._ask(call, "questions", request, config, ns)
        parsed, raw = call.unpack(result)
        questions = parse_questions(parsed.model_dump_json(), n) if parsed is not None else []
        questions = questions or parse_questions(raw, n)
        if not questions:
            self._unusable("questions", raw)
            return {"questions": [], "skipped": "no_questions"}
        # queries, and the reflections' metadata: a NUL or a lone surrogate would fail them
        return {"questions": [storable_text(q) for q in questions]}

    def insights(self, branch: InsightBranch, config: RunnableConfig) -> Flow[Update]:
        """Retrieve evidence for one question and ask for insights citing it."""
        cfg, ns = self.config, branch["namespace"]
        flt: dict[str, Any] = {"min_relevance": cfg.min_relevance}
        if cfg.evidence_kinds is not None:
            flt["kinds"] = list(cfg.evidence_kinds)
        hits = yield Op(
            self.stream.retrieve,
            self.stream.aretrieve,
            (branch["question"],),
            {
                "k": cfg.evidence_k,
                "filter": flt,
                "touch": cfg.touch_evidence,
                "namespace": ns,
                "now": branch["now"],
            },
        )
        records: list[MemoryRecord] = [h.record for h in hits]
        found = QuestionInsights(
            index=branch["index"], question=branch["question"], insights=[], evidence_ids=[]
        )
        if not records:
            return {"branches": [found]}
        texts = [r.text for r in records]
        call, request = self._request(
            "insights",
            document=insights_document(texts, branch["question"], max_chars=cfg.max_chars),
            schema=insights_schema(len(records), cfg.max_insights, subjects(texts)),
            statements=fence_block(texts, "statements", max_chars=cfg.max_chars),
            question=neutralise(branch["question"]),
        )
        result = yield self._ask(call, "insights", request, config, ns)
        pairs, raw = self._insight_pairs(result)
        insights = self._cited("insights", pairs, [r.id for r in records])
        if not insights:
            self._unusable("insights", raw)
        if len(insights) > cfg.max_insights:  # (asked for at most that many: the condense
            logger.warning(  # prompt holds every question's, and must fit the model)
                "reflection insights step: %d insights for one question, the first %d kept",
                len(insights),
                cfg.max_insights,
            )
            insights = insights[: cfg.max_insights]
        found["insights"] = [i.to_dict() for i in insights]
        found["evidence_ids"] = [r.id for r in records]
        return {"branches": [found]}

    def condense(self, state: ReflectionGraphState, config: RunnableConfig) -> Flow[Update]:
        """Condense all branches' insights to at most ``max_insights``.

        Each branch cited its own statement numbers; they are renumbered over the union of
        cited records before the condense prompt, and mapped back to ids after it. If the answer
        yields nothing usable, the branches' insights are taken round-robin instead.
        """
        cfg = self.config
        ns = state.get("namespace") or self.stream.namespace
        branches = sorted(state.get("branches") or [], key=lambda b: b["index"])
        groups = [[Insight.from_dict(i) for i in b["insights"]] for b in branches]
        pool = [i for group in groups for i in group]
        if not pool:
            return {"condensed": []}
        ids = list(dict.fromkeys(e for i in pool for e in i.evidence))
        numbers = {rid: n for n, rid in enumerate(ids, 1)}
        lines = format_insights(pool, numbers)
        call, request = self._request(
            "condense",
            document=condense_document(lines, cfg.max_insights),
            schema=insights_schema(
                len(ids), cfg.max_insights, subjects(state.get("recent") or lines)
            ),
            insights=fence_block(lines, "insights"),
            max_insights=cfg.max_insights,
        )
        result = yield self._ask(call, "condense", request, config, ns)
        pairs, raw = self._insight_pairs(result)
        condensed = self._cited("condense", pairs, ids)[: cfg.max_insights]
        if not condensed:
            self._unusable("condense", raw)
            condensed = _round_robin(groups)[: cfg.max_insights]
        return {"condensed": [i.to_dict() for i in condensed]}

    def store(self, state: ReflectionGraphState, config: RunnableConfig) -> Flow[Update]:
        """Store the insights as ``reflection`` records and reset the counter, atomically, if
        no other reflection reset it since the gate read it (else: ``superseded``)."""
        ns = state.get("namespace") or self.stream.namespace
        now = state.get("run_now") or datetime.now(UTC)
        condensed = [Insight.from_dict(i) for i in state.get("condensed") or []]
        st = self.stream
        # what the gate counted: memories stored while this reflection ran keep counting; its
        # generation makes the reset (and so the whole write) conditional on no other reset
        seen = ReflectionState(
            state.get("importance_sum", 0.0),
            state.get("adds_since", 0),
            generation=state.get("reflection_generation"),
        )
        try:
            if not condensed:
                if self.config.reset_on_empty:
                    yield Op(
                        st.mark_reflected,
                        threaded(st.mark_reflected),
                        (),
                        {"namespace": ns, "now": now, "consumed": seen},
                    )
                return {
                    "reflections": [],
                    "reflection_ids": [],
                    "skipped": state.get("skipped") or "no_insights",
                }
            questions = list(state.get("questions") or [])
            records = yield Op(
                st.add,
                st.aadd,
                ([i.text for i in condensed],),
                {
                    "kinds": REFLECTION,
                    "evidence": [list(i.evidence) for i in condensed],
                    "metadatas": [{"questions": questions} for _ in condensed],
                    "namespace": ns,
                    "now": now,
                    "reset_reflection_counter": seen,
                },
            )
        except ReflectionConflictError as exc:
            logger.info(
                "reflection of namespace %r superseded: %s (%d insight(s) not stored)",
                ns,
                exc,
                len(condensed),
            )
            return {"reflections": [], "reflection_ids": [], "skipped": "superseded"}
        return {
            "reflections": list(records),
            "reflection_ids": [r.id for r in records],
            "skipped": None,
        }

    # -- nodes -----------------------------------------------------------------------------

    def node(self, stage: str, step: Callable[[Any, RunnableConfig], Flow[Update]]) -> FlowNode:
        """A node running ``step`` with both a sync and an async body; errors are wrapped.

        The node starts no run of its own: LangGraph's run of the node (named after the step)
        is the step's run, with the step's model calls inside it.
        """

        def wrap(exc: Exception) -> Exception:
            if isinstance(exc, ReflectionError | GraphBubbleUp):
                return exc
            # (worded to follow "reflection failed: ", as the reflect_now tool reports it)
            return ReflectionError(
                f"the {stage} step raised {type(exc).__name__}: {exc}; nothing was written"
            )

        return FlowNode(f"reflection.{stage}", step, wrap=wrap)


def _described(insight: Insight) -> str:
    """``"text (cited 7, 9)"`` for a log line: the insight and the citations it lost."""
    cited = ", ".join(dict.fromkeys(insight.dropped)) or "nothing"
    return f"{insight.text[:80]} (cited {cited})"


def _round_robin(groups: Sequence[Sequence[Insight]]) -> list[Insight]:
    out: list[Insight] = []
    seen: set[str] = set()
    for i in range(max((len(g) for g in groups), default=0)):
        for group in groups:
            if i < len(group) and group[i].text.lower() not in seen:
                seen.add(group[i].text.lower())
                out.append(group[i])
    return out


def route_after_gate(state: ReflectionGraphState) -> str:
    """Go on to the questions unless the gate skipped the reflection."""
    return END if state.get("skipped") else "questions"


def fan_out_questions(state: ReflectionGraphState) -> list[Send] | str:
    """One ``insights`` branch per question (in parallel), or straight to ``store``."""
    questions = state.get("questions") or []
    if not questions:
        return "store"
    ns = state.get("namespace") or ""
    now = state.get("run_now") or datetime.now(UTC)
    return [
        Send("insights", InsightBranch(index=i, question=q, namespace=ns, now=now))
        for i, q in enumerate(questions)
    ]


def create_reflection_graph(
    model: str | BaseChatModel,
    stream: MemoryStream,
    *,
    config: ReflectionConfig | None = None,
    prompts: ReflectionPrompts | None = None,
    checkpointer: Checkpointer = None,
    name: str = "reflection",
) -> CompiledStateGraph[ReflectionGraphState, None, ReflectionInput, ReflectionOutput]:
    """Build the reflection graph of Generative Agents (seed 002) over a memory stream.

    Steps (nodes; in a trace each is one run named after the node, e.g. ``gate``, inside
    the graph's ``reflection`` run, with its model call ``reflection.<step>.model`` inside it;
    every run's metadata names the namespace reflected on, ``namespace``, see
    :class:`ReflectionGraph`):

    1. ``gate``: go on if the importance summed since the last reflection reaches
       ``config.threshold`` (or ``force=True``); read the ``recent_window`` newest memories.
    2. ``questions``: one model call asks ``n_questions`` high-level questions about them.
    3. ``insights``: one branch per question, in parallel (``Send``): retrieve evidence
       (relevance >= ``min_relevance``), one model call for insights citing statement numbers,
       numbers mapped back to record ids (out-of-range citations dropped, and logged).
    4. ``condense``: one model call condenses all insights to at most ``max_insights``.
    5. ``store``: one ``stream.add`` stores them as ``reflection`` records with ``evidence``
       and ``depth = 1 + max(depth of evidence)``, importance rated by the stream's scorer
       (one batched call), and takes what the gate counted off the counter in the same
       transaction (memories stored meanwhile count towards the next reflection).

    At most one reflection per counter, without a lock across steps: the gate reads the
    counter's generation (``ReflectionState.generation``, raised by every reset) and the store
    step's reset is conditional on it, in the transaction that stores the insights. Two runs for
    one namespace at once (threads, processes, machines sharing a Postgres database) may both
    think, but only the first to store does: the other's transaction writes nothing and it
    ends with ``skipped="superseded"`` and no reflections (logged at INFO), leaving the counter
    as the winner left it. A forced run (``force=True``) that loses the race is superseded too,
    and so is a ``reset_on_empty`` reset. To keep a second run from calling the model at all,
    run reflections through :class:`~langchain_reflective.memory.ReflectiveMemory` (which holds
    the backend's reflection lock around the whole run, across processes too) or wrap the
    graph in ``stream.backend.reflection_lock(namespace)`` yourself.

    All or nothing: a model error (after retries) or a storage error at any step raises
    :class:`~langchain_reflective.errors.ReflectionError` and nothing is written. Malformed
    answers take the documented fallbacks (``config.strict=True`` raises instead).

    Example:
        .. code-block:: python

            graph = create_reflection_graph(ChatOpenAI(model="gpt-4o-mini"), stream)
            out = graph.invoke({"force": True})
            for record in out["reflections"]:
                print(record.text, record.evidence)

    Args:
        model: The chat model, or a ``"provider:model"`` string for ``init_chat_model``.
        stream: The memory stream to reflect on and to store reflections in.
        config: Thresholds, sizes, strictness, retries (:class:`ReflectionConfig`).
        prompts: Custom prompts, e.g. a synthesis (insights) prompt (:class:`ReflectionPrompts`).
        checkpointer: Passed to ``compile``. A thread keeps its inputs as LangGraph state
            does (``namespace``, ``now`` when given), except ``force``, which holds for one
            run. With ``None`` (the default) a run inside a checkpointed graph -- the graph
            added as a node, or invoked from a node or a tool -- saves its state in the
            caller's checkpoints: the texts of the memories it reflects on (``recent``), its
            questions and insights, which ``MemoryStream.purge`` cannot reach. Pass
            ``checkpointer=False`` to keep them out (it then keeps no state of its own, and
            an interrupt cannot resume it); ``ReflectiveMemory`` compiles its graph so.
        name: The compiled graph's name (its run name in traces).

    Returns:
        A compiled ``StateGraph`` (a :class:`ReflectionGraph`) with input
        :class:`ReflectionInput` (``force``, ``namespace``, ``now``) and output
        :class:`ReflectionOutput` (``reflections``, ``questions``, ``skipped``,
        ``importance_sum``); ``invoke``/``ainvoke``/``stream`` all work, alone or as a node of
        a parent graph.
    """
    cfg = config or ReflectionConfig()
    steps = _Reflection(resolve_chat_model(model), stream, cfg, prompts)
    builder = StateGraph(
        ReflectionGraphState, input_schema=ReflectionInput, output_schema=ReflectionOutput
    )
    builder.add_node("gate", steps.node("gate", steps.gate))
    builder.add_node("questions", steps.node("questions", steps.questions))
    builder.add_node("insights", steps.node("insights", steps.insights), input_schema=InsightBranch)
    builder.add_node("condense", steps.node("condense", steps.condense))
    builder.add_node("store", steps.node("store", steps.store))
    builder.add_edge(START, "gate")
    builder.add_conditional_edges("gate", route_after_gate, ["questions", END])
    builder.add_conditional_edges("questions", fan_out_questions, ["insights", "store"])
    builder.add_edge("insights", "condense")
    builder.add_edge("condense", "store")
    builder.add_edge("store", END)
    compiled = builder.compile(checkpointer=checkpointer, name=name)
    graph = ReflectionGraph(
        default_namespace=stream.namespace,
        **{k: v for k, v in vars(compiled).items() if k != "__orig_class__"},  # (as copy())
    )
    return graph.with_config(
        tags=["langchain-reflective", "reflection"], metadata={"ls_component": "reflection"}
    )


class ReflectionGraph(
    CompiledStateGraph[ReflectionGraphState, None, ReflectionInput, ReflectionOutput]
):
    """The compiled reflection graph: each run's metadata names the namespace it reflects on
    (``namespace``), so its steps' runs and their calls (model calls, the store step's
    rating) carry it, run alone or as a node of a parent graph.

    The namespace is the input's; without one, the stream's default, unless the graph keeps
    threads of its own (a ``checkpointer``), whose state may name another: then only the model
    calls name it (the steps read it from the state).
    """

    def __init__(self, *, default_namespace: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.default_namespace = default_namespace
        """The stream's namespace, reflected on when the input names none."""

    def _traced(self, input: Any, config: RunnableConfig | None) -> RunnableConfig | None:
        """``config`` with the namespace reflected on in its metadata, when it is known."""
        ns = input.get("namespace") if isinstance(input, Mapping) else None
        if ns is None and isinstance(input, Mapping) and self.checkpointer in (None, False):
            ns = self.default_namespace  # (no state of its own to take one from)
        if not isinstance(ns, str) or not ns:  # (unknown, or one the gate refuses)
            return config
        return merge_configs(config, {"metadata": {"namespace": ns}})

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """LangGraph's ``stream`` (which ``invoke`` runs, alone or as a parent's node), with
        the namespace in the run's metadata."""
        return super().stream(input, self._traced(input, config), **kwargs)

    def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Async twin of :meth:`stream` (``ainvoke`` runs it)."""
        return super().astream(input, self._traced(input, config), **kwargs)
