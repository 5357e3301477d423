"""Tolerant parsers for the reflection steps' answers (questions and cited insights).

Nothing here raises on a malformed answer: parsers return what they could read (possibly
nothing) and the graph decides on the fallback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_reflective._llm import clean_model_text, load_json

if TYPE_CHECKING:
    from langchain_reflective.reflection.state import InsightDict

__all__ = [
    "Insight",
    "format_insights",
    "map_citations",
    "parse_insights",
    "parse_questions",
]

MAX_RANGE = 20
"""A citation range like ``3-7`` is expanded when it spans at most this many statements."""


@dataclass(frozen=True, slots=True)
class Insight:
    """An insight with its evidence, cited by local number and resolved to record ids."""

    text: str
    """The insight, without its list marker and citations."""
    citations: tuple[int, ...] = ()
    """Valid statement numbers cited (1-based, local to the prompt)."""
    evidence: tuple[str, ...] = ()
    """Ids of the cited records, in citation order."""
    dropped: tuple[str, ...] = ()
    """Citations that were dropped (out of range), for diagnostics: the reflection graph logs
    them, with the insights dropped for citing no statement shown."""

    def to_dict(self) -> InsightDict:
        """``{"text", "evidence", "citations"}`` as plain JSON values."""
        return {
            "text": self.text,
            "evidence": list(self.evidence),
            "citations": list(self.citations),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Insight:
        """Inverse of :meth:`to_dict`."""
        return cls(
            str(data["text"]),
            tuple(int(c) for c in data.get("citations", ())),
            tuple(str(e) for e in data.get("evidence", ())),
        )


_MARKER = re.compile(
    r"^\s*(?:#{1,6}\s+)?(?:[-*•+]\s+|\(?\d{1,3}\s*[.):]\)?\s*(?=\D)|\(\d{1,3}\)\s*)"
)
_CITE_WORDS = (
    r"(?:because\s+of|based\s+on|evidence|sources?|statements?|citing|cites?|cited|see|"
    r"refs?|references?|index(?:es)?|indices)"
)
_TRAILING_BRACKETS = re.compile(r"((?:\s*\[[^\[\]]*\])+)\s*[.;,]?\s*$")
# Each cited number is an atomic group ("(?>...)"): whitespace between numbers could otherwise
# be split among three quantifiers in exponentially many ways before a failed match gives up
# (a 58-character "(1   1   1 ... x" took 53 s, holding the GIL).
_TRAILING_PARENS = re.compile(
    r"\s*\(\s*(?:" + _CITE_WORDS + r"\s*:?\s*)*"
    r"((?>[\[`#\s]*\d+[\]`\s]*)(?>(?:,|;|&|/|-|–|\band\b|\s)*[\[`#\s]*(?:statements?\s*)?\d+[\]`\s]*)*)"
    r"\)\s*[.;,]?\s*$",
    re.IGNORECASE,
)
_TAIL = 400
"""Trailing citations are looked for in a line's last characters only (a search from every
position of a long line is quadratic)."""
_INLINE_NUMERIC_BRACKETS = re.compile(r"\s*\[\s*\d+(?:\s*[,;]\s*\d+)*\s*\]")
_LEFTOVER_CITE_WORD = re.compile(r"[\s(]*" + _CITE_WORDS + r"\s*:?\s*\)?\s*$", re.IGNORECASE)
_LABEL = re.compile(r"^(?:insight|reflection)\s*\d*\s*[:.-]\s*", re.IGNORECASE)
_RANGE = re.compile(r"^([0-9]{1,6})\s*[-–]\s*([0-9]{1,6})$")
_NUMBER = re.compile(r"[0-9]{1,6}")
"""A cited number: ASCII digits, at most six (``"①"`` and ``"²"`` pass ``str.isdigit`` but not
``int``; Python's ``int`` refuses more than 4,300 digits)."""
_TEXT_KEYS = ("insight", "text", "statement", "reflection", "content", "summary")
_EVIDENCE_KEYS = (
    "evidence",
    "citations",
    "because_of",
    "indices",
    "indexes",
    "index",
    "sources",
    "statements",
    "refs",
    "references",
    "pointers",
)


def _citation_numbers(content: str) -> list[int]:
    """Integers cited in ``content``; non-numeric tokens are dropped, small ranges expanded."""
    content = re.sub(r"[`#\[\]()]", " ", content)
    content = re.sub(_CITE_WORDS + r"\s*:?", " ", content, flags=re.IGNORECASE)
    content = re.sub(r"(\d+)\s*[-–]\s*(\d+)", r"\1-\2", content)
    out: list[int] = []
    for token in re.split(r"[,;&/\s]+|\band\b", content):
        token = token.strip().rstrip(".")
        if not token:
            continue
        m = _RANGE.match(token)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo <= hi and hi - lo < MAX_RANGE:
                out.extend(range(lo, hi + 1))
            else:
                out.extend([lo, hi])
        elif _NUMBER.fullmatch(token):
            out.append(int(token))
    return out


def _dedupe(numbers: Iterable[int]) -> list[int]:
    seen: dict[int, None] = {}
    for n in numbers:
        seen.setdefault(n, None)
    return list(seen)


def _split_line(line: str) -> tuple[str, list[int], bool, bool] | None:
    """``(text, citations, has_marker, has_citation)`` of one answer line, or ``None``."""
    line = " ".join(line.replace("**", "").replace("__", "").split())  # (linear; no runs left)
    if not line:
        return None
    m = _MARKER.match(line)
    has_marker = bool(m)
    body = line[m.end() :] if m else line
    citations: list[int] = []
    has_citation = False
    tail = _TRAILING_BRACKETS.search(body, max(0, len(body) - _TAIL))
    if tail:
        has_citation = True
        citations = _citation_numbers(tail.group(1))
        body = body[: tail.start()]
    else:
        paren = _TRAILING_PARENS.search(body, max(0, len(body) - _TAIL))
        if paren:
            has_citation = True
            citations = _citation_numbers(paren.group(1))
            body = body[: paren.start()]
    inline = list(_INLINE_NUMERIC_BRACKETS.finditer(body))
    if inline:
        has_citation = True
        citations = [n for g in inline for n in _citation_numbers(g.group())] + citations
        body = _INLINE_NUMERIC_BRACKETS.sub("", body)
    if has_citation:
        body = _LEFTOVER_CITE_WORD.sub("", body)
    text = _LABEL.sub("", body.strip()).strip().strip("\"'“”").strip()
    if not text:
        return None
    return text, _dedupe(citations), has_marker, has_citation


_CITATION_LINE_REST = re.compile(r"[\d\s,;&/\-–.:]+")
_CITE_WORD = re.compile(_CITE_WORDS + r"|\band\b", re.IGNORECASE)


def _citation_line(line: str) -> list[int] | None:
    """The numbers of a line that holds citations only ("Evidence: [1, 2]", "[1, 2]",
    "(because of 1, 2)", "- Sources: statements 1 and 3"), else ``None``. A numbered line
    ("2. [3]") is an item of its own, not a citation line."""
    line = line.replace("**", "").replace("__", "").strip()
    m = _MARKER.match(line)
    if m:
        if any(ch.isdigit() for ch in m.group()):
            return None
        line = line[m.end() :]
    if len(line) > _TAIL or not any(ch.isdigit() for ch in line):
        return None
    bare = _CITE_WORD.sub(" ", line)
    if bare == line and not any(ch in line for ch in "[("):
        return None  # (a bare "1, 2" is no citation line: no cite word, no brackets)
    if not _CITATION_LINE_REST.fullmatch(re.sub(r"[`#\[\]()]", " ", bare).strip()):
        return None
    return _dedupe(_citation_numbers(line))


def _answer_lines(text: str) -> list[tuple[str, list[int], bool, bool]]:
    """:func:`_split_line` of every line, a line of citations alone given to the uncited line
    before it: a model that puts its evidence on a line of its own ("1. Klaus works hard" then
    "Evidence: [1, 2]") cites it for that insight (else the insight was dropped for citing
    nothing, or with ``keep_insights_without_evidence``, "Evidence: 1, 2" was one)."""
    out: list[tuple[str, list[int], bool, bool]] = []
    for line in text.splitlines():
        if out and not out[-1][3]:
            cited = _citation_line(line)
            if cited is not None:
                text_, _, marker, _ = out[-1]
                out[-1] = (text_, cited, marker, True)
                continue
        parts = _split_line(line)
        if parts:
            out.append(parts)
    return out


def _json_citations(value: Any) -> list[int]:
    if value is None or isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, float):
        return [int(value)] if value.is_integer() else []
    if isinstance(value, str):
        return _citation_numbers(value)
    if isinstance(value, Sequence):
        return [n for item in value for n in _json_citations(item)]
    return []


