"""``ReflectiveMemoryStrategy``: a :class:`ReflectiveMemory` behind the strategy interface."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any, ClassVar

from langchain_core.messages import BaseMessage, SystemMessage

from langchain_reflective._llm import Flow, Op, run_async, run_sync
from langchain_reflective.errors import DuplicateIdError
from langchain_reflective.memory import ReflectiveMemory
from langchain_reflective.records import MemoryRecord, clip_text, new_memory_id
from langchain_reflective.strategies._recorded import message_memory_id, observation_keys
from langchain_reflective.strategies.base import (
    BaseMemoryStrategy,
    Observation,
    TokenCounter,
    check_budget,
    check_token_counter,
    counts_in_thread,
    latest_query,
)
from langchain_reflective.strategies.budget import count_checked, count_tokens
from langchain_reflective.stream import ScoredMemory

__all__ = ["ReflectiveMemoryStrategy"]

_Parts = tuple[list[MemoryRecord], list[MemoryRecord], list[ScoredMemory]]
_MESSAGE_ID_KEYS = {"user": "query_message_id", "assistant": "reply_message_id"}
_SCOPE = "ReflectiveMemoryStrategy"
_STEPS = 64
"""How many renders :meth:`ReflectiveMemoryStrategy._fit` steps down by the overshoot before it
bisects, with the approximate counter (usually a few; a budget near the size of the block
without memory lines steps a token or two at a time: 63 seen, and the steps give the lines
contexts always had)."""
_STEPS_COUNTED = 8
"""The same with a counter of the user's, which may be a request each (a provider's token
count): a few steps, then the bisection (about ``log2(budget)`` counts more). When a step fits,
the counts the steps did not take grow that fit (:meth:`ReflectiveMemoryStrategy._bisect`): this
many counts in all. A text rendered again is not counted again."""


class _Renders:
    """The renders of one context's working context at line budgets, and their counts by the
    strategy's counter: each text is counted once (a render is local, a count of the user's
    counter may be a provider's request, and many line budgets render the same text)."""

    def __init__(self, strategy: ReflectiveMemoryStrategy, parts: _Parts) -> None:
        self._strategy = strategy
        self._parts = parts
        self._costs: dict[str, int] = {}

    def message(self, lines: int) -> SystemMessage:
        """The render with ``lines`` tokens of memory lines (not counted)."""
        return SystemMessage(self._strategy.memory.render_context(*self._parts, budget=lines))

    def counted(self, message: SystemMessage) -> bool:
        """Whether ``message``'s text was counted already (its cost needs no count)."""
        return message.text in self._costs

    @property
    def counts(self) -> int:
        """How many times the counter was called."""
        return len(self._costs)

    def cost(self, message: SystemMessage) -> int:
        """``message``'s tokens by the strategy's counter (counted once per text)."""
        cost = self._costs.get(message.text)
        if cost is None:
            cost = count_checked(self._strategy.token_counter, [message])
            self._costs[message.text] = cost
        return cost

    def __call__(self, lines: int) -> tuple[SystemMessage, int]:
        """The render with ``lines`` tokens of memory lines, and its cost."""
        message = self.message(lines)
        return message, self.cost(message)


