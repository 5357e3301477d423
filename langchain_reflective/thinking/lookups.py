"""Finding the turns a :class:`~langchain_reflective.thinking.context.ContextMemory` stored: their
ids, lookups by turn number and by id, the summaries to inject into a prompt, and hybrid search
and recall over snapshots and summaries (see ``context.py`` for how turns are stored)."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.stream import RetrievalFilter
from langchain_reflective.thinking.turns import (
    _KINDS,
    SNAPSHOT_KIND,
    SUMMARY_KIND,
    ContextSnapshot,
    ContextSummary,
    RecallResult,
    count_text_tokens,
)

if TYPE_CHECKING:
    from langchain_reflective.stream import MemoryStream

__all__ = ["ContextLookups"]


def _suffix(namespace: str) -> str:
    return hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:10]


def _positive_turn(turn: object) -> int:
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise InvalidMemoryError(f"a turn number must be a positive integer, got {turn!r}")
    return turn


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

    # -- reads -----------------------------------------------------------------------------

    def last_turn(self, *, namespace: str | None = None) -> int:
        """The newest stored turn number of the namespace (0 when none)."""
        ns = self.namespace(namespace)
        newest = self.stream.recent(1, namespace=ns, kinds=[SNAPSHOT_KIND])
        return int(newest[0].metadata.get("turn", 0)) if newest else 0

    def next_turn(self, *, namespace: str | None = None) -> int:
        """The number the next turn gets (``last_turn + 1``): a reopened file resumes here."""
        return self.last_turn(namespace=namespace) + 1

    def context_by_turn(self, turn: int, *, namespace: str | None = None) -> ContextSnapshot | None:
        """The snapshot of ``turn`` (``None`` when not stored)."""
        found = self.contexts_by_turn([turn], namespace=namespace)
        return found[0] if found else None

    def contexts_by_turn(
        self, turns: Iterable[int], *, namespace: str | None = None
    ) -> list[ContextSnapshot]:
        """Snapshots of these turns, in the order given (unknown turns skipped).

        One indexed read by id; records imported under another namespace (whose ids carry the
        old namespace's hash) are found by their ``turn`` metadata instead.
        """
        ns = self.namespace(namespace)
        wanted = list(dict.fromkeys(_positive_turn(t) for t in turns))
        by_id = {
            r.id: r
            for r in self.stream.get(
                [self.context_id(t, namespace=ns) for t in wanted], namespace=ns
            )
            if r.kind == SNAPSHOT_KIND
        }
        found = {
            t: by_id[cid] for t in wanted if (cid := self.context_id(t, namespace=ns)) in by_id
        }
        if len(found) < len(wanted):
            for record in self.stream.recent(None, namespace=ns, kinds=[SNAPSHOT_KIND]):
                turn = record.metadata.get("turn")
                if turn in wanted and turn not in found:
                    found[turn] = record
        return [ContextSnapshot.from_record(found[t]) for t in wanted if t in found]

    def contexts_by_id(
        self, ids: Iterable[str], *, namespace: str | None = None
    ) -> list[ContextSnapshot]:
        """Snapshots with these context ids (a summary id gives its snapshot), in order."""
        ns = self.namespace(namespace)
        wanted = list(dict.fromkeys(str(i) for i in ids))
        records = [r for r in self.stream.get(wanted, namespace=ns) if r.kind in _KINDS]
        snapshot_ids = [
            r.id if r.kind == SNAPSHOT_KIND else ContextSummary.from_record(r).context_id
            for r in records
        ]
        return self._snapshots(snapshot_ids, ns)

    def _snapshots(self, ids: Sequence[str], namespace: str) -> list[ContextSnapshot]:
        unique = list(dict.fromkeys(ids))
        by_id = {
            r.id: r for r in self.stream.get(unique, namespace=namespace) if r.kind == SNAPSHOT_KIND
        }
        return [ContextSnapshot.from_record(by_id[i]) for i in unique if i in by_id]

    def summary_by_turn(self, turn: int, *, namespace: str | None = None) -> ContextSummary | None:
        """The summary of ``turn`` (``None`` when not stored)."""
        ns = self.namespace(namespace)
        found = self.stream.get(self.summary_id(turn, namespace=ns), namespace=ns)
        if found and found[0].kind == SUMMARY_KIND:
            return ContextSummary.from_record(found[0])
        for record in self.stream.recent(None, namespace=ns, kinds=[SUMMARY_KIND]):
            if record.metadata.get("turn") == turn:
                return ContextSummary.from_record(record)
        return None

    def recent_summaries(
        self, n: int | None = None, *, namespace: str | None = None
    ) -> list[ContextSummary]:
        """The newest ``n`` summaries (all when ``None``), oldest first."""
        ns = self.namespace(namespace)
        records = self.stream.recent(n, namespace=ns, kinds=[SUMMARY_KIND])
        return [ContextSummary.from_record(r) for r in records]

    def accumulated_summaries(
        self,
        *,
        budget: int | None = 2_000,
        max_summaries: int = 200,
        namespace: str | None = None,
    ) -> list[ContextSummary]:
        """The summaries to inject into a prompt: the newest that fit ``budget`` tokens, oldest
        first. Older summaries leave the prompt, never the storage.

        Args:
            budget: tokens the summaries may take (``None``: no limit).
            max_summaries: at most this many newest summaries are considered.
            namespace: whose summaries.
        """
        if budget is not None and budget < 0:
            raise InvalidMemoryError(f"budget must be >= 0 or None, got {budget!r}")
        newest_first = list(reversed(self.recent_summaries(max_summaries, namespace=namespace)))
        chosen: list[ContextSummary] = []
        left = budget
        for summ in newest_first:
            cost = count_text_tokens(f"[Turn {summ.turn}] {summ.text}")
            if left is not None:
                if cost > left:
                    break  # keep the injected summaries contiguous: the newest turns
                left -= cost
            chosen.append(summ)
        return list(reversed(chosen))

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
        """
        query = keywords if isinstance(keywords, str) else " ".join(str(w) for w in keywords)
        if not query.strip():
            raise InvalidMemoryError("search needs at least one non-empty keyword")
        ns = self.namespace(namespace)
        hits = self.stream.retrieve(
            query, k=max(2 * k, k + 2), filter=RetrievalFilter(kinds=_KINDS), namespace=ns
        )
        return self._ranked(hits, k, ns)

    async def asearch(
        self,
        keywords: str | Sequence[str],
        *,
        k: int = 3,
        namespace: str | None = None,
    ) -> list[ContextSnapshot]:
        """Async twin of :meth:`search`."""
        query = keywords if isinstance(keywords, str) else " ".join(str(w) for w in keywords)
        if not query.strip():
            raise InvalidMemoryError("search needs at least one non-empty keyword")
        ns = self.namespace(namespace)
        hits = await self.stream.aretrieve(
            query, k=max(2 * k, k + 2), filter=RetrievalFilter(kinds=_KINDS), namespace=ns
        )
        return await asyncio.to_thread(self._ranked, hits, k, ns)

    def _ranked(self, hits: Sequence[Any], k: int, namespace: str) -> list[ContextSnapshot]:
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
        return self._snapshots(order, namespace)[:k]

    def recall(
        self,
        *,
        turn_numbers: Sequence[int] = (),
        context_ids: Sequence[str] = (),
        keywords: Sequence[str] = (),
        limit: int = 3,
        namespace: str | None = None,
    ) -> RecallResult:
        """Recall snapshots by turn number, context id and keywords (in that order), at most
        ``limit`` in all, each once.

        Raises:
            InvalidMemoryError: a bad turn number, limit or namespace.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidMemoryError(f"limit must be a positive integer, got {limit!r}")
        ns = self.namespace(namespace)
        found: list[ContextSnapshot] = []
        missing: list[str] = []
        if turn_numbers:
            by_turn = self.contexts_by_turn(turn_numbers, namespace=ns)
            have = {s.turn for s in by_turn}
            missing += [f"turn {t}" for t in turn_numbers if t not in have]
            found += by_turn
        if context_ids:
            by_id = self.contexts_by_id(context_ids, namespace=ns)
            have_ids = {s.id for s in by_id}
            missing += [
                f"id {i}" for i in context_ids if i not in have_ids and not _summary_of(i, by_id)
            ]
            found += by_id
        words = [w for w in (str(x).strip() for x in keywords) if w]
        if words and len(_unique(found)) < limit:
            found += self.search(words, k=limit, namespace=ns)
        return RecallResult(_unique(found)[:limit], missing)

    async def arecall(
        self,
        *,
        turn_numbers: Sequence[int] = (),
        context_ids: Sequence[str] = (),
        keywords: Sequence[str] = (),
        limit: int = 3,
        namespace: str | None = None,
    ) -> RecallResult:
        """Async twin of :meth:`recall` (the keyword search embeds its query asynchronously)."""
        words = [w for w in (str(x).strip() for x in keywords) if w]
        result = await asyncio.to_thread(
            self.recall,
            turn_numbers=turn_numbers,
            context_ids=context_ids,
            limit=limit,
            namespace=namespace,
        )
        if not words or len(result.snapshots) >= limit:
            return result
        more = await self.asearch(words, k=limit, namespace=namespace)
        return RecallResult(_unique([*result.snapshots, *more])[:limit], result.missing)


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
