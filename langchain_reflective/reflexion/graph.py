"""The Reflexion loop as a LangGraph graph: actor -> evaluate -> self_reflect -> store -> actor.

Each step is a generator that ``yield``s its I/O as :class:`~langchain_reflective._llm.Op`, so
one body serves ``invoke`` and ``ainvoke`` (see :mod:`langchain_reflective.reflection.graph`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.runnables.config import merge_configs
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import END, START, StateGraph
from langgraph.pregel import Pregel

from langchain_reflective._llm import (
    Failure,
    Flow,
    FlowNode,
    ModelCall,
    Op,
    guarded,
    resolve_chat_model,
    threaded,
)
from langchain_reflective.errors import StorageError
from langchain_reflective.reflexion.actor import actor_input, attempt_of, error_evaluation
from langchain_reflective.reflexion.config import (
    STRATEGIES,
    ReflexionConfig,
    ReflexionInput,
    ReflexionOutput,
    ReflexionState,
    Strategy,
)
from langchain_reflective.reflexion.episodic import (
    REFLEXION_KIND,
    Episode,
    episode,
    fit_to_budget,
    load_loop,
    loop_status,
    reflection_window,
    search_reflections,
)
from langchain_reflective.reflexion.evaluators import Attempt, BaseEvaluator
from langchain_reflective.reflexion.reflection import (
    InlineAttempt,
    ReflexionPrompts,
    reflect_flow,
)
from langchain_reflective.reflexion.schema import EvaluatorOutput, SelfReflection
from langchain_reflective.reflexion.trials import trial_record, trial_record_id

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph
    from langgraph.types import Checkpointer

    from langchain_reflective.stream import MemoryStream

__all__ = ["ActorInput", "create_reflexion_graph"]

T = TypeVar("T")
Update = dict[str, Any]
ActorInput = dict[str, Any]
"""What a plain Runnable actor receives: ``task``, ``iteration``, ``context`` (the fenced
notes as one string), ``reflections`` (the window's structured reflections), ``last_attempt``,
``lessons`` and ``messages`` (the same as a chat model would get)."""

logger = logging.getLogger(__name__)


class _Reflexion:
    """The steps of a Reflexion loop, bound to an actor, an evaluator, a stream and settings."""

    def __init__(
        self,
        actor: Any,
        evaluator: BaseEvaluator,
        stream: MemoryStream,
        *,
        reflection_model: BaseChatModel | None,
        omega: int,
        max_trials: int,
        strategy: Strategy,
        config: ReflexionConfig,
        prompts: ReflexionPrompts,
    ) -> None:
        if isinstance(actor, BaseChatModel):
            self.actor_kind = "chat"
        elif isinstance(actor, Pregel):
            self.actor_kind = "graph"
        else:
            self.actor_kind = "runnable"
        self.actor: Runnable[Any, Any] = coerce_to_runnable(actor)
        self.evaluator = evaluator
        self.stream = stream
        self.omega = omega
        self.max_trials = max_trials
        self.strategy = strategy
        self.config = config
        self.prompts = prompts
        self.reflects = strategy in ("reflexion", "last_attempt_reflexion")
        self.inline = config.inline_reflection
        if self.inline and (self.actor_kind != "chat" or not self.reflects):
            raise ValueError(
                "inline_reflection needs a chat model actor and a strategy that reflects "
                "('reflexion' or 'last_attempt_reflexion')"
            )
        self.call: ModelCall[SelfReflection] | None = (
            ModelCall.build(
                reflection_model,
                SelfReflection,
                retry=config.retry,
                structured_output=config.structured_output,
            )
            if reflection_model is not None
            else None
        )
        self.inline_call: ModelCall[InlineAttempt] | None = (
            ModelCall.build(
                actor,
                InlineAttempt,
                retry=config.retry,
                structured_output=config.structured_output,
            )
            if self.inline
            else None
        )

    # -- helpers ---------------------------------------------------------------------------

    def _cfg(self, config: RunnableConfig, step: str, state: ReflexionState) -> RunnableConfig:
        tags = ["langchain-reflective", f"reflexion.{step}"]
        named: RunnableConfig = {}
        if step == "self_reflect":
            # the memory's own call: named for its step (LangSmith showed the retry wrapper
            # under the model's class name) and kept out of stream_mode="messages", where a
            # chat UI would show the reflection as the agent's answer; the actor stays streamed
            named = {"run_name": "reflexion.self_reflect.model"}
            tags.append(TAG_NOSTREAM)
        return merge_configs(
            config,
            named,
            {
                "tags": tags,
                "metadata": {
                    "loop_id": state.get("loop_id"),
                    "iteration": state.get("iteration", 0),
                    "reflexion_step": step,
                },
            },
        )

    def _ns(self, state: ReflexionState) -> str:
        return self.stream.resolve_namespace(state.get("namespace"))

    def _actor_input(self, state: ReflexionState) -> tuple[Any, int]:
        return actor_input(
            state,
            kind=self.actor_kind,
            strategy=self.strategy,
            omega=self.omega if self.reflects else 0,
            max_reflection_tokens=self.config.max_reflection_tokens,
            max_chars=self.config.max_chars,
            context_prompt=self.prompts.actor_context,
        )

    # -- steps -----------------------------------------------------------------------------

    def load(self, state: ReflexionState, config: RunnableConfig) -> Flow[Update]:
        """Read the loop's stored trials: a new loop, a loop to resume, or a finished one."""
        task = state.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ValueError("the Reflexion graph needs a non-empty 'task' string")
        ns = self._ns(state)
        loop_id = state.get("loop_id") or uuid.uuid4().hex
        st = self.stream
        episodes: list[Episode] = yield Op(
            load_loop, threaded(load_loop), (st, loop_id), {"namespace": ns}
        )
        if episodes and str(episodes[0].get("task", task)) != task:
            # the id of another task's loop: left in a checkpointed thread's state by the
            # previous run, or reused; resuming it would answer the wrong task
            logger.info("loop %s was for another task: a new loop starts for this one", loop_id)
            loop_id, episodes = uuid.uuid4().hex, []
        status = loop_status(episodes)
        update: Update = {
            "namespace": ns,
            "loop_id": loop_id,
            "episodes": episodes,
            "iteration": len(episodes),
            "resumed": bool(episodes),
            "lessons": [],
            "lessons_reused": [],
            "reflection": None,
            "error": None,
            "done": False,
            "pending": None,
        }
        if episodes and (status != "running" or len(episodes) >= self.max_trials):
            last = episodes[-1]
            update.update(
                done=True,
                status=status if status != "running" else "failed",
                output=str(last.get("attempt", "")),
                evaluation=last.get("evaluator_output"),
                error=last.get("error"),
            )
            return update
        if not episodes and self.config.prior_lessons > 0:
            hits = yield Op(
                search_reflections,
                threaded(search_reflections),
                (st, task),
                {
                    "limit": self.config.prior_lessons,
                    "namespace": ns,
                    "min_confidence": self.config.prior_min_confidence,
                    "include_low_quality": False,
                    "exclude_loops": [loop_id],
                },
            )
            lessons = list(dict.fromkeys(lesson for h in hits for lesson in h.lessons))
            update["lessons"] = lessons
            update["lessons_reused"] = [h.record.id for h in hits]
        return update

    def act(self, state: ReflexionState, config: RunnableConfig) -> Flow[Update]:
        """One attempt of the actor, with the window (and lessons) in its context."""
        pending = state.get("pending")
        if pending is not None:
            return (yield from self._act_inline(state, config, pending))
        payload, sent = self._actor_input(state)
        cfg = self._cfg(config, "actor", state)
        result = yield guarded(
            Op(self.actor.invoke, self.actor.ainvoke, (payload,), {"config": cfg})
        )
        if isinstance(result, Failure):
            return {"attempt": "", "actions": [], "error": f"the actor failed: {result}"}
        text, actions = attempt_of(result, sent)
        return {"attempt": text, "actions": actions, "error": None}

    def _act_inline(
        self, state: ReflexionState, config: RunnableConfig, pending: Mapping[str, Any]
    ) -> Flow[Update]:
        """One call: the reflection on the pending failure, then the next attempt."""
        from langchain_reflective.reflexion.reflection import (
            fallback_reflection,
            parse_inline,
            reflection_quality,
        )

        assert self.inline_call is not None
        cfg = self.config
        episodes = list(state.get("episodes") or [])
        evaluation = EvaluatorOutput.model_validate(pending["evaluation"])
        # the reflection written now takes one of the Ω places in the actor's context
        shown = fit_to_budget(
            reflection_window(episodes, self.omega - 1), cfg.max_reflection_tokens
        )
        messages = self.prompts.inline_messages(
            task=state["task"],
            actions=list(pending.get("actions") or []),
            attempt=str(pending.get("attempt", "")),
            evaluation=evaluation,
            previous=shown,
            min_chars=cfg.min_reflection_chars,
            max_chars=cfg.max_chars,
        )
        call = self.inline_call
        result = yield guarded(
            Op(
                call.runnable.invoke,
                call.runnable.ainvoke,
                (messages,),
                {"config": self._cfg(config, "actor", state)},
            )
        )
        error = None
        if isinstance(result, Failure):
            reflection, answer = None, ""
            error = f"the actor failed: {result}"
        else:
            parsed, raw = call.unpack(result)
            reflection, answer = parse_inline(parsed, raw)
        if reflection is None:
            reflection = fallback_reflection(evaluation, iteration=int(pending["iteration"]))
            issues, source = ["unparseable"], "fallback"
        else:
            earlier = [
                e["self_reflection"]["reflection_text"]
                for e in episodes
                if e["kind"] == REFLEXION_KIND
            ]
            issues = list(
                reflection_quality(reflection, earlier, min_chars=cfg.min_reflection_chars)
            )
            source = "model"
        trial = {
            **pending,
            "in_context": [e["iteration"] for e in shown] + [pending["iteration"]],
            "reflection": {
                "self_reflection": reflection.model_dump(mode="json"),
                "low_quality": bool(issues) or source == "fallback",
                "quality_issues": issues,
                "reflection_source": source,
            },
        }
        episodes, fresh = yield from self._write(state, trial, episodes)
        if not fresh:  # another run stored this trial: redo the attempt from what is stored
            resync = self._resync(episodes)
            if resync["done"]:
                return resync
            again = cast("ReflexionState", {**state, **resync})
            return {**resync, **(yield from self.act(again, config))}
        return {
            **self._progress(episodes),
            "pending": None,
            "attempt": answer,
            "actions": [],
            "error": error,
        }

    def evaluate(self, state: ReflexionState, config: RunnableConfig) -> Flow[Update]:
        """Verify the attempt (skipped after a critical actor error)."""
        if state.get("error"):
            return {"evaluation": error_evaluation(state["error"] or "")}
        attempt = Attempt(
            task=state["task"],
            output=state.get("attempt", ""),
            actions=list(state.get("actions") or []),
            iteration=state.get("iteration", 0),
        )
        ev = self.evaluator
        result = yield guarded(Op(ev.evaluate, ev.aevaluate, (attempt,)))
        if isinstance(result, Failure):
            msg = f"the evaluator failed: {result}"
            return {"evaluation": error_evaluation(msg), "error": msg}
        if not isinstance(result, EvaluatorOutput):
            msg = f"the evaluator returned {type(result).__name__}, not an EvaluatorOutput"
            return {"evaluation": error_evaluation(msg), "error": msg}
        return {"evaluation": result.model_dump(mode="json")}

    def _outcome(self, state: ReflexionState) -> str:
        if state.get("error"):
            return "error"
        evaluation = state.get("evaluation") or {}
        if evaluation.get("passed"):
            return "passed"
        return "max_trials" if state.get("iteration", 0) + 1 >= self.max_trials else "failed"

    def self_reflect(self, state: ReflexionState, config: RunnableConfig) -> Flow[Update]:
        """Write a structured self-reflection on the failure (quality-checked, one retry)."""
        from langchain_reflective.reflexion.reflection import (
            ReflectionOutcome,
            fallback_reflection,
        )

        evaluation = EvaluatorOutput.model_validate(state.get("evaluation"))
        episodes = state.get("episodes") or []
        window = reflection_window(episodes, self.omega)
        outcome = self._outcome(state)
        iteration = state.get("iteration", 0)
        if self.call is None:  # an error under a strategy without a reflection model
            result = ReflectionOutcome(
                fallback_reflection(evaluation, iteration=iteration, error=state.get("error")),
                ["unparseable"],
                "fallback",
                0,
            )
        else:
            messages = self.prompts.reflection_messages(
                task=state["task"],
                actions=list(state.get("actions") or []),
                attempt=state.get("attempt", ""),
                evaluation=evaluation,
                previous=window,
                outcome=outcome,  # type: ignore[arg-type]
                min_chars=self.config.min_reflection_chars,
                max_chars=self.config.max_chars,
            )
            previous_texts = [
                e["self_reflection"]["reflection_text"]
                for e in episodes
                if e["kind"] == REFLEXION_KIND
            ]
            result = yield from reflect_flow(
                self.call,
                messages,
                previous_texts=previous_texts,
                evaluation=evaluation,
                iteration=iteration,
                min_chars=self.config.min_reflection_chars,
                retry_prompt=self.prompts.retry,
                quality_retry=self.config.quality_retry,
                config=self._cfg(config, "self_reflect", state),
                error=state.get("error"),
            )
        return {
            "reflection": {
                "self_reflection": result.reflection.model_dump(mode="json"),
                "low_quality": result.low_quality,
                "quality_issues": list(result.issues),
                "reflection_source": result.source,
            }
        }

    def _write(
        self, state: ReflexionState, trial: Mapping[str, Any], episodes: list[Episode]
    ) -> Flow[tuple[list[Episode], bool]]:
        """Store one trial: ``(the loop's episodes with it appended, True)``.

        The record's id is derived from (namespace, loop, iteration), so when another run of
        the same loop stored this iteration first, the write fails with a duplicate id and
        nothing is stored twice: then ``(the loop's stored episodes, False)``, to continue from
        what is stored. Any other storage error is raised.
        """
        text, meta, kind, importance = trial_record(
            trial,
            episodes,
            loop_id=state["loop_id"],
            task=state["task"],
            lessons_reused=state.get("lessons_reused") or [],
            strategy=self.strategy,
            omega=self.omega,
            config=self.config,
        )
        st, ns = self.stream, self._ns(state)
        record_id = trial_record_id(ns, state["loop_id"], int(trial["iteration"]))
        records = yield guarded(
            Op(
                st.add,
                st.aadd,
                ([text],),
                {
                    "kinds": kind,
                    "metadatas": [meta],
                    "importances": [importance],
                    "ids": [record_id],
                    "namespace": ns,
                },
            )
        )
        if not isinstance(records, Failure):
            return [*episodes, episode(records[0])], True
        if isinstance(records.error, StorageError):  # a duplicate only if it is stored now
            stored: list[Episode] = yield Op(
                load_loop, threaded(load_loop), (st, state["loop_id"]), {"namespace": ns}
            )
            if any(e["id"] == record_id for e in stored):
                return stored, False
        raise records.error

    def _resync(self, stored: list[Episode]) -> Update:
        """Continue from the loop as stored by another run (after a duplicate iteration)."""
        status = loop_status(stored)
        done = status != "running" or len(stored) >= self.max_trials
        last = stored[-1]
        return {
            **self._progress(stored),
            "status": (status if status != "running" else "failed") if done else "running",
            "done": done,
            "passed": bool(last.get("passed")),
            "iteration": len(stored),
            "output": str(last.get("attempt", "")),
            "evaluation": last.get("evaluator_output"),
            "error": last.get("error"),
            "reflection": None,
            "pending": None,
        }

    def _progress(self, episodes: list[Episode]) -> Update:
        window = (
            fit_to_budget(
                reflection_window(episodes, self.omega), self.config.max_reflection_tokens
            )
            if self.reflects
            else []
        )
        return {
            "episodes": episodes,
            "reflections": [e for e in episodes if e["kind"] == REFLEXION_KIND],
            "window": [e["iteration"] for e in window],
            "rewards": [float(e.get("reward", 0.0)) for e in episodes],
            "trials": len(episodes),
        }

    def store(self, state: ReflexionState, config: RunnableConfig) -> Flow[Update]:
        """Store the trial (with its reflection, if any) and move the window.

        With inline reflection, a failed trial that is not the last waits (``pending``) for
        the next attempt's call to write its reflection; it is stored then.
        """
        iteration = state.get("iteration", 0)
        outcome = self._outcome(state)
        trial = {
            "iteration": iteration,
            "outcome": outcome,
            "evaluation": state.get("evaluation") or {},
            "attempt": state.get("attempt", ""),
            "actions": list(state.get("actions") or []),
            "error": state.get("error"),
            "reflection": state.get("reflection"),
        }
        status = {"passed": "passed", "error": "error", "max_trials": "failed"}.get(
            outcome, "running"
        )
        common: Update = {
            "status": status,
            "passed": outcome == "passed",
            "output": trial["attempt"],
            "iteration": iteration + 1 if status == "running" else iteration,
            "reflection": None,
        }
        if self.inline and outcome == "failed" and trial["reflection"] is None:
            return {**common, "pending": trial}
        episodes, fresh = yield from self._write(state, trial, list(state.get("episodes") or []))
        if not fresh:
            return self._resync(episodes)
        return {**common, **self._progress(episodes)}

    def finish(self, state: ReflexionState) -> Update:
        """Fill the output of a loop loaded as already finished."""
        episodes = list(state.get("episodes") or [])
        return {
            **self._progress(episodes),
            "passed": bool(episodes and episodes[-1].get("passed")),
        }

    # -- routing ---------------------------------------------------------------------------

    def after_load(self, state: ReflexionState) -> str:
        return "finish" if state.get("done") else "actor"

    def after_act(self, state: ReflexionState) -> str:
        return END if state.get("done") else "evaluate"

    def after_evaluate(self, state: ReflexionState) -> str:
        if state.get("error"):
            return "self_reflect"
        if (state.get("evaluation") or {}).get("passed"):
            return "store"
        if self.inline and self._outcome(state) == "failed":
            return "store"  # the next attempt's call writes the reflection
        return "self_reflect" if self.reflects else "store"

    def after_store(self, state: ReflexionState) -> str:
        return "actor" if state.get("status") == "running" else END

    # -- nodes -----------------------------------------------------------------------------

    def node(self, step: str, fn: Callable[[Any, RunnableConfig], Flow[Update]]) -> FlowNode:
        """A node with a sync and an async body driving the same step (no run of its own:
        LangGraph's run of the node is the step's run)."""
        return FlowNode(f"reflexion.{step}", fn)


def create_reflexion_graph(
    actor: BaseChatModel | Runnable[Any, Any] | Callable[..., Any],
    evaluator: BaseEvaluator,
    *,
    stream: MemoryStream,
    omega: int = 3,
    max_trials: int = 5,
    strategy: Strategy = "reflexion",
    reflection_model: str | BaseChatModel | None = None,
    config: ReflexionConfig | None = None,
    prompts: ReflexionPrompts | None = None,
    checkpointer: Checkpointer = None,
    name: str = "reflexion",
) -> CompiledStateGraph[ReflexionState, None, ReflexionInput, ReflexionOutput]:
    """Build a Reflexion loop (Shinn et al. 2023; seed 003) with episodic memory in a stream.

    Nodes (in a trace, one run each, named after the node, inside the ``reflexion`` run):
    ``load`` reads the loop's stored trials (a new loop, a loop to resume after a restart, or a
    finished one returned as stored) -> ``actor`` makes an attempt with the Ω window of its
    reflections (and, when asked, lessons of similar past loops) in its context ->
    ``evaluate`` verifies it -> on failure
    ``self_reflect`` writes a structured first-person reflection -> ``store`` keeps the trial
    as a memory record -> the next attempt, until the attempt passes or ``max_trials`` is
    reached (the last failure still gets its reflection). With
    ``ReflexionConfig(inline_reflection=True)`` a chat model actor writes the reflection on a
    failure in the same call as its next attempt (one call per failed trial). A critical error
    of the actor or the evaluator (an exception) gets an error reflection and stops the loop
    with status ``error``; nothing is raised for it. Storage errors are raised. Two runs of one
    ``loop_id`` at once store each trial once: a trial's record id is derived from (namespace,
    loop, iteration), and the run that finds its trial already stored by the other continues
    from the stored loop (or returns it, when finished) instead of storing it twice.

    What the actor receives: a chat model gets a system message with the fenced notes and the
    task as a human message; a compiled graph (e.g. a ``create_agent`` agent) gets
    ``{"messages": [HumanMessage(notes + task)]}``; any other Runnable or function gets an
    :data:`ActorInput` dict. The attempt is the message text, the agent's last answer (its tool
    calls become the actions) or the returned text.

    Example:
        .. code-block:: python

            evaluator = command_evaluator(["pytest -q"], cwd=workdir, prepare=write_solution)
            graph = create_reflexion_graph(model, evaluator, stream=stream, omega=3)
            out = graph.invoke({"task": "Write add(a, b) in solution.py"})
            print(out["status"], out["rewards"], out["window"])

    Args:
        actor: a chat model, any Runnable or function, or a compiled graph / agent.
        evaluator: verifies attempts (:func:`command_evaluator`, :func:`llm_judge_evaluator`,
            :func:`callable_evaluator`, :func:`match_evaluator` or a :class:`BaseEvaluator`).
        stream: where the episodic memory lives (records of kinds ``reflexion`` and
            ``reflexion_trial``).
        omega: Ω, how many of the loop's latest reflections the actor sees (older ones stay
            stored).
        max_trials: the most attempts per loop.
        strategy: ``reflexion`` (default), ``last_attempt_reflexion``, ``last_attempt`` or
            ``none`` (see :data:`Strategy`), to measure whether reflections help on a task.
        reflection_model: the self-reflection model; defaults to ``actor`` when it is a chat
            model. Required for other actors when the strategy reflects.
        config: budgets, quality checks, cross-task lessons (:class:`ReflexionConfig`).
        prompts: custom prompts (:class:`ReflexionPrompts`).
        checkpointer: passed to ``compile``; leave ``None`` inside a parent graph.
        name: the compiled graph's name.

    Returns:
        A compiled graph with input :class:`ReflexionInput` (``task``, ``loop_id``,
        ``namespace``) and output :class:`ReflexionOutput`; works alone and as a node of a
        parent graph, sync and async.

    Raises:
        ValueError: a bad Ω, trial limit or strategy, or no reflection model when one is
            needed.
    """
    if isinstance(omega, bool) or not isinstance(omega, int) or omega < 0:
        raise ValueError(f"omega must be a non-negative integer, got {omega!r}")
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1:
        raise ValueError(f"max_trials must be a positive integer, got {max_trials!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if not isinstance(evaluator, BaseEvaluator):
        raise TypeError(
            f"evaluator must be a BaseEvaluator (e.g. command_evaluator(...)), got "
            f"{type(evaluator).__name__}"
        )
    model = resolve_chat_model(reflection_model) if reflection_model is not None else None
    if model is None and isinstance(actor, BaseChatModel):
        model = actor
    if model is None and strategy in ("reflexion", "last_attempt_reflexion"):
        raise ValueError(
            f"strategy {strategy!r} writes self-reflections: pass reflection_model=<chat model> "
            "(it defaults to the actor only when the actor is a chat model)"
        )
    steps = _Reflexion(
        actor,
        evaluator,
        stream,
        reflection_model=model,
        omega=omega,
        max_trials=max_trials,
        strategy=strategy,
        config=config or ReflexionConfig(),
        prompts=prompts or ReflexionPrompts(),
    )
    builder = StateGraph(ReflexionState, input_schema=ReflexionInput, output_schema=ReflexionOutput)
    builder.add_node("load", steps.node("load", steps.load))
    builder.add_node("actor", steps.node("actor", steps.act))
    builder.add_node("evaluate", steps.node("evaluate", steps.evaluate))
    builder.add_node("self_reflect", steps.node("self_reflect", steps.self_reflect))
    builder.add_node("store", steps.node("store", steps.store))
    builder.add_node("finish", steps.finish)
    builder.add_edge(START, "load")
    builder.add_conditional_edges("load", steps.after_load, ["actor", "finish"])
    builder.add_conditional_edges("actor", steps.after_act, ["evaluate", END])
    builder.add_conditional_edges("evaluate", steps.after_evaluate, ["self_reflect", "store"])
    builder.add_edge("self_reflect", "store")
    builder.add_conditional_edges("store", steps.after_store, ["actor", END])
    builder.add_edge("finish", END)
    graph = builder.compile(checkpointer=checkpointer, name=name)
    return graph.with_config(
        recursion_limit=4 * max_trials + 10,
        tags=["langchain-reflective", "reflexion"],
        metadata={"ls_component": "reflexion", "default_namespace": stream.namespace},
    )
