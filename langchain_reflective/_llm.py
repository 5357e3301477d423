"""Model-call plumbing shared by importance rating and reflection (internal).

Retries of transient errors through LangChain's ``with_retry``, a structured-or-text model call,
prompt fencing of memory text, tolerant cleanup of model answers, and the generator-based step
driver that lets one flow run with sync or async model calls (:func:`run_sync`,
:func:`run_async`), the way httpx's ``auth_flow`` serves both clients.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import unicodedata
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from langchain_core.runnables import Runnable
from langchain_core.runnables.config import ensure_config
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import RunnableConfig


def transient_errors() -> tuple[type[BaseException], ...]:
    """Exception types worth retrying: timeouts, connection errors, rate limits, 5xx.

    Always ``TimeoutError`` and ``ConnectionError``; plus ``openai``'s and ``httpx``'s timeout,
    connection, rate-limit and server errors when those packages are importable.
    """
    errors: list[type[BaseException]] = [TimeoutError, ConnectionError]
    try:
        import openai

        errors += [
            openai.APITimeoutError,
            openai.APIConnectionError,
            openai.RateLimitError,
            openai.InternalServerError,
        ]
    except ImportError:  # pragma: no cover - openai is a dependency of langchain-openai
        pass
    try:
        import httpx

        errors += [httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError]
    except ImportError:  # pragma: no cover - httpx comes with langchain-core
        pass
    return tuple(errors)


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """How transient model errors are retried (LangChain's ``Runnable.with_retry``).

    Waits grow exponentially with jitter (``wait_exponential_jitter``). Set ``attempts=1`` to
    disable retries, or the waits to ``0`` in tests.
    """

    attempts: int = 3
    """Total attempts per model call, the first included (1 = no retry)."""
    initial_wait: float = 1.0
    """Wait before the first retry, in seconds."""
    max_wait: float = 20.0
    """Longest wait between two attempts, in seconds."""
    exp_base: float = 2.0
    """Growth factor of the wait between attempts."""
    jitter: float = 1.0
    """Random extra wait of up to this many seconds."""
    retry_on: tuple[type[BaseException], ...] | None = None
    """Exception types to retry; ``None`` means :func:`transient_errors`. Other errors fail at
    once (and then take the fallback, or are raised in strict mode)."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryConfig.attempts must be >= 1, got {self.attempts}")
        if min(self.initial_wait, self.max_wait, self.jitter) < 0 or self.exp_base < 1:
            raise ValueError("RetryConfig waits must be >= 0 and exp_base >= 1")

    def apply(self, runnable: Runnable[Any, Any]) -> Runnable[Any, Any]:
        """Wrap ``runnable`` with ``with_retry`` using these settings."""
        if self.attempts == 1:
            return runnable
        backoff: dict[str, float] = {
            _jitter_start_param(): self.initial_wait,
            "max": self.max_wait,
            "exp_base": self.exp_base,
            "jitter": self.jitter,
        }
        # with_retry() validates its jitter params as langchain-core's ExponentialJitterParams,
        # which silently drops tenacity's current "multiplier" name (and the old "initial"
        # warns), so the wait is built here instead.
        retry: Runnable[Any, Any] = _backoff_retry_class()(
            bound=runnable,
            retry_exception_types=self.retry_on or transient_errors(),
            max_attempt_number=self.attempts,
            wait_exponential_jitter=False,
            backoff=backoff,
        )
        return retry


@functools.cache
def _backoff_retry_class() -> Any:
    """A ``RunnableRetry`` whose exponential-jitter wait takes tenacity's own parameters."""
    from langchain_core.runnables.retry import RunnableRetry
    from tenacity import wait_exponential_jitter

    class BackoffRetry(RunnableRetry[Any, Any]):
        backoff: dict[str, float]
        """Keyword arguments of ``tenacity.wait_exponential_jitter``."""

        @property
        def _kwargs_retrying(self) -> dict[str, Any]:
            kwargs = dict(super()._kwargs_retrying)
            kwargs["wait"] = wait_exponential_jitter(**self.backoff)
            return kwargs

    return BackoffRetry


