"""ContextMemory's async twins answer as their sync methods, take the same parameters, and
await the stream's async twins; its constructor refuses what it cannot use."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import ContextMemory, InvalidMemoryError, MemoryStream
from langchain_reflective.thinking import TurnTakenError
from tests.conftest import NOW
from tests.fakes import WordEmbeddings

READS = [
    "last_turn",
    "next_turn",
    "context_by_turn",
    "contexts_by_turn",
    "contexts_by_id",
    "summary_by_turn",
    "recent_summaries",
    "accumulated_summaries",
    "search",
    "recall",
]
TWINS = [*READS, "record_turn", "export_jsonl", "import_jsonl"]
PURE = ["namespace", "context_id", "summary_id"]
"""In-memory computations: no I/O, no twin."""

TURNS = [
    (1, "Files: [main.ts, utils.ts]", "Analyzed the codebase, 3 modules", ["3 modules found"]),
    (2, "Files: [benchmark.ts]", "Bottleneck in utils.ts parseData", ["O(n²) parseData"]),
    (3, "State: optimized", "Implemented the optimization, 10x faster", []),
]


def _filled(path: Path) -> ContextMemory:
    memory = ContextMemory(MemoryStream(WordEmbeddings(), path=path))
    for turn, context, summary, insights in TURNS:
        memory.record_turn(turn, context, summary, insights, now=NOW)
    memory.record_turn(1, "Bob's context", "Bob's summary", namespace="bob", now=NOW)
    return memory


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ContextMemory, ContextMemory]]:
    """Two context memories holding the same turns: one for the sync calls, one for async."""
    sync, asyn = _filled(tmp_path / "sync.db"), _filled(tmp_path / "async.db")
    yield sync, asyn
    sync.stream.close()
    asyn.stream.close()


def _params(fn: Any) -> list[tuple[str, str, Any]]:
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", TWINS)
def test_each_twin_takes_the_sync_methods_parameters(name: str) -> None:
    sync, asyn = getattr(ContextMemory, name), getattr(ContextMemory, "a" + name)
    assert inspect.iscoroutinefunction(asyn)
    assert _params(asyn) == _params(sync)
    assert inspect.signature(asyn).return_annotation == inspect.signature(sync).return_annotation
    assert asyn.__doc__.startswith(f"Async twin of :meth:`{name}`")


def test_every_public_method_with_io_has_a_twin() -> None:
    public = {n for n, v in inspect.getmembers(ContextMemory, inspect.isfunction) if n[0] != "_"}
    sync = {n for n in public if not inspect.iscoroutinefunction(getattr(ContextMemory, n))}
    assert sync == {*TWINS, *PURE}
    assert public - sync == {"a" + n for n in TWINS}


CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("last_turn", (), {}),
    ("last_turn", (), {"namespace": "bob"}),
    ("last_turn", (), {"namespace": "nobody"}),
    ("next_turn", (), {}),
    ("context_by_turn", (2,), {}),
    ("context_by_turn", (9,), {}),
    ("contexts_by_turn", ([3, 1, 9],), {}),
    ("contexts_by_turn", ([1],), {"namespace": "bob"}),
    ("contexts_by_id", (["ctx", "nope"],), {}),
    ("summary_by_turn", (2,), {}),
    ("summary_by_turn", (7,), {}),
    ("recent_summaries", (), {}),
    ("recent_summaries", (2,), {}),
    ("accumulated_summaries", (), {}),
    ("accumulated_summaries", (), {"budget": 20, "max_summaries": 2}),
    ("accumulated_summaries", (), {"budget": None, "namespace": "bob"}),
    ("search", (["bottleneck", "parseData"],), {}),
    ("search", ("modules codebase",), {"k": 1}),
    ("search", (["zebra"],), {}),
    ("recall", (), {"turn_numbers": [3, 7], "context_ids": ["nope"], "limit": 2}),
    ("recall", (), {"turn_numbers": [1], "keywords": ["parseData"], "limit": 3}),
    ("recall", (), {"keywords": ["optimization"], "namespace": "bob"}),
]


async def test_reads_answer_as_the_sync_methods(pair: tuple[ContextMemory, ContextMemory]) -> None:
    sync, asyn = pair
    ids = [sync.context_id(2), sync.summary_id(1), "nope"]
    for name, args, kwargs in CALLS:
        if name == "contexts_by_id":
            args = (ids,)
        expected = getattr(sync, name)(*args, **kwargs)
        got = await getattr(asyn, "a" + name)(*args, **kwargs)
        assert got == expected, (name, args, kwargs)
    assert await asyn.anext_turn() == 4 and await asyn.anext_turn(namespace="bob") == 2
    assert [s.turn for s in await asyn.acontexts_by_id(ids)] == [2, 1]
    found = await asyn.arecall(turn_numbers=[1], keywords=["parseData"], limit=3)
    assert [s.turn for s in found.snapshots] == [1, 2]


async def test_bad_arguments_fail_as_in_sync(pair: tuple[ContextMemory, ContextMemory]) -> None:
    sync, asyn = pair
    bad: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("context_by_turn", (0,), {}),
        ("contexts_by_turn", ([1, True],), {}),
        ("summary_by_turn", (-1,), {}),
        ("recent_summaries", (-2,), {}),
        ("accumulated_summaries", (), {"budget": -1}),
        ("search", (["  "],), {}),
        ("search", ("tea",), {"namespace": ""}),
        ("recall", (), {"turn_numbers": [1], "limit": 0}),
        ("last_turn", (), {"namespace": 3}),
    ]
    for name, args, kwargs in bad:
        with pytest.raises(InvalidMemoryError) as expected:
            getattr(sync, name)(*args, **kwargs)
        with pytest.raises(InvalidMemoryError) as got:
            await getattr(asyn, "a" + name)(*args, **kwargs)
        assert str(got.value) == str(expected.value), name
    with pytest.raises(TurnTakenError, match="the next turn is 4"):
        await asyn.arecord_turn(2, "again", "again")


async def test_reads_await_the_streams_async_twins(
    pair: tuple[ContextMemory, ContextMemory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No sync stream call from an async twin: the reads await ``aget``, ``arecent`` and
    ``aretrieve`` (before, ``asearch`` and ``arecall`` ran sync reads in a worker thread)."""
    _, asyn = pair
    stream = asyn.stream
    for name in ("get", "recent", "retrieve"):

        def refuse(*args: Any, _name: str = name, **kwargs: Any) -> Any:
            raise AssertionError(f"sync stream.{_name} called from an async twin")

        monkeypatch.setattr(stream, name, refuse)
    for name, args, kwargs in CALLS:
        await getattr(asyn, "a" + name)(*args, **kwargs)
    assert (await asyn.acontext_by_turn(2)) is not None


