"""Load multi-session conversations (the LoCoMo JSON format) as memory-stream turns.

One loader reads both shapes of the LoCoMo format:

* a LoCoMo sample: ``{"sample_id": ..., "conversation": {...}, "qa": [...], ...}`` (the format
  of the public release; a list of such samples is accepted too, see ``index``);
* a bare conversation: ``{"speaker_a": ..., "speaker_b": ..., "session_1_date_time": ...,
  "session_1": [...], ...}`` (the sample conversation shipped with the package uses this shape,
  plus a ``"questions"`` list for the demo).

Each turn becomes one memory whose text is ``"<speaker>: <text>"`` plus
``" [image: <blip_caption>]"`` when the turn shares an image; its time is the session's date
(``"1:56 pm on 8 May, 2023"``, read as UTC) and its ``dia_id`` (``"D1:3"``) is kept so answers
can be checked against LoCoMo's evidence ids.

Example:
    >>> from langchain_reflective.conversation import load_conversation, sample_conversation_path
    >>> turns = load_conversation(sample_conversation_path())
    >>> turns[0].dia_id, turns[0].session
    ('D1:1', 1)
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

from langchain_reflective.errors import ReflectiveError

__all__ = [
    "ConversationError",
    "ConversationQuestion",
    "Turn",
    "load_conversation",
    "load_questions",
    "parse_session_date",
    "sample_conversation_path",
]

_SESSION_KEY = re.compile(r"session_(\d+)$")
_DATE_FORMATS = (
    "%I:%M %p on %d %B, %Y",  # 1:56 pm on 8 May, 2023 (LoCoMo)
    "%I:%M %p on %d %b, %Y",  # 1:56 pm on 8 Sep, 2023
    "%I:%M %p on %B %d, %Y",  # 1:56 pm on May 8, 2023
    "%H:%M on %d %B, %Y",  # 13:56 on 8 May, 2023
)


class ConversationError(ReflectiveError, ValueError):
    """A conversation file cannot be read or is not in the LoCoMo format."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One dialogue turn, ready to be stored as a memory."""

    speaker: str
    """Who said it."""
    text: str
    """The memory text: ``"<speaker>: <utterance>"`` plus ``" [image: <caption>]"``."""
    created_at: datetime
    """The session's date and time (timezone-aware, UTC)."""
    dia_id: str
    """The turn's id in the conversation (``"D<session>:<turn>"``)."""
    session: int
    """The session number (1-based)."""
    utterance: str
    """What the speaker said, without the speaker prefix or the image caption."""
    image_caption: str | None = None
    """Caption of the image shared with the turn (LoCoMo ``blip_caption``), if any."""

    @property
    def metadata(self) -> dict[str, Any]:
        """JSON metadata to store with the memory (``dia_id``, ``session``, ``speaker``)."""
        return {"dia_id": self.dia_id, "session": self.session, "speaker": self.speaker}


@dataclass(frozen=True, slots=True)
class ConversationQuestion:
    """A question about a conversation, with its reference answer and evidence turns."""

    question: str
    """The question."""
    answer: str | None = None
    """The reference answer, when known."""
    evidence: tuple[str, ...] = ()
    """``dia_id`` of the turns that hold the answer."""


def sample_conversation_path() -> Path:
    """Path of the small sample conversation shipped with the package (LoCoMo format).

    It is an original conversation written for this project: four sessions between two
    friends, with a few life events among everyday chatter, and a ``"questions"`` list.
    """
    resource = files("langchain_reflective").joinpath("data", "sample_conversation.json")
    return Path(str(resource))  # package data of a regular (unzipped) install is a real file