@functools.cache
def _jitter_start_param() -> str:
    """``"multiplier"`` on tenacity versions that deprecate ``initial``, else ``"initial"``."""
    import inspect

    from tenacity import wait_exponential_jitter

    names = inspect.signature(wait_exponential_jitter.__init__).parameters
    return "multiplier" if "multiplier" in names else "initial"


def resolve_chat_model(model: str | BaseChatModel) -> BaseChatModel:
    """Return ``model`` itself, or a chat model built from a ``"provider:model"`` string.

    Strings go through ``langchain.chat_models.init_chat_model`` (imported lazily).

    Raises:
        ImportError: for a string when the ``langchain`` package is not installed.
        TypeError: when ``model`` is neither a string nor a chat model.
    """
    from langchain_core.language_models import BaseChatModel

    if isinstance(model, BaseChatModel):
        return model
    if isinstance(model, str):
        try:
            from langchain.chat_models import init_chat_model
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                f"model={model!r} is a string, which needs `langchain` to resolve it: "
                "pip install 'langchain-reflective[agents]', or pass a BaseChatModel instance "
                "(e.g. ChatOpenAI(...))."
            ) from exc
        return init_chat_model(model)
    raise TypeError(
        f"model must be a BaseChatModel or a 'provider:model' string, got {type(model).__name__}"
    )


# A tag candidate runs from a "<" to the next ">" (or to the next "<" / the end of the text):
# one pass, each character in one candidate at most.
_TAG_CANDIDATE = re.compile(r"<[^<>]*>?")
_TAG_NAME = re.compile(r"[\w-]+")
_IGNORABLE_CATEGORIES = frozenset({"Mn", "Me", "Cf", "Cc", "Zs", "Zl", "Zp"})
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0")  # Hangul fillers: letters that show nothing
_SLASHES = frozenset("/\u2044\u2215\u29f8\uff0f")  # and the slashes that look like one
_ANGLES = str.maketrans("\ufe64\uff1c\ufe65\uff1e", "<<>>")
"""The small and full-width angle brackets: NFKC (which many tokenizers apply to their input)
makes them ``<`` and ``>``, so ``\uff1c/memory\uff1e`` reaches such a model as ``</memory>``."""


def _ignorable(ch: str) -> bool:
    """Whether ``ch`` shows as nothing (or as a space) between ``<`` and a tag name: spaces,
    format characters (zero-width, direction marks, tag characters), combining marks and
    variation selectors, Hangul fillers."""
    return ch.isspace() or ch in _FILLERS or unicodedata.category(ch) in _IGNORABLE_CATEGORIES


def fence_block(items: Iterable[str], tag: str, *, max_chars: int | None = None) -> str:
    """Number ``items`` (1-based) inside a ``<tag>...</tag>`` block, as data for a prompt.

    Each item is put on a single line (newlines become spaces, so an item cannot forge a numbered
    line), anything that looks like an XML-ish tag (a forged ``</tag>``, also with attributes,
    spaces, slashes, or characters that show as nothing -- zero-width and format characters,
    combining marks, variation selectors, fillers -- inside, and any ``</`` at all; full-width
    and small angle brackets count as ``<`` and ``>``) has its angle brackets replaced by
    ``‹ ›``, and items longer than ``max_chars`` are cut with ``…``.
    """
    lines = [f"<{tag}>"]
    for i, item in enumerate(items, 1):
        text = neutralise(item)
        if max_chars is not None and len(text) > max_chars:
            text = text[: max(1, max_chars - 1)].rstrip() + "…"
        lines.append(f"{i}. {text}")
    lines.append(f"</{tag}>")
    return "\n".join(lines)


