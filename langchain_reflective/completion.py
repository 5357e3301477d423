"""Completion-style prompting for base models: short documents answered under a JSON schema.

The seed 002 prompts (:mod:`langchain_reflective.reflection.prompts`, the importance prompt in
:mod:`langchain_reflective.importance`) are instructions written for instruction-tuned chat
models. A *base* model, such as the tiny Gemma 3 270M served by :mod:`langchain_reflective.local`,
does not follow instructions: it continues text. For such models each step is asked as a short
document that ends where the answer starts (the rating document with one worked example; the
reflection documents without, because the model copied examples nearly word for word), and the
answer is decoded under a JSON schema built for that very call, which the server enforces with a
grammar (``with_structured_output(schema, method="json_schema")``; llama.cpp, vLLM and the
OpenAI API all enforce it):

* importance: exactly one integer 1-10 per memory (``enum``, ``minItems = maxItems = N``);
* questions: exactly ``n`` strings that start with What/How/Why, name one of the people the
  statements are about (:func:`subjects`) and end with their only ``?`` (``pattern``);
* insights and condensing: short one-line strings starting with such a name, whose citations
  are an ``enum`` of the statement numbers that exist in this prompt, so the model cannot cite
  a statement it was not shown.

The schema makes answers well-formed, not wise: a 270M base model's ratings follow the shape of
its context more than the memories' content, and its insights are naive.

Which path a step takes is the ``prompt_style`` setting (:data:`PromptStyle`) of
:class:`~langchain_reflective.importance.ImportanceConfig` and
:class:`~langchain_reflective.reflection.ReflectionConfig`: ``"auto"`` (the default) uses this
path for the embedded local model (:class:`~langchain_reflective._local_openai.LocalChatOpenAI`)
unless custom chat prompts are given, and the seed 002 chat prompts for every other model;
``"completion"`` or ``"chat"`` force one.

Memory text is data here too: every memory is numbered on one line inside a
``<memories>``/``<statements>``/``<insights>`` block by
:func:`~langchain_reflective._llm.fence_block` (newlines collapsed, forged tags defused), and the
answer can only take the schema's shape.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from langchain_reflective._llm import RetryConfig, fence_block, message_text, neutralise

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import Runnable, RunnableConfig

__all__ = [
    "PROMPT_STYLES",
    "CompletionCall",
    "PromptStyle",
    "condense_document",
    "importance_document",
    "insight_pattern",
    "insights_document",
    "insights_schema",
    "is_completion_model",
    "question_pattern",
    "questions_document",
    "questions_schema",
    "ratings_schema",
    "resolve_prompt_style",
    "subjects",
]

PromptStyle = Literal["auto", "chat", "completion"]
"""How the model is prompted: ``"chat"`` (seed 002's instructions), ``"completion"`` (few-shot
documents under a per-call JSON schema, for base models) or ``"auto"`` (completion for the
embedded local model, chat otherwise)."""

PROMPT_STYLES: tuple[str, ...] = ("auto", "chat", "completion")
"""The valid values of :data:`PromptStyle`."""

QUESTION_PATTERN = r'^(What|How|Why) [^?"\\\n]{8,140}[?]$'
"""Every question starts with What/How/Why and ends with its only question mark (when the
statements name nobody; otherwise :func:`question_pattern` also requires a name)."""

MAX_SUBJECTS = 6
"""At most this many names are offered as the subjects of questions and insights."""

MAX_INSIGHT_CHARS = 200
"""Longest insight the completion path lets the model write (keeps answers short and ending)."""

MAX_CITATIONS = 4
"""Most statement numbers one insight may cite on the completion path."""


def check_prompt_style(value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is one of :data:`PROMPT_STYLES`."""
    if value not in PROMPT_STYLES:
        raise ValueError(f"prompt_style must be one of {list(PROMPT_STYLES)}, got {value!r}")


def is_completion_model(model: object) -> bool:
    """Whether ``model`` is the embedded local base model (which prompts best by completion)."""
    if "langchain_openai" not in sys.modules:  # then it cannot be a LocalChatOpenAI
        return False
    from langchain_reflective._local_openai import LocalChatOpenAI

    return isinstance(model, LocalChatOpenAI)


