"""The conversation loader: both LoCoMo shapes, image captions, dates, questions, bad files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective.conversation import (
    ConversationError,
    Turn,
    load_conversation,
    load_questions,
    parse_session_date,
    sample_conversation_path,
)
from langchain_reflective.errors import ReflectiveError

CONV: dict[str, Any] = {
    "speaker_a": "Ana",
    "speaker_b": "Ben",
    "session_2_date_time": "10:37 am on 27 June, 2023",
    "session_2": [
        {"speaker": "Ben", "dia_id": "D2:1", "text": "Back from Oslo."},
    ],
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben!"},
        {
            "speaker": "Ben",
            "dia_id": "D1:2",
            "text": "Look at my new bike.",
            "img_url": ["https://example.invalid/bike.jpg"],
            "blip_caption": "a photo of a red bicycle",
            "query": "red bike",
        },
    ],
    "session_3_date_time": "8:00 pm on 1 July, 2023",  # a date without turns: ignored
    "events_session_1": {"Ana": []},
    "session_1_summary": "They talk.",
}


def write(tmp_path: Path, data: Any, name: str = "conv.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_bare_conversation_shape(tmp_path: Path) -> None:
    turns = load_conversation(write(tmp_path, CONV))
    assert [t.dia_id for t in turns] == ["D1:1", "D1:2", "D2:1"]  # sessions sorted by number
    assert [t.session for t in turns] == [1, 1, 2]
    assert turns[0] == Turn(
        speaker="Ana",
        text="Ana: Hi Ben!",
        created_at=datetime(2023, 5, 8, 13, 56, tzinfo=UTC),
        dia_id="D1:1",
        session=1,
        utterance="Hi Ben!",
    )
    assert turns[2].created_at == datetime(2023, 6, 27, 10, 37, tzinfo=UTC)
    assert turns[0].metadata == {"dia_id": "D1:1", "session": 1, "speaker": "Ana"}


def test_image_caption_is_appended(tmp_path: Path) -> None:
    bike = load_conversation(write(tmp_path, CONV))[1]
    assert bike.text == "Ben: Look at my new bike. [image: a photo of a red bicycle]"
    assert bike.image_caption == "a photo of a red bicycle"
    assert bike.utterance == "Look at my new bike."


def test_locomo_sample_shape_and_list_of_samples(tmp_path: Path) -> None:
    sample = {"sample_id": "x", "conversation": CONV, "qa": []}
    nested = load_conversation(write(tmp_path, sample))
    bare = load_conversation(write(tmp_path, CONV, "bare.json"))
    assert nested == bare
    other = {"sample_id": "y", "conversation": {**CONV, "speaker_a": "Zoe"}}
    listed = write(tmp_path, [sample, other], "list.json")
    assert load_conversation(listed) == bare
    assert load_conversation(listed, index=1) == bare
    with pytest.raises(ConversationError, match="out of range"):
        load_conversation(listed, index=5)


def test_missing_dia_id_is_generated(tmp_path: Path) -> None:
    data = {
        "session_1_date_time": "9:00 am on 2 January, 2024",
        "session_1": [{"speaker": "A", "text": "one"}, {"speaker": "B", "text": "two"}],
    }
    assert [t.dia_id for t in load_conversation(write(tmp_path, data))] == ["D1:1", "D1:2"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("12:48 am on 1 February, 2023", datetime(2023, 2, 1, 0, 48, tzinfo=UTC)),
        ("12:05 PM on 1 February, 2023", datetime(2023, 2, 1, 12, 5, tzinfo=UTC)),
        ("  7:55  pm on 9 June, 2023 ", datetime(2023, 6, 9, 19, 55, tzinfo=UTC)),
        ("2023-05-08T13:56:00", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("2023-05-08T15:56:00+02:00", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
    ],
)
def test_session_dates(text: str, expected: datetime) -> None:
    parsed = parse_session_date(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize("bad", ["", "yesterday", "25:00 pm on 8 May, 2023", 20230508, None])
def test_bad_session_date(bad: object) -> None:
    with pytest.raises(ConversationError):
        parse_session_date(bad)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"hello": "world"}, "no 'session_<N>' lists"),
        ([], "empty list"),
        ("just a string", "not a LoCoMo conversation"),
        ({"session_1": [{"speaker": "A", "text": "x"}]}, "has no 'session_1_date_time'"),
        ({"session_1_date_time": "soon", "session_1": [{"speaker": "A", "text": "x"}]}, "soon"),
        (
            {"session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": [{"text": "x"}]},
            "no 'speaker'",
        ),
        (
            {"session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": ["hi"]},
            "not a JSON object",
        ),
        ({"session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": []}, "no dialogue"),
    ],
)
def test_not_a_conversation(tmp_path: Path, data: Any, match: str) -> None:
    with pytest.raises(ConversationError, match=match):
        load_conversation(write(tmp_path, data))


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConversationError, match="does not exist"):
        load_conversation(tmp_path / "nope.json")
    with pytest.raises(ConversationError, match="directory"):
        load_conversation(tmp_path)
    text = tmp_path / "notes.txt"
    text.write_text("not json at all", encoding="utf-8")
    with pytest.raises(ConversationError, match="not valid JSON"):
        load_conversation(text)
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(ConversationError, match="not a text"):
        load_conversation(binary)
    assert issubclass(ConversationError, ReflectiveError)
    assert issubclass(ConversationError, ValueError)


def test_questions_from_locomo_qa_skip_adversarial_and_unchecked(tmp_path: Path) -> None:
    qa = [
        {"question": "When?", "answer": 2022, "evidence": ["D1:2"], "category": 2},
        {"question": "Trick?", "adversarial_answer": "no", "evidence": ["D1:1"], "category": 5},
        {"question": "No evidence?", "answer": "x", "evidence": [], "category": 1},
        {"question": "Who?", "answer": "Ben", "evidence": ["D2:1"], "category": 4},
    ]
    path = write(tmp_path, {"conversation": CONV, "qa": qa})
    questions = load_questions(path)
    assert [(q.question, q.answer, q.evidence) for q in questions] == [
        ("When?", "2022", ("D1:2",)),
        ("Who?", "Ben", ("D2:1",)),
    ]
    assert len(load_questions(path, limit=1)) == 1
    assert load_questions(write(tmp_path, CONV, "bare.json")) == []


def test_sample_conversation_ships_with_the_package() -> None:
    path = sample_conversation_path()
    assert path.is_file()
    turns = load_conversation(path)
    assert 40 <= len(turns) <= 60
    assert len({t.session for t in turns}) == 4
    assert len({t.speaker for t in turns}) == 2
    assert any(t.image_caption for t in turns)
    dates = [t.created_at for t in turns]
    assert dates == sorted(dates)
    assert all(d.tzinfo is UTC for d in dates)
    questions = load_questions(path)
    assert 3 <= len(questions) <= 5
    ids = {t.dia_id for t in turns}
    for q in questions:
        assert q.answer
        assert q.evidence
        assert set(q.evidence) <= ids, q