def fence_text(text: str, tag: str, *, max_chars: int | None = None) -> str:
    """One text inside a ``<tag>...</tag>`` block, as data for a prompt, its lines kept (code,
    a task with examples: :func:`fence_block` puts an item on one line, which loses their
    indentation and line structure).

    Each line starts with ``"| "``, so no line of the text can pass for a line of the prompt
    (a numbered item, an instruction); fence markers are defused on every line as
    :func:`neutralise` does; trailing whitespace is dropped; a text longer than ``max_chars`` is
    cut with ``…``.
    """
    if max_chars is not None and len(text) > max_chars:
        text = text[: max(1, max_chars - 1)].rstrip() + "…"
    return "\n".join([f"<{tag}>", *_guttered(text.splitlines() or [""]), f"</{tag}>"])


def fence_items(items: Iterable[str], tag: str, *, max_chars: int | None = None) -> str:
    """Number ``items`` (1-based) inside a ``<tag>...</tag>`` block, each keeping its lines (a
    traceback, a tool's multi-line output), behind :func:`fence_text`'s ``"| "`` gutter.

    An item's first line starts with its number; its other lines are indented past the number,
    so none can pass for the next item. Each item longer than ``max_chars`` is cut with ``…``.
    """
    lines: list[str] = []
    for i, item in enumerate(items, 1):
        text = item.strip()
        if max_chars is not None and len(text) > max_chars:
            text = text[: max(1, max_chars - 1)].rstrip() + "…"
        first, *rest = text.splitlines() or [""]
        number = f"{i}. "
        lines += [number + first, *(" " * len(number) + line for line in rest)]
    return "\n".join([f"<{tag}>", *_guttered(lines), f"</{tag}>"])


def _guttered(lines: Iterable[str]) -> list[str]:
    """Each line behind ``"| "``, fence markers defused, trailing whitespace dropped."""
    out = []
    for line in lines:
        line = line.rstrip().translate(_ANGLES)
        if "<" in line:
            line = _TAG_CANDIDATE.sub(_defuse, line)
        out.append(f"| {line}".rstrip())
    return out


def neutralise(text: str) -> str:
    """One line of prompt data: whitespace collapsed, tag-like fence markers defused (also
    those written with angle brackets that normalise to ``<`` and ``>``)."""
    text = " ".join(text.split()).translate(_ANGLES)
    return _TAG_CANDIDATE.sub(_defuse, text) if "<" in text else text


def _defuse(match: re.Match[str]) -> str:
    """``‹...›`` for a candidate that reads as a tag, else the candidate unchanged.

    A tag: ``<`` then (past characters that show as nothing) ``/`` -- anything that starts like
    a closing tag, closed or not --, or a name right after the ``<`` (attributes allowed), or
    after spaces a name alone (``< memory >``, but not ``a < b && c > d``)."""
    candidate = match.group(0)
    closed = len(candidate) > 1 and candidate.endswith(">")
    inner = candidate[1:-1] if closed else candidate[1:]
    start = 0
    while start < len(inner) and _ignorable(inner[start]):
        start += 1
    if start == len(inner):
        return candidate
    first = inner[start]
    if first in _SLASHES:
        tag = True
    elif closed and (first.isalpha() or first == "_"):
        spaced = any(ch.isspace() for ch in inner[:start])
        rest = inner[start:]
        end = len(rest)
        while end and _ignorable(rest[end - 1]):
            end -= 1
        tag = not spaced or _TAG_NAME.fullmatch(rest[:end]) is not None
    else:
        tag = False
    if not tag:
        return candidate
    return "‹" + inner + ("›" if closed else "")


_MENTION = r"(?<![`'\"])"
"""A tag right after a backtick or a quote is mentioned (`` `</think>` ``), not written: it
neither opens nor closes a section."""
_THINK_OPEN = re.compile(_MENTION + r"<(think|thinking|reasoning)>", re.IGNORECASE)
"""The opening tag of a reasoning section."""
_REFLECTION_OPEN = re.compile(_MENTION + r"<(reflection)>", re.IGNORECASE)
"""The opening tag of a ``<reflection>`` section: reasoning beside an answer, but the answer
itself when it is all there is (a model asked for a reflection may wrap it so)."""
_CLOSING = {
    name: re.compile(_MENTION + f"</{name}>", re.IGNORECASE)
    for name in ("think", "thinking", "reasoning", "reflection")
}
_REFLECTION_TAG = re.compile(r"</?reflection>", re.IGNORECASE)
_CLOSING_ONLY = re.compile(
    r"^.*?" + _MENTION + r"</(think|thinking|reasoning)>", re.IGNORECASE | re.DOTALL
)
"""Reasoning whose opening tag the chat template wrote (DeepSeek-R1 served so starts its answer
inside ``<think>``): everything up to the first closing tag, if no opening tag precedes it."""
_CODE_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.DOTALL)


