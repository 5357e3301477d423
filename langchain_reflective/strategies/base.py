"""The extension point for memory strategies: :class:`Observation` and :class:`BaseMemoryStrategy`.

A *memory strategy* decides what an agent remembers of its turns and what it is shown of them
before a model call. The interface is three calls (and their async twins):

* :meth:`BaseMemoryStrategy.commit` stores one :class:`Observation` (a user's message and the
  agent's answer, with timestamps, importance, an optional embedding and a namespace);
* :meth:`BaseMemoryStrategy.context` returns the messages to show before the next model call,
  within an optional token budget;
* :meth:`BaseMemoryStrategy.purge` forgets everything one namespace holds.

:class:`~langchain_reflective.integrations.middleware.MemoryMiddleware` calls them around a
``create_agent`` agent's model calls, and fences what :meth:`~BaseMemoryStrategy.context` returns
as data (see :func:`~langchain_reflective.strategies.render.format_context`).

**Namespaces.** One strategy object serves many owners (users, tenants, agents): every
observation carries its ``namespace``, and ``context``/``purge`` take one. ``None`` means the
strategy's :attr:`~BaseMemoryStrategy.default_namespace`. A namespace never sees another's
observations; the conformance tests check it.

**Thread safety.** A strategy is shared by every run of an agent, and agents run in many threads
(LangGraph's sync executor, ``batch``) and event loops at once. Every method of a strategy must
therefore be safe to call concurrently from any thread, and the async twins must not block the
event loop: guard shared state with a lock (the built-ins use one ``threading.RLock`` each and
hold it only while touching their lists, never during I/O or model calls). The default async
twins run the sync method in a worker thread.
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.runnables.config import run_in_executor

from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.records import (
    MAX_TEXT_CHARS,
    new_memory_id,
    storable_text,
    utc,
    validate_metadata,
)

__all__ = [
    "DEFAULT_NAMESPACE",
    "BaseMemoryStrategy",
    "Observation",
    "latest_query",
]

DEFAULT_NAMESPACE = "default"
"""The namespace used when neither a call nor a strategy names one (as in ``MemoryStream``)."""

TokenCounter = Callable[[Sequence[BaseMessage]], int]
"""Counts the tokens of a list of messages."""


def count_tokens(messages: Sequence[BaseMessage]) -> int:
    """Approximate tokens of ``messages`` (LangChain's ``count_tokens_approximately``)."""
    return count_tokens_approximately(messages)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Observation:
    """One turn of an agent: what the user asked and what the agent answered.

    Strategies read these fields to decide what to keep and what to show; what each built-in
    uses is in ``docs/MEMORY.md``. Observations are immutable: a strategy that rates or embeds
    one stores a copy (``dataclasses.replace(observation, importance=0.8)``).

    Raises:
        InvalidMemoryError: ``query`` and ``reply`` are both empty, a text is not a string or
            too large, ``importance`` is outside [0, 1], a timestamp is naive, the embedding is
            not finite numbers, or ``metadata`` is not JSON-serialisable.
    """

    query: str
    """The user's message (empty when only the answer is new, e.g. a resumed run)."""
    reply: str
    """The agent's final answer (empty when the turn ended without one)."""
    namespace: str | None = None
    """Whose turn this is (user, tenant, agent); ``None``: the strategy's default namespace."""
    created_at: datetime = field(default_factory=_now)
    """When the turn happened (timezone-aware; stored as UTC)."""
    accessed_at: datetime | None = None
    """When the observation was last shown to a model (``None``: never, read as
    ``created_at``); a strategy that tracks access stores a copy with a new value, e.g. for
    least-recently-used eviction."""
    importance: float | None = None
    """How significant the turn is, in [0, 1]; ``None``: not rated (a strategy may rate it,
    e.g. with :func:`~langchain_reflective.strategies.heuristic_importance` or an LLM)."""
    embedding: tuple[float, ...] | None = None
    """An embedding of the turn for similarity search, if the caller has one."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """JSON-serialisable extras. The agent middleware sets ``source="agent"``, ``thread_id``,
    ``query_message_id`` and ``reply_message_id`` when it knows them. The built-in strategies
    keep each message once per namespace, by its thread, id and text: a part whose message
    they hold already is left out (a turn re-run from a checkpoint), an edited message (same
    id, new text) is stored."""
    id: str = field(default_factory=new_memory_id)
    """A unique, time-ordered id."""

    def __post_init__(self) -> None:
        for name in ("query", "reply"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidMemoryError(f"{name} must be a str, got {type(value).__name__}")
            if len(value) > MAX_TEXT_CHARS or "\x00" in value:
                raise InvalidMemoryError(
                    f"{name} is longer than {MAX_TEXT_CHARS:,} characters or contains NUL"
                )
        if not self.query.strip() and not self.reply.strip():
            raise InvalidMemoryError("an observation needs a query or a reply (both are empty)")
        if self.namespace is not None and (
            not isinstance(self.namespace, str) or not self.namespace
        ):
            raise InvalidMemoryError("namespace must be a non-empty string or None")
        object.__setattr__(self, "created_at", utc(self.created_at))
        if self.accessed_at is not None:
            object.__setattr__(self, "accessed_at", utc(self.accessed_at))
        if self.importance is not None:
            value = self.importance
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidMemoryError(f"importance must be a number, got {value!r}")
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise InvalidMemoryError(f"importance must be in [0, 1], got {value!r}")
            object.__setattr__(self, "importance", float(value))
        if self.embedding is not None:
            try:
                vector = tuple(float(x) for x in self.embedding)
            except (TypeError, ValueError) as exc:
                raise InvalidMemoryError(f"embedding must be numbers: {exc}") from exc
            if not vector or not all(math.isfinite(x) for x in vector):
                raise InvalidMemoryError("embedding must be a non-empty vector of finite numbers")
            object.__setattr__(self, "embedding", vector)
        object.__setattr__(self, "metadata", validate_metadata(self.metadata))
        if not isinstance(self.id, str) or not self.id:
            raise InvalidMemoryError("id must be a non-empty string")

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def last_access(self) -> datetime:
        """``accessed_at``, or ``created_at`` when never accessed."""
        return self.accessed_at or self.created_at

    @property
    def text(self) -> str:
        """The query and the reply on one text (for embedding, scoring or storing)."""
        return "\n".join(part for part in (self.query.strip(), self.reply.strip()) if part)


def is_summary(message: BaseMessage) -> bool:
    """Whether ``message`` is the summary LangChain's ``SummarizationMiddleware`` put in place
    of earlier messages (a ``HumanMessage``, but not one the user wrote)."""
    return message.additional_kwargs.get("lc_source") == "summarization"


def latest_query(messages: Sequence[BaseMessage]) -> str | None:
    """The text of the latest user message in ``messages`` (``None`` when there is none; a
    conversation summary is not a user message), as a search can take it (a NUL or an unpaired
    surrogate replaced, cut at the memory text limit: :func:`storable_text`)."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage) and not is_summary(message):
            text = storable_text(message.text.strip())
            return text or None
    return None


def check_budget(budget: int | None) -> int | None:
    """Validate a token budget (``None``: no limit).

    Raises:
        InvalidMemoryError: the budget is not an integer >= 0.
    """
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise InvalidMemoryError(f"budget must be an integer >= 0 or None, got {budget!r}")
    return budget


def counts_in_thread(token_counter: TokenCounter, budget: int | None) -> bool:
    """Whether an async context fits ``budget`` in a worker thread: only a counter other than
    :func:`count_tokens` runs then, and it may block (a model's
    ``get_num_tokens_from_messages`` may call its provider), so it never runs on the loop."""
    return budget is not None and token_counter is not count_tokens


def check_token_counter(token_counter: object) -> TokenCounter:
    """``token_counter`` if it can count a context's tokens (``None``: :func:`count_tokens`).

    Raises:
        InvalidMemoryError: not a sync function of a list of messages (not callable, a class,
            an async function).
    """
    if token_counter is None or token_counter is count_tokens_approximately:
        return count_tokens  # (the same count: contexts counted with it stay on the loop)
    call = getattr(token_counter, "__call__", None)  # noqa: B004 (an async __call__, too)
    if callable(token_counter) and not (
        inspect.isclass(token_counter)
        or inspect.iscoroutinefunction(token_counter)
        or inspect.iscoroutinefunction(call)
    ):
        return token_counter
    if inspect.isclass(token_counter):
        what = f"the class {token_counter.__name__}, not a function"
    elif hasattr(token_counter, "get_num_tokens_from_messages"):
        what = f"a {type(token_counter).__name__}: pass its get_num_tokens_from_messages"
    elif callable(token_counter):
        what = "an async function"
    else:
        what = f"{token_counter!r:.60} ({type(token_counter).__name__})"
    raise InvalidMemoryError(
        "token_counter must be a function (list of messages) -> int >= 0, such as a chat "
        "model's get_num_tokens_from_messages or LangChain's count_tokens_approximately "
        f"(None: the approximate count); got {what}"
    )


def counter_name(token_counter: object) -> str:
    """A short name of ``token_counter`` for traces: ``ChatOpenAI.get_num_tokens_from_messages``
    for a model's bound method (its class, not where the method is defined), else its
    qualified name, else its type's name (a ``functools.partial``, a callable object)."""
    owner = getattr(token_counter, "__self__", None)
    name = getattr(token_counter, "__name__", None)
    if owner is not None and not inspect.ismodule(owner) and isinstance(name, str):
        cls = owner if inspect.isclass(owner) else type(owner)  # (a classmethod: its class)
        return f"{cls.__name__}.{name}"
    qualname = getattr(token_counter, "__qualname__", None)
    return qualname if isinstance(qualname, str) else type(token_counter).__name__


class _CheckedTokenCounter:
    """:attr:`BaseMemoryStrategy.token_counter`: every assignment goes through
    :func:`check_token_counter`, as the built-ins' ``token_counter=`` does, so an async
    function, a class or a chat model object is refused where it is set, not at the first
    budgeted context (where it fails obscurely, or, async, counts a coroutine).

    Read on the class it is the class's default counter; read on a strategy, the counter the
    strategy was given (kept in the instance's ``__dict__`` under the same name, so a copy
    keeps it), else the class's default. ``del strategy.token_counter`` restores the
    default.
    """

    def __init__(self, default: TokenCounter) -> None:
        self.default = default
        self.name = "token_counter"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object | None, owner: type | None = None) -> TokenCounter:
        if instance is None:
            return self.default
        counter: TokenCounter = vars(instance).get(self.name, self.default)
        return counter

    def __set__(self, instance: object, value: TokenCounter | None) -> None:
        vars(instance)[self.name] = check_token_counter(value)

    def __delete__(self, instance: object) -> None:
        vars(instance).pop(self.name, None)