def _from_json(data: Any) -> list[tuple[str, list[int]]] | None:
    if isinstance(data, Mapping):
        for key in ("insights", "reflections", "items", "results", "bullets"):
            if isinstance(data.get(key), list):
                return _from_json(data[key])
        if any(k in data for k in _TEXT_KEYS):
            data = [data]
        else:
            return None
    if not isinstance(data, list):
        return None
    out: list[tuple[str, list[int]]] = []
    for item in data:
        if isinstance(item, str):
            parts = _split_line(item)
            if parts:
                out.append((parts[0], parts[1]))
        elif isinstance(item, Mapping):
            text = next((item[k] for k in _TEXT_KEYS if isinstance(item.get(k), str)), None)
            if not text or not text.strip():
                continue
            field = next((k for k in _EVIDENCE_KEYS if k in item), None)
            if field is None:  # the text may carry its own "[1, 2]"
                parts = _split_line(text)
                if parts is not None:
                    out.append((parts[0], parts[1]))
                continue
            # the evidence has a field of its own (structured output): the text is the
            # insight, parentheses included ("two children (5 and 7)" cites nothing); only
            # numeric brackets, which can be nothing but citations, are taken out of it
            whole = " ".join(_INLINE_NUMERIC_BRACKETS.sub("", text).split())
            if whole:
                out.append((whole, _dedupe(_json_citations(item[field]))))
        elif (
            isinstance(item, list)
            and len(item) == 2
            and isinstance(item[0], str)
            and item[0].strip()
        ):
            out.append((item[0].strip(), _dedupe(_json_citations(item[1]))))
    return out