def _drop_sections(text: str, opening: re.Pattern[str]) -> str:
    """``text`` without the sections ``opening`` starts, each up to its closing tag.

    An unclosed section is unfinished reasoning (the answer ran out of tokens inside it) only
    when it starts the answer: nothing but whitespace, and sections dropped, before it; it then
    runs to the end. An unclosed tag after some of the answer is a mention ("use the
    <thinking> tag to ...") and stays, with the text after it. Linear: a closing tag missing
    after one opening is not looked for again."""
    out: list[str] = []
    pos = 0
    blank = True  # (only whitespace kept so far)
    unclosed: set[str] = set()
    while (m := opening.search(text, pos)) is not None:
        name = m.group(1).lower()
        before = text[pos : m.start()]
        blank = blank and not before.strip()
        close = None if name in unclosed else _CLOSING[name].search(text, m.end())
        if close is not None:
            out.append(before)
            pos = close.end()
        elif blank:
            out.append(before)
            return "".join(out)
        else:
            unclosed.add(name)
            out.append(text[pos : m.end()])
            pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def strip_reasoning(text: str, *, reflection_is_answer: bool = False) -> str:
    """``text`` without its ``<think>``, ``<thinking>``, ``<reasoning>`` and ``<reflection>``
    sections (tag names in any case).

    - A section runs from its opening tag to its closing tag, wherever it is.
    - An unclosed section counts only at the start of the answer (after whitespace, or after
      sections dropped): reasoning cut off by the token limit, it runs to the end. An opening
      tag mentioned later in the answer ("use the <thinking> tag to ...") leaves the text
      intact.
    - A closing tag with no opening tag of the three names before it ends reasoning that began
      with the answer, and what precedes it is dropped, wherever the tag is: DeepSeek-R1's
      template writes the ``<think>`` itself, so its answer starts inside the reasoning.
    - A tag right after a backtick or a quote (`` `</think>` ``, ``"<thinking>"``) is mentioned,
      not written: it neither opens nor closes a section.

    Only these exact tags: the word ``reflection`` elsewhere (a JSON key, ``<reflections>``)
    stays. When nothing but ``<reflection>`` sections is left, their content is kept, only the
    tags dropped; with ``reflection_is_answer`` (a prompt that asked for a reflection)
    always."""
    closing = _CLOSING_ONLY.match(text)  # (after an opening of any name: inside its section)
    if closing is not None and _THINK_OPEN.search(text, 0, closing.start(1) - 2) is None:
        text = text[closing.end() :]
    text = _drop_sections(text, _THINK_OPEN)
    if "<" not in text:
        return text
    without = "" if reflection_is_answer else _drop_sections(text, _REFLECTION_OPEN)
    return without if without.strip() or not text.strip() else _REFLECTION_TAG.sub("", text)


def clean_model_text(text: str, *, reflection_is_answer: bool = False) -> str:
    """Drop reasoning sections (:func:`strip_reasoning`, which ``reflection_is_answer`` goes
    to) and unwrap a Markdown code fence from a model's answer."""
    text = strip_reasoning(text, reflection_is_answer=reflection_is_answer)
    m = _CODE_FENCE.search(text)
    if m and m.group(1).strip():
        inner = m.group(1).strip()
        if inner[:1] in "[{" or not text.replace(m.group(0), "").strip():
            return inner
    return text.strip()


MAX_JSON_DEPTH = 32
"""Nesting deeper than this in a model's JSON answer is not an answer (and the parsers that
walk it recursively must not hit Python's recursion limit)."""


