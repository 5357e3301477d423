"""ReflectiveStore: a LangGraph ``BaseStore`` whose items are memories of a :class:`MemoryStream`.

``graph.compile(store=ReflectiveStore(stream))``, ``create_agent(..., store=...)``,
``get_store()`` inside nodes and ``runtime.store`` inside tools then read and write reflective
memory: every item is one memory of the stream (embedded, rated for importance, counted towards
reflection), and ``search(query=...)`` ranks with the stream's own scoring.

**Namespaces.** A namespace tuple maps to one stream namespace: each label has ``%`` written as
``%25`` and ``/`` as ``%2F``, and the labels are joined with ``/``; so ``("users", "alice")`` is
the stream namespace ``"users/alice"`` and ``("alice",)`` is ``"alice"`` (the namespace a
``ReflectiveMemory`` or a retriever of user ``alice`` uses). The encoding is reversible and
injective; a stream namespace that is not the encoding of any tuple (``"a//b"``, ``"a%zz"``) is
invisible to the store. Labels must be non-empty strings without NUL characters; an empty tuple
cannot hold items (:class:`StoreNamespaceError`). ``BaseStore.put`` additionally refuses labels
with ``.`` and the root label ``"langgraph"``, as for every LangGraph store.

**Items.** A put stores the value as one memory: its text is a rendering of the value (the
``fields`` you configure, LangGraph's ``index={"fields": [...]}``, or per put
``index=[...]``; by default a value whose only field is a string is that string, any other value
is one ``field: value`` line per top-level field) and the value itself travels in the memory's
metadata, so ``get`` returns it exactly (as JSON: a tuple comes back a list). What JSON cannot
keep as given is refused with ``InvalidMemoryError`` before anything of the batch is written: a
key that is not a string, at any depth (JSON would store ``1``, ``True`` or ``None`` as ``"1"``,
``"true"`` or ``"null"``, merging it with an equal string key; LangGraph's ``InMemoryStore``
keeps such keys, so a JSON-backed store refuses them rather than change them), dicts and lists
nested more than :data:`~langchain_reflective.store_codec.MAX_VALUE_DEPTH` (98) levels deep,
a value that holds one dict or list in so many places that its JSON (which writes it once per
place) would be longer than :data:`~langchain_reflective.records.MAX_JSON_CHARS` characters,
and a NUL character (Postgres cannot store one). The memory's id is derived from the namespace
and the key, so a put with an existing key replaces that memory under the same id (the old memory is
deleted in the add's own transaction, ``MemoryStream.add(..., replacing=...)``: a failed or
interrupted put leaves the old memory in place) and ``put(value=None)`` deletes it.
Memories written to the stream directly (observations, reflections) appear as items too: their
key is the memory id and their value ``{"text", "kind", "importance", "evidence", "depth",
"metadata"}``; a put or delete with that key replaces (keeping the id, so reflections citing it
still resolve) or deletes that memory.

**Search.** With a ``query``, each selected namespace is ranked by
:meth:`MemoryStream.retrieve` (recency + importance + relevance, the stream's
:class:`~langchain_reflective.scoring.ScoringConfig`) and every ``SearchItem`` carries that score.
Items are memories of kind ``"item"``, each ranked on its own: the neighbour context that the
default scoring gives observations (a conversation's turns) does not link them, so the order
of puts never moves an unrelated item up. A prefix over several namespaces ranks them as one
(:meth:`MemoryStream.retrieve` with ``namespaces=[...]``: min-max normalisation and the lexical
half's best match run over all of them; each namespace's BM25 term statistics stay its own), and
embeds its query once, whatever is read again. Without a query, items come last written first (a
put moves its item to the front) with ``score=None``: each namespace in the order its memories were
written to the stream, and several namespaces merged by taking, each time, the namespace whose next
item has the latest ``updated_at``. That is LangGraph's ``PostgresStore`` order (``updated_at``
descending) whenever a namespace's memories were written in time order, as puts through one stream
are (unless the clock steps back); a memory added with a past ``now=`` (an import) keeps its place
in the write order. Every page is a slice of that one order, and reads at most ``offset + limit``
memories of each selected namespace (with a ``filter``, more until enough match: at worst the whole
namespace). ``filter`` matches value fields as
LangGraph documents: exact values (nested dicts and lists compare structurally, dotted keys reach
nested fields) and the operators ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``; a range
operator compares numbers with numbers and strings with strings, and a field of the other type
does not match (LangGraph's ``InMemoryStore`` converts both sides to float, its ``PostgresStore``
compares them as text). A prefix selects exactly the namespaces whose leading labels equal it;
nothing else is ever read. Searches do not update the memories' access times.

**Unindexed items.** Items put with ``index=False``, or whose indexed fields (``fields``, or a
put's ``index=[...]``) select no text, are returned by ``get`` and by searches without a query,
never by a query search (as LangGraph's ``PostgresStore``, which keeps no vector for them; its
``InMemoryStore`` appends them unscored). So choose ``fields`` that your values have: LangMem's
are ``{"content": ...}``. Their memory text is cut at the memory text limit (200,000
characters); their value is stored whole. An indexed text longer than that is refused.

**TTL is not supported** (``supports_ttl = False``): a put with a ``ttl`` raises
``NotImplementedError``; ``refresh_ttl`` on reads is ignored, as LangGraph specifies.

**Batches.** Like LangGraph's own stores, the reads of a batch see the store as it was before the
batch's puts, and of several puts to one key the last wins. A batch is validated completely before
anything is written; it is not one transaction (the puts of each namespace are one stream ``add``).
Within a process, batches that write to the same namespace of one ``MemoryStream`` object take
turns (sync and async callers alike, through any ``ReflectiveStore`` over that stream), so
concurrent puts to one key never collide; a sync call made inside the event loop while an async
call of that loop writes the namespace raises ``asyncio.InvalidStateError`` (use the
``a``-method) rather than wait forever for it. An async batch cancelled while the stream writes
raises ``CancelledError`` at once, but the write it started (in a worker thread, which cannot be
stopped) still lands, and its namespaces stay locked until it has: no later write can land
before it; no further write of the batch starts. Two *processes* (or two ``MemoryStream``
objects over one database) putting the same key at the same moment: the last to commit wins
(each put deletes whatever memory holds the key's id in its own transaction). For a new key the
second insert of its id fails (``DuplicateIdError``) and that put reads the key again and
replaces it; after three such reads, each overtaken by another writer, the error is raised and
that put writes nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import heapq
from collections import defaultdict
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
)

from langchain_reflective.errors import (
    DuplicateIdError,
    StorageError,
)
from langchain_reflective.records import (
    MemoryRecord,
)
from langchain_reflective.store_codec import (
    ITEM_METADATA_KEY,
    StoreNamespaceError,
    decode_namespace,
    encode_namespace,
    item_key,
    item_memory_id,
    matches_condition,
    matches_filter,
    render_value,
)
from langchain_reflective.store_locks import Turn, caller_method, lock_table
from langchain_reflective.store_ops import Call, Put, Search, prepare_ops
from langchain_reflective.stream import MemoryStream
from langchain_reflective.stream_base import (
    WRITE_STARTED,
    Landed,
    _retrieved,
    in_worker_thread,
)

_WRITE_ATTEMPTS = 3
"""How many times one namespace's puts are read and written when another writer keeps storing
one of their new keys between the read and the write."""

__all__ = [
    "ReflectiveStore",
    "StoreNamespaceError",
    "decode_namespace",
    "encode_namespace",
    "render_value",
]

ITEM_KIND = "item"
"""The memory kind of store items by default: independent facts, no neighbour context."""

_WRITES = frozenset({"add", "delete"})  # the stream calls of the flow that write

_FIRST_FETCH = 32  # memories a filtered search reads per namespace before reading them all


# -- the store's view of a memory ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _View:
    """A memory as the store shows it."""

    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    indexed: bool


def _merge_newest(
    lists: Sequence[Sequence[tuple[tuple[str, ...], _View]]], need: int
) -> list[tuple[tuple[str, ...], _View]]:
    """The first ``need`` items of the no-query order: the namespaces' lists (each in the order
    its memories were written, last first) merged by taking, each time, the list head put last
    (``updated_at``; on a tie the namespace sorted first).

    Each list keeps its own order, so the first ``need`` items of the merge depend on the first
    ``need`` of each list only: every page is a slice of one order, and a page reads at most
    ``offset + limit`` items of a namespace.
    """
    heads = [(-items[0][1].updated_at.timestamp(), i, 0) for i, items in enumerate(lists) if items]
    heapq.heapify(heads)
    out: list[tuple[tuple[str, ...], _View]] = []
    while heads and len(out) < need:
        _, i, at = heapq.heappop(heads)
        out.append(lists[i][at])
        if at + 1 < len(lists[i]):
            heapq.heappush(heads, (-lists[i][at + 1][1].updated_at.timestamp(), i, at + 1))
    return out


class ReflectiveStore(BaseStore):
    """A LangGraph ``BaseStore`` over a :class:`MemoryStream`: items are reflective memories.

    See the module documentation for the namespace encoding, how values become memory text,
    search, filters and batches. TTL is not supported (``supports_ttl = False``): a put with
    ``ttl`` raises ``NotImplementedError``.

    Args:
        stream: the memory stream holding the items (it is not closed by the store).
        fields: LangGraph field paths whose text becomes a memory's text (like
            ``index={"fields": [...]}`` of LangGraph's stores); ``None`` renders the whole value
            (see :func:`render_value`). A put's ``index=[...]`` overrides it for that item.
        kind: the memory kind of stored items. The default, ``"item"``, ranks each item on
            its own. Pass ``"observation"`` only for items that form a stream of related
            events: observations are linked to the previous and next observation, and
            retrieval adds half of a neighbour's relevance (``ScoringConfig.hybrid``), so an
            unrelated item put right after a relevant one would be pulled up.

    Raises:
        TypeError: ``stream`` is not a :class:`MemoryStream`.
        ValueError: ``fields`` is not a list of non-empty field paths, or ``kind`` is empty.

    Example:
        .. code-block:: python

            from langchain_core.embeddings import DeterministicFakeEmbedding
            from langchain_reflective import MemoryStream, ReflectiveStore

            with MemoryStream(DeterministicFakeEmbedding(size=64)) as stream:
                store = ReflectiveStore(stream)
                store.put(("alice", "memories"), "tea", {"text": "Alice drinks green tea"})
                print(store.get(("alice", "memories"), "tea").value)
                for hit in store.search(("alice",), query="What does Alice drink?"):
                    print(hit.key, hit.score)
    """

    supports_ttl: bool = False

    def __init__(
        self,
        stream: MemoryStream,
        *,
        fields: Sequence[str] | None = None,
        kind: str = ITEM_KIND,
    ) -> None:
        if not isinstance(stream, MemoryStream):
            raise TypeError(f"stream must be a MemoryStream, got {type(stream).__name__}")
        if fields is not None and (
            isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields)
        ):
            raise ValueError("fields must be a list of non-empty field paths")
        if not isinstance(kind, str) or not kind:
            raise ValueError("kind must be a non-empty string")
        self.stream = stream
        self.fields = None if fields is None else list(fields)
        self.kind = kind
        self._locks = lock_table(stream)  # the stream's, shared by every store over it

    # -- the two abstract methods: one flow, driven sync or async ---------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` (Get, Put, Search, ListNamespaces); results in the order of ``ops``."""
        ops = list(ops)
        turn = self._turn(ops)
        try:
            turn.hold(caller_method(ops))
            flow = self._flow(ops)
            try:
                call = next(flow)
                while True:
                    try:
                        result = getattr(self._target(call), call.method)(*call.args, **call.kwargs)
                    except Exception as exc:
                        call = flow.throw(exc)
                    else:
                        call = flow.send(result)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        finally:
            turn.release()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async twin of :meth:`batch` (embedding and rating calls are awaited).

        Cancelled while the stream writes (a step that runs in a worker thread, which
        cancelling cannot stop), it raises ``CancelledError`` at once, but that write still
        completes and the batch's namespaces stay locked until it has: no later write of them
        can land before it. No further step of the batch starts.
        """
        ops = list(ops)
        turn = self._turn(ops)
        try:
            await turn.ahold()
            flow = self._flow(ops)
            try:
                call = next(flow)
                while True:
                    try:
                        if turn.entries and call.method in _WRITES:
                            result = await self._awrite(call, turn)
                        else:
                            result = await self._acall(call)
                    except Exception as exc:
                        call = flow.throw(exc)
                    else:
                        call = flow.send(result)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        finally:
            turn.release()

    async def _awrite(self, call: Call, turn: Turn) -> Any:
        """A write of the stream that, if the batch is cancelled, runs on holding ``turn``.

        An add is the stream's ``aadd``: cancelled while it embeds or rates, it stops and
        writes nothing; once its store write started, that write runs on and the turn is
        handed to it (``WRITE_STARTED``). A delete runs in a worker thread, which the
        cancellation does not stop: the turn is handed to it. Either way the turn ends when
        the worker thread has, not when the task awaiting it ends (the event loop's teardown
        cancels that task while the thread still writes)."""
        if call.method == "add":
            started: list[Landed] = []
            token = WRITE_STARTED.set(started.append)
            try:
                return await self._acall(call)
            except asyncio.CancelledError:
                running = [write for write in started if not write.done()]
                if running:
                    turn.defer_to(running[-1])
                raise
            finally:
                WRITE_STARTED.reset(token)
        landed: concurrent.futures.Future[Any] = concurrent.futures.Future()
        task = asyncio.ensure_future(
            in_worker_thread(landed, self.stream.delete, call.args, call.kwargs)
        )
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                task.add_done_callback(_retrieved)  # (nobody awaits it now)
                turn.defer_to(landed)  # the thread's: the loop's teardown cancels the task
            raise

    def _turn(self, ops: Sequence[Op]) -> Turn:
        """The write turn of the namespaces ``ops`` put to (their locks, in a fixed order).

        A put reads the key's memory, then replaces it: two puts to one key at once in this
        process would race, so writes to a namespace take turns (the locks are the stream's,
        shared by every store over it).
        """
        names = set()
        for op in ops:
            if isinstance(op, PutOp):
                with contextlib.suppress(StoreNamespaceError):  # the flow reports it
                    names.add(encode_namespace(op.namespace))
        return Turn(self._locks, names)

    def _target(self, call: Call) -> Any:
        return self.stream.embeddings if call.embeddings else self.stream

    async def _acall(self, call: Call) -> Any:
        if call.embeddings or call.method in ("add", "retrieve"):  # async twins await models
            return await getattr(self._target(call), "a" + call.method)(*call.args, **call.kwargs)
        return await asyncio.to_thread(getattr(self.stream, call.method), *call.args, **call.kwargs)

    # -- the flow ------------------------------------------------------------------------------

    def _flow(self, ops: Iterable[Op]) -> Generator[Call, Any, list[Result]]:
        prepared = prepare_ops(ops, self.fields)
        results: list[Result] = [None] * prepared.size
        for name, gets in prepared.gets.items():
            ids = [i for _, _, key in gets for i in (self.memory_id(name, key), key)]
            records = yield Call("get", (ids,), {"namespace": name})
            for index, ns, key in gets:
                found = self._find(name, key, {r.id: r for r in records})
                results[index] = None if found is None else self._item(ns, self._view(found))
        if prepared.searches or prepared.lists:
            names: list[str] = yield Call("namespaces")
            decoded = {n: decode_namespace(n) for n in names}
            known = {n: labels for n, labels in decoded.items() if labels is not None}
            for index, op in prepared.lists:
                results[index] = self._list(op, list(known.values()))
            for index, search in prepared.searches:
                results[index] = yield from self._search(search, known)
        if prepared.puts:
            yield from self._write(prepared.puts)
        return results

    @staticmethod
    def memory_id(stream_namespace: str, key: str) -> str:
        """The id of the memory holding ``key`` in a stream namespace (stable, 34 chars)."""
        return item_memory_id(stream_namespace, key)

    def _find(self, name: str, key: str, by_id: Mapping[str, MemoryRecord]) -> MemoryRecord | None:
        """The memory of ``key``: the store's item, else a stream memory whose id is ``key``."""
        item = by_id.get(self.memory_id(name, key))
        if item is not None and self._is_item(item):
            return item
        raw = by_id.get(key)
        if raw is None or not self._is_item(raw):
            return raw
        return raw if item_key(raw) == key else None  # put over it

    @staticmethod
    def _is_item(record: MemoryRecord) -> bool:
        return item_key(record) is not None

    def _view(self, record: MemoryRecord) -> _View:
        key = item_key(record)
        if key is not None and ITEM_METADATA_KEY not in record.metadata:
            # stored too deep to read (stored_json.UNREADABLE_METADATA_KEY): its value says why
            value = dict(record.metadata)
            return _View(key, value, record.created_at, record.created_at, indexed=True)
        if key is not None:
            meta = record.metadata[ITEM_METADATA_KEY]
            try:
                created = datetime.fromisoformat(meta.get("created_at", ""))
            except (TypeError, ValueError):
                created = record.created_at
            return _View(
                key=meta["key"],
                value=dict(meta["value"]),
                created_at=created,
                updated_at=record.created_at,
                indexed=meta.get("indexed", True) is not False,
            )
        value = {
            "text": record.text,
            "kind": record.kind,
            "importance": record.importance,
            "evidence": list(record.evidence),
            "depth": record.depth,
            "metadata": dict(record.metadata),
        }
        return _View(record.id, value, record.created_at, record.created_at, indexed=True)

    @staticmethod
    def _item(ns: tuple[str, ...], view: _View) -> Item:
        return Item(
            value=view.value,
            key=view.key,
            namespace=ns,
            created_at=view.created_at,
            updated_at=view.updated_at,
        )

    @staticmethod
    def _list(op: ListNamespacesOp, namespaces: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        selected = {
            ns[: op.max_depth] if op.max_depth is not None else ns
            for ns in namespaces
            if all(matches_condition(c, ns) for c in conditions)
        }
        return sorted(selected)[op.offset : op.offset + op.limit]

    def _search(
        self, search: Search, known: Mapping[str, tuple[str, ...]]
    ) -> Generator[Call, Any, list[SearchItem]]:
        need = search.offset + search.limit
        if search.limit == 0:
            return []
        prefix = search.prefix
        selected = sorted((ns, name) for name, ns in known.items() if ns[: len(prefix)] == prefix)
        if search.query is None:
            lists = []
            for ns, name in selected:
                lists.append([(ns, view) for view in (yield from self._recent(name, search, need))])
            newest = _merge_newest(lists, need)
            return [self._search_item(ns, view, None) for ns, view in newest[search.offset :]]
        if not selected:
            return []
        # one ranking over every selected namespace
        ranked = yield from self._ranked([name for _, name in selected], search, need)
        found = [
            (score, self._search_item(known[name], view, score)) for name, view, score in ranked
        ]
        found.sort(key=lambda pair: -pair[0])  # stable: ties keep the stream's order
        return [item for _, item in found[search.offset : need]]

    @staticmethod
    def _search_item(ns: tuple[str, ...], view: _View, score: float | None) -> SearchItem:
        return SearchItem(
            namespace=ns,
            key=view.key,
            value=view.value,
            created_at=view.created_at,
            updated_at=view.updated_at,
            score=score,
        )

    def _ranked(
        self, names: list[str], search: Search, need: int
    ) -> Generator[Call, Any, list[tuple[str, _View, float]]]:
        """Up to ``need`` indexed items of the namespaces ``names`` that match the filter, best
        first, ranked as one (``MemoryStream.retrieve(namespaces=...)``; the query embedded
        once, whatever is read again).

        Reads ``need`` memories (more when a filter is set), and everything only when hidden
        or filtered-out memories left fewer than ``need``.
        """
        assert search.query is not None
        vector = yield Call("embed_query", (search.query,), embeddings=True)
        n = need if search.filter is None else max(need * 4, _FIRST_FETCH)
        while True:
            hits = yield Call(
                "retrieve",
                (search.query,),
                {"k": n, "namespaces": names, "touch": False, "query_embedding": vector},
            )
            out: list[tuple[str, _View, float]] = []
            for hit in hits:
                view = self._view(hit.record)
                if view.indexed and matches_filter(view.value, search.filter):
                    out.append((hit.record.namespace, view, float(hit.score)))
            if len(out) >= need or len(hits) < n:
                return out[:need]
            total = 0  # retrieve needs a number: read every memory
            for name in names:
                total += yield Call("count", (), {"namespace": name})
            if total <= n:
                return out[:need]
            n = total

    def _recent(self, name: str, search: Search, need: int) -> Generator[Call, Any, list[_View]]:
        """Up to ``need`` items of one namespace that match the filter, last written first.

        Reads ``need`` memories (more when a filter is set), and everything only when
        filtered-out memories left fewer than ``need``.
        """
        n: int | None = need if search.filter is None else max(need * 4, _FIRST_FETCH)
        while True:
            records = yield Call("recent", (n,), {"namespace": name})
            out = [
                view
                for view in map(self._view, reversed(records))
                if matches_filter(view.value, search.filter)
            ]
            if len(out) >= need or n is None or len(records) < n:
                return out[:need]
            n = None

    def _write(self, puts: Mapping[tuple[tuple[str, ...], str], Put]) -> Generator[Call, Any, None]:
        """Apply the puts: per namespace one read, one delete and one add."""
        now = datetime.now(UTC)
        by_name: dict[str, list[Put]] = defaultdict(list)
        for put in puts.values():
            by_name[encode_namespace(put.namespace)].append(put)
        for name, group in by_name.items():
            for attempt in range(1, _WRITE_ATTEMPTS + 1):
                try:
                    yield from self._write_namespace(name, group, now)
                    break
                except DuplicateIdError:
                    # another writer (process, MemoryStream) stored one of these keys since
                    # the read: read again, so this put replaces it (the last to commit wins)
                    if attempt == _WRITE_ATTEMPTS:
                        raise

    def _write_namespace(
        self, name: str, group: Sequence[Put], now: datetime
    ) -> Generator[Call, Any, None]:
        """Apply one namespace's puts: one read, then one add that deletes what it replaces
        in its own transaction (or one delete)."""
        ids = [i for put in group for i in (self.memory_id(name, put.key), put.key)]
        records = yield Call("get", (ids,), {"namespace": name})
        by_id = {r.id: r for r in records}
        old: list[MemoryRecord] = []
        created: dict[str, datetime] = {}
        ids_of: dict[str, str] = {}  # a replaced memory keeps its id (evidence stays valid)
        for put in group:
            current = self._find(name, put.key, by_id)
            if current is not None:
                old.append(current)
                created[put.key] = self._view(current).created_at
                ids_of[put.key] = current.id
        adds = [put for put in group if put.value is not None]
        old_ids = [r.id for r in old]
        if not adds:
            if old_ids:
                yield Call("delete", (old_ids,), {"namespace": name})
            return
        metadatas = [
            {
                ITEM_METADATA_KEY: {
                    "key": put.key,
                    "value": put.value,
                    "created_at": created.get(put.key, now).isoformat(),
                    "indexed": put.indexed,
                }
            }
            for put in adds
        ]
        try:
            yield Call(
                "add",
                ([put.text for put in adds],),
                {
                    "ids": [ids_of.get(put.key, self.memory_id(name, put.key)) for put in adds],
                    "metadatas": metadatas,
                    "kinds": self.kind,
                    "namespace": name,
                    "now": now,
                    "replacing": old_ids,  # deleted in the add's own transaction
                },
            )
        except Exception as exc:
            if old_ids:  # a backend whose replace is not atomic may have deleted them
                try:
                    still = yield Call("get", (old_ids,), {"namespace": name})
                except Exception:
                    raise exc from None  # (the storage is unreachable: report the put's error)
                kept = {r.id for r in still}
                yield from self._restore(name, [r for r in old if r.id not in kept], exc)
            raise

    def _restore(
        self, name: str, old: Sequence[MemoryRecord], cause: Exception
    ) -> Generator[Call, Any, None]:
        """Write back the memories an update deleted before its add failed."""
        for record in old:
            try:
                yield Call(
                    "add",
                    (record.text,),
                    {
                        "ids": [record.id],
                        "importances": record.importance,
                        "kinds": record.kind,
                        "metadatas": dict(record.metadata),
                        "evidence": [list(record.evidence)] if record.evidence else None,
                        "namespace": name,
                        "now": record.created_at,
                    },
                )
            except Exception as exc:
                raise StorageError(
                    f"a put failed ({cause!r}) and the memory {record.id!r} it replaced could not "
                    f"be written back ({exc!r}); its text was: {record.text!r}"
                ) from cause
