"""``SemanticMemory``: retrieval-augmented memory over a :class:`MemoryStream` (seed 001's RAG)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage

from langchain_reflective._llm import Flow, Op, run_async, run_sync
from langchain_reflective.errors import DuplicateIdError
from langchain_reflective.records import MemoryRecord, clip_text, storable_id
from langchain_reflective.strategies._recorded import (
    message_keys,
    message_memory_id,
    observation_keys,
    without_held,
)
from langchain_reflective.strategies.base import (
    BaseMemoryStrategy,
    Observation,
    TokenCounter,
    check_budget,
    check_token_counter,
    counts_in_thread,
    latest_query,
)
from langchain_reflective.strategies.budget import fit_groups
from langchain_reflective.stream import MemoryStream

__all__ = ["SemanticMemory"]

_SCOPE = "SemanticMemory"
"""Whose memory ids :func:`message_memory_id` derives (another strategy on the same stream
derives others)."""
_ATTEMPTS = 3
"""Tries to store a turn: each refusal means one of its messages was stored meanwhile, which
the next try leaves out (a turn carries two)."""


def _messages(record: MemoryRecord) -> list[BaseMessage]:
    meta = record.metadata
    query, reply = meta.get("query"), meta.get("reply")
    if "observation_id" not in meta or not isinstance(query, str) or not isinstance(reply, str):
        # written by someone else (a tool, a reflection): shown as a note
        return [ChatMessage(content=record.text, role="note", id=f"memory-{record.id}")]
    out: list[BaseMessage] = []
    if query.strip():
        out.append(HumanMessage(query, id=f"memory-{meta['observation_id']}-query"))
    if reply.strip():
        out.append(AIMessage(reply, id=f"memory-{meta['observation_id']}-reply"))
    return out


class SemanticMemory(BaseMemoryStrategy):
    """The turns most relevant to the latest user message, retrieved from a memory stream.

    Each committed turn becomes one ``observation`` memory of the stream (its text is the
    query and the reply; its embedding comes from the stream's embeddings; its importance is
    the observation's, or the stream's importance scorer rates it). The context retrieves the
    ``k`` best memories for the latest user message with the stream's ranking (relevance,
    recency, importance; see ``ScoringConfig``), or the ``k`` newest when there is no user
    message, admits them best first within the budget, and shows them oldest first. Memories
    written by others in the same namespace (tools, reflections) are shown as notes.

    The memory is durable when the stream has a ``path``; namespaces are the stream's. Give it
    a stream or namespaces of its own: :meth:`purge` deletes every memory of a namespace. A
    turn is stored under its observation's id, so committing it again (a retry after a
    cancelled ``acommit`` whose write went through) stores nothing. A turn of the agent
    middleware is stored under an id derived from the namespace, the thread, the id and the
    text of its first message instead, and a message the namespace holds already is left out
    of it: a thread re-run from an earlier checkpoint (a "regenerate") stores the new answer
    alone, not the user's message again; an edited message (same id, new text) is stored with
    its new answer (turns stored before this version have other ids: the first regenerate of
    one of them still stores the message again, once).

    Args:
        stream: the memory stream to write to and retrieve from.
        k: memories retrieved per context.
        token_counter: counts the tokens of a list of messages, for the context's ``budget``
            (e.g. a chat model's ``get_num_tokens_from_messages``); ``None``: LangChain's
            approximate count. See :attr:`BaseMemoryStrategy.token_counter`.

    Raises:
        TypeError: ``stream`` is not a ``MemoryStream``.
        ValueError: ``k`` is not an integer >= 1.
        InvalidMemoryError: ``token_counter`` is not a function (``context`` raises it too
            when the counter returns anything but an integer >= 0).

    Example:
        .. code-block:: python

            from langchain_core.embeddings import DeterministicFakeEmbedding
            from langchain_reflective import MemoryStream, Observation, SemanticMemory

            memory = SemanticMemory(MemoryStream(DeterministicFakeEmbedding(size=64)), k=3)
            memory.commit(Observation("My cat is called Miso", "What a nice name!"))
    """

    def __init__(
        self, stream: MemoryStream, *, k: int = 4, token_counter: TokenCounter | None = None
    ) -> None:
        if not isinstance(stream, MemoryStream):
            raise TypeError(f"stream must be a MemoryStream, got {type(stream).__name__}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        self.stream = stream
        self.k = k
        self.token_counter = check_token_counter(token_counter)
        self.default_namespace = stream.namespace

    def trace_metadata(self) -> dict[str, Any]:
        return {**super().trace_metadata(), "k": self.k, "scoring": self.stream.scoring.name}

    def _message_ids(self, obs: Observation) -> list[str]:
        """The memory ids of the messages ``obs`` carries (see :func:`message_memory_id`)."""
        ns = self.resolve_namespace(obs.namespace)
        return [message_memory_id(_SCOPE, ns, key) for key in observation_keys(obs).values()]

    @staticmethod
    def _held(records: Sequence[MemoryRecord]) -> set[str]:
        """The keys of the messages ``records`` hold (as :func:`message_keys`)."""
        held: set[str] = set()
        for record in records:
            meta = record.metadata
            query, reply = meta.get("query"), meta.get("reply")
            if isinstance(query, str) and isinstance(reply, str):
                held.update(message_keys(meta, query, reply).values())
        return held

    def _add_args(self, obs: Observation) -> dict[str, Any]:
        """The stream's ``add`` arguments of ``obs``: under the memory id of its first message
        when it carries any, else under its own id."""
        first = self._message_ids(obs)[:1]
        return {
            "texts": [clip_text(obs.text)],  # query + reply may be too long together
            "importances": obs.importance,
            "metadatas": {
                **obs.metadata,
                "observation_id": obs.id,
                "query": obs.query,
                "reply": obs.reply,
            },
            "namespace": self.resolve_namespace(obs.namespace),
            "now": obs.created_at,
            "ids": first or ([obs.id] if storable_id(obs.id) else None),
        }

    def commit(self, observation: Observation) -> None:
        """Store the turn as one memory of the stream (embedded, rated when unrated), under
        the observation's id: a turn committed again (a retry) is not stored twice.

        A turn of the agent middleware (its metadata names its messages) is stored under the
        id of its first message instead, and a message the namespace holds already (a turn
        re-run from an earlier checkpoint: the same user message, a new answer) is left out
        of it: one lookup by id first, and the stream refuses a copy stored meanwhile.
        """
        run_sync(self._commit(observation))

    async def acommit(self, observation: Observation) -> None:
        """Async twin of :meth:`commit`."""
        await run_async(self._commit(observation))

    def _commit(self, observation: Observation) -> Flow[None]:
        """:meth:`commit`'s flow, for both worlds."""
        obs: Observation | None = self.check_observation(observation)
        for _ in range(_ATTEMPTS):
            if obs is None:
                return
            mine = self._message_ids(obs)
            if mine:
                ns = self.resolve_namespace(obs.namespace)
                held = yield Op(self.stream.get, self.stream.aget, (mine,), {"namespace": ns})
                obs = without_held(obs, self._held(held))
                if obs is None:
                    return
            try:
                yield Op(self.stream.add, self.stream.aadd, (), self._add_args(obs))
                return
            except DuplicateIdError:
                if not mine:
                    return  # stored already (by this call's first attempt, or a concurrent one)
                # a message stored meanwhile: look again

    def _render(self, ranked: Sequence[MemoryRecord], budget: int | None) -> list[BaseMessage]:
        groups = [_messages(r) for r in ranked]
        chosen = sorted(
            fit_groups(groups, budget, self.token_counter), key=lambda i: ranked[i].created_at
        )
        return [m for i in chosen for m in groups[i]]

    def context(
        self,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        namespace: str | None = None,
    ) -> list[BaseMessage]:
        """The ``k`` most relevant turns that fit in ``budget``, oldest first."""
        check_budget(budget)
        ns = self.resolve_namespace(namespace)
        query = latest_query(messages)
        if query is None:
            ranked = list(reversed(self.stream.recent(self.k, namespace=ns)))
        else:
            ranked = [h.record for h in self.stream.retrieve(query, k=self.k, namespace=ns)]
        return self._render(ranked, budget)

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
        query = latest_query(messages)
        if query is None:
            recent = await asyncio.to_thread(self.stream.recent, self.k, namespace=ns)
            ranked = list(reversed(recent))
        else:
            hits = await self.stream.aretrieve(query, k=self.k, namespace=ns)
            ranked = [h.record for h in hits]
        if counts_in_thread(self.token_counter, budget):  # the user's counter may block
            return await asyncio.to_thread(self._render, ranked, budget)
        return self._render(ranked, budget)

    def purge(self, *, namespace: str | None = None) -> None:
        """Delete every memory of the namespace from the stream."""
        self.stream.purge(namespace=self.resolve_namespace(namespace))
