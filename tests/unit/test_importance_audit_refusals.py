"""A model that declines to rate gives no rating: the numbers of its refusal (the scale's
"1 to 10", the memories' own numbers) are not taken for ratings."""

from __future__ import annotations

import logging

import pytest
from langchain_core.language_models import FakeListChatModel

from langchain_reflective.importance import (
    ImportanceConfig,
    LLMImportanceScorer,
    RetryConfig,
    heuristic_rating,
    parse_ratings,
)

N = None
FAST = RetryConfig(attempts=1)


@pytest.mark.parametrize(
    ("answer", "count", "expected"),
    [
        ("I'm sorry, but I can't rate this memory on a scale of 1 to 10.", 1, [N]),
        ("I'm sorry, but I can't provide ratings on a scale from 1 to 10 for these.", 2, [N, N]),
        ("I'm sorry, I cannot rate memories 1 and 2 as they contain sensitive content.", 2, [N, N]),
        ("As an AI language model, I won't be rating memory 1 or 2.", 2, [N, N]),
        ('{"rating": "I cannot rate this on a scale of 1 to 10"}', 1, [N]),
        # a refusal for one memory leaves the others' ratings
        ("I'm unable to rate memory 3 because it is unclear.\n1: 7\n2: 4", 3, [7, 4, N]),
        ("1: 8\n2: I cannot rate this one (1-10 scale).", 2, [8, N]),
        # an apology before the labels is no refusal of them (a review: all three fell back)
        ("Sorry for the delay! 1: 7, 2: 3, 3: I cannot rate this one", 3, [7, 3, N]),
        ("As an AI, I cannot rate memory 2: it is private", 2, [N, N]),
        ("I'm sorry, I can't rate these on a scale of 1-10: they are private", 2, [N, N]),
        # hedges that still rate are read
        ("I can't be sure, but I'd say 6.", 1, [6]),
        ("As an AI, I don't have feelings, but I'd rate it 5.", 1, [5]),
        ("1: 9 - I can't imagine anything worse\n2: 8 - I can't help but feel it", 2, [9, 8]),
    ],
)
def test_a_refusal_is_no_rating(answer: str, count: int, expected: list[float | None]) -> None:
    assert parse_ratings(answer, count) == expected


def test_a_refused_memory_falls_back_to_the_heuristic_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "My grandmother died and I was at her funeral"
    model = FakeListChatModel(
        responses=["I'm sorry, but I can't rate this memory on a scale of 1 to 10."]
    )
    scorer = LLMImportanceScorer(
        model, config=ImportanceConfig(structured_output=False, retry=FAST)
    )
    with caplog.at_level(logging.WARNING, logger="langchain_reflective.importance"):
        [result] = scorer.score([text])
    # not the refusal's "10" taken for the model's own rating of 10/10
    assert result.source == "heuristic"
    assert result.value == heuristic_rating(text) / 10
    assert "can't rate this memory" in str(result.error)
    assert "could not be rated by the model" in caplog.text
