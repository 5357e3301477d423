"""A stored row whose metadata nests deeper than the write limit (by an earlier version or by
hand) no longer makes its whole namespace unreadable on the Postgres backend.

The server keeps such ``jsonb`` (it parses and prints ~10,000 levels within its default
``max_stack_depth`` of 2 MB, and refuses far deeper ones itself), but psycopg's ``jsonb``
loader is ``json.loads``, which raised ``RecursionError`` from ~990 levels while fetching the
rows: every read of the namespace (``get``, ``recent``, ``retrieve`` with or without the local
index, exports, the pending queue) failed for one row. The backend now fetches metadata as
text and reads it as the SQLite backend does (``tests/unit/test_deep_values.py``): such a row
comes back with its metadata replaced by ``{UNREADABLE_METADATA_KEY: {"problem": ..., "json":
<the stored text>}}``, with a warning naming it; the row itself is never changed nor deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream, PostgresBackend
from langchain_reflective.records import MAX_NESTING
from langchain_reflective.store import ReflectiveStore
from langchain_reflective.stored_json import UNREADABLE_METADATA_KEY
from tests.fakes import WordEmbeddings

psycopg = pytest.importorskip("psycopg", reason="the 'postgres' extra is not installed")

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

FACTS = ["Alice keeps a dog named Rex", "Bob plays the violin", "Carol grows tomatoes"]


def deep_json(levels: int) -> str:
    """A JSON object whose dicts and lists nest ``levels`` deep (the object is level 1)."""
    return '{"v": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


def _open(url: str, **kwargs: Any) -> MemoryStream:
    backend = PostgresBackend.from_conn_string(url, max_size=4, **kwargs)
    backend.setup()
    return MemoryStream(WordEmbeddings(16), backend=backend)


@pytest.fixture
def stream(postgres_url: str) -> Iterator[MemoryStream]:
    with _open(postgres_url) as s:
        s.add(FACTS, importances=0.5, metadatas=[{"n": i} for i in range(len(FACTS))])
        yield s


def _write_by_hand(url: str, sql: str, params: tuple[Any, ...]) -> None:
    """Run one write with psycopg (past the package's checks)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql, params)


def _spoil(url: str, record_id: str, metadata: str, table: str = "reflective_memories") -> None:
    """Store the JSON text ``metadata`` as the metadata of ``record_id`` in ``table``."""
    _write_by_hand(
        url, f"UPDATE {table} SET metadata = %s::jsonb WHERE id = %s", (metadata, record_id)
    )


def _unreadable(record: Any) -> dict[str, Any]:
    assert set(record.metadata) == {UNREADABLE_METADATA_KEY}, record.metadata
    marker: dict[str, Any] = record.metadata[UNREADABLE_METADATA_KEY]
    return marker


def test_the_server_keeps_jsonb_deeper_than_python_decodes(postgres_url: str) -> None:
    """Why the guard is needed on Postgres too: the server takes 5,000 levels (psycopg's
    loader then recursed per level), and refuses 100,000 on its own."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        text = conn.execute("SELECT (%s::jsonb)::text", (deep_json(5_000),)).fetchone()[0]
        assert text.count("[") == 4_999
        with pytest.raises(RecursionError):
            conn.execute("SELECT %s::jsonb", (deep_json(5_000),)).fetchone()
        with pytest.raises(psycopg.errors.StatementTooComplex):
            conn.execute("SELECT %s::jsonb", (deep_json(100_000),))


@pytest.mark.parametrize("levels", [5_000, 995, MAX_NESTING + 1])
def test_one_too_deep_row_leaves_the_namespace_readable(
    stream: MemoryStream, postgres_url: str, levels: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: ``RecursionError`` from every read below (for the rows of 5,000 and 995
    levels; one just over the limit was read as stored, now as on SQLite)."""
    bob = stream.recent()[1]
    raw = deep_json(levels)
    _spoil(postgres_url, bob.id, raw)
    caplog.set_level(logging.WARNING)
    recent = stream.recent()
    assert [r.text for r in recent] == FACTS
    assert [r.metadata for r in recent[::2]] == [{"n": 0}, {"n": 2}]
    marker = _unreadable(recent[1])
    assert marker["json"] == raw  # (as Postgres prints it: here the same text)
    assert f"more than {MAX_NESTING}" in marker["problem"]
    (got,) = stream.get([bob.id])
    assert got.metadata == recent[1].metadata
    hits = stream.retrieve("Bob violin", k=3)
    assert hits[0].record.id == bob.id and hits[0].record.metadata == recent[1].metadata
    assert stream.count() == 3
    assert [r for r in caplog.records if bob.id in r.getMessage()]


def test_the_local_index_reads_past_a_too_deep_row(stream: MemoryStream, postgres_url: str) -> None:
    """The local index keeps the records it returns (a copy of their metadata, made through
    JSON) from the touch that read them: retrievals through it read past the bad row too,
    the first from the server's rows, the next from the records it keeps."""
    bob = stream.recent()[1]
    raw = deep_json(2_000)
    _spoil(postgres_url, bob.id, raw)
    with _open(postgres_url, local_index=True, local_index_wait=True) as s:
        for _ in range(3):
            hits = s.retrieve("Bob violin", k=3)
            assert hits[0].record.id == bob.id
            assert _unreadable(hits[0].record)["json"] == raw
            assert sorted(h.record.metadata["n"] for h in hits[1:]) == [0, 2]


def test_an_export_keeps_the_stored_text_and_imports(
    stream: MemoryStream, postgres_url: str, tmp_path: Path
) -> None:
    """Before: ``RecursionError``. Now the export carries the marker, which imports (here into
    SQLite): nothing of the row is lost."""
    bob = stream.recent()[1]
    _spoil(postgres_url, bob.id, deep_json(1_500))
    out = tmp_path / "out.jsonl"
    assert stream.export_jsonl(out) == 3
    with MemoryStream(WordEmbeddings(16), path=tmp_path / "copy.db") as copy:
        assert copy.import_jsonl(out) == 3
        (moved,) = copy.get([bob.id])
    assert _unreadable(moved)["json"].count("[") == 1_499


def test_a_too_deep_pending_memory_leaves_the_queue_readable(
    stream: MemoryStream, postgres_url: str
) -> None:
    """One too-deep queued memory blocked the whole queue (every drain reads it)."""
    stream.enqueue(["first queued", "second queued"])
    first = stream.pending()[0]
    _spoil(postgres_url, first.id, deep_json(1_200), table="reflective_pending")
    pending = stream.pending()
    assert [p.text for p in pending] == ["first queued", "second queued"]
    assert UNREADABLE_METADATA_KEY in pending[0].metadata
    done = stream.complete_pending(pending)
    assert [r.text for r in done] == ["first queued", "second queued"]
    (stored,) = stream.get([first.id])
    assert _unreadable(stored)["json"].count("[") == 1_199


def test_a_store_item_too_deep_to_read_can_be_read_and_replaced(
    stream: MemoryStream, postgres_url: str
) -> None:
    """The item keeps its key: Postgres prints ``jsonb`` with its shortest keys first, so the
    item's ``key`` still leads the stored text."""
    store = ReflectiveStore(stream)
    store.put(("users", "alice"), "prefs", {"theme": "dark"})
    item_id = ReflectiveStore.memory_id("users/alice", "prefs")
    raw = '{"langgraph_item": {"value": ' + deep_json(1_100) + ', "key": "prefs"}}'
    _spoil(postgres_url, item_id, raw)
    got = store.get(("users", "alice"), "prefs")
    assert got is not None and got.key == "prefs"
    assert UNREADABLE_METADATA_KEY in got.value
    store.put(("users", "alice"), "prefs", {"theme": "blue"})
    again = store.get(("users", "alice"), "prefs")
    assert again is not None and again.value == {"theme": "blue"}
    assert stream.count(namespace="users/alice") == 1
