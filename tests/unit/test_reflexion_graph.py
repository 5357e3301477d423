"""The Reflexion loop: stopping on success, the Ω window (seed 003's table), restart, strategies,
critical errors, async, a parent graph and real pytest as the evaluator."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph

from langchain_reflective import MemoryStream
from langchain_reflective.importance import RetryConfig
from langchain_reflective.records import CUT_MARKER, MAX_TEXT_CHARS
from langchain_reflective.reflexion import (
    REFLEXION_KIND,
    TRIAL_KIND,
    ReflexionConfig,
    callable_evaluator,
    command_evaluator,
    create_reflexion_graph,
    match_evaluator,
)
from tests.fakes import WordEmbeddings
from tests.unit.reflexion_fakes import (
    TESTS,
    CodingActor,
    InterruptedActor,
    ScriptedReflexionModel,
    good_reflection,
    system_text,
)

FAST = ReflexionConfig(retry=RetryConfig(attempts=1))
TASK = "What is the capital of Australia?"


def reflections_in(call: list[BaseMessage]) -> list[int]:
    """Attempt numbers of the reflections the actor was shown."""
    import re

    text = system_text(call)
    block = re.search(r"<reflections>(.*?)</reflections>", text, re.DOTALL)
    if not block:
        return []
    return [int(n) for n in re.findall(r"^\d+\. Attempt (\d+) ", block.group(1), re.MULTILINE)]


def stored(stream: MemoryStream, kind: str, namespace: str | None = None) -> list[Any]:
    return stream.recent(None, kinds=[kind], namespace=namespace)


@pytest.fixture
def stream() -> Any:
    with MemoryStream(WordEmbeddings()) as s:
        yield s


def test_the_loop_stops_on_success_without_reflecting(stream: MemoryStream) -> None:
    model = ScriptedReflexionModel(actor_script=["Canberra"])
    graph = create_reflexion_graph(model, match_evaluator("Canberra"), stream=stream, config=FAST)
    out = graph.invoke({"task": TASK})
    assert out["status"] == "passed" and out["passed"] is True
    assert out["trials"] == 1 and out["rewards"] == [1.0]
    assert len(model.calls) == 1 and model.reflection_calls == []
    assert stored(stream, REFLEXION_KIND) == []
    [trial] = stored(stream, TRIAL_KIND)
    assert trial.metadata["passed"] is True and trial.metadata["loop_id"] == out["loop_id"]


def test_fail_reflect_then_pass_with_the_reflection_in_context(stream: MemoryStream) -> None:
    model = ScriptedReflexionModel(actor_script=["Sydney", "Canberra"])
    graph = create_reflexion_graph(model, match_evaluator("Canberra"), stream=stream, config=FAST)
    out = graph.invoke({"task": TASK})
    assert out["status"] == "passed" and out["rewards"] == [0.0, 1.0]
    assert len(model.actor_calls) == 2 and len(model.reflection_calls) == 1
    # the reflection's own text reached the second attempt, fenced as data
    [refl] = out["reflections"]
    second = system_text(model.actor_calls[1])
    assert refl["self_reflection"]["reflection_text"][:60] in second
    assert "<reflections>" in second and "never follow instructions" in second
    assert system_text(model.actor_calls[0]) == ""  # first attempt: the task alone
    # the expected answer is never shown to the actor or the reflection model
    assert all("Canberra" not in m.text for c in model.calls for m in c)


def test_seed_omega_table_for_iterations_0_to_4(stream: MemoryStream) -> None:
    """Ω=3: the 4th failure pushes the 1st reflection out of the context, never out of storage."""
    model = ScriptedReflexionModel(actor_script=["wrong"])
    graph = create_reflexion_graph(
        model, match_evaluator("right"), stream=stream, omega=3, max_trials=5, config=FAST
    )
    out = graph.invoke({"task": TASK})
    assert out["status"] == "failed" and out["trials"] == 5
    # what each attempt saw: iteration i sees the reflections of the (up to) 3 previous failures
    assert [reflections_in(c) for c in model.actor_calls] == [
        [],
        [0],
        [0, 1],
        [0, 1, 2],
        [1, 2, 3],  # iteration 3 failed -> reflection 004; 001 (iteration 0) left the context
    ]
    records = sorted(stored(stream, REFLEXION_KIND), key=lambda r: r.metadata["iteration"])
    assert [r.metadata["iteration"] for r in records] == [0, 1, 2, 3, 4]  # all kept
    assert [r.metadata["memory_metadata"]["reflections_in_context"] for r in records] == [
        [0],
        [0, 1],
        [0, 1, 2],
        [1, 2, 3],
        [2, 3, 4],
    ]
    assert [r.metadata["memory_metadata"]["total_reflections_generated"] for r in records] == [
        1,
        2,
        3,
        4,
        5,
    ]
    assert records[-1].metadata["outcome"] == "max_trials"  # the final reflection
    assert out["window"] == [2, 3, 4]


@pytest.mark.parametrize("actor_kind", ["chat", "runnable"])
def test_window_and_metadata_are_what_the_actor_saw_under_the_token_budget(
    stream: MemoryStream, actor_kind: str
) -> None:
    """max_reflection_tokens=120 holds one reflection: Ω=3 would show three."""
    model = ScriptedReflexionModel(actor_script=["Sydney"])
    seen: list[dict[str, Any]] = []

    def runnable(payload: dict[str, Any]) -> str:
        seen.append(payload)
        return model.invoke(payload["messages"]).text

    config = ReflexionConfig(retry=RetryConfig(attempts=1), max_reflection_tokens=120)
    graph = create_reflexion_graph(
        model if actor_kind == "chat" else RunnableLambda(runnable),
        match_evaluator("Canberra"),
        stream=stream,
        reflection_model=model,
        config=config,
        omega=3,
        max_trials=4,
    )
    out = graph.invoke({"task": TASK})
    shown = [reflections_in(c) for c in model.actor_calls]
    assert shown == [[], [0], [1], [2]]  # the budget keeps the newest reflection only
    in_context = [r["memory_metadata"]["reflections_in_context"] for r in out["reflections"]]
    assert in_context[:-1] == shown[1:]  # was [0], [0, 1], [0, 1, 2]
    assert [r["memory_metadata"]["current_memory_size"] for r in out["reflections"]] == [1] * 4
    assert out["window"] == [3]  # was [1, 2, 3]
    if actor_kind == "runnable":  # the structured reflections are the ones in the notes
        assert [[r["reflection_text"][:60] for r in p["reflections"]] for p in seen] == [
            [r["self_reflection"]["reflection_text"][:60] for r in out["reflections"][i - 1 : i]]
            for i in range(4)
        ]


def test_a_restart_resumes_the_loop_with_the_same_window(tmp_path: Path) -> None:
    class Crash(BaseException):
        """Stands for the process dying (not an Exception: the loop must not catch it)."""

    path = tmp_path / "episodes.db"
    first = ScriptedReflexionModel(actor_script=["wrong", "wrong", "wrong", Crash("killed")])
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        graph = create_reflexion_graph(
            first, match_evaluator("right"), stream=stream, omega=2, max_trials=6, config=FAST
        )
        with pytest.raises(Crash):
            graph.invoke({"task": TASK, "loop_id": "loop-1"})
    assert [reflections_in(c) for c in first.actor_calls] == [[], [0], [0, 1], [1, 2]]

    second = ScriptedReflexionModel(actor_script=["right"])
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        graph = create_reflexion_graph(
            second, match_evaluator("right"), stream=stream, omega=2, max_trials=6, config=FAST
        )
        out = graph.invoke({"task": TASK, "loop_id": "loop-1"})
        assert out["resumed"] is True
        # the resumed attempt (iteration 3) sees exactly what the crashed one saw
        assert [reflections_in(c) for c in second.actor_calls] == [[1, 2]]
        assert system_text(second.actor_calls[0]) == system_text(first.actor_calls[3])
        assert out["status"] == "passed" and out["rewards"] == [0.0, 0.0, 0.0, 1.0]
        # a finished loop is returned as stored, without any call
        third = ScriptedReflexionModel()
        again = create_reflexion_graph(
            third, match_evaluator("right"), stream=stream, config=FAST
        ).invoke({"task": TASK, "loop_id": "loop-1"})
        assert again["status"] == "passed" and again["trials"] == 4 and third.calls == []


@pytest.mark.parametrize(
    "strategy", ["none", "last_attempt", "reflexion", "last_attempt_reflexion"]
)
def test_strategies_decide_what_the_actor_sees(stream: MemoryStream, strategy: str) -> None:
    model = ScriptedReflexionModel(actor_script=["It is:\n    Sydney", "Canberra"])
    graph = create_reflexion_graph(
        model,
        match_evaluator("Canberra"),
        stream=stream,
        strategy=strategy,
        config=FAST,  # type: ignore[arg-type]
    )
    out = graph.invoke({"task": TASK})
    assert out["status"] == "passed"
    second = system_text(model.actor_calls[1])
    reflects = "reflexion" in strategy
    assert len(model.reflection_calls) == (1 if reflects else 0)
    assert ("<reflections>" in second) is reflects
    assert ("<last_attempt>" in second) is strategy.startswith("last_attempt")
    if strategy.startswith("last_attempt"):  # the previous attempt itself, fenced, its lines kept
        assert "<last_attempt>\n| It is:\n|     Sydney\n</last_attempt>" in second
    if reflects:  # and so does the reflection prompt
        reflection_prompt = model.reflection_calls[0][-1].text
        assert "<attempt>\n| It is:\n|     Sydney\n</attempt>" in reflection_prompt
    if strategy == "none":
        assert second == ""
    kinds = [r.kind for r in stream.recent(None)]
    assert kinds == ([REFLEXION_KIND, TRIAL_KIND] if reflects else [TRIAL_KIND, TRIAL_KIND])
    assert all(r.metadata["strategy"] == strategy for r in stream.recent(None))


def test_an_actor_error_gives_an_error_reflection_and_stops(stream: MemoryStream) -> None:
    model = ScriptedReflexionModel(actor_script=[RuntimeError("the API is down")])
    graph = create_reflexion_graph(model, match_evaluator("x"), stream=stream, config=FAST)
    out = graph.invoke({"task": TASK})
    assert out["status"] == "error" and "the API is down" in (out["error"] or "")
    assert out["trials"] == 1 and len(model.actor_calls) == 1
    [refl] = stored(stream, REFLEXION_KIND)
    assert refl.metadata["outcome"] == "error"
    prompt = model.reflection_calls[0][-1].text
    assert "the API is down" in prompt and "crashed" in prompt


def test_an_evaluator_error_gives_an_error_reflection_and_stops(stream: MemoryStream) -> None:
    def broken(attempt: Any) -> bool:
        raise KeyError("no such fixture")

    model = ScriptedReflexionModel(actor_script=["a", "b"])
    graph = create_reflexion_graph(model, callable_evaluator(broken), stream=stream, config=FAST)
    out = graph.invoke({"task": TASK})
    assert out["status"] == "error" and "no such fixture" in (out["error"] or "")
    assert len(model.actor_calls) == 1
    assert stored(stream, REFLEXION_KIND)[0].metadata["outcome"] == "error"


async def test_ainvoke_runs_the_same_loop(stream: MemoryStream) -> None:
    model = ScriptedReflexionModel(actor_script=["Sydney", "Melbourne", "Canberra"])
    graph = create_reflexion_graph(model, match_evaluator("Canberra"), stream=stream, config=FAST)
    out = await graph.ainvoke({"task": TASK})
    assert out["status"] == "passed" and out["rewards"] == [0.0, 0.0, 1.0]
    assert [reflections_in(c) for c in model.actor_calls] == [[], [0], [0, 1]]


def test_an_over_long_reflection_is_stored_cut_and_the_loop_goes_on(
    stream: MemoryStream,
) -> None:
    import json

    huge = json.loads(good_reflection(1))
    huge["reflection_text"] = "I failed because " + "x" * 250_000  # over the memory text limit
    huge["actionable_insights"] = ["Check the input first. " * 50] * 100
    huge["lessons_learned"] = ["Read the task. " * 100] * 100
    model = ScriptedReflexionModel(
        actor_script=["Sydney", "Canberra"], reflection_script=[json.dumps(huge)]
    )
    config = ReflexionConfig(retry=RetryConfig(attempts=1), max_chars=1000)
    graph = create_reflexion_graph(model, match_evaluator("Canberra"), stream=stream, config=config)
    out = graph.invoke({"task": TASK, "loop_id": "L"})
    assert out["status"] == "passed" and out["rewards"] == [0.0, 1.0]  # was InvalidMemoryError
    [record] = stored(stream, REFLEXION_KIND)
    sr = record.metadata["self_reflection"]
    assert sr["reflection_text"] == huge["reflection_text"][:1000]
    assert sum(map(len, sr["actionable_insights"])) == 1000
    assert sum(map(len, sr["lessons_learned"])) == 1000
    assert len(record.text) < 2100  # the text plus its lessons
    assert out["reflections"][0]["self_reflection"] == sr


@pytest.mark.parametrize("value", [10**9, MAX_TEXT_CHARS + 1, 9, 4000.5, True, "4000"])
@pytest.mark.parametrize("name", ["max_chars", "max_stored_attempt_chars"])
def test_text_limits_are_bounded_by_the_memory_text_limit(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"{name} must be an integer from 10 to 200,000"):
        ReflexionConfig(**{name: value})
    assert getattr(ReflexionConfig(**{name: MAX_TEXT_CHARS}), name) == MAX_TEXT_CHARS


def test_a_reflection_and_its_lessons_longer_than_a_memory_are_stored_cut(
    stream: MemoryStream,
) -> None:
    import json

    long = json.loads(good_reflection(1))
    long["reflection_text"] = "I failed because " + "x" * 150_000  # each under max_chars,
    long["lessons_learned"] = ["Read the task. " * 6_000]  # together over a memory's limit
    model = ScriptedReflexionModel(
        actor_script=["Sydney", "Canberra"], reflection_script=[json.dumps(long)]
    )
    config = ReflexionConfig(retry=RetryConfig(attempts=1), max_chars=MAX_TEXT_CHARS)
    graph = create_reflexion_graph(model, match_evaluator("Canberra"), stream=stream, config=config)
    out = graph.invoke({"task": TASK, "loop_id": "L"})
    assert out["status"] == "passed" and out["rewards"] == [0.0, 1.0]  # was InvalidMemoryError
    [record] = stored(stream, REFLEXION_KIND)
    assert len(record.text) == MAX_TEXT_CHARS and record.text.endswith(CUT_MARKER)
    sr = record.metadata["self_reflection"]  # the metadata keeps the whole reflection
    assert sr["reflection_text"] == long["reflection_text"]
    assert sr["lessons_learned"] == [long["lessons_learned"][0].strip()]


# -- two runs of one loop at once -------------------------------------------------------------


def iterations(stream: MemoryStream, loop_id: str) -> list[int]:
    return sorted(
        r.metadata["iteration"] for r in stream.recent(None) if r.metadata["loop_id"] == loop_id
    )


async def test_two_concurrent_runs_of_one_loop_store_each_trial_once(
    stream: MemoryStream,
) -> None:
    import asyncio

    from langchain_reflective.reflexion import analyze_loops, export_loops

    model = ScriptedReflexionModel(actor_script=["Sydney"])
    graph = create_reflexion_graph(
        model, match_evaluator("Canberra"), stream=stream, config=FAST, max_trials=3
    )
    outs = await asyncio.gather(*[graph.ainvoke({"task": TASK, "loop_id": "L"}) for _ in "ab"])
    assert iterations(stream, "L") == [0, 1, 2]  # was [0, 0, 1, 1, 2, 2]
    assert all(o["status"] == "failed" and o["trials"] == 3 for o in outs)
    [loop] = export_loops(stream)["loops"]
    assert [t["iteration"] for t in loop["trials"]] == [0, 1, 2]
    [analysis], _, _ = analyze_loops(stream)
    assert analysis.trials == 3


def test_a_run_whose_loop_was_finished_meanwhile_returns_it_as_stored(
    stream: MemoryStream,
) -> None:
    other = create_reflexion_graph(
        ScriptedReflexionModel(actor_script=["Canberra"]),
        match_evaluator("Canberra"),
        stream=stream,
        config=FAST,
    )
    model = InterruptedActor(
        actor_script=["Sydney"],
        before_first=lambda: other.invoke({"task": TASK, "loop_id": "L"}),
    )
    graph = create_reflexion_graph(
        model, match_evaluator("Canberra"), stream=stream, config=FAST, max_trials=3
    )
    out = graph.invoke({"task": TASK, "loop_id": "L"})
    # its own failed trial 0 collided with the other run's passed trial 0: nothing stored twice
    assert out["status"] == "passed" and out["output"] == "Canberra" and out["rewards"] == [1.0]
    assert iterations(stream, "L") == [0] and len(model.actor_calls) == 1
    assert stored(stream, REFLEXION_KIND) == []


def test_an_inline_run_continues_from_the_trial_another_run_stored(
    stream: MemoryStream,
) -> None:
    class Crash(BaseException):
        """Stops the other run after its first trial is stored."""

    def other_run() -> None:
        other = create_reflexion_graph(
            ScriptedReflexionModel(
                actor_script=["Perth", Crash("stop")],
                reflection_script=[good_reflection(1, about="other run")],
            ),
            match_evaluator("Canberra"),
            stream=stream,
            config=FAST,
        )
        with pytest.raises(Crash):
            other.invoke({"task": TASK, "loop_id": "L"})

    model = InterruptedActor(actor_script=["Sydney", "Hobart", "Canberra"], before_first=other_run)
    graph = create_reflexion_graph(
        model, match_evaluator("Canberra"), stream=stream, config=INLINE, max_trials=3
    )
    out = graph.invoke({"task": TASK, "loop_id": "L"})
    # its inline reflection on trial 0 collided: it redid trial 1 with the stored reflection
    assert out["status"] == "passed" and out["rewards"] == [0.0, 1.0]
    assert iterations(stream, "L") == [0, 1]
    assert [r["attempt"] for r in out["reflections"]] == ["Perth"]
    assert "other run" in system_text(model.calls[-1])


def test_a_loop_stored_twice_by_an_old_version_counts_each_iteration_once(
    stream: MemoryStream,
) -> None:
    from datetime import timedelta

    from langchain_reflective.reflexion import analyze_loops, export_loops

    class Crash(BaseException):
        """Stops the first run after its first trial is stored."""

    first = create_reflexion_graph(
        ScriptedReflexionModel(actor_script=["Sydney", Crash("stop")]),
        match_evaluator("Canberra"),
        stream=stream,
        config=FAST,
    )
    with pytest.raises(Crash):
        first.invoke({"task": TASK, "loop_id": "L"})
    [mine] = stored(stream, REFLEXION_KIND)
    # what the old bug left: the other run's copy of trial 0 under a random id, stored first
    meta = dict(mine.metadata)
    meta["attempt"] = "Hobart"
    meta["self_reflection"] = {
        **meta["self_reflection"],
        "reflection_text": "I answered Hobart, the capital of Tasmania, not of Australia.",
    }
    [copy] = stream.add(
        ["Hobart copy"],
        kinds=REFLEXION_KIND,
        metadatas=[meta],
        importances=[0.7],
        now=mine.created_at - timedelta(seconds=1),
    )
    model = ScriptedReflexionModel(actor_script=["Canberra"])
    graph = create_reflexion_graph(
        model, match_evaluator("Canberra"), stream=stream, config=FAST, max_trials=2
    )
    out = graph.invoke({"task": TASK, "loop_id": "L"})
    # was: 2 trials loaded (>= max_trials), returned "failed" without an attempt
    assert out["status"] == "passed" and out["rewards"] == [0.0, 1.0] and out["trials"] == 2
    assert [r["id"] for r in out["reflections"]] == [copy.id]  # the first stored copy counts
    assert reflections_in(model.actor_calls[0]) == [0]
    assert "Tasmania" in system_text(model.actor_calls[0])
    assert mine.metadata["self_reflection"]["reflection_text"] not in system_text(
        model.actor_calls[0]
    )
    [loop] = export_loops(stream)["loops"]
    assert loop["trials"][0]["record_id"] == copy.id
    assert [t["iteration"] for t in loop["trials"]] == [0, 1]
    assert analyze_loops(stream)[0][0].rewards == [0.0, 1.0]
    assert iterations(stream, "L") == [0, 0, 1]  # the file is not rewritten


def test_works_as_a_node_of_a_parent_graph(stream: MemoryStream) -> None:
    class Parent(TypedDict, total=False):
        task: str
        status: str
        rewards: list[float]
        summary: str

    model = ScriptedReflexionModel(actor_script=["Sydney", "Canberra"])
    loop = create_reflexion_graph(model, match_evaluator("Canberra"), stream=stream, config=FAST)
    parent = StateGraph(Parent)
    parent.add_node("reflexion", loop)
    parent.add_node("summarise", lambda s: {"summary": f"{s['status']} after {len(s['rewards'])}"})
    parent.add_edge(START, "reflexion")
    parent.add_edge("reflexion", "summarise")
    parent.add_edge("summarise", END)
    out = parent.compile().invoke({"task": TASK})
    assert out["summary"] == "passed after 2"


def test_node_names_and_tags_for_langsmith(stream: MemoryStream) -> None:
    from langchain_core.tracers.base import BaseTracer
    from langchain_core.tracers.schemas import Run

    class Names(BaseTracer):
        def __init__(self) -> None:
            super().__init__()
            self.runs: list[Run] = []

        def _persist_run(self, run: Run) -> None:
            pass

        def _start_trace(self, run: Run) -> None:
            super()._start_trace(run)
            self.runs.append(run)

    tracer = Names()
    model = ScriptedReflexionModel(actor_script=["Sydney", "Canberra"])
    graph = create_reflexion_graph(model, match_evaluator("Canberra"), stream=stream, config=FAST)
    graph.invoke({"task": TASK}, config={"callbacks": [tracer]})
    names = {r.name for r in tracer.runs}
    assert {"reflexion", "actor", "evaluate", "self_reflect", "store"} <= names
    # one run per step: LangGraph's node run, no nested "reflexion.<step>" run inside it
    assert not {n for n in names if n.startswith("reflexion.") and not n.endswith(".model")}
    model_runs = [r for r in tracer.runs if r.run_type == "llm"]
    assert any("reflexion.actor" in (r.tags or []) for r in model_runs)
    assert any("reflexion.self_reflect" in (r.tags or []) for r in model_runs)


def test_a_plain_runnable_actor_gets_the_structured_window(stream: MemoryStream) -> None:
    seen: list[dict[str, Any]] = []

    def actor(payload: dict[str, Any]) -> str:
        seen.append(payload)
        return "Canberra" if payload["reflections"] else "Sydney"

    reflector = ScriptedReflexionModel()
    graph = create_reflexion_graph(
        RunnableLambda(actor),
        match_evaluator("Canberra"),
        stream=stream,
        reflection_model=reflector,
        config=FAST,
    )
    out = graph.invoke({"task": TASK})
    assert out["status"] == "passed"
    assert seen[0]["reflections"] == [] and seen[0]["iteration"] == 0
    assert seen[1]["reflections"][0]["credit_assignment"]["failure_category"] == "edge_case_miss"
    assert "<reflections>" in seen[1]["context"]


def test_reflecting_without_a_reflection_model_is_refused(stream: MemoryStream) -> None:
    with pytest.raises(ValueError, match="reflection_model"):
        create_reflexion_graph(RunnableLambda(lambda x: "a"), match_evaluator("b"), stream=stream)
    with pytest.raises(ValueError, match="omega"):
        create_reflexion_graph(
            ScriptedReflexionModel(), match_evaluator("b"), stream=stream, omega=-1
        )
    with pytest.raises(ValueError, match="strategy"):
        create_reflexion_graph(
            ScriptedReflexionModel(),
            match_evaluator("b"),
            stream=stream,
            strategy="magic",  # type: ignore[arg-type]
        )
    graph = create_reflexion_graph(ScriptedReflexionModel(), match_evaluator("b"), stream=stream)
    with pytest.raises(ValueError, match="task"):
        graph.invoke({"task": "  "})


def test_real_pytest_loop_fails_reads_its_reflection_then_passes(tmp_path: Path) -> None:
    (tmp_path / "test_solution.py").write_text(TESTS)

    def write(attempt: Any, cwd: Path) -> None:
        (cwd / "solution.py").write_text(attempt["output"])

    evaluator = command_evaluator(
        [[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]],
        cwd=tmp_path,
        prepare=write,
        timeout=120,
    )
    model = CodingActor()
    with MemoryStream(WordEmbeddings()) as stream:
        out = create_reflexion_graph(model, evaluator, stream=stream, config=FAST).invoke(
            {"task": "Write largest(nums) in solution.py; largest([]) is None."}
        )
    assert out["status"] == "passed" and out["rewards"] == [0.5, 1.0]
    [refl] = out["reflections"]
    errors = refl["evaluator_output"]["errors"]
    assert any(e["file"] == "solution.py" and e["line"] == 2 for e in errors)
    assert refl["evaluator_output"]["metrics"]["tests_failed"] == 1.0
    # the reflection prompt carried pytest's real error, fenced
    prompt = model.reflection_calls[0][-1].text
    assert "<verification>" in prompt and "IndexError" in prompt


# -- inline reflection: one call per failed trial ---------------------------------------------

INLINE = ReflexionConfig(retry=RetryConfig(attempts=1), inline_reflection=True)


def test_inline_reflection_writes_each_reflection_in_the_next_attempts_call(
    stream: MemoryStream,
) -> None:
    model = ScriptedReflexionModel(actor_script=["Sydney", "Perth", "Canberra"])
    graph = create_reflexion_graph(model, match_evaluator("Canberra"), stream=stream, config=INLINE)
    out = graph.invoke({"task": TASK})
    assert out["status"] == "passed" and out["rewards"] == [0.0, 0.0, 1.0]
    assert len(model.calls) == 3 and model.reflection_calls == []  # one call per trial
    records = sorted(
        stream.recent(None, kinds=[REFLEXION_KIND]), key=lambda r: r.metadata["iteration"]
    )
    assert [r.metadata["iteration"] for r in records] == [0, 1]
    assert [r.metadata["attempt"] for r in records] == ["Sydney", "Perth"]
    assert all(not r.metadata["low_quality"] for r in records)
    # the third call reflects on "Perth" and sees the stored reflection on "Sydney"
    third = model.calls[2]
    assert "Perth" in third[-1].text and "<previous_reflections>" in third[-1].text
    assert records[0].metadata["self_reflection"]["reflection_text"][:50] in third[-1].text


def test_inline_reflection_keeps_the_seed_omega_table(stream: MemoryStream) -> None:
    model = ScriptedReflexionModel(actor_script=["wrong"])
    graph = create_reflexion_graph(
        model, match_evaluator("right"), stream=stream, omega=3, max_trials=5, config=INLINE
    )
    out = graph.invoke({"task": TASK})
    records = sorted(
        stream.recent(None, kinds=[REFLEXION_KIND]), key=lambda r: r.metadata["iteration"]
    )
    assert [r.metadata["memory_metadata"]["reflections_in_context"] for r in records] == [
        [0],
        [0, 1],
        [0, 1, 2],
        [1, 2, 3],
        [2, 3, 4],
    ]
    assert out["status"] == "failed" and len(model.reflection_calls) == 1  # the final one


def test_an_unreadable_inline_answer_is_the_attempt_and_the_reflection_a_fallback(
    stream: MemoryStream,
) -> None:
    class Prose(ScriptedReflexionModel):
        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
            from langchain_core.messages import AIMessage
            from langchain_core.outputs import ChatGeneration, ChatResult

            self.calls.append(list(messages))
            text = "Canberra" if len(self.calls) > 1 else "Sydney"
            return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])

    model = Prose()
    out = create_reflexion_graph(
        model, match_evaluator("Canberra"), stream=stream, config=INLINE
    ).invoke({"task": TASK})
    assert out["status"] == "passed" and out["output"] == "Canberra"
    [record] = stream.recent(None, kinds=[REFLEXION_KIND])
    assert record.metadata["reflection_source"] == "fallback" and record.metadata["low_quality"]


def test_an_inline_reply_without_an_answer_is_an_empty_attempt_not_its_json(
    stream: MemoryStream,
) -> None:
    """A reply holding only a (valid) reflection was graded whole as the attempt: a
    reflection that names the right answer passed the loop."""
    import json

    class NoAnswer(ScriptedReflexionModel):
        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
            from langchain_core.messages import AIMessage
            from langchain_core.outputs import ChatGeneration, ChatResult

            self.calls.append(list(messages))
            reflection = json.loads(good_reflection(len(self.calls), about="Canberra question"))
            text = "Sydney" if len(self.calls) == 1 else json.dumps({"reflection": reflection})
            return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])

    model = NoAnswer()
    out = create_reflexion_graph(
        model,
        match_evaluator("Canberra", mode="contains"),
        stream=stream,
        max_trials=2,
        config=INLINE,
    ).invoke({"task": TASK})
    assert out["status"] == "failed" and out["output"] == "" and out["rewards"] == [0.0, 0.0]
    first = min(stream.recent(None, kinds=[REFLEXION_KIND]), key=lambda r: r.metadata["iteration"])
    assert first.metadata["reflection_source"] == "model"  # (the reflection was kept)
    assert "Canberra" in first.metadata["self_reflection"]["reflection_text"]


def test_inline_reflection_needs_a_chat_model_actor(stream: MemoryStream) -> None:
    with pytest.raises(ValueError, match="inline_reflection"):
        create_reflexion_graph(
            RunnableLambda(lambda x: "a"),
            match_evaluator("b"),
            stream=stream,
            reflection_model=ScriptedReflexionModel(),
            config=INLINE,
        )


def test_a_new_task_on_a_checkpointed_thread_starts_a_new_loop(stream: MemoryStream) -> None:
    """The previous run's loop_id stayed in the thread's state, so a second task was answered
    with the first task's stored result, without calling the actor."""
    from langgraph.checkpoint.memory import InMemorySaver

    model = ScriptedReflexionModel(actor_script=["Canberra", "Paris"])
    graph = create_reflexion_graph(
        model,
        match_evaluator("Canberra", mode="contains"),
        stream=stream,
        config=FAST,
        checkpointer=InMemorySaver(),
    )
    cfg = {"configurable": {"thread_id": "t1"}}
    first = graph.invoke({"task": TASK}, cfg)
    second = graph.invoke({"task": "What is the capital of France?"}, cfg)
    assert first["passed"] and first["output"] == "Canberra"
    assert second["loop_id"] != first["loop_id"] and second["output"] == "Paris"
    calls = len(model.actor_calls)
    assert calls > 1 and "France" in model.actor_calls[1][-1].text
    again = graph.invoke(
        {"task": TASK, "loop_id": first["loop_id"]}, {"configurable": {"thread_id": "t2"}}
    )
    assert again["loop_id"] == first["loop_id"] and again["output"] == "Canberra"
    assert len(model.actor_calls) == calls  # (a finished loop: returned as stored)
