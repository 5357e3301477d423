"""A corpus of malformed model answers, each with the outcome the package must produce.

Importance cases give the expected rating per memory (1-10), or ``None`` when the heuristic
fallback must be taken for that memory. Reflection cases give, per step, the insights that must
survive parsing (statement numbers against 5 statements), or the fallback taken:

* ``questions`` step: no usable question -> ``skipped == "no_questions"``;
* ``insights`` step: nothing usable in any branch -> ``skipped == "no_insights"``;
* ``condense`` step: nothing usable -> the branches' own insights are kept (``"round_robin"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class RatingCase:
    name: str
    output: str
    count: int
    expected: tuple[float | None, ...]
    error: BaseException | None = None
    """When set, the model raises this instead of answering."""


N = None

RATING_CASES: list[RatingCase] = [
    RatingCase("empty", "", 3, (N, N, N)),
    RatingCase("whitespace", "  \n\t \n", 3, (N, N, N)),
    RatingCase("prose_without_numbers", "These memories are all fairly mundane.", 3, (N, N, N)),
    RatingCase("refusal", "I'm sorry, I can't rate personal memories.", 3, (N, N, N)),
    RatingCase("number_words", "1: seven\n2: three\n3: five", 3, (N, N, N)),
    RatingCase("too_few_in_order", "7\n3", 3, (N, N, N)),
    RatingCase("too_many_in_order", "7\n3\n5\n9", 3, (N, N, N)),
    RatingCase("single_number_for_a_batch", "7", 3, (N, N, N)),
    RatingCase("partial_numbered", "1: 7\n3: 2", 3, (7, N, 2)),
    RatingCase("index_out_of_range", "1: 7\n2: 3\n9: 5", 3, (7, 3, N)),
    RatingCase("duplicate_index_first_wins", "1: 7\n1: 2\n2: 3\n3: 4", 3, (7, 3, 4)),
    RatingCase("clamped_high", "1: 15\n2: 100\n3: 11", 3, (10, 10, 10)),
    RatingCase("clamped_low", "1: 0\n2: -4\n3: 0.5", 3, (1, 1, 1)),
    RatingCase("huge_number", "1: 99999999999999999999\n2: 5\n3: 5", 3, (10, 5, 5)),
    RatingCase("nan_and_inf", "1: nan\n2: inf\n3: 5", 3, (N, N, 5)),
    RatingCase("garbage_item", "1: 7\n2: ???\n3: 4", 3, (7, N, 4)),
    RatingCase("truncated_json", '{"ratings": [{"index": 1, "rating": 7}, ', 3, (N, N, N)),
    RatingCase("json_wrong_keys", '{"foo": "bar"}', 3, (N, N, N)),
    RatingCase("json_strings", '["7", "3/10", "high"]', 3, (7, 3, N)),
    RatingCase("json_booleans", "[true, false, 5]", 3, (N, N, 5)),
    RatingCase("json_out_of_range_index", '[{"index": 4, "rating": 9}]', 3, (N, N, N)),
    RatingCase("echoed_prompt", "Rating: <fill in with a number between 1 and 10>", 3, (N, N, N)),
    RatingCase(
        "think_then_answer", "<think>1: 1\n2: 1\n3: 1</think>1: 8\n2: 8\n3: 8", 3, (8, 8, 8)
    ),
    RatingCase("think_only", "<think>1: 9\n2: 9\n3: 9", 3, (N, N, N)),
    RatingCase("code_fence", "```\n1: 6\n2: 6\n3: 6\n```", 3, (6, 6, 6)),
    RatingCase(
        "markdown_table", "| # | rating |\n|---|---|\n| 1 | 7 |\n| 2 | 3 |\n| 3 | 5 |", 3, (7, 3, 5)
    ),
    RatingCase("explained", "1: 7 (it happened 3 times)\n2: 2 - routine\n3: 1", 3, (7, 2, 1)),
    RatingCase(
        "labelled_prose", "Memory 1 gets a 9, memory 2 gets a 2, memory 3 gets a 5", 3, (9, 2, 5)
    ),
    RatingCase("zero_based", "0: 7\n1: 3\n2: 5", 3, (7, 3, 5)),
    RatingCase("html_error_page", "<html><body>502 Bad Gateway</body></html>", 3, (N, N, N)),
    RatingCase("model_exception", "", 3, (N, N, N), error=RuntimeError("model crashed")),
    RatingCase("model_timeout", "", 3, (N, N, N), error=TimeoutError("read timed out")),
    RatingCase("single_rating_prose", "I would rate this memory a 6 out of 10.", 1, (6,)),
    RatingCase("single_fraction", "8/10", 1, (8,)),
    RatingCase("single_garbage", "poignant!", 1, (N,)),
]


Stage = Literal["questions", "insights", "condense"]
Pairs = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class ReflectionCase:
    name: str
    stage: Stage
    output: str
    expected: Pairs | tuple[str, ...] | None
    """Insights stage / condense stage: surviving ``(text, citations)``; questions stage: the
    questions; ``None``: the step's fallback."""