class BaseMemoryStrategy(ABC):
    """What an agent remembers of its turns, and what it is shown of them.

    Implement :meth:`commit`, :meth:`context` and :meth:`purge`; override the async twins when
    the strategy has a native async path (the defaults run the sync method in a worker thread).
    Read the module documentation for the namespace and thread-safety contracts, and run
    :class:`~langchain_reflective.strategies.testing.StrategyConformanceTests` on your strategy.

    Example:
        .. code-block:: python

            from langchain_reflective import Observation, WindowMemory

            memory = WindowMemory(capacity=10)
            memory.commit(Observation("I live in Lisbon", "Noted!", namespace="alice"))
            memory.context([], namespace="alice")  # [HumanMessage(...), AIMessage(...)]
    """

    default_namespace: str = DEFAULT_NAMESPACE
    """The namespace of calls and observations that name none."""
    context_run_name: ClassVar[str] = "memory_context"
    """The LangSmith run name of a context call made by the agent middleware."""
    token_counter: TokenCounter = _CheckedTokenCounter(count_tokens)  # type: ignore[assignment]
    """What a ``budget`` is counted with: a function of a list of messages returning their
    tokens (default: :func:`count_tokens`, LangChain's approximate count). The built-ins fit
    their contexts with it, and the conformance tests check budgets with it, so a strategy that
    counts exactly (a chat model's ``get_num_tokens_from_messages``, a tiktoken function)
    assigns it in ``__init__``: ``self.token_counter = counter``, or for all its instances in
    the class body: ``token_counter = staticmethod(counter)`` (a plain function there would be
    bound as a method). Every built-in strategy takes ``token_counter=``. Whichever way it is
    set, it is checked as the built-ins' argument is (:func:`check_token_counter`: ``None`` is
    the default count; an async function, a class or a chat model object is an
    :class:`~langchain_reflective.errors.InvalidMemoryError` where it is set). A method
    ``def token_counter(self, messages)`` is left a method, unchecked."""
    blocking: ClassVar[bool] = True
    """Whether the sync methods may block (I/O, a model call). The default async twins run
    them in a worker thread when ``True`` and directly on the event loop when ``False`` (for
    quick in-process strategies, where a thread hop would cost more than the call); a context
    with a ``budget`` counted by a :attr:`token_counter` of the user's runs in a worker thread
    either way (the counter may block)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Check a counter a subclass sets in its class body (``staticmethod(counter)``, or a
        callable that is not a descriptor, such as ``len``) when the class is made, and keep
        assignments to its instances checked; a method or a property is the subclass's own."""
        super().__init_subclass__(**kwargs)
        if "token_counter" not in cls.__dict__:
            return  # (the parent's counter, checked already)
        value = cls.__dict__["token_counter"]
        if isinstance(value, staticmethod):
            value = value.__func__
        elif hasattr(type(value), "__get__"):  # a method, a property, the checked attribute
            return
        checked = _CheckedTokenCounter(check_token_counter(value))
        checked.__set_name__(cls, "token_counter")
        cls.token_counter = checked  # type: ignore[assignment]  # (the descriptor of it)

    def resolve_namespace(self, namespace: str | None = None) -> str:
        """The namespace a call with ``namespace`` reads or writes.

        Raises:
            InvalidMemoryError: an empty or non-string namespace.
        """
        if namespace is None:
            return self.default_namespace
        if not isinstance(namespace, str) or not namespace:
            raise InvalidMemoryError(f"namespace must be a non-empty string, got {namespace!r}")
        return namespace

    def trace_metadata(self) -> dict[str, Any]:
        """Metadata for the traced context run: the strategy's name and what its budgets are
        counted with (:func:`counter_name` of :attr:`token_counter`: a context that differs
        between two runs may differ by its counter). Subclasses add their settings to
        ``super().trace_metadata()``."""
        return {"strategy": type(self).__name__, "token_counter": counter_name(self.token_counter)}

    @abstractmethod
    def commit(self, observation: Observation) -> None:
        """Store one observation (rate it, embed it, evict others: the strategy's policy).

        Raises:
            TypeError: ``observation`` is not an :class:`Observation`.
        """

    @abstractmethod
    def context(
        self,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        namespace: str | None = None,
    ) -> list[BaseMessage]:
        """The remembered messages to show before a model call, oldest first.

        Return ``HumanMessage``/``AIMessage`` pairs (what the user said, what the agent
        answered) or other non-system messages: the middleware fences them as data. A
        ``SystemMessage`` is added to the system prompt as it is, so return one only when its
        memory text is already fenced (like ``ReflectiveMemory``'s working context).

        Args:
            messages: the conversation the model is about to see (the latest user message is
                the natural query for relevance); never modified.
            budget: the most tokens the returned messages may take, counted with
                :attr:`token_counter` (default: LangChain's ``count_tokens_approximately``);
                ``None``: the strategy's own limits only.
            namespace: whose memory (default: :attr:`default_namespace`).

        Raises:
            InvalidMemoryError: a negative budget or a bad namespace (and, in the built-ins,
                a :attr:`token_counter` that returns no count; what the counter raises
                propagates).
        """

    @abstractmethod
    def purge(self, *, namespace: str | None = None) -> None:
        """Forget everything the namespace holds (default: :attr:`default_namespace`)."""

    async def acommit(self, observation: Observation) -> None:
        """Async twin of :meth:`commit`."""
        if not self.blocking:
            return self.commit(observation)
        await run_in_executor(None, self.commit, observation)

    async def acontext(
        self,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        namespace: str | None = None,
    ) -> list[BaseMessage]:
        """Async twin of :meth:`context`."""

        def call() -> list[BaseMessage]:
            return self.context(messages, budget=budget, namespace=namespace)

        if self.blocking or counts_in_thread(self.token_counter, budget):
            return await run_in_executor(None, call)
        return call()

    async def apurge(self, *, namespace: str | None = None) -> None:
        """Async twin of :meth:`purge`."""

        def call() -> None:
            self.purge(namespace=namespace)

        if not self.blocking:
            return call()
        await run_in_executor(None, call)

    @staticmethod
    def check_observation(observation: object) -> Observation:
        """``observation`` if it is an :class:`Observation`.

        Raises:
            TypeError: it is not.
        """
        if not isinstance(observation, Observation):
            raise TypeError(f"expected an Observation, got {type(observation).__name__}")
        return observation
