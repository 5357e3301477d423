"""Evidence written on a line of its own, under the insight it supports, is that insight's:
such insights were dropped for citing nothing (or, kept without evidence, "Evidence: 1, 2" was
stored as an insight of its own)."""

from __future__ import annotations

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


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            "1. Klaus works hard\n   Evidence: [1, 2]\n2. Maria studies\n   Evidence: [3]",
            [("Klaus works hard", [1, 2]), ("Maria studies", [3])],
        ),
        ("1. Klaus works hard\n   [1, 2]", [("Klaus works hard", [1, 2])]),
        ("**Insight 1:** Klaus works hard\n**Evidence:** 1, 2", [("Klaus works hard", [1, 2])]),
        ("1. Klaus works hard.\n(because of 1, 2)", [("Klaus works hard.", [1, 2])]),
        (
            "- Klaus works hard\n  - Evidence: statements 1 and 2",
            [("Klaus works hard", [1, 2])],
        ),
        # citations under a line that cites already, or alone, or a numbered item: no change
        ("1. Klaus works hard [1]\nEvidence: [3]", [("Klaus works hard", [1])]),
        ("[1, 2]", []),
        ("1. [1]\n2. [2]", []),
        ("1. Klaus works hard\n2. [2]", [("Klaus works hard", [])]),
        ("1. Klaus works hard\n1, 2", [("Klaus works hard", [])]),
    ],
)
def test_a_line_of_citations_cites_for_the_insight_above(
    answer: str, expected: list[tuple[str, list[int]]]
) -> None:
    assert parse_insights(answer, n_statements=5) == expected


@pytest.mark.parametrize("keep", [False, True], ids=["drop_uncited", "keep_uncited"])
def test_evidence_on_its_own_line_is_stored_with_the_insight(now: datetime, keep: bool) -> None:
    answer = "1. Klaus is devoted to his research\n   Evidence: [1, 2]"
    model = ScriptedChatModel(overrides={"insights": answer})
    with MemoryStream(WordEmbeddings()) as stream:
        records = stream.add(OBSERVATIONS, importances=0.5, now=now)
        config = ReflectionConfig(retry=FAST, n_questions=1, keep_insights_without_evidence=keep)
        out = create_reflection_graph(model, stream, config=config).invoke(
            {"force": True, "now": now}
        )
        texts = [r.text for r in out["reflections"]]
        assert texts == ["Klaus is devoted to his research"]
        [reflection] = out["reflections"]
        assert len(reflection.evidence) == 2
        assert set(reflection.evidence) <= {r.id for r in records}