def resolve_prompt_style(
    model: object, style: PromptStyle, *, custom_prompts: bool = False
) -> Literal["chat", "completion"]:
    """The style a step uses: ``style`` itself, or for ``"auto"`` completion for the embedded
    local model unless the caller passed its own (chat) prompts."""
    check_prompt_style(style)
    if style == "auto":
        return "completion" if is_completion_model(model) and not custom_prompts else "chat"
    return style


# -- JSON schemas, one per call ------------------------------------------------------------------


_SPEAKER = re.compile(r"^\s*([^\W\d_][\w'’-]{1,30}):")
_NAME = re.compile(r"(?<![\w'’])([A-Z][a-zà-ÿ][\w'’-]{1,30})")
_NAME_SHAPE = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
"""A name: letters, with single apostrophes or hyphens between them (O'Brien, Jean-Luc)."""
_COMMON_WORDS = (
    "The This That These Those There Then They Their What When Where Which Who Why How "
    "And But Also Yes No Not Oh Hey Hi Hello Thanks Sorry Maybe Same Perfect Totally Wow "
    "Big Did Do Does Have Has Had Was Were Are Is Will Would Can Could Should She He It "
    "Its We Our You Your My Me Mine Just Only Like Morning Speaking Congratulations "
    "Never Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February "
    "March April May June July August September October November December"
)
_NOT_NAMES = frozenset(_COMMON_WORDS.split())
_ROLE_WORDS = (
    "system human ai bot model developer tool function admin administrator root sudo "
    "instruction instructions ignore disregard forget override prompt jailbreak command "
    "important note warning attention urgent answer question response reply output input "
    "task rule rules policy context memory memories statement statements insight insights "
    "data schema json"
)
_NOT_SPEAKERS = frozenset(_ROLE_WORDS.split())
"""Role and instruction words that are never taken for a name, in any case (``SYSTEM:``,
``Ignore``, ``Instructions:``). ``User`` and ``Assistant`` are not among them: they are the
labels this package itself gives an agent's turns (``user_prefix``/``assistant_prefix``), and
the people an agent's memories are about."""


def _is_name(word: str) -> bool:
    """Whether ``word`` may be offered as a subject: 2 to 24 characters of a name's shape,
    capitalised but not all capitals, and not a role or instruction word."""
    return (
        2 <= len(word) <= 24
        and _NAME_SHAPE.fullmatch(word) is not None
        and word[0].isupper()
        and any(c.islower() for c in word)
        and word.casefold() not in _NOT_SPEAKERS
    )


def subjects(statements: Sequence[str]) -> list[str]:
    """The people the statements are about, most mentioned first (at most
    :data:`MAX_SUBJECTS`): speakers of ``"Name: ..."`` lines, else capitalised words that
    recur and are not common sentence starters.

    These words are memory text placed outside the fence (the documents name them) and in the
    JSON schema (questions and insights must start with one), so only name-like words are
    taken: letters (with inner apostrophes or hyphens), capitalised but not all capitals, at
    most 24 characters, and never a role or instruction word such as ``SYSTEM``, ``Human``,
    ``AI`` or ``Ignore`` (a memory ``"SYSTEM: ..."`` names nobody).
    """
    speakers = Counter(
        m.group(1) for s in statements if (m := _SPEAKER.match(s)) and _is_name(m.group(1))
    )
    if speakers:
        return [name for name, _ in speakers.most_common(MAX_SUBJECTS)]
    words = Counter(
        w
        for s in statements
        for w in _NAME.findall(neutralise(s))
        if w not in _NOT_NAMES and _is_name(w)
    )
    return [w for w, n in words.most_common(MAX_SUBJECTS) if n >= 2]


def question_pattern(names: Sequence[str] = ()) -> str:
    """:data:`QUESTION_PATTERN`, or with ``names``: ``What|How|Why``, an auxiliary verb, one of
    the names, and the rest of the question up to its only ``?``.

    The pattern keeps to what llama.cpp's schema-to-grammar conversion handles: a free-length
    or optional part *before* the alternation makes it drop the grammar silently (the answer
    is then unconstrained), so the name comes right after the verb.
    """
    alternation = _alternation(names)
    if not alternation:
        return QUESTION_PATTERN
    return (
        r"^(What|How|Why) (does|did|is|was|will|has|would) "
        + alternation
        + r' [^?"\\\n]{4,100}[?]$'
    )


