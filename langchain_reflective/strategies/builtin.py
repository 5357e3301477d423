"""The in-process built-in strategies: void, window, importance-weighted and hybrid memory.

Each keeps its observations per namespace in a dict guarded by one ``threading.RLock`` (held
only while the lists change or are copied), so one instance can serve every thread and event
loop of an agent. Nothing is persisted: a restart forgets everything (use
:class:`~langchain_reflective.strategies.semantic.SemanticMemory` or ``ReflectiveMemory`` for
memory that survives). A custom importance scorer (it may call a model) runs in a worker
thread under ``acommit``; everything else of these strategies runs on the event loop. A
context is chosen in the strategy's priority order, fitted to the budget with
:func:`~langchain_reflective.strategies.budget.fit_observations`, and returned oldest first as
the turns' messages.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from langchain_core.messages import BaseMessage

from langchain_reflective._llm import Flow, Op, run_async, run_sync, threaded
from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.importance import BaseImportanceScorer, heuristic_rating
from langchain_reflective.strategies._recorded import observation_keys, without_held
from langchain_reflective.strategies.base import (
    DEFAULT_NAMESPACE,
    BaseMemoryStrategy,
    Observation,
    TokenCounter,
    check_budget,
    check_token_counter,
)
from langchain_reflective.strategies.budget import fit_observations, observation_messages

__all__ = [
    "HybridMemory",
    "ImportanceMemory",
    "ImportanceScorer",
    "VoidMemory",
    "WindowMemory",
    "heuristic_importance",
]

ImportanceScorer = Callable[[Observation], float]
"""Rates an observation in [0, 1]."""

logger = logging.getLogger(__name__)


def heuristic_importance(observation: Observation) -> float:
    """``observation.importance`` when set, else the package's deterministic heuristic
    (:func:`~langchain_reflective.importance.heuristic_rating` of the turn's text, / 10)."""
    if observation.importance is not None:
        return observation.importance
    return heuristic_rating(observation.text) / 10.0


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _threshold(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"threshold must be a number in [0, 1], got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class _Kept:
    seq: int
    """Commit order within the strategy (ties of ``created_at`` keep their commit order)."""
    observation: Observation


class _ListMemory(BaseMemoryStrategy):
    """Per-namespace lists of observations behind one lock; subclasses set the policy."""

    blocking = False  # in-process and quick: the async twins run on the loop

    def __init__(
        self, *, namespace: str = DEFAULT_NAMESPACE, token_counter: TokenCounter | None = None
    ) -> None:
        self.default_namespace = self.resolve_namespace(namespace)
        self.token_counter = check_token_counter(token_counter)
        self._lock = threading.RLock()
        self._spaces: dict[str, list[_Kept]] = {}
        self._ids: dict[str, set[str]] = {}
        """The ids of each namespace's kept observations (a commit of one is dropped)."""
        self._messages: dict[str, dict[str, int]] = {}
        """The chat messages each namespace's kept observations carry (their keys, see
        :mod:`~langchain_reflective.strategies._recorded`), with how many carry each: a
        message kept already is not stored again (a turn re-run from an earlier checkpoint)."""
        self._seq = 0

    def _prepare(self, observation: Observation) -> Observation:
        """The observation as stored (rated, for importance policies); runs outside the lock."""
        return observation

    async def _aprepare(self, observation: Observation) -> Observation:
        """Async twin of :meth:`_prepare` (default: on the event loop, it is quick)."""
        return self._prepare(observation)

    @abstractmethod
    def _evict(self, kept: list[_Kept]) -> list[_Kept]:
        """Drop what the policy does not keep from ``kept`` (in place, commit order); return
        what was dropped."""

    @abstractmethod
    def _ranked(self, kept: Sequence[_Kept]) -> list[_Kept]:
        """What the context shows, most wanted first (the budget drops the tail)."""

    def _new_part(self, obs: Observation) -> Observation | None:
        """What the namespace does not keep of ``obs``: ``None`` when it keeps its id (a retried
        commit) or each of its messages, else ``obs`` without the messages it keeps. Call it
        with the lock held."""
        ns = self.resolve_namespace(obs.namespace)
        if obs.id in self._ids.get(ns, ()):
            return None
        messages = self._messages.get(ns)
        return without_held(obs, messages) if messages else obs

    def _fresh(self, obs: Observation) -> Observation | None:
        """:meth:`_new_part`, under the lock."""
        with self._lock:
            return self._new_part(obs)

    def _count(self, ns: str, obs: Observation, step: int) -> None:
        """Add ``step`` to the count of each message ``obs`` carries (lock held)."""
        messages = self._messages.setdefault(ns, {})
        for key in observation_keys(obs).values():
            left = messages.get(key, 0) + step
            if left > 0:
                messages[key] = left
            else:
                messages.pop(key, None)

    def _store(self, obs: Observation) -> None:
        ns = self.resolve_namespace(obs.namespace)
        with self._lock:
            new = self._new_part(obs)  # (committed twice at once: kept once)
            if new is None:
                return
            self._seq += 1
            kept = self._spaces.setdefault(ns, [])
            kept.append(_Kept(self._seq, new))
            self._ids.setdefault(ns, set()).add(new.id)
            self._count(ns, new, 1)
            for gone in self._evict(kept):
                self._ids[ns].discard(gone.observation.id)
                self._count(ns, gone.observation, -1)

    def commit(self, observation: Observation) -> None:
        """Store ``observation`` in its namespace, then apply the eviction policy. An
        observation whose id the namespace keeps already (a retried commit) is not stored
        again, nor rated; a message it carries that the namespace keeps already (by its
        thread, id and text: a turn re-run from an earlier checkpoint) is left out of it (an
        edited message, same id and new text, is another message)."""
        obs = self._fresh(self.check_observation(observation))
        if obs is not None:
            self._store(self._prepare(obs))

    async def acommit(self, observation: Observation) -> None:
        """Async twin of :meth:`commit`: a custom scorer rates the turn off the event loop, then
        the turn is stored on it (that takes the lock for microseconds)."""
        obs = self._fresh(self.check_observation(observation))
        if obs is not None:
            self._store(await self._aprepare(obs))

    def context(
        self,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        namespace: str | None = None,
    ) -> list[BaseMessage]:
        """The kept turns that fit in ``budget``, oldest first (see the class docs)."""
        check_budget(budget)
        ns = self.resolve_namespace(namespace)
        with self._lock:
            ranked = self._ranked(list(self._spaces.get(ns, ())))
        order = {id(k.observation): k.seq for k in ranked}
        chosen = fit_observations(
            [k.observation for k in ranked], budget, token_counter=self.token_counter
        )
        chosen.sort(key=lambda o: (o.created_at, order[id(o)]))
        return observation_messages(chosen)

    def purge(self, *, namespace: str | None = None) -> None:
        """Forget the namespace's observations."""
        ns = self.resolve_namespace(namespace)
        with self._lock:
            self._spaces.pop(ns, None)
            self._ids.pop(ns, None)
            self._messages.pop(ns, None)


class VoidMemory(BaseMemoryStrategy):
    """Remembers nothing: every model call sees only its own conversation.

    For stateless agents and one-shot tasks, and as the baseline a memory is compared with.
    ``commit`` still checks its argument, so a wiring mistake shows up early.

    Example:
        .. code-block:: python

            from langchain_reflective import Observation, VoidMemory

            memory = VoidMemory()
            memory.commit(Observation("hello", "hi"))
            assert memory.context([]) == []
    """

    blocking = False

    def commit(self, observation: Observation) -> None:
        """Check ``observation`` and drop it."""
        self.resolve_namespace(self.check_observation(observation).namespace)

    def context(
        self,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        namespace: str | None = None,
    ) -> list[BaseMessage]:
        """Always ``[]``."""
        check_budget(budget)
        self.resolve_namespace(namespace)
        return []

    def purge(self, *, namespace: str | None = None) -> None:
        """Nothing to forget."""
        self.resolve_namespace(namespace)


class WindowMemory(_ListMemory):
    """The last ``capacity`` turns of each namespace (first in, first out).

    Seed 001's ``Stream``. Under a token budget the newest turns are kept. Within one
    conversation thread LangGraph's checkpointer (plus ``trim_messages``) already does this;
    a window memory carries the last turns *across* threads and agents of the same owner.

    Args:
        capacity: turns kept per namespace.
        namespace: the default namespace.
        token_counter: counts the tokens of a list of messages, for the context's ``budget``
            (see :attr:`BaseMemoryStrategy.token_counter`); ``None``: LangChain's approximate
            count.

    Raises:
        ValueError: a ``capacity`` that is not an integer >= 1.
        InvalidMemoryError: a ``token_counter`` that is not a function.

    Example:
        .. code-block:: python

            from langchain_reflective import Observation, WindowMemory

            memory = WindowMemory(capacity=2)
            for n in range(3):
                memory.commit(Observation(f"question {n}", f"answer {n}"))
            assert [m.text for m in memory.context([])][0] == "question 1"
    """

    def __init__(
        self,
        capacity: int = 20,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        token_counter: TokenCounter | None = None,
    ) -> None:
        super().__init__(namespace=namespace, token_counter=token_counter)
        self.capacity = _positive("capacity", capacity)

    def trace_metadata(self) -> dict[str, Any]:
        return {**super().trace_metadata(), "capacity": self.capacity}

    def _evict(self, kept: list[_Kept]) -> list[_Kept]:
        gone = kept[: max(0, len(kept) - self.capacity)]
        del kept[: len(gone)]
        return gone

    def _ranked(self, kept: Sequence[_Kept]) -> list[_Kept]:
        return list(reversed(kept))  # newest first


def _checked_scorer(scorer: object) -> ImportanceScorer | BaseImportanceScorer:
    """``scorer`` if it can rate a turn (``None``: the heuristic).

    Raises:
        TypeError: a scorer that is neither a sync callable nor a ``BaseImportanceScorer``.
    """
    if scorer is None:
        return heuristic_importance
    if isinstance(scorer, BaseImportanceScorer):
        return scorer
    if inspect.isclass(scorer):
        raise TypeError(
            f"scorer must be a function (Observation) -> float in [0, 1] or a "
            f"BaseImportanceScorer such as LLMImportanceScorer(model): got the class "
            f"{scorer.__name__}, pass an instance"
        )
    call = getattr(scorer, "__call__", None)  # noqa: B004 (an async __call__, too)
    if callable(scorer) and not (
        inspect.iscoroutinefunction(scorer) or inspect.iscoroutinefunction(call)
    ):
        return cast("ImportanceScorer", scorer)
    what = "an async function" if callable(scorer) else type(scorer).__name__
    raise TypeError(
        "scorer must be a function (Observation) -> float in [0, 1] or a BaseImportanceScorer "
        f"such as LLMImportanceScorer(model) (its ascore is used by acommit); got {what}"
    )


def _unit(value: object) -> float:
    """A scorer's rating as a float, clamped to [0, 1]: any number ``float()`` takes (an
    ``int``, a ``Decimal``, a ``Fraction``, a numpy scalar or 0-d array), but not a bool (nor
    a numpy one), a string or bytes, an array of more than a number, or NaN or infinity.

    Raises:
        InvalidMemoryError: not a finite number.
    """
    number = math.nan
    dtype = getattr(value, "dtype", None)
    if not (
        isinstance(value, bool | str | bytes | bytearray)
        or getattr(dtype, "kind", None) == "b"
        or getattr(value, "ndim", 0) != 0
    ):
        with contextlib.suppress(TypeError, ValueError, OverflowError):
            number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number):
        raise InvalidMemoryError(f"the scorer returned {value!r}, not a number in [0, 1]")
    return min(1.0, max(0.0, number))


class _RatedMemory(_ListMemory):
    """A list memory whose turns are rated by ``scorer`` before they are stored.

    A scorer that fails (raises, or returns anything but a finite number) does not lose the
    turn: it is kept with :func:`heuristic_importance` (its own importance when set), and a
    warning says so.
    """

    def __init__(
        self,
        *,
        scorer: ImportanceScorer | BaseImportanceScorer | None,
        namespace: str,
        token_counter: TokenCounter | None,
    ) -> None:
        super().__init__(namespace=namespace, token_counter=token_counter)
        self.scorer = _checked_scorer(scorer)

    def _fallback(self, observation: Observation, error: Exception) -> Observation:
        value = heuristic_importance(observation)
        logger.warning(
            "%s: the importance scorer failed on observation %s (%s: %s); it is kept with "
            "importance %.2f (%s)",
            type(self).__name__,
            observation.id,
            type(error).__name__,
            error,
            value,
            "its own" if observation.importance is not None else "the heuristic's",
        )
        return replace(observation, importance=value)

    def _prepare(self, observation: Observation) -> Observation:
        return run_sync(self._rate(observation))

    async def _aprepare(self, observation: Observation) -> Observation:
        return await run_async(self._rate(observation))

    def _rate(self, observation: Observation) -> Flow[Observation]:
        """The observation with its importance, for both worlds: a function scorer may call a
        model, so the async twin runs it in a worker thread (the default heuristic, a regular
        expression or two, on the loop); a ``BaseImportanceScorer`` is awaited."""
        scorer = self.scorer
        try:
            if not isinstance(scorer, BaseImportanceScorer):
                on_loop = scorer is heuristic_importance
                value = yield Op(scorer, None if on_loop else threaded(scorer), (observation,))
            elif observation.importance is not None:
                return observation  # rated already: no model call
            else:
                (result,) = yield Op(scorer.score, scorer.ascore, ([observation.text],))
                value = result.value
            return replace(observation, importance=_unit(value))
        except Exception as exc:  # the turn is kept all the same (see the class docs)
            return self._fallback(observation, exc)


class ImportanceMemory(_RatedMemory):
    """The ``max_size`` most important turns of each namespace.

    A new turn is rated (``scorer``; default: its ``importance``, else the package's
    heuristic), then the least important turn is evicted when the namespace is full (the
    oldest among equals). The context shows the kept turns oldest first; under a token budget
    the most important are kept.

    Args:
        max_size: turns kept per namespace.
        scorer: rates an observation in [0, 1]; its result is stored as the importance. A
            function of the observation, which may call a model (``acommit`` runs it in a
            worker thread; the default heuristic runs on the event loop), or a
            ``BaseImportanceScorer`` such as ``LLMImportanceScorer(model)`` (it rates the
            turn's text when the turn has no importance yet; ``acommit`` awaits its
            ``ascore``). A scorer that fails does not lose the turn: it is kept with the
            heuristic's importance, and a warning is logged.
        namespace: the default namespace.
        token_counter: counts the tokens of a list of messages, for the context's ``budget``
            (see :attr:`BaseMemoryStrategy.token_counter`); ``None``: LangChain's approximate
            count.

    Raises:
        TypeError: a ``scorer`` that is neither (an async function, an object that is not
            callable).
        ValueError: a ``max_size`` that is not an integer >= 1.
        InvalidMemoryError: a ``token_counter`` that is not a function.
    """

    def __init__(
        self,
        max_size: int = 20,
        *,
        scorer: ImportanceScorer | BaseImportanceScorer | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        token_counter: TokenCounter | None = None,
    ) -> None:
        super().__init__(scorer=scorer, namespace=namespace, token_counter=token_counter)
        self.max_size = _positive("max_size", max_size)

    def trace_metadata(self) -> dict[str, Any]:
        return {**super().trace_metadata(), "max_size": self.max_size}

    def _evict(self, kept: list[_Kept]) -> list[_Kept]:
        gone: list[_Kept] = []
        while len(kept) > self.max_size:
            gone.append(min(kept, key=_importance_then_seq))
            kept.remove(gone[-1])
        return gone

    def _ranked(self, kept: Sequence[_Kept]) -> list[_Kept]:
        return sorted(kept, key=_importance_then_seq, reverse=True)


def _importance_then_seq(kept: _Kept) -> tuple[float, int]:
    return (kept.observation.importance or 0.0, kept.seq)


class HybridMemory(_RatedMemory):
    """The recent window plus every older turn above an importance threshold, once each.

    Seed 001's hybrid pattern: the last ``capacity`` turns are always kept; a turn rated at
    least ``threshold`` is also kept after it leaves the window (at most ``max_important`` of
    them, the least important evicted first). A turn in both appears once. Under a token
    budget the recent turns come first (newest first), then the important ones (most important
    first).

    Args:
        capacity: recent turns kept per namespace.
        threshold: importance at which a turn is kept beyond the window.
        max_important: important turns kept per namespace beyond the window.
        scorer: rates an observation in [0, 1] (default: its importance, else the heuristic);
            what it may be, and what happens when it fails, as for :class:`ImportanceMemory`.
        namespace: the default namespace.
        token_counter: counts the tokens of a list of messages, for the context's ``budget``
            (see :attr:`BaseMemoryStrategy.token_counter`); ``None``: LangChain's approximate
            count.

    Raises:
        TypeError: a ``scorer`` that is neither a sync function nor a
            ``BaseImportanceScorer`` (as for :class:`ImportanceMemory`).
        ValueError: a ``capacity`` or ``max_important`` that is not an integer >= 1, a
            ``threshold`` outside [0, 1].
        InvalidMemoryError: a ``token_counter`` that is not a function.
    """

    def __init__(
        self,
        capacity: int = 10,
        *,
        threshold: float = 0.7,
        max_important: int = 50,
        scorer: ImportanceScorer | BaseImportanceScorer | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        token_counter: TokenCounter | None = None,
    ) -> None:
        super().__init__(scorer=scorer, namespace=namespace, token_counter=token_counter)
        self.capacity = _positive("capacity", capacity)
        self.threshold = _threshold(threshold)
        self.max_important = _positive("max_important", max_important)

    def trace_metadata(self) -> dict[str, Any]:
        return {
            **super().trace_metadata(),
            "capacity": self.capacity,
            "threshold": self.threshold,
            "max_important": self.max_important,
        }

    def _evict(self, kept: list[_Kept]) -> list[_Kept]:
        if len(kept) <= self.capacity:
            return []
        older = kept[: -self.capacity]
        keep = [k for k in older if (k.observation.importance or 0.0) >= self.threshold]
        if len(keep) > self.max_important:
            keep = sorted(keep, key=_importance_then_seq)[-self.max_important :]
        kept_ids = {k.seq for k in keep}
        kept[: len(older)] = [k for k in older if k.seq in kept_ids]
        return [k for k in older if k.seq not in kept_ids]

    def _ranked(self, kept: Sequence[_Kept]) -> list[_Kept]:
        recent = list(kept[-self.capacity :])
        important = sorted(kept[: -self.capacity], key=_importance_then_seq, reverse=True)
        return [*reversed(recent), *important]