def load_json(text: str) -> Any:
    """The JSON value in ``text`` (whole text, or its first ``[...]``/``{...}``), else ``None``
    (also for values nested deeper than :data:`MAX_JSON_DEPTH`)."""
    text = clean_model_text(text)
    candidates = [text]
    for open_, close in (("[", "]"), ("{", "}")):
        start, end = text.find(open_), text.rfind(close)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        if candidate[:1] not in "[{":
            continue
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):  # (the decoder recurses per nesting level)
            continue
        return None if _deeper_than(value, MAX_JSON_DEPTH) else value
    return None


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether containers nest more than ``limit`` deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > limit:
                return True
            stack.extend(
                (child, depth + 1) for child in (node.values() if isinstance(node, dict) else node)
            )
    return False


def message_text(result: Any) -> str:
    """The text of a model result (a message, a string, or anything else)."""
    from langchain_core.messages import BaseMessage

    if isinstance(result, BaseMessage):
        return str(result.text)
    if isinstance(result, str):
        return result
    return "" if result is None else str(result)


S = TypeVar("S", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class ModelCall(Generic[S]):
    """One kind of model call: structured output when available, else text.

    ``runnable`` returns either ``{"raw": AIMessage, "parsed": S | None, ...}`` (structured
    path, built with ``include_raw=True``) or a message (text path). :meth:`unpack` turns both
    into ``(parsed_or_None, raw_text)`` so callers parse text only when they must.
    """

    runnable: Runnable[Any, Any]
    schema: type[S]
    structured: bool

    @classmethod
    def build(
        cls,
        model: BaseChatModel,
        schema: type[S],
        *,
        retry: RetryConfig,
        structured_output: bool | None,
    ) -> ModelCall[S]:
        """Build the call; ``structured_output=None`` uses structured output if supported.

        Raises:
            ValueError: ``structured_output=True`` but the model does not support it.
        """
        runnable: Runnable[Any, Any] | None = None
        if structured_output is not False:
            try:
                runnable = model.with_structured_output(
                    schema, method="json_schema", include_raw=True
                )
            except (NotImplementedError, TypeError, ValueError, AttributeError) as exc:
                if structured_output:
                    raise ValueError(
                        f"structured_output=True but {type(model).__name__} does not support "
                        f"with_structured_output(method='json_schema'): {exc}"
                    ) from exc
        structured = runnable is not None
        return cls(retry.apply(runnable if runnable is not None else model), schema, structured)

    def unpack(self, result: Any) -> tuple[S | None, str]:
        """``(parsed, raw_text)`` of one result."""
        if isinstance(result, Mapping) and "raw" in result:
            parsed = result.get("parsed")
            raw = message_text(result.get("raw"))
            if isinstance(parsed, self.schema):
                return parsed, raw
            if isinstance(parsed, Mapping):
                try:
                    return self.schema.model_validate(parsed), raw
                except ValueError:
                    return None, raw
            return None, raw
        if isinstance(result, self.schema):
            return result, ""
        return None, message_text(result)


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Op(Generic[T]):
    """One I/O step of an LLM flow: a sync function and its optional async twin.

    Flows are generators that ``yield`` ops and receive their results; :func:`run_sync` and
    :func:`run_async` drive them, so each flow is written once for both worlds.
    """

    sync: Callable[..., T]
    async_: Callable[..., Awaitable[T]] | None
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


Flow = Generator[Op[Any], Any, T]


def threaded(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """The async twin of a blocking function (a stream method) for an :class:`Op`: it runs
    ``fn`` in a worker thread."""

    async def call(*args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    return call


@dataclass(frozen=True, slots=True)
class Failure:
    """What a :func:`guarded` op returns instead of raising."""

    error: Exception

    def __str__(self) -> str:
        return f"{type(self.error).__name__}: {self.error}"


def guarded(op: Op[T]) -> Op[T | Failure]:
    """``op`` whose failure is returned as a :class:`Failure` (so the flow takes its fallback
    or decides what the error means); LangGraph's control-flow exceptions (interrupts) still
    propagate."""

    def sync(*args: Any, **kwargs: Any) -> T | Failure:
        try:
            return op.sync(*args, **kwargs)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return Failure(exc)

    async def async_(*args: Any, **kwargs: Any) -> T | Failure:
        try:
            if op.async_ is None:
                return op.sync(*args, **kwargs)
            return await op.async_(*args, **kwargs)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            return Failure(exc)

    return Op(sync, async_, op.args, op.kwargs)


def batch_op(runnable: Runnable[Any, Any], inputs: list[Any], config: RunnableConfig) -> Op[Any]:
    """An op calling ``runnable`` once per input, concurrently, errors returned in place.

    It uses ``Runnable``'s generic ``batch``/``abatch`` (``invoke`` per input, in LangChain's
    thread pool or ``asyncio.gather``), not ``RunnableRetry``'s override: the override does not
    make its run the current one while the wrapped runnable runs, so inside a parent run (a
    graph node, a tool, an agent step) the model call of each input was traced beside its
    retry run instead of under it (langchain-core 1.8), and a LangSmith reader saw an
    ``importance`` run without the model call it made.
    """
    return Op(
        functools.partial(Runnable.batch, runnable),
        functools.partial(Runnable.abatch, runnable),
        (inputs,),
        {"config": config, "return_exceptions": True},
    )


def run_sync(flow: Flow[T]) -> T:
    """Drive ``flow``, calling each op's sync function. An op's error is raised inside the
    flow at its ``yield`` (so the flow may handle it) and otherwise reaches the caller."""
    value: Any = None
    error: Exception | None = None
    try:
        while True:
            op = flow.send(value) if error is None else flow.throw(error)
            try:
                value, error = op.sync(*op.args, **op.kwargs), None
            except Exception as exc:
                value, error = None, exc
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        flow.close()


async def run_async(flow: Flow[T]) -> T:
    """Drive ``flow``, awaiting each op's async twin (or calling the sync one if it has none);
    errors as in :func:`run_sync`."""
    value: Any = None
    error: Exception | None = None
    try:
        while True:
            op = flow.send(value) if error is None else flow.throw(error)
            try:
                if op.async_ is not None:
                    value = await op.async_(*op.args, **op.kwargs)
                else:
                    value = op.sync(*op.args, **op.kwargs)
                error = None
            except Exception as exc:
                value, error = None, exc
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        flow.close()


# --------------------------------------------------------------------------------------------
# LLM importance
# --------------------------------------------------------------------------------------------


class FlowNode(Runnable[Any, Any]):
    """A graph node running one step's flow with :func:`run_sync` or :func:`run_async`.

    LangGraph traces every node as one run named after the node, with the node's work inside
    it. A ``RunnableLambda`` node starts a second run for the same step inside that one
    (``gate`` > ``reflection.gate``); this node starts none, so the step's model calls and
    stream writes are the children of the node's run, and ``get_config()`` inside the step
    sees the node's config (LangGraph makes it current for the node).

    Args:
        name: The runnable's name (the node's run is named after the node, not this).
        step: The step: ``(state, config) -> Flow``.
        wrap: Maps an error of the step to the error to raise (default: the error itself);
            a different error is raised ``from`` the original.
    """

    def __init__(
        self,
        name: str,
        step: Callable[[Any, RunnableConfig], Flow[Any]],
        *,
        wrap: Callable[[Exception], Exception] | None = None,
    ) -> None:
        self.name = name
        self.step = step
        self.wrap = wrap

    def _replacement(self, exc: Exception) -> Exception | None:
        err = self.wrap(exc) if self.wrap is not None else exc
        return None if err is exc else err

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the step with its sync I/O."""
        try:
            return run_sync(self.step(input, ensure_config(config)))
        except Exception as exc:
            err = self._replacement(exc)
            if err is None:
                raise
            raise err from exc

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the step with its async I/O."""
        try:
            return await run_async(self.step(input, ensure_config(config)))
        except Exception as exc:
            err = self._replacement(exc)
            if err is None:
                raise
            raise err from exc