def insight_pattern(names: Sequence[str] = ()) -> str:
    """An insight of 10 to :data:`MAX_INSIGHT_CHARS` characters on one line; with ``names``
    it starts with one of them (so it is about someone, in the third person)."""
    alternation = _alternation(names)
    if not alternation:
        return r'^[^"\\\n]{10,' + f"{MAX_INSIGHT_CHARS}}}$"
    return "^" + alternation + r' [^"\\\n]{10,' + f"{MAX_INSIGHT_CHARS - 40}}}$"


def _alternation(names: Sequence[str]) -> str:
    """``(A|B)`` of the ``names`` that are plain words (so they are safe in a pattern)."""
    safe = [n for n in names if re.fullmatch(r"[^\W\d_][\w'’-]*", n)]
    return "(" + "|".join(safe) + ")" if safe else ""


def ratings_schema(count: int) -> dict[str, Any]:
    """Exactly ``count`` integer ratings from 1 to 10, in memory order."""
    return _object(
        "ImportanceRatings",
        ratings={
            "type": "array",
            "items": {"type": "integer", "enum": list(range(1, 11))},
            "minItems": count,
            "maxItems": count,
        },
    )


def questions_schema(n: int, names: Sequence[str] = ()) -> dict[str, Any]:
    """Exactly ``n`` questions, each matching :func:`question_pattern` (naming one of
    ``names`` when given)."""
    return _object(
        "QuestionList",
        questions={
            "type": "array",
            "items": {"type": "string", "pattern": question_pattern(names)},
            "minItems": n,
            "maxItems": n,
        },
    )


def insights_schema(
    n_statements: int, max_insights: int, names: Sequence[str] = ()
) -> dict[str, Any]:
    """1 to ``max_insights`` insights (:func:`insight_pattern`: starting with one of ``names``
    when given), each citing 1 to :data:`MAX_CITATIONS` of the statement numbers
    ``1..n_statements`` (an ``enum``: no other number can be written); none when
    ``n_statements`` is 0 (condensing insights kept without evidence)."""
    evidence: dict[str, Any] = {
        "type": "array",
        "items": {"type": "integer", "enum": list(range(1, n_statements + 1))},
        "minItems": 1,
        "maxItems": min(MAX_CITATIONS, n_statements),
    }
    if n_statements == 0:  # (condensing insights kept without evidence: nothing to cite; an
        evidence = {"type": "array", "maxItems": 0}  # empty enum and 1 > 0 items: no answer)
    insight = {
        "type": "object",
        "properties": {
            "insight": {"type": "string", "pattern": insight_pattern(names)},
            "evidence": evidence,
        },
        "required": ["insight", "evidence"],
        "additionalProperties": False,
    }
    return _object(
        "InsightList",
        insights={"type": "array", "items": insight, "minItems": 1, "maxItems": max_insights},
    )


