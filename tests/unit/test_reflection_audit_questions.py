"""A remark around the list of questions that ends with "?" is no question: it was asked as
one (a retrieval and an insights call of its own, and its "insights" stored)."""

from __future__ import annotations

from datetime import datetime

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.importance import RetryConfig
from langchain_reflective.reflection import (
    ReflectionConfig,
    create_reflection_graph,
    parse_questions,
)
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

FAST = RetryConfig(attempts=1)
ANSWER = (
    "Sure! Shall I start?\n"
    "1. What drives Klaus's research paper?\n"
    "2. Why does Klaus work on so many topics?\n"
    "Would you like me to elaborate on any of these?"
)
LISTED = ["What drives Klaus's research paper?", "Why does Klaus work on so many topics?"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ANSWER, LISTED),
        # no list: every line ending with "?" (as before)
        ("Why is Klaus busy?\nHow is Maria?", ["Why is Klaus busy?", "How is Maria?"]),
        (
            "Question 1: Why is Klaus busy?\nQ2) How is Maria?",
            ["Why is Klaus busy?", "How is Maria?"],
        ),
    ],
)
def test_listed_questions_come_before_remarks(text: str, expected: list[str]) -> None:
    assert parse_questions(text, 3) == expected


def test_a_remark_is_not_asked_as_a_question(now: datetime) -> None:
    model = ScriptedChatModel(overrides={"questions": ANSWER})
    with MemoryStream(WordEmbeddings()) as stream:
        texts = [f"Klaus works on his research paper topic {i}" for i in range(1, 6)]
        stream.add(texts, importances=0.5, now=now)
        graph = create_reflection_graph(model, stream, config=ReflectionConfig(retry=FAST))
        out = graph.invoke({"force": True, "now": now})
    assert out["questions"] == LISTED
    asked = [str(c.messages[-1].content) for c in model.calls if c.kind == "insights"]
    assert not [prompt for prompt in asked if "elaborate" in prompt]
