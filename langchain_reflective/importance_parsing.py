"""Reading an LLM's importance ratings out of its answer: every form a model writes (numbered
lines, a bare list, JSON, structured output), tolerant of noise and never raising.

:func:`parse_ratings` reads free text (and JSON in it); :func:`ratings_from_structured` reads
the structured answer (:class:`~langchain_reflective.importance.ImportanceRatings`). Both give
one rating (1..10) or ``None`` per memory, placed by memory number with one rule
(:func:`_by_index`); the scorer in :mod:`langchain_reflective.importance` decides the fallback.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from langchain_reflective._llm import clean_model_text, load_json

if TYPE_CHECKING:
    from langchain_reflective.importance import ImportanceRatings

__all__ = ["parse_ratings", "ratings_from_structured"]

_NUMBER = r"[-+]?(?<!\d)\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
"""A number as a model writes it. The exponent belongs to it ("1e309" is one number, too large
to be a rating, not the ratings 1 and 309). It starts where its digits start: a pattern that
failed after a long run of digits retried from every digit of the run (quadratic: 5000 digits
took seconds, with the GIL held)."""
_INDEXED = re.compile(
    r"^(?:(?:memory|memories|item|statement|mem|no\.?|number|#)\s*#?\s*)?"
    r"[\[(]?(\d{1,4})[\])]?"
    r"(?:\s*(?:[:)=\]\-–—]|->|=>)|\.(?=\s|$))\s*(.*)$",
    re.IGNORECASE,
)
_LABELLED = re.compile(r"^(?:memory|item|statement)\s*#?\s*(\d{1,4})\b\s*(.*)$", re.IGNORECASE)
_KEYWORD_RATING = re.compile(
    r"(?:rating|rate|score|importance|poignancy)\w{0,4}\s*(?:is|of|as|:|=|-)?\s*(?:a\s+)?("
    + _NUMBER
    + r")",
    re.IGNORECASE,
)
_OUT_OF_TEN = re.compile(r"(" + _NUMBER + r")\s*(?:/|out\s+of)\s*10\b", re.IGNORECASE)
_ANY_NUMBER = re.compile(_NUMBER)
_BLANKS = re.compile(r"[^\S\n]+")
_LEADING_NUMBER = re.compile(r"^[^\w+-]*(" + _NUMBER + r")")
_LABEL_SPLIT = re.compile(r"[,;]?[ \t]+(?=(?:memory|item)\s*#?\s*\d)", re.IGNORECASE)
_ONLY_NUMBER = re.compile(r"^[^\w+-]*(" + _NUMBER + r")\W*$")
_UNRATED = re.compile(
    r"^[\s:.,;=)\]-]*(?:n/?a\b|none\b|null\b|unknown|unclear|unrated|not (?:applicable|sure|"
    r"rated|possible)|no (?:rating|idea|score)|unable|cannot|can['’]?t|won['’]?t|i (?:can|am|"
    r"do|won|will)|sorry|\?)",
    re.IGNORECASE,
)
"""What follows a memory's number when the model gives it no rating ("N/A", "unclear", "I
cannot rate this", "?")."""
_REFUSAL = re.compile(
    r"""^\W*
    # an apology or "As an AI ...", then the refusal in the same line
    (?:(?:i[’']?m\s+sorry|i\s+am\s+sorry|sorry|i\s+apologi[sz]e|apologies|unfortunately
        |as\s+an?\s+(?:ai|(?:large\s+)?language\s+model)\b)[^\n]{0,80}?)?
    \b(?:i|we)(?:\s+am|[’']m|\s+are|[’']re)?\s+
    (?:cannot|can[’']?t|can\s+not|could\s+not|couldn[’']?t|won[’']?t|will\s+not
      |unable\s+to|not\s+able\s+to|(?:must\s+|have\s+to\s+)?(?:decline|refuse)\s+to
      |(?:do\s+not|don[’']?t)\s+feel\s+comfortable|not\s+comfortable)
    (?:\s+[\w’']+){0,3}?\s+
    (?:rat(?:e|es|ed|ing|ings)|provide|give|assign|score|assess|evaluate|judge|determine|help
      |assist|comply|answer|respond|complete|fulfil+|process|do\s+(?:that|this|so|it))\b""",
    re.IGNORECASE | re.VERBOSE,
)
"""A line (or what follows a memory's number) that declines to rate: "I'm sorry, but I can't
rate this memory on a scale of 1 to 10", "As an AI, I cannot rate memories 1 and 2". Its numbers
are the scale's or the memories', not ratings: read as ratings, a refusal rated one memory 10
(the maximum) and another 1, as the model's own ratings. A hedge that still rates ("I can't be
sure, but 7", "I don't have feelings, but I'd rate it 5") is no refusal."""
_KEY_NUMBER = re.compile(r"(?<!\d)\d{1,4}(?!\d)")
"""A memory number in a JSON key ("3", "memory_3"); at most 4 digits like the line patterns (a
longer run numbers no memory, and ``int()`` of more than 4300 digits raises)."""
_INLINE_PAIR = re.compile(r"(?:^|[\s,;{(\[])(\d{1,4})\s*[:=]\s*(" + _NUMBER + r")")
_INDEX_KEYS = ("index", "idx", "id", "memory", "number", "num", "n", "i", "item")
_RATING_KEYS = ("rating", "score", "importance", "poignancy", "value", "rate")


