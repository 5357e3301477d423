"""A stored row whose JSON cannot be read (nested deeper than the write limit, by an earlier
version or by hand; or not JSON at all) no longer makes its whole namespace unreadable on the
SQLite backend.

Decoding such a row raised ``RecursionError`` (from ~990 levels at the top of the stack, from
far fewer deep inside a graph), and every read of the namespace decodes every row it returns:
one bad row broke ``get``, ``recent``, ``retrieve``, exports and the pending queue. Now each
such row is read with its metadata replaced by
``{UNREADABLE_METADATA_KEY: {"problem": ..., "json": <the stored text>}}`` and a warning naming
it; the row itself is never changed nor deleted. The rows are written here with ``sqlite3``
directly, past the write-side check of :data:`~langchain_reflective.records.MAX_NESTING`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.records import MAX_NESTING
from langchain_reflective.store import ReflectiveStore
from langchain_reflective.stored_json import UNREADABLE_METADATA_KEY
from tests.fakes import WordEmbeddings

T = TypeVar("T")

FACTS = ["Alice keeps a dog named Rex", "Bob plays the violin", "Carol grows tomatoes"]


def deep_json(levels: int) -> str:
    """A JSON object whose dicts and lists nest ``levels`` deep (the object is level 1)."""
    return '{"v": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


def at_stack_depth(frames: int, call: Callable[[], T]) -> T:
    """``call()`` run ``frames`` Python frames deeper than here: a read deep inside a graph."""

    def down(n: int) -> T:
        return call() if n == 0 else down(n - 1)

    return down(frames)


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[MemoryStream]:
    with MemoryStream(WordEmbeddings(16), path=tmp_path / "m.db") as s:
        s.add(FACTS, importances=0.5, metadatas=[{"n": i} for i in range(len(FACTS))])
        yield s


def _write_by_hand(path: Path, sql: str, params: tuple[Any, ...]) -> None:
    """Run one write on the file with ``sqlite3`` (past the package's checks)."""
    con = sqlite3.connect(path)
    try:
        with con:
            con.execute(sql, params)
    finally:
        con.close()


def _spoil(stream: MemoryStream, record_id: str, metadata: str) -> None:
    """Store ``metadata`` as the stored text of ``record_id``'s metadata, as an earlier version
    (or a hand edit) could have, and make the stream read the file again."""
    path = Path(stream.store.path)
    _write_by_hand(path, "UPDATE memories SET metadata=? WHERE id=?", (metadata, record_id))


def _unreadable(record: Any) -> dict[str, Any]:
    assert set(record.metadata) == {UNREADABLE_METADATA_KEY}, record.metadata
    marker: dict[str, Any] = record.metadata[UNREADABLE_METADATA_KEY]
    return marker


@pytest.mark.parametrize("levels", [2_000, 995])
def test_one_too_deep_row_leaves_the_namespace_readable(
    stream: MemoryStream, levels: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: ``RecursionError`` from every read below. The bad row is still there (nothing
    deleted), read with its stored text kept in the marker; the others read as they were."""
    bob = stream.recent()[1]
    raw = deep_json(levels)
    _spoil(stream, bob.id, raw)
    caplog.set_level(logging.WARNING)
    recent = stream.recent()
    assert [r.text for r in recent] == FACTS
    assert [r.metadata for r in recent[::2]] == [{"n": 0}, {"n": 2}]
    marker = _unreadable(recent[1])
    assert marker["json"] == raw
    assert f"more than {MAX_NESTING}" in marker["problem"]
    (got,) = stream.get([bob.id])
    assert got.metadata == recent[1].metadata and got.text == bob.text
    hits = stream.retrieve("Bob violin", k=3)
    assert hits[0].record.id == bob.id and _unreadable(hits[0].record)["json"] == raw
    assert stream.count() == 3
    warned = [r for r in caplog.records if bob.id in r.getMessage()]
    assert warned and "metadata" in warned[0].getMessage()
    assert len(warned) == 1  # once per row and process, not once per read


def test_an_export_keeps_the_stored_text_and_imports(stream: MemoryStream, tmp_path: Path) -> None:
    """Before: the export raised ``RecursionError``. Now the line carries the marker (the
    stored JSON as text, flat), which an import accepts: nothing of the row is lost."""
    bob = stream.recent()[1]
    raw = deep_json(1_500)
    _spoil(stream, bob.id, raw)
    out = tmp_path / "out.jsonl"
    assert stream.export_jsonl(out) == 3
    with MemoryStream(WordEmbeddings(16), path=tmp_path / "copy.db") as copy:
        assert copy.import_jsonl(out) == 3
        (moved,) = copy.get([bob.id])
    assert _unreadable(moved)["json"] == raw


def test_a_row_deeper_than_the_limit_reads_the_same_at_any_stack_depth(
    stream: MemoryStream,
) -> None:
    """A row 150 levels deep (which earlier versions wrote) decoded at the top of the stack,
    but raised ``RecursionError`` in a read ~900 frames down (inside a deep graph). Whether a
    row is readable no longer depends on where it is read from: over the limit, never."""
    bob = stream.recent()[1]
    raw = deep_json(MAX_NESTING + 50)
    _spoil(stream, bob.id, raw)
    frames = sys.getrecursionlimit() - 120
    deep = at_stack_depth(frames, lambda: stream.get([bob.id]))
    (shallow,) = stream.get([bob.id])
    assert deep == [shallow]
    assert _unreadable(shallow)["json"] == raw


def test_metadata_at_the_limit_still_reads(stream: MemoryStream) -> None:
    """The guard refuses only what the package would refuse to write: a row exactly
    ``MAX_NESTING`` deep, or with many shallow lists, is read as stored."""
    alice, bob, _ = stream.recent()
    _spoil(stream, alice.id, deep_json(MAX_NESTING))
    wide = {"rows": [[i, {"x": [i]}] for i in range(500)]}
    _spoil(stream, bob.id, json.dumps(wide))
    (a,) = stream.get([alice.id])
    assert a.metadata == json.loads(deep_json(MAX_NESTING))
    (b,) = stream.get([bob.id])
    assert b.metadata == wide


@pytest.mark.parametrize(
    ("stored", "problem"),
    [
        ('{"a": [1, 2', "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('"text"', "not a JSON object"),
        ('{"s": "' + "[" * 5_000 + '"}', None),  # brackets inside a string are not nesting
    ],
)
def test_metadata_that_is_not_a_json_object(
    stream: MemoryStream, stored: str, problem: str | None
) -> None:
    """A hand edit that left broken JSON (or a list) raised ``JSONDecodeError`` from every read
    of the namespace (or handed out a list as metadata); it reads as a too-deep row does."""
    bob = stream.recent()[1]
    _spoil(stream, bob.id, stored)
    (got,) = stream.get([bob.id])
    if problem is None:
        assert got.metadata == json.loads(stored)
        return
    marker = _unreadable(got)
    assert marker["json"] == stored and problem in marker["problem"]
    assert [r.text for r in stream.recent()] == FACTS


def test_too_deep_evidence_reads_as_none(stream: MemoryStream) -> None:
    """SQLite keeps evidence as JSON too: a too-deep one raised ``RecursionError`` as well."""
    bob = stream.recent()[1]
    path = Path(stream.store.path)
    _write_by_hand(
        path, "UPDATE memories SET evidence=? WHERE id=?", ("[" * 3_000 + "]" * 3_000, bob.id)
    )
    (got,) = stream.get([bob.id])
    assert got.evidence == ()
    assert [r.text for r in stream.recent()] == FACTS


def test_a_too_deep_pending_memory_leaves_the_queue_readable(stream: MemoryStream) -> None:
    """The queue is read whole by every drain: one too-deep row blocked every queued memory
    of every namespace. It is read with the marker; completing it stores the marker (the
    stored text kept), which a drain can write."""
    stream.enqueue(["first queued", "second queued"])
    first = stream.pending()[0]
    raw = deep_json(1_200)
    _write_by_hand(
        Path(stream.store.path), "UPDATE pending SET metadata=? WHERE id=?", (raw, first.id)
    )
    pending = stream.pending()
    assert [p.text for p in pending] == ["first queued", "second queued"]
    assert pending[0].metadata[UNREADABLE_METADATA_KEY]["json"] == raw
    done = stream.complete_pending(pending)
    assert [r.text for r in done] == ["first queued", "second queued"]
    (stored,) = stream.get([first.id])
    assert _unreadable(stored)["json"] == raw


def test_a_store_item_too_deep_to_read_can_be_read_and_replaced(
    stream: MemoryStream,
) -> None:
    """A ``ReflectiveStore`` item whose value an earlier version stored too deep: ``get``
    raised ``RecursionError``. Now its key finds it (the value says why it cannot be given),
    and a put to that key replaces it, instead of failing on the id it still holds."""
    store = ReflectiveStore(stream)
    store.put(("users", "alice"), "prefs", {"theme": "dark"})
    store.put(("users", "alice"), "other", {"theme": "light"})
    item_id = ReflectiveStore.memory_id("users/alice", "prefs")
    raw = '{"langgraph_item": {"key": "prefs", "value": ' + deep_json(1_100) + "}}"
    _spoil(stream, item_id, raw)
    got = store.get(("users", "alice"), "prefs")
    assert got is not None and got.key == "prefs"
    assert got.value[UNREADABLE_METADATA_KEY]["json"] == raw
    assert {i.key for i in store.search(("users", "alice"))} == {"prefs", "other"}
    store.put(("users", "alice"), "prefs", {"theme": "blue"})
    again = store.get(("users", "alice"), "prefs")
    assert again is not None and again.value == {"theme": "blue"}
    assert stream.count(namespace="users/alice") == 2


def test_a_store_item_whose_stored_key_is_not_json_leaves_the_store_readable(
    stream: MemoryStream,
) -> None:
    """An unreadable item's key is read from the start of its stored text; an escape JSON
    has not there (a hand edit) raised a raw ``JSONDecodeError`` from every read of the store
    that reached it. Now that memory reads as a memory of the namespace (under its id, as one
    not written through the store), its key being unknown; the others read as before."""
    store = ReflectiveStore(stream)
    store.put(("users", "alice"), "prefs", {"theme": "dark"})
    store.put(("users", "alice"), "other", {"theme": "light"})
    item_id = ReflectiveStore.memory_id("users/alice", "prefs")
    _spoil(stream, item_id, '{"langgraph_item": {"key": "pr\\qefs", "value": {')
    assert {i.key for i in store.search(("users", "alice"))} == {"other", item_id}
    assert store.get(("users", "alice"), "other") is not None
    assert store.get(("users", "alice"), "prefs") is None


def test_too_deep_cache_bookkeeping_is_rebuilt_not_raised(tmp_path: Path) -> None:
    """The ``meta`` rows that describe a namespace's caches are JSON too: a tampered one is
    treated as missing (the cache is rebuilt from the rows); one nested too deep raised
    ``RecursionError`` from the namespace's load instead."""
    path = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(16), path=path) as s:
        s.add(FACTS, importances=0.5)
        want = [h.record.id for h in s.retrieve("Bob violin", k=3, touch=False)]
        namespace = s.namespace
    deep = deep_json(5_000)
    for prefix in ("columns_cache", "vector_cache", "index_cache", "lexical_cache"):
        _write_by_hand(
            path,
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            (f"{prefix}:{namespace}", deep),
        )
    with MemoryStream(WordEmbeddings(16), path=path) as s:
        assert [h.record.id for h in s.retrieve("Bob violin", k=3, touch=False)] == want