def parse_insights(text: str, *, n_statements: int | None = None) -> list[tuple[str, list[int]]]:
    """Parse an answer like ``"1. insight [7, 52, 47]"`` into ``[(insight, [7, 52, 47]), ...]``.

    Understood forms: seed 002's numbered lines with bracketed citations; the paper's
    ``"insight (because of 1, 5, 3)"``; bullets or bare lines; backticks, ``#``, ``and``,
    small ranges (``3-5``) inside citations; numeric brackets in the middle of a line; a line
    of citations alone (``"Evidence: [1, 2]"``) under the uncited insight it supports; JSON
    (``[{"insight": ..., "evidence": [1, 2]}]``, ``{"insights": [...]}``, ``[[text, [1]]]``,
    seed 000's ``[{"insight": ..., "importance": 0.8}]``), also in a Markdown code fence.
    Lines without any list marker or citation are headers or prose and are skipped, unless no
    line has either: then every line of 10+ characters is an insight without evidence (seed
    000's plain-text fallback). A JSON item with an evidence field of its own (structured
    output) keeps its text whole: parentheses are content there, not citations. An uncited
    line that declines or apologises ("I'm sorry, I can't ...", "I cannot determine ...") is a
    refusal, not an insight, and so is a cited one that apologises or declines to work on the
    statements ("I cannot infer insights from statements [1, 2]"); a note on the statements or
    insights ("Note: statement [3] is unrelated", "These insights are based on [2, 3]") is
    no insight either. A first-person insight ("I don't trust the build cache ...") is no
    refusal.

    Args:
        text: the model's answer.
        n_statements: when given, citations outside ``1..n_statements`` are dropped.

    Returns:
        ``(insight text, cited statement numbers)`` pairs; non-numeric citations are dropped,
        duplicates removed. Never raises.
    """
    if not isinstance(text, str):
        return []
    text = clean_model_text(text)
    parsed: list[tuple[str, list[int]]] | None = None
    if text[:1] in "[{" or "```" in text:
        parsed = _from_json(load_json(text))
    if not parsed:
        lines = _answer_lines(text)
        structured = any(marker or cited for _, _, marker, cited in lines)
        if structured:
            parsed = [(t, c) for t, c, marker, cited in lines if marker or cited]
        else:
            parsed = [(t, c) for t, c, _, _ in lines if len(t) >= 10 and not t.endswith(":")]
    return [
        (t, [n for n in c if n >= 1 and (n_statements is None or n <= n_statements)])
        for t, c in parsed
        if _plausible(t) and not _commentary(t, cited=bool(c))
    ]


