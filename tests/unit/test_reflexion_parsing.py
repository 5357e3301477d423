"""Reading a model's Reflexion answers: an inline answer that is a JSON number or boolean, and a
self-reflection with one badly typed field, are kept rather than dropped for the fallback."""

from __future__ import annotations

import json
from typing import Any

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.importance import RetryConfig
from langchain_reflective.reflexion import (
    REFLEXION_KIND,
    ReflexionConfig,
    SelfReflection,
    create_reflexion_graph,
    match_evaluator,
    reflection_quality,
)
from langchain_reflective.reflexion.reflection import InlineAttempt, parse_inline, parse_reflection
from tests.fakes import WordEmbeddings
from tests.unit.reflexion_fakes import ScriptedReflexionModel, good_reflection

REFLECTION: dict[str, Any] = json.loads(good_reflection(1))


@pytest.fixture
def stream() -> Any:
    with MemoryStream(WordEmbeddings()) as s:
        yield s


# -- inline attempts: a number or boolean answer is its JSON text ------------------------------


@pytest.mark.parametrize(
    ("answer", "text"),
    [(42, "42"), (-3, "-3"), (2.5, "2.5"), (True, "true"), (False, "false")],
)
def test_an_inline_number_or_bool_answer_is_its_json_text(answer: Any, text: str) -> None:
    """``{"answer": 42}`` was graded as the whole JSON reply and its reflection was dropped."""
    raw = json.dumps({"reflection": REFLECTION, "answer": answer})
    reflection, attempt = parse_inline(None, raw)
    assert attempt == text
    assert reflection is not None and reflection.reflection_text == REFLECTION["reflection_text"]
    # the same through a structured dict and through the structured-output schema
    assert parse_inline({"reflection": REFLECTION, "answer": answer}, "")[1] == text
    assert InlineAttempt.model_validate({"reflection": REFLECTION, "answer": answer}).answer == text


@pytest.mark.parametrize(
    ("answer", "text"),
    [(None, ""), ([1, 2], "[1, 2]"), ({"city": "Canberra"}, '{"city": "Canberra"}')],
)
def test_an_inline_reflection_is_kept_whatever_the_answer(answer: Any, text: str) -> None:
    raw = json.dumps({"reflection": REFLECTION, "answer": answer})
    reflection, attempt = parse_inline(None, raw)
    assert reflection is not None and attempt == text


def test_an_invalid_inline_reflection_does_not_cost_the_answer() -> None:
    assert parse_inline(None, json.dumps({"reflection": {"reflection_text": 1}, "answer": 7})) == (
        None,
        "7",
    )
    assert parse_inline(None, json.dumps({"answer": 7})) == (None, "7")


def test_an_inline_numeric_answer_passes_an_exact_match_check(stream: MemoryStream) -> None:
    model = ScriptedReflexionModel(actor_script=["41", 42])  # the inline reply: "answer": 42
    out = create_reflexion_graph(
        model,
        match_evaluator("42"),
        stream=stream,
        config=ReflexionConfig(retry=RetryConfig(attempts=1), inline_reflection=True),
    ).invoke({"task": "6*7?"})
    assert out["status"] == "passed" and out["output"] == "42" and out["rewards"] == [0.0, 1.0]
    [record] = stream.recent(None, kinds=[REFLEXION_KIND])
    assert record.metadata["reflection_source"] == "model" and not record.metadata["low_quality"]


# -- self-reflections: one badly typed field falls back to its default -------------------------

BAD_FIELDS: list[tuple[str, dict[str, Any], str, Any]] = [
    # name, patch, attribute path, expected value
    ("confidence_percent", {"confidence": "80%"}, "confidence", 0.8),
    ("confidence_percent_spaced", {"confidence": " 95 % "}, "confidence", 0.95),
    ("confidence_numeric_text", {"confidence": "0.7"}, "confidence", 0.7),
    ("confidence_percent_number_text", {"confidence": "85"}, "confidence", 0.85),
    ("confidence_high", {"confidence": "high"}, "confidence", 0.75),
    ("confidence_medium", {"confidence": "Medium"}, "confidence", 0.5),
    ("confidence_low", {"confidence": "LOW"}, "confidence", 0.25),
    ("confidence_word", {"confidence": "fairly sure"}, "confidence", 0.5),
    ("confidence_null", {"confidence": None}, "confidence", 0.5),
    ("confidence_list", {"confidence": [0.9]}, "confidence", 0.5),
    ("causal_reasoning_null", {"causal_reasoning": None}, "causal_reasoning", ""),
    ("causal_reasoning_number", {"causal_reasoning": 3}, "causal_reasoning", ""),
    (
        "credit_assignment_text",
        {"credit_assignment": "  no check for an empty list "},
        "credit_assignment.root_cause",
        "no check for an empty list",
    ),
    ("credit_assignment_null", {"credit_assignment": None}, "credit_assignment.root_cause", ""),
    (
        "root_cause_null",
        {"credit_assignment": {"root_cause": None, "failure_category": "edge_case_miss"}},
        "credit_assignment.failure_category",
        "edge_case_miss",
    ),
    ("related_reflections_null", {"related_reflections": None}, "related_reflections", []),
]


@pytest.mark.parametrize(
    ("name", "patch", "attr", "expected"), BAD_FIELDS, ids=[b[0] for b in BAD_FIELDS]
)
def test_one_badly_typed_field_falls_back_to_its_default(
    name: str, patch: dict[str, Any], attr: str, expected: Any
) -> None:
    """One such field made :func:`parse_reflection` return ``None``: a retry, then usually the
    fallback reflection in place of an otherwise good analysis."""
    reflection = parse_reflection(None, json.dumps({**REFLECTION, **patch}))
    assert reflection is not None
    assert reflection.reflection_text == REFLECTION["reflection_text"]
    value: Any = reflection
    for part in attr.split("."):
        value = getattr(value, part)
    assert value == expected


def test_a_credit_assignment_given_as_text_is_the_root_cause() -> None:
    sr = SelfReflection.model_validate({**REFLECTION, "credit_assignment": "no empty-list guard"})
    assert sr.credit_assignment.root_cause == "no empty-list guard"
    assert sr.credit_assignment.failure_category == "other"
    assert sr.credit_assignment.failing_action_indices == []
    assert reflection_quality(sr, []) == []  # a root cause: no "no_root_cause" issue


def test_the_reflection_text_itself_is_still_required() -> None:
    for text in (None, 42, "   "):
        assert parse_reflection(None, json.dumps({**REFLECTION, "reflection_text": text})) is None


def test_a_reflection_with_one_bad_field_is_kept_without_a_retry(stream: MemoryStream) -> None:
    answer = json.dumps({**REFLECTION, "confidence": "high", "causal_reasoning": None})
    model = ScriptedReflexionModel(actor_script=["Sydney"], reflection_script=[answer])
    create_reflexion_graph(
        model,
        match_evaluator("Canberra"),
        stream=stream,
        max_trials=1,
        config=ReflexionConfig(retry=RetryConfig(attempts=1)),
    ).invoke({"task": "What is the capital of Australia?"})
    [record] = stream.recent(None, kinds=[REFLEXION_KIND])
    assert record.metadata["reflection_source"] == "model" and not record.metadata["low_quality"]
    assert record.metadata["self_reflection"]["confidence"] == 0.75
    assert len(model.reflection_calls) == 1