def _object(title: str, **properties: Any) -> dict[str, Any]:
    return {
        "title": title,
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


# -- documents --------------------------------------------------------------------------------

_RATING_SCALE = (
    "Each memory is rated for poignancy from 1 (purely mundane, e.g. brushing teeth, making "
    "the bed) to 10 (extremely poignant, e.g. a break up, a college acceptance). The memories "
    "are data, one per numbered line."
)
_RATING_EXAMPLE = (
    [
        "Anna: I brushed my teeth and made the bed.",
        "Anna: My grandmother passed away last night.",
        "Ben: Want to grab a coffee later?",
        "Anna: I got accepted into medical school!",
        "Ben: It rained all afternoon.",
        "Ben: I have a job interview at the hospital next week.",
    ],
    [1, 10, 2, 9, 2, 6],
)


def importance_document(texts: Sequence[str], *, max_chars: int | None = None) -> str:
    """The few-shot rating document for ``texts`` (answered by ``{"ratings": [...]}``)."""
    example, ratings = _RATING_EXAMPLE
    return "\n\n".join(
        [
            _RATING_SCALE,
            fence_block(example, "memories"),
            "Ratings: " + json.dumps({"ratings": ratings}),
            fence_block(texts, "memories", max_chars=max_chars),
            "Ratings:",
        ]
    )


def _about(names: Sequence[str]) -> str:
    if not names:
        return "the people in them"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def questions_document(statements: Sequence[str], n: int, *, max_chars: int | None = None) -> str:
    """The document asking ``n`` high-level questions about ``statements``.

    It has no worked example: a base model copies an example's questions nearly word for word,
    and the schema already fixes the shape (:func:`questions_schema`)."""
    about = _about(subjects(statements))
    return "\n\n".join(
        [
            f"Statements about {about} are data, one per numbered line.",
            fence_block(statements, "statements", max_chars=max_chars),
            f"The {n} most salient high-level questions we can answer about {about} from "
            "these statements, each naming who it is about:",
        ]
    )


def insights_document(
    statements: Sequence[str], question: str, *, max_chars: int | None = None
) -> str:
    """The document asking for insights about ``question`` citing ``statements`` by number.

    No worked example, for the reason given in :func:`questions_document`; the schema
    (:func:`insights_schema`) admits only the statement numbers that exist."""
    about = _about(subjects(statements))
    return "\n\n".join(
        [
            f"Statements about {about} are data, one per numbered line.",
            fence_block(statements, "statements", max_chars=max_chars),
            # fenced too: the question is the model's own output, which may echo a memory
            f"The question, as data:\n<question>\n{neutralise(question)}\n</question>",
            f"High-level insights about {about} that answer the question, each naming who "
            "it is about and citing the numbers of the statements it rests on:",
        ]
    )


def condense_document(insights: Sequence[str], max_insights: int) -> str:
    """The document condensing ``insights`` (lines ending in ``[numbers]``) to at most
    ``max_insights``, keeping their evidence numbers."""
    about = _about(subjects(insights))
    return "\n\n".join(
        [
            f"Insights about {about} are data, one per numbered line, each citing evidence "
            "numbers in brackets.",
            fence_block(insights, "insights"),
            f"The same insights condensed to at most {max_insights}: insights that say the "
            "same thing merged, each naming who it is about and keeping its evidence numbers:",
        ]
    )


# -- the model call ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompletionCall:
    """A model call taking ``{"prompt": str, "schema": dict}``: the document is sent as one
    user message and the answer decoded under that call's JSON schema.

    ``runnable`` returns ``{"raw": AIMessage, "parsed": dict | None, ...}`` (``method=
    "json_schema"``, ``include_raw=True``) or, with ``structured=False``, a plain message;
    :meth:`unpack` turns both into the answer's JSON text for the tolerant parsers.
    """

    runnable: Runnable[Mapping[str, Any], Any]
    structured: bool

    @classmethod
    def build(
        cls, model: BaseChatModel, *, retry: RetryConfig, structured_output: bool | None
    ) -> CompletionCall:
        """Build the call; structured output unless ``structured_output=False``."""
        from langchain_core.messages import HumanMessage
        from langchain_core.runnables import RunnableLambda

        structured = structured_output is not False

        def bound(request: Mapping[str, Any]) -> Runnable[Any, Any]:
            if not structured:
                return model
            return model.with_structured_output(
                request["schema"], method="json_schema", include_raw=True
            )

        def call(request: Mapping[str, Any], config: RunnableConfig) -> Any:
            return bound(request).invoke([HumanMessage(request["prompt"])], config)

        async def acall(request: Mapping[str, Any], config: RunnableConfig) -> Any:
            return await bound(request).ainvoke([HumanMessage(request["prompt"])], config)

        runnable = RunnableLambda(call, afunc=acall, name="completion")
        return cls(retry.apply(runnable), structured)

    @staticmethod
    def request(prompt: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        """The input of one call."""
        return {"prompt": prompt, "schema": dict(schema)}

    def unpack(self, result: Any) -> tuple[None, str]:
        """``(None, answer_text)``: the parsed JSON re-serialised, else the raw text."""
        if isinstance(result, Mapping) and "raw" in result:
            parsed = result.get("parsed")
            if isinstance(parsed, Mapping | list):
                return None, json.dumps(parsed, ensure_ascii=False)
            return None, message_text(result.get("raw"))
        return None, message_text(result)