def _to_rating(value: Any) -> float | None:
    """A rating clamped to 1..10, or ``None`` for anything that is not a finite number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        if _refused(value):
            return None
        value = _find_rating(value)
        if value is None:
            return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # (OverflowError: a JSON integer past 1e308)
        return None
    if not math.isfinite(number):
        return None
    return max(1.0, min(10.0, number))


_FIRST_LABEL = re.compile(r"(?<![\w.])\d{1,4}\s*[:=]")
"""A memory's label inside a line ("2: ..."): a refusal after one is that memory's alone."""


def _refused(line: str) -> bool:
    """Whether ``line`` (after a memory's number, if it starts with one) declines to rate,
    before any memory's label in it: "Sorry for the delay! 1: 7, 2: I cannot rate this" rates
    the first memory (the second's refusal is its entry's, read as unrated)."""
    line = _strip_markup(line)
    label = _LABELLED.match(line) or _INDEXED.match(line)
    text = label.group(2) if label else line
    first = _FIRST_LABEL.search(text)
    return _REFUSAL.match(text[: first.start()] if first else text) is not None


def _number(text: str) -> float:
    return float(text)


def _find_rating(text: str) -> float | None:
    """The rating in a piece of text: after 'rating', before '/10', alone, or the last number."""
    for pattern in (_KEYWORD_RATING, _OUT_OF_TEN, _ONLY_NUMBER):
        m = pattern.search(text)
        if m:
            return _number(m.group(1))
    numbers = _ANY_NUMBER.findall(text)
    return _number(numbers[-1]) if numbers else None


def _rating_after_index(rest: str) -> float | None:
    """The rating after a memory number: after 'rating', before '/10', first, or last number."""
    for pattern in (_KEYWORD_RATING, _OUT_OF_TEN, _LEADING_NUMBER):
        m = pattern.search(rest)
        if m:
            return _number(m.group(1))
    numbers = _ANY_NUMBER.findall(rest)
    return _number(numbers[-1]) if numbers else None


def _line_rating(line: str) -> tuple[int | None, float | None]:
    """``(memory number, rating)`` of one answer line; the number is ``None`` if it has none."""
    m = _LABELLED.match(line) or _INDEXED.match(line)
    if not m:
        return None, _find_rating(line)
    index, rest = int(m.group(1)), m.group(2)
    cut = _INLINE_PAIR.search(rest)
    if cut:  # "1: 7, 2: 3": keep this item's part only
        rest = rest[: cut.start()]
    if not rest.strip():  # a bare "7." is a rating, not a memory number
        return None, float(index)
    return index, _rating_after_index(rest)


def _strip_markup(line: str) -> str:
    line = line.replace("**", "").replace("__", "").replace("`", "")
    return re.sub(r"^\s*(?:[-*•+>]\s+)+", "", line).strip()


def _by_index(pairs: Iterable[tuple[int, Any]], count: int) -> list[float | None]:
    """Ratings placed by memory number: ``(number, rating)`` pairs, the first usable rating of a
    memory wins and numbers out of range are ignored.

    The prompt numbers memories from 1, but some models answer from 0: an answer that has a 0
    and no number past ``count - 1`` is numbered from 0 (else its 0 would be dropped and every
    rating would land on the next memory). Every answer form (lines, JSON, structured) uses this
    one rule."""
    pairs = list(pairs)
    shift = 1 if any(i == 0 for i, _ in pairs) and max(i for i, _ in pairs) < count else 0
    out: list[float | None] = [None] * count
    for index, rating in pairs:
        position = index + shift - 1
        if 0 <= position < count and out[position] is None:
            out[position] = _to_rating(rating)
    return out


def ratings_from_structured(parsed: ImportanceRatings, count: int) -> list[float | None]:
    """Ratings by position from a structured answer (numbered from 1, or from 0: see
    :func:`_by_index`); out-of-range indices are ignored."""
    return _by_index([(item.index, item.rating) for item in parsed.ratings], count)


def _from_json(value: Any, count: int) -> list[float | None] | None:
    out: list[float | None] = [None] * count
    if isinstance(value, Mapping):
        for key in ("ratings", "scores", "results", "memories", "items"):
            if key in value:
                return _from_json(value[key], count)
        single = next((value[k] for k in _RATING_KEYS if k in value), None)
        if single is not None and count == 1:
            out[0] = _to_rating(single)
            return out
        pairs = [
            (int(m.group()), item if not isinstance(item, Mapping) else _rating_of(item))
            for key, item in value.items()
            if (m := _KEY_NUMBER.search(str(key)))
        ]
        return _by_index(pairs, count) if pairs else None
    if isinstance(value, list):
        if all(not isinstance(v, Mapping | list) for v in value):
            ratings = [_to_rating(v) for v in value]
            if len(ratings) == count:
                return ratings
            return None
        numbered: list[tuple[int, Any]] = []
        for pos, item in enumerate(value, 1):
            if not isinstance(item, Mapping):
                continue
            index = next((item[k] for k in _INDEX_KEYS if k in item), pos)
            try:
                i = int(index)
            except (TypeError, ValueError, OverflowError):  # (OverflowError: Infinity)
                i = pos
            numbered.append((i, _rating_of(item)))
        return _by_index(numbered, count)
    if count == 1:
        out[0] = _to_rating(value)
        return out
    return None


def _rating_of(item: Mapping[str, Any]) -> Any:
    """An item's rating: under a rating key, else under the first key that names one
    (``"importance_rating"``, ``"poignancy_score"``), not an index key."""
    found = next((item[k] for k in _RATING_KEYS if k in item), None)
    if found is not None:
        return found
    return next(
        (
            value
            for key, value in item.items()
            if isinstance(key, str)
            and key.lower() not in _INDEX_KEYS
            and any(word in key.lower() for word in _RATING_KEYS)
        ),
        None,
    )


def parse_ratings(text: str, count: int) -> list[float | None]:
    """Ratings (1..10, clamped) for ``count`` numbered memories from a model's free-text answer.

    Accepted forms include ``"7"``, ``"Rating: 7"``, ``"7/10"``, ``"I'd rate it 7 out of 10"``,
    numbered lines (``"1: 7"``, ``"2. 3"``, ``"Memory 3 - rating 8"``, an echoed memory followed
    by its rating), one rating per line in order, ``"7, 3, 5"``, ``"1: 7, 2: 3"``, and JSON
    (``[7, 3]``, ``[{"index": 1, "rating": 7}]``, ``{"ratings": ...}``, ``{"1": 7}``), also
    inside a Markdown code fence. Reasoning sections (``<think>``, ``<thinking>``,
    ``<reasoning>``: see :func:`~langchain_reflective._llm.strip_reasoning`) are ignored, and
    so are lines that decline to rate ("I'm sorry, but I can't rate this on a scale of 1 to
    10"): their numbers are no ratings.

    Returns:
        One entry per memory: its rating, or ``None`` when the answer has none for it (then the
        caller falls back). Never raises.
    """
    out: list[float | None] = [None] * count
    if count <= 0 or not isinstance(text, str):
        return out
    text = _BLANKS.sub(" ", clean_model_text(text))  # (runs of blanks made some searches slow)
    if not text:
        return out
    data = load_json(text)
    if data is not None:
        from_json = _from_json(data, count)
        if from_json is not None:
            # numbered JSON items are the whole answer, with ratings or without: read again
            # as lines, {"1": "N/A", "2": "N/A"} (a refusal) rated the memories 1 and 2
            return from_json
    # a line that declines to rate rates nothing, whatever numbers it holds (the scale's)
    text = "\n".join(line for line in text.splitlines() if not _refused(line))
    text = _LABEL_SPLIT.sub("\n", text)
    lines = [s for s in (_strip_markup(line) for line in text.splitlines()) if s]
    entries = [_line_rating(line) for line in lines]
    # 1. lines that carry their memory number ("1: 7", "Memory 2 - rating 3", echoed text)
    out = _by_index([(i, r) for i, r in entries if i is not None and r is not None], count)
    found = any(r is not None for r in out)
    # 2. "1: 7, 2: 3" on one line
    for m in _INLINE_PAIR.finditer(text):
        index = int(m.group(1))
        if 1 <= index <= count and out[index - 1] is None:
            out[index - 1] = _to_rating(m.group(2))
            found = True
    if found:
        return out
    # 3. ratings in order, one per line or a comma-separated list
    sequence = [r for index, r in entries if index is None and r is not None]
    if len(sequence) != count and len(lines) == 1:
        line_index, line_rating = entries[0]
        if line_rating is None and line_index is not None and line_index <= count:
            label = _LABELLED.match(lines[0]) or _INDEXED.match(lines[0])
            if label is not None and _UNRATED.match(label.group(2)):
                # "1: N/A", "Memory 1: unclear" (or "0: N/A", numbered from 0): the line's
                # only number numbers a memory, and the model says it gives no rating; "1 -
                # mundane" for one memory is still the rating 1 (the prompt's own anchor)
                return out
        sequence = [_number(n) for n in _ANY_NUMBER.findall(lines[0])]
        if count == 1 and sequence:
            keyword = _find_rating(lines[0])
            sequence = [keyword if keyword is not None else sequence[0]]
    if len(sequence) == count:
        return [_to_rating(r) for r in sequence]
    return out
