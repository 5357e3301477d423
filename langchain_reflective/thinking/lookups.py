"""Finding the turns a :class:`~langchain_reflective.thinking.context.ContextMemory` stored: their
ids, lookups by turn number and by id, the summaries to inject into a prompt, and hybrid search
and recall over snapshots and summaries (see ``context.py`` for how turns are stored)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard, cast

from langchain_reflective._llm import Flow, Op, run_async, run_sync
from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.records import MemoryRecord, storable_id
from langchain_reflective.stream import RetrievalFilter
from langchain_reflective.thinking.turns import (
    _KINDS,
    SNAPSHOT_KIND,
    SUMMARY_KIND,
    ContextSnapshot,
    ContextSummary,
    RecallResult,
)

if TYPE_CHECKING:
    from langchain_reflective.stream import MemoryStream
    from langchain_reflective.thinking.state import SummaryDict

__all__ = ["ContextLookups"]


_PROBE = 8
"""Turn numbers after the newest snapshot's that :meth:`ContextLookups.last_turn` looks up in
one read."""


def _suffix(namespace: str) -> str:
    return hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:10]


def _is_turn(turn: object) -> TypeGuard[int]:
    return isinstance(turn, int) and not isinstance(turn, bool) and turn >= 1


def _positive_turn(turn: object) -> int:
    if not _is_turn(turn):
        raise InvalidMemoryError(f"a turn number must be a positive integer, got {turn!r}")
    return turn


def _strings(value: str | Iterable[Any]) -> list[Any]:
    """A list of items given as a list, or as one string (one item, not its characters)."""
    return [value] if isinstance(value, str) else list(value)


def _turn_list(value: int | Iterable[Any]) -> list[Any]:
    """Turn numbers given as a list, or as one number; a string is refused (its characters
    were taken as the numbers)."""
    if isinstance(value, (str, bytes)):
        raise InvalidMemoryError(
            f"turn_numbers must be a list of turn numbers (integers), got the string {value!r}"
        )
    return [value] if isinstance(value, int) else list(value)


class ContextLookups:
    """The reads of :class:`~langchain_reflective.thinking.context.ContextMemory`: turn ids,
    lookups, accumulated summaries, search and recall over its stream."""

    stream: MemoryStream
    """The memory stream holding the records."""
    search_min_relevance: float
    """A keyword search keeps a match only if it shares a word with the query or its meaning is
    at least this close (cosine)."""

    # -- ids -------------------------------------------------------------------------------

    def namespace(self, namespace: str | None = None) -> str:
        """The namespace a call with ``namespace`` uses (default: the stream's)."""
        return self.stream.resolve_namespace(namespace)

    def context_id(self, turn: int, *, namespace: str | None = None) -> str:
        """The snapshot id of ``turn`` in the namespace."""
        return f"ctx_{_positive_turn(turn)}_{_suffix(self.namespace(namespace))}"

    def summary_id(self, turn: int, *, namespace: str | None = None) -> str:
        """The summary id of ``turn`` in the namespace."""
        return f"sum_{_positive_turn(turn)}_{_suffix(self.namespace(namespace))}"

    # -- reads ---------------------------------------------------------------------------
    #
    # Each read is written once, as a flow (``_llm.Flow``) of the stream's calls; the sync
    # method runs it with the stream's methods, its async twin awaits their ``a*`` twins.

    def _get(self, ids: Sequence[str], namespace: str) -> Op[list[MemoryRecord]]:
        st = self.stream
        return Op(st.get, st.aget, (ids,), {"namespace": namespace})

    def _recent(self, n: int | None, namespace: str, kind: str) -> Op[list[MemoryRecord]]:
        st = self.stream
        return Op(st.recent, st.arecent, (n,), {"namespace": namespace, "kinds": [kind]})

    def _last_turn_flow(self, namespace: str | None) -> Flow[int]:
        ns = self.namespace(namespace)
        st = self.stream
        newest = yield Op(st.recent, st.arecent, (1,), {"namespace": ns, "kinds": list(_KINDS)})
        last = int(newest[0].metadata.get("turn", 0)) if newest else 0
        while True:  # (numbers right after it that an import brought, with older timestamps)
            probe = [last + i for i in range(1, _PROBE + 1)]
            ids = {
                i: t
                for t in probe
                for i in (self.context_id(t, namespace=ns), self.summary_id(t, namespace=ns))
            }
            found = yield self._get(list(ids), ns)
            stored = {ids[r.id] for r in found if r.kind in _KINDS and r.id in ids}
            for t in probe:
                if t not in stored:
                    return last
                last = t

    def last_turn(self, *, namespace: str | None = None) -> int:
        """The namespace's last turn number (0 when none): the newest snapshot's or summary's,
        or the last of the numbers stored right after it (an import may bring turns with older
        timestamps). A number holding either record counts (a summary whose snapshot was
        deleted still holds its number: :meth:`record_turn` refuses it)."""
        return run_sync(self._last_turn_flow(namespace))

    async def alast_turn(self, *, namespace: str | None = None) -> int:
        """Async twin of :meth:`last_turn`."""
        return await run_async(self._last_turn_flow(namespace))

    def _next_turn_flow(self, namespace: str | None) -> Flow[int]:
        return (yield from self._last_turn_flow(namespace)) + 1

    def next_turn(self, *, namespace: str | None = None) -> int:
        """The number the next turn gets (``last_turn + 1``): a reopened file resumes here."""
        return run_sync(self._next_turn_flow(namespace))

    async def anext_turn(self, *, namespace: str | None = None) -> int:
        """Async twin of :meth:`next_turn`."""
        return await run_async(self._next_turn_flow(namespace))

    def _context_by_turn_flow(
        self, turn: int, namespace: str | None
    ) -> Flow[ContextSnapshot | None]:
        found = yield from self._contexts_by_turn_flow([turn], namespace)
        return found[0] if found else None

    def context_by_turn(self, turn: int, *, namespace: str | None = None) -> ContextSnapshot | None:
        """The snapshot of ``turn`` (``None`` when not stored)."""
        return run_sync(self._context_by_turn_flow(turn, namespace))

    async def acontext_by_turn(
        self, turn: int, *, namespace: str | None = None
    ) -> ContextSnapshot | None:
        """Async twin of :meth:`context_by_turn`."""
        return await run_async(self._context_by_turn_flow(turn, namespace))

    def _contexts_by_turn_flow(
        self, turns: Iterable[int], namespace: str | None
    ) -> Flow[list[ContextSnapshot]]:
        ns = self.namespace(namespace)
        wanted = list(dict.fromkeys(_positive_turn(t) for t in turns))
        ids = [self.context_id(t, namespace=ns) for t in wanted]
        by_id = {r.id: r for r in (yield self._get(ids, ns)) if r.kind == SNAPSHOT_KIND}
        return [
            ContextSnapshot.from_record(by_id[cid])
            for t in wanted
            if (cid := self.context_id(t, namespace=ns)) in by_id
        ]

    def contexts_by_turn(
        self, turns: Iterable[int], *, namespace: str | None = None
    ) -> list[ContextSnapshot]:
        """Snapshots of these turns, in the order given (unknown turns skipped).

        One indexed read by id (:meth:`context_id`: an import gives each turn the id its number
        has in the namespace), however many turns are missing: a missing turn reads nothing
        more.

        Raises:
            InvalidMemoryError: a turn that is not a positive integer, or a bad namespace.
        """
        return run_sync(self._contexts_by_turn_flow(turns, namespace))

    async def acontexts_by_turn(
        self, turns: Iterable[int], *, namespace: str | None = None
    ) -> list[ContextSnapshot]:
        """Async twin of :meth:`contexts_by_turn`."""
        return await run_async(self._contexts_by_turn_flow(turns, namespace))

    def _contexts_by_id_flow(
        self, ids: Iterable[str], namespace: str | None
    ) -> Flow[list[ContextSnapshot]]:
        ns = self.namespace(namespace)
        # ids a model asks for: one no memory can have (a NUL, too long) is simply not stored
        wanted = [i for i in dict.fromkeys(str(i) for i in ids) if storable_id(i)]
        records = [r for r in (yield self._get(wanted, ns)) if r.kind in _KINDS]
        snapshot_ids = [
            r.id if r.kind == SNAPSHOT_KIND else ContextSummary.from_record(r).context_id
            for r in records
        ]
        return (yield from self._snapshots_flow(snapshot_ids, ns))

    def contexts_by_id(
        self, ids: Iterable[str], *, namespace: str | None = None
    ) -> list[ContextSnapshot]:
        """Snapshots with these context ids (a summary id gives its snapshot), in order."""
        return run_sync(self._contexts_by_id_flow(ids, namespace))

    async def acontexts_by_id(
        self, ids: Iterable[str], *, namespace: str | None = None
    ) -> list[ContextSnapshot]:
        """Async twin of :meth:`contexts_by_id`."""
        return await run_async(self._contexts_by_id_flow(ids, namespace))

    def _snapshots_flow(self, ids: Sequence[str], namespace: str) -> Flow[list[ContextSnapshot]]:
        unique = list(dict.fromkeys(ids))
        found = yield self._get(unique, namespace)
        by_id = {r.id: r for r in found if r.kind == SNAPSHOT_KIND}
        return [ContextSnapshot.from_record(by_id[i]) for i in unique if i in by_id]

    def _summary_by_turn_flow(
        self, turn: int, namespace: str | None
    ) -> Flow[ContextSummary | None]:
        ns = self.namespace(namespace)
        found = yield self._get([self.summary_id(turn, namespace=ns)], ns)
        if found and found[0].kind == SUMMARY_KIND:
            return ContextSummary.from_record(found[0])
        return None

    def summary_by_turn(self, turn: int, *, namespace: str | None = None) -> ContextSummary | None:
        """The summary of ``turn`` (``None`` when not stored)."""
        return run_sync(self._summary_by_turn_flow(turn, namespace))

    async def asummary_by_turn(
        self, turn: int, *, namespace: str | None = None
    ) -> ContextSummary | None:
        """Async twin of :meth:`summary_by_turn`."""
        return await run_async(self._summary_by_turn_flow(turn, namespace))

    def _recent_summaries_flow(
        self, n: int | None, namespace: str | None
    ) -> Flow[list[ContextSummary]]:
        records = yield self._recent(n, self.namespace(namespace), SUMMARY_KIND)
        return [ContextSummary.from_record(r) for r in records]

    def recent_summaries(
        self, n: int | None = None, *, namespace: str | None = None
    ) -> list[ContextSummary]:
        """The newest ``n`` summaries (all when ``None``), oldest first."""
        return run_sync(self._recent_summaries_flow(n, namespace))

    async def arecent_summaries(
        self, n: int | None = None, *, namespace: str | None = None
    ) -> list[ContextSummary]:
        """Async twin of :meth:`recent_summaries`."""
        return await run_async(self._recent_summaries_flow(n, namespace))

    def _accumulated_flow(
        self, budget: int | None, max_summaries: int, namespace: str | None
    ) -> Flow[list[ContextSummary]]:
        if budget is not None and budget < 0:
            raise InvalidMemoryError(f"budget must be >= 0 or None, got {budget!r}")
        from langchain_reflective.thinking.prompts import fit_summaries

        recent = yield from self._recent_summaries_flow(max_summaries, namespace)
        # the thinking graph's rule: one summary takes at most a share of the budget (cut,
        # with a marker), so a long one cannot push the older ones out
        fitted = fit_summaries([cast("SummaryDict", s.to_dict()) for s in recent], budget)
        by_id = {s.id: s for s in recent}
        return [
            dataclasses.replace(
                by_id[f["id"]],
                summary=f["summary"],
                insights=tuple(f["insights"]),
                token_count=f["token_count"],
            )
            for f in fitted
        ]

    def accumulated_summaries(
        self,
        *,
        budget: int | None = 2_000,
        max_summaries: int = 200,
        namespace: str | None = None,
    ) -> list[ContextSummary]:
        """The summaries to inject into a prompt: the newest that fit ``budget`` tokens, oldest
        first, as the thinking graph injects them. Older summaries leave the prompt, never the
        storage. One summary takes at most a quarter of ``budget``
        (:data:`~langchain_reflective.thinking.prompts.SUMMARIES_ALWAYS_SHOWN`): a longer one
        is returned cut, ending in a marker (its record keeps the whole text), so one long
        summary cannot push the older ones out.

        Args:
            budget: tokens the summaries may take (``None``: no limit).
            max_summaries: at most this many newest summaries are considered.
            namespace: whose summaries.

        Raises:
            InvalidMemoryError: a negative budget, or a bad ``max_summaries`` or namespace.
        """
        return run_sync(self._accumulated_flow(budget, max_summaries, namespace))

    async def aaccumulated_summaries(
        self,
        *,
        budget: int | None = 2_000,
        max_summaries: int = 200,
        namespace: str | None = None,
    ) -> list[ContextSummary]:
        """Async twin of :meth:`accumulated_summaries`."""
        return await run_async(self._accumulated_flow(budget, max_summaries, namespace))

    def _search_flow(
        self, keywords: str | Sequence[str], k: int, namespace: str | None
    ) -> Flow[list[ContextSnapshot]]:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidMemoryError(f"k must be a positive integer, got {k!r}")
        query = keywords if isinstance(keywords, str) else " ".join(str(w) for w in keywords)
        if not query.strip():
            raise InvalidMemoryError("search needs at least one non-empty keyword")
        ns = self.namespace(namespace)
        st = self.stream
        retrieve = {
            "k": max(2 * k, k + 2),
            "filter": RetrievalFilter(kinds=_KINDS),
            "namespace": ns,
        }
        hits = yield Op(st.retrieve, st.aretrieve, (query,), retrieve)
        order: list[str] = []
        for hit in hits:
            if hit.lexical <= 0 and hit.relevance < self.search_min_relevance:
                continue
            record = hit.record
            cid = (
                record.id
                if record.kind == SNAPSHOT_KIND
                else ContextSummary.from_record(record).context_id
            )
            if cid and cid not in order:
                order.append(cid)
        return (yield from self._snapshots_flow(order, ns))[:k]

    def search(
        self,
        keywords: str | Sequence[str],
        *,
        k: int = 3,
        namespace: str | None = None,
    ) -> list[ContextSnapshot]:
        """Snapshots matching ``keywords`` by keyword and meaning, best first.

        One hybrid retrieval of the stream (dense + BM25, its scoring) over snapshots and
        summaries; a matching summary stands for its snapshot, each snapshot counted once.
        Records that share no word with the query and are not close in meaning
        (``search_min_relevance``) are not matches, however recent or important.

        Raises:
            InvalidMemoryError: no non-empty keyword, a bad ``k`` or namespace.
        """
        return run_sync(self._search_flow(keywords, k, namespace))

    async def asearch(
        self,
        keywords: str | Sequence[str],
        *,
        k: int = 3,
        namespace: str | None = None,
    ) -> list[ContextSnapshot]:
        """Async twin of :meth:`search`."""
        return await run_async(self._search_flow(keywords, k, namespace))

    def _recall_flow(
        self,
        turn_numbers: int | Sequence[int],
        context_ids: str | Sequence[str],
        keywords: str | Sequence[str],
        limit: int,
        namespace: str | None,
    ) -> Flow[RecallResult]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidMemoryError(f"limit must be a positive integer, got {limit!r}")
        turn_numbers = _turn_list(turn_numbers)
        context_ids, keywords = _strings(context_ids), _strings(keywords)
        ns = self.namespace(namespace)
        found: list[ContextSnapshot] = []
        missing: list[str] = []
        if turn_numbers:
            # a number no turn can have (0, -3: a model's) is reported, not the recall's failure
            numbers = [t for t in turn_numbers if _is_turn(t)]
            by_turn = yield from self._contexts_by_turn_flow(numbers, ns)
            have = {s.turn for s in by_turn}
            missing += [f"turn {t}" for t in turn_numbers if not _is_turn(t) or t not in have]
            found += by_turn
        if context_ids:
            by_id = yield from self._contexts_by_id_flow(context_ids, ns)
            have_ids = {s.id for s in by_id}
            missing += [
                f"id {i}" for i in context_ids if i not in have_ids and not _summary_of(i, by_id)
            ]
            found += by_id
        words = [w for w in (str(x).strip() for x in keywords) if w]
        if words and len(_unique(found)) < limit:
            found += yield from self._search_flow(words, limit, ns)
        return RecallResult(_unique(found)[:limit], missing)

    def recall(
        self,
        *,
        turn_numbers: int | Sequence[int] = (),
        context_ids: str | Sequence[str] = (),
        keywords: str | Sequence[str] = (),
        limit: int = 3,
        namespace: str | None = None,
    ) -> RecallResult:
        """Recall snapshots by turn number, context id and keywords (in that order), at most
        ``limit`` in all, each once. Each may be given as a list or as a single item (one
        number, id or keyword string).

        Requested turns and ids that are not stored are listed in ``missing`` (``"turn 7"``,
        ``"id ctx_x"``), as is a number no turn can have (``"turn 0"``): it does not fail the
        recall of the others.

        Raises:
            InvalidMemoryError: a bad limit or namespace, or ``turn_numbers`` given as a string.
        """
        return run_sync(self._recall_flow(turn_numbers, context_ids, keywords, limit, namespace))

    async def arecall(
        self,
        *,
        turn_numbers: int | Sequence[int] = (),
        context_ids: str | Sequence[str] = (),
        keywords: str | Sequence[str] = (),
        limit: int = 3,
        namespace: str | None = None,
    ) -> RecallResult:
        """Async twin of :meth:`recall`."""
        flow = self._recall_flow(turn_numbers, context_ids, keywords, limit, namespace)
        return await run_async(flow)


def _unique(snapshots: Iterable[ContextSnapshot]) -> list[ContextSnapshot]:
    seen: set[str] = set()
    out = []
    for s in snapshots:
        if s.id not in seen:
            seen.add(s.id)
            out.append(s)
    return out


def _summary_of(summary_id: str, snapshots: Sequence[ContextSnapshot]) -> bool:
    m = re.match(r"sum_(\d+)_", summary_id)
    return m is not None and any(s.turn == int(m.group(1)) for s in snapshots)
