"""A model that declines, apologises or comments on the statements -- citing them -- writes no
insight: such a line was stored as a reflection pointing at the statements it declined."""

from __future__ import annotations

import logging
from datetime import datetime

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.importance import RetryConfig
from langchain_reflective.reflection import (
    ReflectionConfig,
    create_reflection_graph,
    parse_insights,
)
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

FAST = RetryConfig(attempts=1)
OBSERVATIONS = [f"Klaus works on his research paper topic {i}" for i in range(1, 6)]
GOOD = "1. Klaus is dedicated to his research [1, 2]"


@pytest.mark.parametrize(
    "line",
    [
        "I'm sorry, but I cannot infer any high-level insights from statements [1, 2].",
        "I'm sorry, I can't find more insights in statements [2-5].",
        "As an AI, I can't speculate about Klaus (because of 1, 2)",
        "I cannot determine anything about Klaus from statement [3].",
        "Note: statement [3] is unrelated to the question.",
        "Note: Statement 4 is irrelevant [4]",
        "These insights are based on statements [2, 3].",
    ],
)
def test_a_cited_refusal_or_note_is_no_insight(line: str) -> None:
    assert parse_insights(f"{GOOD}\n{line}", n_statements=5) == [
        ("Klaus is dedicated to his research", [1, 2])
    ]
    assert parse_insights(line, n_statements=5) == []


@pytest.mark.parametrize(
    "insight",
    [
        "I cannot find Klaus at home on Sundays",  # (pinned in test_parsing too)
        "I cannot complete tasks that need the network",
        "Note: Klaus keeps notes of every meeting",
        "Klaus values evidence over opinion",
    ],
)
def test_a_cited_first_person_insight_or_note_stays(insight: str) -> None:
    assert parse_insights(f"1. {insight} [2]", n_statements=5) == [(insight, [2])]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_refusal_citing_statements_is_not_stored(
    now: datetime, use_async: bool, caplog: pytest.LogCaptureFixture
) -> None:
    refusal = "I'm sorry, but I cannot infer any high-level insights from statements [1, 2]."
    model = ScriptedChatModel(overrides={"insights": refusal})
    with MemoryStream(WordEmbeddings()) as stream:
        stream.add(OBSERVATIONS, importances=0.5, now=now)
        graph = create_reflection_graph(model, stream, config=ReflectionConfig(retry=FAST))
        with caplog.at_level(logging.WARNING, logger="langchain_reflective.reflection.graph"):
            request = {"force": True, "now": now}
            out = await graph.ainvoke(request) if use_async else graph.invoke(request)
        assert out["reflections"] == []
        assert out["skipped"] == "no_insights"
        assert stream.recent(kinds=["reflection"]) == []
    assert "unusable" in caplog.text
