"""Parsing of insights and questions (seed 002's example verbatim, paper and JSON forms)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from langchain_reflective.reflection import (
    Insight,
    format_insights,
    map_citations,
    parse_insights,
    parse_questions,
)

# seed 002, "parse_insight输入输出的例子", verbatim
SEED_INPUT = """1. Missing data in user_dims table for country may impact accuracy of data analysis and decision-making for marketing campaigns and user segmentation. [7, 52, 47]
2. Inconsistent information in user_dims table may lead to incorrect analysis and decision-making for user segmentation and marketing campaigns. [22, 40]
3. Duplicated and inconsistent data in user_dims table may impact accuracy of data-driven decisions for user segmentation and marketing campaigns. [3, 57, 62, 42]
4. Large number of missing values in bitcoin_price_data table may affect accuracy of analysis and decision-making for cryptocurrency investments. [14]"""  # noqa: E501

SEED_OUTPUT = [
    (
        "Missing data in user_dims table for country may impact accuracy of data analysis and decision-making for marketing campaigns and user segmentation.",  # noqa: E501
        [7, 52, 47],
    ),
    (
        "Inconsistent information in user_dims table may lead to incorrect analysis and decision-making for user segmentation and marketing campaigns.",  # noqa: E501
        [22, 40],
    ),
    (
        "Duplicated and inconsistent data in user_dims table may impact accuracy of data-driven decisions for user segmentation and marketing campaigns.",  # noqa: E501
        [3, 57, 62, 42],
    ),
    (
        "Large number of missing values in bitcoin_price_data table may affect accuracy of analysis and decision-making for cryptocurrency investments.",  # noqa: E501
        [14],
    ),
]

# seed 002, condensed_output example
SEED_CONDENSED = """1. Missing data in user_dims table for country may impact accuracy of data analysis and decision-making for marketing campaigns and user segmentation. [7, 52, 47]
2. Inconsistent information in user_dims table may lead to incorrect analysis and decision-making for user segmentation and marketing campaigns. [22, 40]
3. Duplicated and inconsistent data in user_dims table may impact accuracy of data-driven decisions for user segmentation and marketing campaigns. [3, 57, 62, 42]
4. Large number of missing values in bitcoin_price_data table may affect accuracy of analysis and decision-making for cryptocurrency investments. [14]
5. The user_dims table has data issues for many users. [26, 7, 22, 12, 17, 62, 47, 57, 52]"""  # noqa: E501


def test_seed_002_example_verbatim() -> None:
    assert parse_insights(SEED_INPUT) == SEED_OUTPUT


def test_seed_002_condensed_example() -> None:
    parsed = parse_insights(SEED_CONDENSED)
    assert len(parsed) == 5
    assert parsed[:4] == SEED_OUTPUT
    assert parsed[4] == (
        "The user_dims table has data issues for many users.",
        [26, 7, 22, 12, 17, 62, 47, 57, 52],
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the paper's form
        (
            "Klaus is dedicated to his research (because of 1, 5, 3)",
            [("Klaus is dedicated to his research", [1, 5, 3])],
        ),
        (
            "1. Klaus works hard (because of statements 1, 2 and 4).",
            [("Klaus works hard", [1, 2, 4])],
        ),
        ("1. Klaus works hard (statement 3)", [("Klaus works hard", [3])]),
        # bullets, backticks, ranges, inline citations
        ("- Klaus loves research [`1`, `2`]", [("Klaus loves research", [1, 2])]),
        ("* Klaus loves research [#1, #3]", [("Klaus loves research", [1, 3])]),
        ("1. Klaus works hard [1-3]", [("Klaus works hard", [1, 2, 3])]),
        ("Klaus [1] loves [2, 3] research.", [("Klaus loves research.", [1, 2, 3])]),
        ("1) Klaus is busy [2][4]", [("Klaus is busy", [2, 4])]),
        ("1. **Klaus** is busy. [2]", [("Klaus is busy.", [2])]),
        ("1. Insight: Klaus is busy. Evidence: [1, 2]", [("Klaus is busy.", [1, 2])]),
        # non-numeric citations are dropped, duplicates merged, 0 and negatives dropped
        ("1. Klaus is busy [a, b]", [("Klaus is busy", [])]),
        ("1. Klaus is busy [2, 2, x, 0, -1]", [("Klaus is busy", [2])]),
        # prose around the list is skipped
        (
            "Here are the insights:\n1. Klaus works hard [2]\nI hope this helps!",
            [("Klaus works hard", [2])],
        ),
        # a parenthesis that is not a citation stays in the text
        (
            "1. Klaus (a student) studies gentrification [1]",
            [("Klaus (a student) studies gentrification", [1])],
        ),
        # seed 000 plain-text fallback: lines are insights without evidence
        (
            "Klaus likes tea and coffee.\nMaria is a student at Oak Hill.",
            [("Klaus likes tea and coffee.", []), ("Maria is a student at Oak Hill.", [])],
        ),
        # <think> sections are ignored
        ("<think>1. not this [9]</think>\n1. Klaus is kind [1]", [("Klaus is kind", [1])]),
    ],
)
def test_text_forms(text: str, expected: list[tuple[str, list[int]]]) -> None:
    assert parse_insights(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[{"insight": "Klaus works hard", "evidence": [1, 2]}]',
            [("Klaus works hard", [1, 2])],
        ),
        (
            '{"insights": [{"text": "Klaus works hard", "citations": "1, 3"}]}',
            [("Klaus works hard", [1, 3])],
        ),
        (
            '```json\n[{"insight": "Klaus", "evidence": [1, "2", "x", true, 2.0, 3.5]}]\n```',
            [("Klaus", [1, 2])],
        ),
        ('[["Klaus works hard", [4]]]', [("Klaus works hard", [4])]),
        (
            '["Klaus works hard [2]", "Maria studies [1]"]',
            [("Klaus works hard", [2]), ("Maria studies", [1])],
        ),
        # seed 000's format: no evidence, an importance
        (
            '[{"insight": "User prefers functional style", "importance": 0.8}]',
            [("User prefers functional style", [])],
        ),
        ('{"insight": "Klaus works", "because_of": [1]}', [("Klaus works", [1])]),
    ],
)
def test_json_forms(text: str, expected: list[tuple[str, list[int]]]) -> None:
    assert parse_insights(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # an evidence field of its own: parentheses in the text are content, not citations
        (
            '{"insights": [{"insight": "Klaus has two children (5 and 7)", "evidence": [1, 2]}]}',
            [("Klaus has two children (5 and 7)", [1, 2])],
        ),
        (
            '[{"insight": "Klaus rated his draft highly (9/10)", "evidence": [3]}]',
            [("Klaus rated his draft highly (9/10)", [3])],
        ),
        # a numeric bracket can only be a citation: out of the text, and the field decides
        (
            '[{"insight": "Klaus reads chapter [3] of Dune nightly", "evidence": [1]}]',
            [("Klaus reads chapter of Dune nightly", [1])],
        ),
    ],
)
def test_an_evidence_field_leaves_the_text_whole(
    text: str, expected: list[tuple[str, list[int]]]
) -> None:
    """Structured output (the graph's ``CitedInsight``) was parsed as a text line too: a
    trailing "(5 and 7)" was cut off and cited as statements 5 and 7."""
    assert parse_insights(text) == expected


@pytest.mark.parametrize(
    "citation",
    ["[①]", "[²]", "(because of ①, 2)", "[1²]", "[" + "9" * 5000 + "]", "[1-" + "9" * 5000 + "]"],
)
def test_a_citation_that_is_no_number_never_raises(citation: str) -> None:
    """``"①".isdigit()`` is true but ``int("①")`` raises, and so does an int of 4,301+ digits:
    one such citation failed the whole reflection step."""
    text = f"1. Klaus is devoted to research {citation}\n2. Klaus works hard on his paper [1, 2]"
    parsed = parse_insights(text, n_statements=5)
    assert parsed[-1] == ("Klaus works hard on his paper", [1, 2])
    assert all(n <= 5 for _, cited in parsed for n in cited)
    as_json = json.dumps([{"insight": "Klaus works hard", "evidence": citation}])
    assert parse_insights(as_json, n_statements=5) in (
        [("Klaus works hard", [])],
        [("Klaus works hard", [2])],
    )


@pytest.mark.parametrize(
    "refusal",
    [
        "I'm sorry, but I can't help with analysing these statements.",
        "I cannot draw insights from these statements.",
        "As an AI, I do not have opinions about Klaus.",
        "I don't have enough information to say what Klaus values.",
        "I cannot determine a pattern from these statements.",
        "I'm unable to help with that.",
        "I won't be able to answer that.",
        "I do not have access to those statements.",
        "I don't see any clear patterns in these statements.",
        "As a language model, I have no views on Klaus.",
    ],
)
def test_an_uncited_refusal_is_not_an_insight(refusal: str) -> None:
    assert parse_insights(refusal) == []
    assert parse_insights(f"- {refusal}") == []
    # a line that cites evidence is an insight, however it starts
    assert parse_insights("1. I cannot find Klaus at home on Sundays [2]") == [
        ("I cannot find Klaus at home on Sundays", [2])
    ]


@pytest.mark.parametrize(
    "insight",
    [
        "I don't trust the build cache after a dependency bump",
        "I do not merge on Fridays: the deploy runs over the weekend",
        "I cannot rely on the flaky integration tests to gate a release",
        "I can't run the GPU tests locally, so CI has to",
        "I won't skip the migration dry run again",
        "I am unable to reproduce the timeout on macOS",
        "I don't have access to the production database",
    ],
)
def test_a_first_person_insight_without_evidence_is_no_refusal(insight: str) -> None:
    """Every uncited line starting "I don't", "I cannot", "I won't" or "I am unable" was taken
    for a refusal and dropped, and with it the insights of an agent that keeps insights without
    evidence (``keep_insights_without_evidence``) and writes them in the first person."""
    assert parse_insights(insight) == [(insight, [])]
    assert parse_insights(f"- {insight}") == [(insight, [])]


def test_out_of_range_citations_dropped_with_n_statements() -> None:
    assert parse_insights("1. Klaus [1, 4, 9]", n_statements=4) == [("Klaus", [1, 4])]


@pytest.mark.parametrize("text", ["", "   ", "{}", "[]", "null", "```\n```", "<think></think>"])
def test_empty_answers(text: str) -> None:
    assert parse_insights(text) == []


def test_map_citations_to_ids() -> None:
    ids = ["id-a", "id-b", "id-c"]
    parsed = [("Klaus works hard", [3, 1, 7]), ("No evidence", [9]), ("Maria", [])]
    out = map_citations(parsed, ids)
    assert out == [Insight("Klaus works hard", (3, 1), ("id-c", "id-a"), ("7",))]
    kept = map_citations(parsed, ids, keep_without_evidence=True)
    assert [(i.text, i.evidence) for i in kept] == [
        ("Klaus works hard", ("id-c", "id-a")),
        ("No evidence", ()),
        ("Maria", ()),
    ]


def test_map_citations_merges_duplicates() -> None:
    out = map_citations([("Klaus works", [1]), ("klaus  works", [2])], ["a", "b"])
    assert len(out) == 1 and out[0].evidence == ("a", "b")


def test_insight_dict_round_trip() -> None:
    insight = Insight("Klaus", (1, 2), ("a", "b"))
    assert Insight.from_dict(insight.to_dict()) == insight


def test_format_insights_renumbers() -> None:
    lines = format_insights(
        [Insight("Klaus", (1,), ("x", "y")), Insight("Maria", (), ())], {"x": 3, "y": 1}
    )
    assert lines == ["Klaus [3, 1]", "Maria"]
    assert parse_insights("\n".join(f"{i}. {line}" for i, line in enumerate(lines, 1))) == [
        ("Klaus", [3, 1]),
        ("Maria", []),
    ]


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [
        (
            "1. What is Klaus passionate about?\n2. How does Maria feel?\n3. Why?",
            3,
            ["What is Klaus passionate about?", "How does Maria feel?", "Why?"],
        ),
        ("Here are 3 questions:\n- A?\n- B?\n- C?\n- D?", 3, ["A?", "B?", "C?"]),
        ('{"questions": ["A?", {"question": "B?"}]}', 3, ["A?", "B?"]),
        ('["A?", "A?", "B?"]', 3, ["A?", "B?"]),
        (
            "Question 1: Why is Klaus busy?\nQ2) How is Maria?",
            3,
            ["Why is Klaus busy?", "How is Maria?"],
        ),
        (
            "1. Klaus and his research\n2. Maria and school",
            3,
            ["Klaus and his research", "Maria and school"],
        ),
        ("", 3, []),
        ("ok", 3, []),
        # a refusal is no question (it was asked as one: retrieval, then insights about it)
        ("I'm sorry, but I can't help with that request.", 3, []),
        ("1. I cannot answer that.\n2. Maria and school", 3, ["Maria and school"]),
        ("As an AI, I do not have access to those statements.", 3, []),
        ("Sorry, which person?", 3, ["Sorry, which person?"]),  # (a question: kept)
        ("Sorry state of the garden in May", 3, ["Sorry state of the garden in May"]),
    ],
)
def test_parse_questions(text: str, n: int, expected: list[str]) -> None:
    assert parse_questions(text, n) == expected


@pytest.mark.parametrize(
    "debris",
    [
        "1",
        '{"insights":[{"insight":"[index number(s) of evidence]","evidence":}',
        '[{"insight": ',
        '"insight": "x", "evidence": [1]',
        "---",
    ],
)
def test_json_debris_and_bare_numbers_are_not_insights(debris: str) -> None:
    """A base model that breaks off its JSON leaves fragments; they must never be stored."""
    assert parse_insights(debris) == []
    assert parse_insights(f"1. Klaus works hard [1]\n2. {debris}") == [("Klaus works hard", [1])]


HOSTILE_ANSWERS = [
    "1. Alice likes tea (" + "1   " * 30 + "x",  # exponential before (58 chars: 53 s)
    "1. Alice likes tea (" + "1 " * 60 + "x",
    "Alice " + " [1]" * 50_000 + " x",  # quadratic before (32k chars: 10 s)
    "1. Bob (" + "statements 1, " * 5_000 + "x",
]


HOSTILE_RATINGS = [
    "rating" * 20_000,  # quadratic before (60k chars: 53 s)
    "[" * 100_000 + "]" * 100_000,  # deeper than the stack: RecursionError escaped
    "[" * 40 + "7" + "]" * 40,  # deeper than any answer: not an answer
]


def test_hostile_answers_parse_without_catastrophic_backtracking() -> None:
    """A model's answer (which may echo a memory's text) must not freeze the process (the
    regular expressions ran with the GIL held, so one reflection or rating stalled every
    thread) nor escape the parsers' "never raises" as a RecursionError.

    Parsed in a child process with a hang guard far above the milliseconds these answers take
    now (before: minutes to hours). A thread cannot guard it: the stuck regex holds the GIL."""
    script = (
        "import json, sys\n"
        "from langchain_reflective.importance import parse_ratings\n"
        "from langchain_reflective.reflection import parse_insights\n"
        "insights, ratings = json.load(sys.stdin)\n"
        "for answer in insights:\n"
        "    assert isinstance(parse_insights(answer, n_statements=5), list)\n"
        "for answer in ratings:\n"
        "    assert parse_ratings(answer, 2) == [None, None], answer[:40]\n"
    )
    subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps([HOSTILE_ANSWERS, HOSTILE_RATINGS]),
        text=True,
        check=True,
        timeout=60,
    )
    # an ordinary citation at the end of a very long line is still found
    assert parse_insights("1. " + "word " * 20_000 + "[2, 3]") == [
        (" ".join(["word"] * 20_000), [2, 3])
    ]