_APOLOGY = re.compile(
    r"^(?:i[’']?m\s+sorry|i\s+am\s+sorry|sorry[,.!]|(?:i\s+)?apologi[sz]e|unfortunately,"
    r"|as\s+an?\s+(?:ai|(?:large\s+)?language\s+model)\b)",
    re.IGNORECASE,
)
_ABOUT_THE_DATA = re.compile(
    r"\b(?:statements?|insights?|evidence)\b"
    r"|\b(?:from|in|of|on|by|with|about|using)\W*$",  # ("... from statement [3]", cite taken out)
    re.IGNORECASE,
)
_NOTE = re.compile(
    r"^(?:(?:note|n\.\s?b\.|p\.\s?s\.)\s*[:.-]"
    r"|(?:these|the\s+above|all(?:\s+of)?(?:\s+(?:the|these|my))?)\s+insights\b)",
    re.IGNORECASE,
)


def _commentary(text: str, *, cited: bool) -> bool:
    """Whether ``text`` is the model talking about the task, not an insight: an apology or "As
    an AI ...", a refusal (:data:`_REFUSAL`), or a note on the statements or insights ("Note:
    statement [3] is unrelated", "These insights are based on statements [2, 3]").

    Such a line may cite the statements it declines or comments on ("I'm sorry, but I cannot
    infer any insights from statements [1, 2]"), and stored it was a reflection pointing at
    them. A cited line is taken for a refusal only when it names the statements, insights or
    evidence (or ends where its citation was taken out: "... from statement [3]"): a
    first-person insight with evidence ("I cannot complete tasks that need the network [2]")
    stays an insight."""
    if _APOLOGY.match(text):
        return True
    if _REFUSAL.match(text):
        return not cited or _ABOUT_THE_DATA.search(text) is not None
    return _NOTE.match(text) is not None and _ABOUT_THE_DATA.search(text) is not None


_WORD = re.compile(r"[^\W\d_]{2,}")
_JSON_DEBRIS = re.compile(r'^[\[{]|"\s*:\s*[\[{"\d]|^\W*$')


def _plausible(text: str) -> bool:
    """Whether ``text`` reads as an insight: it has a word, and is not JSON debris.

    A base model that breaks off its JSON answer leaves fragments such as ``'1'`` or
    ``'{"insights":[{"insight": ...'``; storing those as reflections would pollute memory.
    """
    return _WORD.search(text) is not None and not _JSON_DEBRIS.search(text.strip())


def map_citations(
    parsed: Iterable[tuple[str, Sequence[int]]],
    ids: Sequence[str],
    *,
    keep_without_evidence: bool = False,
) -> list[Insight]:
    """Resolve local statement numbers (1-based) to record ids.

    Out-of-range numbers are dropped (kept in :attr:`Insight.dropped`); an insight left with no
    valid evidence is kept only when ``keep_without_evidence`` is true. Duplicate insight texts
    are merged.
    """
    out: dict[str, Insight] = {}
    for text, numbers in parsed:
        valid = [n for n in numbers if 1 <= n <= len(ids)]
        dropped = tuple(str(n) for n in numbers if not 1 <= n <= len(ids))
        evidence = tuple(dict.fromkeys(ids[n - 1] for n in valid))
        if not evidence and not keep_without_evidence:
            continue
        key = " ".join(text.lower().split())
        if key in out:
            prev = out[key]
            evidence = tuple(dict.fromkeys(prev.evidence + evidence))
            valid = list(prev.citations) + valid
            dropped = prev.dropped + dropped
        out[key] = Insight(text, tuple(_dedupe(valid)), evidence, dropped)
    return list(out.values())


def format_insights(insights: Sequence[Insight], numbers: Mapping[str, int]) -> list[str]:
    """Lines ``"insight [3, 7]"`` citing each insight's evidence by its number in ``numbers``."""
    lines = []
    for insight in insights:
        cited = [str(numbers[e]) for e in insight.evidence if e in numbers]
        lines.append(f"{insight.text} [{', '.join(cited)}]" if cited else insight.text)
    return lines