async def test_files_answer_as_the_sync_methods(
    pair: tuple[ContextMemory, ContextMemory], tmp_path: Path
) -> None:
    sync, asyn = pair
    asyn.stream.add("an unrelated observation", now=NOW)  # not a thinking record
    sync.stream.add("an unrelated observation", now=NOW)
    for namespace in (None, "bob"):
        out_sync, out_async = tmp_path / "sync.jsonl", tmp_path / "async.jsonl"
        assert await asyn.aexport_jsonl(out_async, namespace=namespace) == sync.export_jsonl(
            out_sync, namespace=namespace
        )
        assert out_async.read_bytes() == out_sync.read_bytes()
    sync.export_jsonl(tmp_path / "turns.jsonl")
    with (
        MemoryStream(WordEmbeddings(), path=tmp_path / "a.db") as a,
        MemoryStream(WordEmbeddings(), path=tmp_path / "b.db") as b,
    ):
        copy_sync, copy_async = ContextMemory(a), ContextMemory(b)
        imported = await copy_async.aimport_jsonl(tmp_path / "turns.jsonl", namespace="carol")
        assert imported == copy_sync.import_jsonl(tmp_path / "turns.jsonl", namespace="carol")
        assert imported == 6
        assert await copy_async.aimport_jsonl(tmp_path / "turns.jsonl", namespace="carol") == 0
        assert copy_async.accumulated_summaries(namespace="carol") == (
            copy_sync.accumulated_summaries(namespace="carol")
        )
        with pytest.raises(InvalidMemoryError, match="cannot read"):
            await copy_async.aimport_jsonl(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"stream": None}, TypeError, "stream must be a MemoryStream, got NoneType"),
        ({"stream": "memory.db"}, TypeError, "got str"),
        ({"summary_importance": 1.5}, ValueError, r"summary_importance must be a number in \[0"),
        ({"snapshot_importance": -0.1}, ValueError, "snapshot_importance"),
        ({"snapshot_importance": float("nan")}, ValueError, "snapshot_importance"),
        ({"summary_importance": True}, ValueError, "summary_importance"),
        ({"search_min_relevance": float("inf")}, ValueError, "search_min_relevance"),
        ({"search_min_relevance": "0.3"}, ValueError, "search_min_relevance"),
    ],
)
def test_the_constructor_refuses_what_it_cannot_use(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    """Before, a bad importance failed only at the first ``record_turn`` (the summary's, after
    the snapshot was written and had to be deleted again), and a wrong ``stream`` at the first
    read, as an ``AttributeError``."""
    with MemoryStream(WordEmbeddings()) as stream:
        args = {"stream": stream, **kwargs}
        with pytest.raises(error, match=match):
            ContextMemory(args.pop("stream"), **args)
        memory = ContextMemory(stream, summary_importance=1, search_min_relevance=-1)
        assert memory.summary_importance == 1