NONE: None = None

REFLECTION_CASES: list[ReflectionCase] = [
    # -- questions step ------------------------------------------------------------------------
    ReflectionCase("q_empty", "questions", "", NONE),
    ReflectionCase("q_too_short", "questions", "ok", NONE),
    ReflectionCase("q_only_header", "questions", "Here are the questions:", NONE),
    ReflectionCase("q_think_only", "questions", "<think>What is Klaus doing?", NONE),
    ReflectionCase(
        "q_truncated_json",
        "questions",
        '{"questions": ["Why is Klaus busy?"',
        ("Why is Klaus busy?",),
    ),
    ReflectionCase(
        "q_too_many",
        "questions",
        "\n".join(f"{i}. Question number {i}?" for i in range(1, 11)),
        ("Question number 1?", "Question number 2?", "Question number 3?"),
    ),
    # -- insights step (5 statements) ----------------------------------------------------------
    ReflectionCase("i_empty", "insights", "", NONE),
    ReflectionCase("i_prose", "insights", "I cannot find any patterns in these statements.", NONE),
    ReflectionCase(
        "i_no_citations", "insights", "1. Klaus works hard\n2. Maria studies a lot", NONE
    ),
    ReflectionCase("i_all_out_of_range", "insights", "1. Klaus works hard [9, 12]", NONE),
    ReflectionCase("i_non_numeric", "insights", "1. Klaus works hard [a, b]", NONE),
    ReflectionCase("i_zero_negative", "insights", "1. Klaus works hard [0, -2]", NONE),
    ReflectionCase(
        "i_huge_citation", "insights", "1. Klaus works hard [99999999999999999999]", NONE
    ),
    ReflectionCase("i_citations_only", "insights", "[1, 2]", NONE),
    ReflectionCase("i_markers_only", "insights", "1. [1]\n2. [2]", NONE),
    ReflectionCase("i_think_only", "insights", "<think>1. Klaus works hard [1]</think>", NONE),
    ReflectionCase("i_fenced_prose", "insights", "```\nnothing to see here\n```", NONE),
    ReflectionCase(
        "i_html", "insights", "<html><body>500 Internal Server Error</body></html>", NONE
    ),
    ReflectionCase(
        "i_truncated_json", "insights", '[{"insight": "Klaus works hard", "evidence": [1', NONE
    ),
    ReflectionCase("i_json_wrong_type", "insights", '{"insights": "Klaus works hard"}', NONE),
    ReflectionCase(
        "i_seed000_no_evidence",
        "insights",
        '[{"insight": "User prefers tea", "importance": 0.8}]',
        NONE,
    ),
    ReflectionCase(
        "i_partially_valid",
        "insights",
        "1. Klaus works hard [1, 99]\n2. Maria studies [x]",
        (("Klaus works hard", (1,)),),
    ),
    ReflectionCase(
        "i_json_string_citations",
        "insights",
        '[{"insight": "Klaus works hard", "evidence": ["1", "two", "3"]}]',
        (("Klaus works hard", (1, 3)),),
    ),
    ReflectionCase(
        "i_duplicates_merged",
        "insights",
        "1. Klaus works hard [1]\n2. Klaus works hard [2]",
        (("Klaus works hard", (1, 2)),),
    ),
    ReflectionCase(
        "i_mixed_styles",
        "insights",
        "Some intro prose\n1. Klaus works hard (because of 2)\n- Maria studies [3]\nThe end",
        (("Klaus works hard", (2,)), ("Maria studies", (3,))),
    ),
    ReflectionCase(
        "i_big_range", "insights", "1. Klaus works hard [1-500]", (("Klaus works hard", (1,)),)
    ),
    # -- condense step -------------------------------------------------------------------------
    ReflectionCase("c_empty", "condense", "", NONE),
    ReflectionCase("c_no_citations", "condense", "1. Klaus works hard\n2. Maria studies", NONE),
    ReflectionCase("c_out_of_range", "condense", "1. Klaus works hard [42]", NONE),
    ReflectionCase("c_refusal", "condense", "I'd rather not.", NONE),
    ReflectionCase(
        "c_partial",
        "condense",
        "1. Klaus works hard [1]\n2. Junk [77]",
        (("Klaus works hard", (1,)),),
    ),
    ReflectionCase(
        "c_too_many",
        "condense",
        "\n".join(f"{i}. Insight number {i} [1]" for i in range(1, 9)),
        tuple((f"Insight number {i}", (1,)) for i in range(1, 6)),
    ),
]
