"""Token budgets for strategy contexts, on LangChain's own token counting.

Tokens are counted with ``langchain_core.messages.utils.count_tokens_approximately`` (about 4
characters per token plus a few per message), the counter LangChain's ``trim_messages`` and
LangGraph's summarisation use; it adds up per message, so a context can be filled greedily.
Pass another ``token_counter`` (e.g. a chat model's ``get_num_tokens_from_messages``) for
exact counts; a strategy's own is its
:attr:`~langchain_reflective.strategies.base.BaseMemoryStrategy.token_counter`.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterable, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, trim_messages

from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.strategies.base import (
    Observation,
    TokenCounter,
    check_budget,
    count_tokens,
    counter_name,
)

__all__ = [
    "TokenCounter",
    "count_tokens",
    "fit_groups",
    "fit_observations",
    "observation_messages",
    "trim_to_budget",
]


def count_checked(token_counter: TokenCounter, messages: Sequence[BaseMessage]) -> int:
    """``token_counter(messages)``, an integer >= 0 (any integer type: a numpy one too).

    What the counter raises is raised as it is (a tokenizer that cannot load, a remote counter
    that times out: the caller's to handle or retry, not a fault of the memories).

    Raises:
        InvalidMemoryError: the counter returned anything but an integer >= 0 (a float, a
            bool, a negative number, ``None``); the message names the counter.
    """
    value = token_counter(messages)
    count = -1
    if not isinstance(value, bool):
        with contextlib.suppress(TypeError):
            count = operator.index(value)
    if count < 0:
        raise InvalidMemoryError(
            f"token_counter {counter_name(token_counter)} returned {value!r}, not a token "
            "count: it must return an integer >= 0 for a list of messages"
        )
    return count


def observation_messages(observations: Iterable[Observation]) -> list[BaseMessage]:
    """Observations as the messages of their turns: the user's, then the agent's.

    An empty query or reply gives no message. Message ids are derived from the observation's
    id, so a context can be traced back to what was committed.
    """
    out: list[BaseMessage] = []
    for obs in observations:
        if obs.query.strip():
            out.append(HumanMessage(obs.query, id=f"memory-{obs.id}-query"))
        if obs.reply.strip():
            out.append(AIMessage(obs.reply, id=f"memory-{obs.id}-reply"))
    return out


def fit_observations(
    ranked: Iterable[Observation],
    budget: int | None,
    *,
    token_counter: TokenCounter = count_tokens,
) -> list[Observation]:
    """The observations that fit in ``budget`` tokens, admitted whole in ``ranked`` order.

    Each observation (its query and reply messages) is admitted if it still fits; one that
    does not is skipped and smaller ones after it may still be admitted, so the budget is
    used well and never exceeded. ``None`` admits everything.

    Args:
        ranked: candidates, most wanted first (newest, most important, most relevant, ...).
        budget: tokens available (``None``: no limit).
        token_counter: counts the tokens of a list of messages.

    Returns:
        The admitted observations, in ``ranked`` order.

    Raises:
        InvalidMemoryError: a negative budget, or a counter that returns no count.
    """
    items = list(ranked)
    admitted = fit_groups([observation_messages([obs]) for obs in items], budget, token_counter)
    return [items[i] for i in admitted]


def fit_groups(
    groups: Sequence[Sequence[BaseMessage]],
    budget: int | None,
    token_counter: TokenCounter = count_tokens,
) -> list[int]:
    """Indexes of the message groups admitted whole, in order, while they fit in ``budget``
    (a group that does not fit is skipped; ``None`` admits all). See :func:`fit_observations`.

    Raises:
        InvalidMemoryError: a negative budget, or a counter that returns no count.
    """
    limit = check_budget(budget)
    if limit is None:
        return list(range(len(groups)))
    left = limit
    chosen: list[int] = []
    for i, group in enumerate(groups):
        if left <= 0:
            break
        cost = count_checked(token_counter, group)
        if cost <= left:
            chosen.append(i)
            left -= cost
    return chosen


def trim_to_budget(
    messages: Sequence[BaseMessage],
    budget: int | None,
    *,
    token_counter: TokenCounter = count_tokens,
) -> list[BaseMessage]:
    """The newest messages of ``messages`` that fit in ``budget`` tokens (LangChain's
    ``trim_messages`` with ``strategy="last"``), in whole turns, for strategies that build
    messages directly.

    A turn is a ``HumanMessage`` and the messages after it up to the next one: when the cut
    falls inside a turn, the rest of that turn is left out too, so no answer is kept without
    its question. (LangChain's ``start_on="human"`` would also drop what comes before the
    first question when nothing is cut, such as a lone answer or a note.)

    Raises:
        InvalidMemoryError: a negative budget.
    """
    limit = check_budget(budget)
    if limit is None:
        return list(messages)
    if limit == 0 or not messages:
        return []
    kept = trim_messages(
        list(messages),
        max_tokens=limit,
        token_counter=token_counter,
        strategy="last",
        allow_partial=False,
    )
    if len(kept) < len(messages) and kept and not isinstance(kept[0], HumanMessage):
        question = next((i for i, m in enumerate(kept) if isinstance(m, HumanMessage)), None)
        kept = [] if question is None else kept[question:]
    return kept