class ReflectiveMemoryStrategy(BaseMemoryStrategy):
    """A :class:`~langchain_reflective.memory.ReflectiveMemory` as a memory strategy.

    :meth:`commit` stores the user's message and the agent's answer as two ``observation``
    memories (``user_prefix``/``assistant_prefix`` + text, metadata ``role``, ``source``,
    ``thread_id``, ``message_id``), which may start a background reflection. :meth:`context`
    returns one ``SystemMessage``: the memory's working context (top insights, recent
    observations, memories relevant to the latest user message), already fenced as data and
    cut to the budget. The memory keeps its own API; ``MemoryMiddleware(memory)`` wraps a
    ``ReflectiveMemory`` in this class.

    Args:
        memory: the reflective memory.
        user_prefix: prefix of a stored user message.
        assistant_prefix: prefix of a stored answer.
        token_counter: counts the tokens of a list of messages, for the context's ``budget``
            (e.g. a chat model's ``get_num_tokens_from_messages``); ``None``: LangChain's
            approximate count. See :attr:`BaseMemoryStrategy.token_counter`.

    Raises:
        TypeError: ``memory`` is not a ``ReflectiveMemory``.
        InvalidMemoryError: ``token_counter`` is not a function (``context`` raises it too
            when the counter returns anything but an integer >= 0).
    """

    context_run_name: ClassVar[str] = "reflective_memory_context"

    def __init__(
        self,
        memory: ReflectiveMemory,
        *,
        user_prefix: str = "User: ",
        assistant_prefix: str = "Assistant: ",
        token_counter: TokenCounter | None = None,
    ) -> None:
        if not isinstance(memory, ReflectiveMemory):
            raise TypeError(f"memory must be a ReflectiveMemory, got {type(memory).__name__}")
        self.memory = memory
        self.user_prefix = user_prefix
        self.assistant_prefix = assistant_prefix
        self.token_counter = check_token_counter(token_counter)
        self.default_namespace = memory.stream.namespace

    def trace_metadata(self) -> dict[str, Any]:
        scoring = self.memory.stream.scoring
        return {
            **super().trace_metadata(),
            "k": self.memory.config.retrieve_k,
            "scoring": scoring.name,
            "weights": {
                "relevance": scoring.relevance_weight,
                "lexical": scoring.lexical_weight,
                "recency": scoring.recency_weight,
                "importance": scoring.importance_weight,
            },
        }

    # -- commit --------------------------------------------------------------------------------

    def _add_args(self, observation: Observation) -> dict[str, Any]:
        obs = self.check_observation(observation)
        shared = {k: v for k, v in obs.metadata.items() if k not in set(_MESSAGE_ID_KEYS.values())}
        texts: list[str] = []
        metadatas: list[dict[str, Any]] = []
        ids: list[str] = []
        ns = self.resolve_namespace(obs.namespace)
        keys = observation_keys(obs)
        for text, role, prefix in (
            (obs.query, "user", self.user_prefix),
            (obs.reply, "assistant", self.assistant_prefix),
        ):
            if not text.strip():
                continue
            texts.append(clip_text(f"{prefix}{text.strip()}"))  # a prefix on a full text
            meta: dict[str, Any] = {"role": role, **shared, "observation_id": obs.id}
            message_id = obs.metadata.get(_MESSAGE_ID_KEYS[role])
            if message_id:
                meta["message_id"] = message_id
            metadatas.append(meta)
            # Never one id twice in the batch (the store refuses the whole batch, and the turn
            # is lost): a part with a message id gets the id derived from its key, which names
            # the part (the question and the answer may share a message id), else a new one.
            key = keys.get("query" if role == "user" else "reply")
            ids.append(message_memory_id(_SCOPE, ns, key) if key else new_memory_id())
        return {
            "texts": texts,
            "namespace": ns,
            "importances": obs.importance,
            "metadatas": metadatas,
            "now": obs.created_at,
            "ids": ids,
        }

    @staticmethod
    def _one_by_one(args: dict[str, Any]) -> list[dict[str, Any]]:
        """``args`` as one enqueue per memory (after a refused batch: one was queued already)."""
        return [
            {**args, "texts": [t], "metadatas": [m], "ids": [i]}
            for t, m, i in zip(args["texts"], args["metadatas"], args["ids"], strict=True)
        ]

    def commit(self, observation: Observation) -> None:
        """Write the turn's user message and answer as *pending* observations: one commit, no
        embedding and no LLM call (see :meth:`ReflectiveMemory.enqueue` for the guarantee). A
        message the namespace holds already (by its thread, id and text: a turn re-run from an
        earlier checkpoint) is refused by the store and left out; an edited message (same id,
        new text) is another message, queued with its new answer."""
        run_sync(self._commit(observation))

    async def acommit(self, observation: Observation) -> None:
        """Async twin of :meth:`commit`."""
        await run_async(self._commit(observation))

    def _commit(self, observation: Observation) -> Flow[None]:
        """:meth:`commit`'s flow, for both worlds."""
        enqueue, aenqueue = self.memory.enqueue, self.memory.aenqueue
        args = self._add_args(observation)
        try:
            yield Op(enqueue, aenqueue, (), args)
        except DuplicateIdError:  # (a part is held: queue the others, one by one)
            for one in self._one_by_one(args):
                with contextlib.suppress(DuplicateIdError):
                    yield Op(enqueue, aenqueue, (), one)

    # -- context -------------------------------------------------------------------------------

    def _fit(self, parts: _Parts, budget: int | None) -> list[BaseMessage]:
        """The working context as one system message of at most ``budget`` tokens by
        :attr:`token_counter` (``[]`` when not even the block without memory lines fits).

        The memory lines are budgeted at 4 characters per token: from the whole budget, each
        render that does not fit gives up its overshoot (a few renders with a counter near
        that). With a counter far from it the steps may overshoot zero (one token per
        character) or be many: then the most lines that fit are bisected. Every render is
        counted (each text once); none over the budget is returned. With the default counter
        the result is the steps' whenever they find one (as before counters could be chosen);
        where they overshot zero, the bisection may still find a fit the steps missed (the
        block without memory lines, saying memories exist but none fit, instead of no block).
        With a counter of the user's, a fit the steps found is grown with the counts they left
        (:meth:`_bisect`).
        """
        if budget is None:
            return [SystemMessage(self.memory.render_context(*parts))]
        render = _Renders(self, parts)
        approximate = self.token_counter is count_tokens
        lines = budget  # token budget of the memory lines; the fence and titles cost extra
        high = budget  # the most lines that may still fit
        for _ in range(_STEPS if approximate else _STEPS_COUNTED):
            message, cost = render(lines)
            if cost <= budget:
                if approximate:  # (the contexts it always gave)
                    return [message]
                # grown with the counts the steps left: a step gives up its overshoot in
                # tokens, but lines go whole, so with a counter of ~3 characters per token a
                # step may drop a line or two more than needed (never more counts than the
                # steps alone could have taken)
                return [self._bisect(render, budget, lines, high, message, _STEPS_COUNTED)]
            high = lines - 1
            lines -= cost - budget  # (fewer each time: the cost is over the budget)
            if lines < 0:
                break
        if high < 0:
            return []
        best, cost = render(0)
        if cost > budget:
            return []  # not even the block without memory lines fits
        return [self._bisect(render, budget, 0, high, best)]

    @staticmethod
    def _bisect(
        render: _Renders,
        budget: int,
        low: int,
        high: int,
        fits: SystemMessage,
        max_counts: int | None = None,
    ) -> SystemMessage:
        """The render of the most memory lines in ``low..high`` that fits ``budget``
        (``fits``: the render of ``low``, which fits; ``high``: one below the last render that
        did not), counting at most ``max_counts`` texts in all (``None``: no limit; at the
        limit, the largest fit found so far). A fit shorter than the best so far (a long
        memory cut at another length) narrows the bisection but is not taken."""
        best = fits
        while low < high:
            middle = (low + high + 1) // 2
            message = render.message(middle)
            if (
                max_counts is not None
                and not render.counted(message)
                and render.counts >= max_counts
            ):
                break  # (no count left)
            if render.cost(message) <= budget:
                low = middle
                if len(message.text) >= len(best.text):
                    best = message
            else:
                high = middle - 1
        return best

    def context(
        self,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        namespace: str | None = None,
    ) -> list[BaseMessage]:
        """The working context for the latest user message, as one fenced ``SystemMessage``.

        ``budget=None`` uses the memory's ``config.token_budget`` for the memory lines.
        """
        check_budget(budget)
        ns = self.resolve_namespace(namespace)
        parts = self.memory.context_parts(latest_query(messages), namespace=ns)
        return self._fit(parts, budget)

    async def acontext(
        self,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        namespace: str | None = None,
    ) -> list[BaseMessage]:
        """Async twin of :meth:`context`."""
        check_budget(budget)
        ns = self.resolve_namespace(namespace)
        parts = await self.memory.acontext_parts(latest_query(messages), namespace=ns)
        if counts_in_thread(self.token_counter, budget):  # the user's counter may block
            return await asyncio.to_thread(self._fit, parts, budget)
        return self._fit(parts, budget)

    # -- purge ---------------------------------------------------------------------------------

    def purge(self, *, namespace: str | None = None) -> None:
        """Delete every memory of the namespace (after its pending reflections finish)."""
        self.memory.purge(namespace=self.resolve_namespace(namespace))

    async def apurge(self, *, namespace: str | None = None) -> None:
        """Async twin of :meth:`purge`."""
        await asyncio.to_thread(self.purge, namespace=namespace)