_QUESTION_PREFIX = re.compile(r"^(?:q(?:uestion)?\s*\d*\s*[:.)-]\s*)", re.IGNORECASE)
_QUESTION_KEYS = ("question", "text", "q", "content")
_REFUSAL = re.compile(
    r"""^(?:
      i[’']?m\s+sorry | i\s+am\s+sorry | sorry[,.!]
    | as\s+an?\s+(?:ai|(?:large\s+)?language\s+model)\b
    # "I cannot / won't / am unable to" + a verb of the task asked
    | (?:i\s+(?:can(?:not|[’']?t|\s+not)|won[’']?t|will\s+not|could\s+not|couldn[’']?t)
        | i(?:\s+am|[’']?m)\s+(?:unable|not\s+able|not\s+in\s+a\s+position))
      \s+(?:(?:really|currently|simply)\s+)?(?:be\s+able\s+to\s+)?(?:to\s+)?
      (?:help|assist|answer|respond|reply|comply|fulfil+|provide|give|offer|share|generate
        |produce|create|formulate|come\s+up|draw|derive|infer|extract|identify|determine
        |discern|tell|say|comment|speculate|analy[sz]e|summari[sz]e|evaluate|assess|complete
        |perform|process|do\s+(?:that|this|so|it)|make\s+(?:any|an?|such)|find\s+any
        |see\s+any|be\s+(?:certain|sure))\b
    # "I don't" + lacking what the task needs, not knowing, not understanding
    | i\s+(?:do\s+not|don[’']?t)\s+
      (?:have\s+(?:(?:enough|sufficient|adequate|any|the)\s+)?
          (?:information|context|data|details|evidence|knowledge)\b
        | have\s+(?:personal\s+)?(?:opinions|feelings|beliefs|preferences|emotions)\b
        | have\s+the\s+(?:ability|capability|capacity)\b
        | have\s+access\s+to\s+(?:th(?:e|ese|ose)\s+|your\s+|any\s+)?
          (?:statements|memories|information|data|context|records|personal)\b
        | know\s*(?:[.,!;:]|$) | know\s+the\s+answer\b
        | understand\s*(?:[.,!;:]|$) | understand\s+(?:the|your|this)\s+(?:question|request|task)\b
        | (?:see|find)\s+any\s+(?:\w+\s+)?(?:insights?|patterns?|connections?|information
          |evidence|relationships?|themes?)\b)
    )""",
    re.IGNORECASE | re.VERBOSE,
)
"""A line that declines or apologises: never taken as a question when it is not one, nor as
an uncited insight. Narrow on purpose: an agent's first-person insight ("I don't trust the
build cache after a dependency bump", "I can't run GPU tests locally") is no refusal; only an
apology, "As an AI ...", or a negation followed by the task itself ("I cannot determine ...",
"I don't have enough information to ...", "I don't know.") is."""
_JSON_KEY = re.compile(r'^[\s\[{]*"\w+"\s*:\s*\[?\s*')


def parse_questions(text: str, n: int) -> list[str]:
    """At most ``n`` questions from a model's answer (numbered/bulleted lines or JSON).

    List items ending with ``?`` are preferred, then any line ending with ``?`` (a remark
    around a list, "Would you like more?", is no question); otherwise list items; otherwise
    every line of 10+
    characters. Headers (lines ending with ``:``), duplicates and, unless they end with ``?``,
    lines that decline or apologise ("I'm sorry, I can't ...": the model refused) are skipped.
    Never raises.
    """
    if not isinstance(text, str) or n < 1:
        return []
    text = clean_model_text(text)
    candidates: list[tuple[str, bool]] = []
    data = load_json(text) if (text[:1] in "[{" or "```" in text) else None
    if isinstance(data, Mapping):
        data = next((data[k] for k in ("questions", "items") if isinstance(data.get(k), list)), [])
    if isinstance(data, list):
        for item in data:
            if isinstance(item, Mapping):
                item = next((item[k] for k in _QUESTION_KEYS if isinstance(item.get(k), str)), "")
            if isinstance(item, str) and item.strip():
                candidates.append((" ".join(item.split()), True))
    if not candidates:
        for raw in text.splitlines():
            line = raw.replace("**", "").strip()
            m = _MARKER.match(line)
            body = _QUESTION_PREFIX.sub("", line[m.end() :] if m else line).strip()
            body = _JSON_KEY.sub("", body).strip("\"'“”[]{},").strip()
            if body and not body.endswith(":"):
                candidates.append((" ".join(body.split()), bool(m)))
    # the listed ones first: a remark around the list may end with "?" too ("Would you like
    # me to elaborate on any of these?"), and asked as a question it cost a branch
    questions = [q for q, listed in candidates if listed and q.endswith("?")] or [
        q for q, _ in candidates if q.endswith("?")
    ]
    if not questions:
        candidates = [(q, listed) for q, listed in candidates if not _REFUSAL.match(q)]
        questions = [q for q, listed in candidates if listed] or [
            q for q, _ in candidates if len(q) >= 10
        ]
    seen: set[str] = set()
    unique = []
    for q in questions:
        if q.lower() not in seen:
            seen.add(q.lower())
            unique.append(q)
    return unique[:n]
