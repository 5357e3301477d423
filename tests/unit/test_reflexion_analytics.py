"""Analytics of Reflexion loops (per loop and across loops, per strategy), the structured-output
path of the reflection model, and the async search."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from langchain_reflective import InvalidMemoryError, MemoryStream
from langchain_reflective.importance import RetryConfig
from langchain_reflective.reflexion import (
    REFLEXION_KIND,
    ReflexionConfig,
    analyze_loops,
    asearch_reflections,
    create_reflexion_graph,
    export_loops,
    match_evaluator,
    search_reflections,
    shipped_json_schema,
)
from langchain_reflective.reflexion.analytics import analyze_loop
from tests.fakes import WordEmbeddings
from tests.unit.reflexion_fakes import (
    ScriptedReflexionModel,
    StructuredReflexionModel,
    good_reflection,
)

FAST = RetryConfig(attempts=1)


@pytest.fixture
def stream() -> Any:
    with MemoryStream(WordEmbeddings()) as s:
        yield s


def _loop(stream: MemoryStream, answers: list[str], strategy: str = "reflexion", **cfg: Any) -> Any:
    model = ScriptedReflexionModel(actor_script=answers)
    return create_reflexion_graph(
        model,
        match_evaluator("right"),
        stream=stream,
        max_trials=3,
        strategy=strategy,  # type: ignore[arg-type]
        config=ReflexionConfig(retry=FAST, **cfg),
    ).invoke({"task": "Say the right word about the webhook API"})


def test_analytics_per_loop_and_across_loops(stream: MemoryStream) -> None:
    first = _loop(stream, ["right"])  # passes at trial 1
    second = _loop(stream, ["wrong", "right"])  # passes at trial 2
    third = _loop(stream, ["wrong"])  # fails 3 times
    fourth = _loop(stream, ["wrong", "right"], strategy="none")
    analyses, overall, by_strategy = analyze_loops(stream)
    by_id = {a.loop_id: a for a in analyses}
    a1, a2, a3, a4 = (by_id[o["loop_id"]] for o in (first, second, third, fourth))
    assert (a1.rewards, a1.trials_to_success, a1.status) == ([1.0], 1, "passed")
    assert (a2.rewards, a2.trials_to_success) == ([0.0, 1.0], 2)
    assert a2.failure_categories == ["edge_case_miss"] and a2.avg_confidence == 0.9
    assert a2.learning_rate == pytest.approx(0.5)
    assert (a3.trials, a3.trials_to_success, a3.status) == (3, None, "failed")
    assert a3.lessons_count == 3 and a4.failure_categories == []
    assert overall.loops == 4 and overall.success_rate == 0.75
    assert overall.success_at == {1: 0.25, 2: 0.75, 3: 0.75}
    assert overall.mean_trials == pytest.approx((1 + 2 + 3 + 2) / 4)
    assert overall.mean_trials_to_success == pytest.approx((1 + 2 + 2) / 3)
    assert overall.failure_categories == {"edge_case_miss": 4}
    assert set(by_strategy) == {"reflexion", "none"}
    assert by_strategy["none"].loops == 1 and by_strategy["none"].success_at == {1: 0.0, 2: 1.0}
    assert by_strategy["reflexion"].success_rate == pytest.approx(2 / 3)
    # the same numbers from the exported JSON
    _, from_json, _ = analyze_loops(json.dumps(export_loops(stream)))
    assert from_json == overall


def test_lesson_reuse_is_counted(stream: MemoryStream) -> None:
    _loop(stream, ["wrong", "right"])
    reused = _loop(stream, ["right"], prior_lessons=2)
    analyses, overall, _ = analyze_loops(stream)
    [a] = [a for a in analyses if a.loop_id == reused["loop_id"]]
    assert len(a.lessons_reused) == 1
    assert overall.lesson_reuse_rate == 0.5 and overall.success_rate_with_lessons == 1.0


def test_the_structured_output_path_of_the_reflection_and_inline_calls(
    stream: MemoryStream,
) -> None:
    model = StructuredReflexionModel(actor_script=["wrong", "wrong", "right"])
    out = create_reflexion_graph(
        model, match_evaluator("right"), stream=stream, config=ReflexionConfig(retry=FAST)
    ).invoke({"task": "t"})
    assert out["status"] == "passed"
    assert ("SelfReflection", "json_schema") in model.structured_requests
    records = stream.recent(None, kinds=[REFLEXION_KIND])
    assert len(records) == 2 and not any(r.metadata["low_quality"] for r in records)

    inline = StructuredReflexionModel(actor_script=["wrong", "right"])
    out = create_reflexion_graph(
        inline,
        match_evaluator("right"),
        stream=stream,
        config=ReflexionConfig(retry=FAST, inline_reflection=True),
    ).invoke({"task": "t2"})
    assert out["status"] == "passed" and len(inline.calls) == 2
    assert ("InlineAttempt", "json_schema") in inline.structured_requests
    [record] = [
        r for r in stream.recent(None, kinds=[REFLEXION_KIND]) if r.metadata["task"] == "t2"
    ]
    assert record.metadata["reflection_source"] == "model" and not record.metadata["low_quality"]


async def test_asearch_reflections_matches_the_sync_search(stream: MemoryStream) -> None:
    model = ScriptedReflexionModel(actor_script=["wrong"], reflection_script=[good_reflection(1)])
    create_reflexion_graph(
        model,
        match_evaluator("right"),
        stream=stream,
        max_trials=1,
        config=ReflexionConfig(retry=FAST),
    ).invoke({"task": "webhook"})
    sync = search_reflections(stream, "empty list IndexError")
    assert [h.record.id for h in await asearch_reflections(stream, "empty list IndexError")] == [
        h.record.id for h in sync
    ]
    assert len(sync) == 1


# -- loops the schema rejects, and iterations stored twice ---------------------------------------


def _exported(stream: MemoryStream) -> dict[str, Any]:
    _loop(stream, ["wrong", "right"])  # a failed trial with its reflection, then a pass
    return export_loops(stream)


def _bad_loops(good: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    def loop(name: str, **changes: Any) -> dict[str, Any]:
        bad = json.loads(json.dumps(good))
        bad["loop_id"] = name
        for path, value in changes.items():
            *keys, last = path.split("__")
            target = bad
            for key in keys:
                target = target[int(key)] if key.isdigit() else target[key]
            target[last] = value
        return bad

    nan, inf = float("nan"), float("inf")
    return [
        (loop("empty", trials=[]), "no trials"),
        (loop("nan", trials__0__reward=nan), "trial 0 has reward nan, not a number in [0, 1]"),
        (loop("inf", trials__1__reward=inf), "trial 1 has reward inf"),
        (loop("big", trials__0__reward=2), "trial 0 has reward 2"),
        (loop("text", trials__0__reward="1.0"), "trial 0 has reward '1.0'"),
        (loop("bool", trials__0__reward=True), "trial 0 has reward True"),
        (loop("nopass", trials__1__passed=None), "trial 1 has no 'passed'"),
        (loop("noiter", trials__0__iteration=-1), "trial 0 has no iteration"),
        (loop("str", trials=["a trial"]), "trial 0 is not a JSON object"),
        (loop("reuse", trials__0__lessons_reused="x"), "trial 0 has lessons_reused that are not"),
        (
            loop("conf", reflections__0__self_reflection__confidence=nan),
            "reflection 0 has confidence nan",
        ),
        (loop("refl", reflections__0__self_reflection=None), "reflection 0 has no self_reflection"),
        ({"trials": good["trials"]}, "no loop_id"),
    ]


def test_loops_the_schema_rejects_are_left_out_and_named(stream: MemoryStream) -> None:
    doc = _exported(stream)
    [good] = doc["loops"]
    bad = _bad_loops(good)
    for loop, reason in bad:
        with pytest.raises(InvalidMemoryError, match="malformed Reflexion loop: ") as caught:
            analyze_loop(loop)
        assert reason in str(caught.value)
    with pytest.raises(jsonschema.ValidationError, match="should be non-empty"):
        jsonschema.validate({**doc, "loops": [bad[0][0]]}, shipped_json_schema())
    doc["loops"] = [good, *(loop for loop, _ in bad)]
    # NaN and Infinity are what Python's json writes for them
    analyses, overall, by_strategy = analyze_loops(json.dumps(doc))
    assert [a.loop_id for a in analyses] == [good["loop_id"]]  # was: 13 loops, nan numbers
    assert overall.loops == 1 and overall.mean_trials == 2.0 and by_strategy["reflexion"].loops == 1
    assert overall.mean_learning_rate == pytest.approx(0.5)
    assert len(overall.malformed) == len(bad)
    for line, (loop, reason) in zip(overall.malformed, bad, strict=True):
        assert reason in line
        assert line.startswith(f"loop {doc['loops'].index(loop)}")


def test_an_iteration_exported_twice_counts_its_first_stored_copy(stream: MemoryStream) -> None:
    doc = _exported(stream)
    [loop] = doc["loops"]
    first_trial, first_reflection = loop["trials"][0], loop["reflections"][0]
    # what the old bug left: the other run's copies of iteration 0, one stored later
    later_trial = {**first_trial, "record_id": "zz-later", "reward": 0.5}
    later_trial["created_at"] = "2999-01-01T00:00:00+00:00"
    later_reflection = json.loads(json.dumps(first_reflection))
    later_reflection.update(id="zz-later", created_at="2999-01-01T00:00:00+00:00")
    later_reflection["self_reflection"]["credit_assignment"]["failure_category"] = "logic_error"
    loop["trials"].insert(0, later_trial)
    loop["reflections"].insert(0, later_reflection)
    [a], overall, _ = analyze_loops(doc)
    assert a.rewards == [0.0, 1.0] and a.trials_to_success == 2  # was [0.5, 0.0, 1.0]
    assert a.failure_categories == ["edge_case_miss"] and a.duplicates == 2
    assert overall.duplicates == 2 and overall.mean_trials == 2.0
    # same time: the smaller id wins, whatever the order in the document
    same = {**first_trial, "record_id": "0-first", "reward": 0.25}
    loop["trials"].append(same)
    [a], _, _ = analyze_loops(doc)
    assert a.rewards == [0.25, 1.0] and a.duplicates == 3
