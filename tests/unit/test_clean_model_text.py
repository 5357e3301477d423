"""clean_model_text: reasoning sections of a model's answer are not its answer."""

from __future__ import annotations

import pytest

from langchain_reflective._llm import clean_model_text, load_json
from langchain_reflective.importance import parse_ratings
from langchain_reflective.reflection.parsing import parse_insights


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>hidden</think>\nanswer", "answer"),
        ("<thinking>\nStatement 1 and 2 look related [1, 2]\n</thinking>\n1. A [1]", "1. A [1]"),
        ("<reasoning>Memory 1 seems mundane.</reasoning>\n1: 9", "1: 9"),
        ("<THINKING>x</Thinking>answer", "answer"),
        ("<reflection>my doubts [3]</reflection>\n1. A [1]", "1. A [1]"),
        # Reflection-70B's layout: the reflection inside the thinking
        (
            "<thinking>a <reflection>b</reflection> c</thinking><output>d</output>",
            "<output>d</output>",
        ),
        # an unclosed section that starts the answer runs to the end (cut off by the limit)
        ("<thinking>1. not this [1]", ""),
        ("<think>1: 9", ""),
        ("\n  <reasoning>and then", ""),
        ("<think>a</think>\n<thinking>b", ""),
        # only these tags: the word, a JSON key, <reflections> and other tags stay
        ('{"reflection": "tried X", "answer": 4}', '{"reflection": "tried X", "answer": 4}'),
        ("<reflections>kept</reflections>", "<reflections>kept</reflections>"),
        ("<thinker>kept</thinker>", "<thinker>kept</thinker>"),
        ("a reflection on thinking and reasoning", "a reflection on thinking and reasoning"),
        # a <reflection> section that is the whole answer is the answer (tags dropped)
        ("<reflection>I should have run the tests.</reflection>", "I should have run the tests."),
        ("<think>t</think><reflection>Run the tests.", "Run the tests."),
        ("", ""),
        ("<thinking></thinking>", ""),
        # reasoning whose <think> the chat template wrote (DeepSeek-R1): up to the closing tag
        ("Memory 1 is mundane, so 2.\n</think>\n1: 2", "1: 2"),
        ("Statement 1 matters [1]\n</THINKING>\n1. Klaus works [2]", "1. Klaus works [2]"),
        ("<think>a</think> b </think> c", "b </think> c"),  # (opened: the usual rule)
        # a closing tag of another name inside a section does not end it (reasoning leaked)
        ("<think>I will write </thinking> here</think>Answer", "Answer"),
        ("<thinking>a </think> b</thinking>\n1: 2", "1: 2"),
        ("<reasoning>x </THINK> y</reasoning>1. A [1]", "1. A [1]"),
        # an opening tag mentioned (after a quote) opens nothing: the closing one still ends
        ('I wrote "<think>" first, so 2.</think>\n1: 2', "1: 2"),
    ],
)
def test_reasoning_sections_are_dropped(text: str, expected: str) -> None:
    assert clean_model_text(text) == expected


def test_a_thinking_section_is_no_insight_and_no_rating() -> None:
    """``<thinking>`` content was parsed and stored as an insight with evidence."""
    answer = (
        "<thinking>\nStatement 1 and 2 look related; maybe the answer is about work [1, 2]\n"
        "</thinking>\n1. Klaus is dedicated to his research [1, 2]"
    )
    assert parse_insights(answer, n_statements=3) == [
        ("Klaus is dedicated to his research", [1, 2])
    ]
    assert parse_insights("<reasoning>1. hidden [1]</reasoning>\n1. Shown [2]") == [("Shown", [2])]
    assert parse_ratings("<reasoning>1: 2\n</reasoning>\n1: 9", 1) == [9.0]
    assert parse_ratings("<thinking>1: 2, maybe 3", 1) == [None]
    assert load_json('<thinking>[1, 2]</thinking>{"a": 1}') == {"a": 1}


def test_a_reflection_asked_for_keeps_its_reflection_section() -> None:
    """Reflexion's plain-text fallback stored "Confidence: high" as the reflection: the
    ``<reflection>`` section, which is what it asked for, was stripped as reasoning."""
    from langchain_reflective.reflexion.reflection import parse_reflection

    answer = (
        "<reflection>I returned the sum of the wrong list; next time I will check the input."
        "</reflection>\nConfidence: high"
    )
    parsed = parse_reflection(None, answer)
    assert parsed is not None
    assert parsed.reflection_text.startswith("I returned the sum of the wrong list")
    assert clean_model_text(answer) == "Confidence: high"  # (elsewhere: reasoning beside it)


@pytest.mark.parametrize(
    "text",
    [
        "1. Use the <thinking> tag to wrap the reasoning, then answer [2]",
        "answer\n<reasoning>and then",
        "<think>a</think>Klaus writes <think> in his prompts",
        "Wrap it in `<think>` and `</think>`, then answer.",
        'Note: "</think>" ends the reasoning of DeepSeek-R1.',
        "Answer. Use <reflection> to mark a reflection.",
    ],
)
def test_a_tag_mentioned_in_the_answer_leaves_the_text_intact(text: str) -> None:
    """An unclosed ``<thinking>`` anywhere ran to the end of the answer: "Use the <thinking>
    tag to ..." in the middle of an answer lost everything after "Use the". Only an unclosed
    tag that starts the answer is unfinished reasoning; a quoted or backticked tag is a
    mention, never a section boundary."""
    kept = text.removeprefix("<think>a</think>")
    assert clean_model_text(text) == kept
    if text.startswith("1."):
        assert parse_insights(text) == [
            ("Use the <thinking> tag to wrap the reasoning, then answer", [2])
        ]


def test_a_stray_closing_tag_still_ends_the_templates_reasoning() -> None:
    """DeepSeek-R1's template writes the ``<think>``: its answer starts inside the reasoning,
    so what precedes a closing tag without its opening one is dropped, even mid-line."""
    assert clean_model_text("Memory 1 is mundane, so 2.</think>1: 2") == "1: 2"
    assert clean_model_text("So the rating is 2. </think> 1: 2") == "1: 2"