def parse_session_date(value: object) -> datetime:
    """Parse a LoCoMo session date such as ``"1:56 pm on 8 May, 2023"`` as UTC.

    ISO 8601 strings are accepted too (a naive one is read as UTC).

    Raises:
        ConversationError: the value is not a date in a known format.
    """
    if not isinstance(value, str) or not value.strip():
        raise ConversationError(f"session date must be a non-empty string, got {value!r}")
    text = " ".join(value.split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ConversationError(
            f"unrecognised session date {value!r}; expected e.g. '1:56 pm on 8 May, 2023'"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _read_json(path: str | os.PathLike[str]) -> Any:
    source = Path(path)
    if not source.exists():
        raise ConversationError(f"conversation file {source} does not exist")
    if source.is_dir():
        raise ConversationError(f"{source} is a directory, not a conversation file")
    try:
        with source.open(encoding="utf-8") as fh:
            return json.load(fh)
    except UnicodeDecodeError:
        raise ConversationError(f"{source} is not a text (UTF-8 JSON) file") from None
    except json.JSONDecodeError as exc:
        raise ConversationError(
            f"{source} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except OSError as exc:
        raise ConversationError(f"cannot read {source}: {exc.strerror or exc}") from None


def _sample(data: Any, source: Path, index: int) -> dict[str, Any]:
    """The sample (conversation plus questions) at ``index`` of a file's JSON."""
    if isinstance(data, list):
        if not data:
            raise ConversationError(f"{source} holds an empty list, not a conversation")
        if not -len(data) <= index < len(data):
            raise ConversationError(
                f"{source} holds {len(data)} conversations; index {index} is out of range"
            )
        data = data[index]
    if not isinstance(data, dict):
        raise ConversationError(
            f"{source} is not a LoCoMo conversation (expected a JSON object with "
            "'speaker_a', 'session_1', ... or a 'conversation' key)"
        )
    return data


def _conversation(sample: dict[str, Any], source: Path) -> dict[str, Any]:
    conv = sample.get("conversation", sample)
    if not isinstance(conv, dict) or not any(
        _SESSION_KEY.match(k) and isinstance(v, list) for k, v in conv.items()
    ):
        raise ConversationError(
            f"{source} is not a LoCoMo conversation: no 'session_<N>' lists of turns found"
        )
    return conv


def load_conversation(path: str | os.PathLike[str], *, index: int = 0) -> list[Turn]:
    """Load a conversation in the LoCoMo format as turns, oldest session first.

    Args:
        path: a JSON file: a LoCoMo sample (``"conversation"`` key), a bare conversation
            (``"speaker_a"``, ``"session_1"``, ...), or a list of LoCoMo samples.
        index: which sample when the file holds a list of them.

    Returns:
        The turns of every non-empty session, in session then turn order. Turns without a
        ``dia_id`` get ``"D<session>:<position>"``.

    Raises:
        ConversationError: the file is missing, not JSON, or not in the LoCoMo format (a
            session without a date, a turn without a speaker or text, ...).
    """
    source = Path(path)
    conv = _conversation(_sample(_read_json(source), source, index), source)
    sessions = sorted(
        (int(m.group(1)), value)
        for key, value in conv.items()
        if (m := _SESSION_KEY.match(key)) and isinstance(value, list)
    )
    turns: list[Turn] = []
    for number, items in sessions:
        if not items:
            continue
        date_key = f"session_{number}_date_time"
        if date_key not in conv:
            raise ConversationError(f"{source}: session_{number} has no {date_key!r}")
        try:
            when = parse_session_date(conv[date_key])
        except ConversationError as exc:
            raise ConversationError(f"{source}: {date_key}: {exc}") from None
        for position, item in enumerate(items, 1):
            turns.append(_turn(item, number, position, when, source))
    if not turns:
        raise ConversationError(f"{source} holds no dialogue turns")
    return turns


def _turn(item: Any, session: int, position: int, when: datetime, source: Path) -> Turn:
    where = f"{source}: session_{session} turn {position}"
    if not isinstance(item, dict):
        raise ConversationError(f"{where} is not a JSON object")
    speaker, utterance = item.get("speaker"), item.get("text")
    if not isinstance(speaker, str) or not speaker.strip():
        raise ConversationError(f"{where} has no 'speaker'")
    if not isinstance(utterance, str):
        raise ConversationError(f"{where} has no 'text'")
    dia_id = item.get("dia_id")
    if not isinstance(dia_id, str) or not dia_id.strip():
        dia_id = f"D{session}:{position}"
    caption = item.get("blip_caption")
    caption = caption.strip() if isinstance(caption, str) and caption.strip() else None
    text = f"{speaker.strip()}: {utterance.strip()}"
    if caption:
        text += f" [image: {caption}]"
    return Turn(
        speaker=speaker.strip(),
        text=text,
        created_at=when,
        dia_id=dia_id.strip(),
        session=session,
        utterance=utterance,
        image_caption=caption,
    )


def load_questions(
    path: str | os.PathLike[str], *, index: int = 0, limit: int | None = None
) -> list[ConversationQuestion]:
    """Questions about a conversation file, for demos and spot checks.

    Reads the ``"questions"`` list of the shipped sample, or LoCoMo's ``"qa"`` list (adversarial
    questions, category 5, and questions without evidence are left out).

    Args:
        path: the conversation file.
        index: which sample when the file holds a list of them.
        limit: at most this many questions (``None``: all).

    Raises:
        ConversationError: the file is missing or not JSON.
    """
    source = Path(path)
    sample = _sample(_read_json(source), source, index)
    raw = sample.get("questions")
    if not isinstance(raw, list):
        raw = sample.get("qa")
    if not isinstance(raw, list):
        conv = sample.get("conversation")
        raw = conv.get("questions") if isinstance(conv, dict) else None
    out: list[ConversationQuestion] = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, str) and item.strip():
            out.append(ConversationQuestion(item.strip()))
            continue
        if not isinstance(item, dict):
            continue
        question = item.get("question")
        evidence = item.get("evidence") or []
        if not isinstance(question, str) or not question.strip() or item.get("category") == 5:
            continue
        if "category" in item and not evidence:
            continue  # a LoCoMo question nobody can check
        answer = item.get("answer")
        out.append(
            ConversationQuestion(
                question=question.strip(),
                answer=None if answer is None else str(answer),
                evidence=tuple(str(e) for e in evidence if isinstance(e, str | int)),
            )
        )
        if limit is not None and len(out) >= limit:
            break
    return out
