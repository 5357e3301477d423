"""The async twins of MemoryStream's reads, deletes and counter calls answer as their sync
methods do, take the same parameters, and await the backend's async twins."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import (
    InvalidMemoryError,
    MemoryRecord,
    MemoryStream,
    SQLiteBackend,
    StorageError,
)
from langchain_reflective.stream_base import StreamBase
from tests.conftest import NOW
from tests.fakes import WordEmbeddings

TWINS = [
    "get",
    "recent",
    "most_important",
    "delete",
    "discard_pending",
    "purge",
    "count",
    "namespaces",
    "reflection_state",
    "mark_reflected",
]
FACTS = ["Alice drinks tea", "Bob moved to Paris", "Carol has a dog", "Dave plays chess"]
IDS = ["m1", "m2", "m3", "m4"]


def _filled(namespace: str = "default") -> MemoryStream:
    stream = MemoryStream(WordEmbeddings())
    stream.add(FACTS, importances=[0.2, 0.9, 0.5, 0.7], ids=IDS, now=NOW, namespace=namespace)
    stream.add(["Erin is a reflection"], kinds="reflection", ids=["r1"], importances=0.6, now=NOW)
    return stream


@pytest.fixture
def pair() -> Iterator[tuple[MemoryStream, MemoryStream]]:
    """Two streams holding the same memories: one for the sync calls, one for the async."""
    sync, asyn = _filled(), _filled()
    yield sync, asyn
    sync.close()
    asyn.close()


def _params(fn: Any) -> list[tuple[str, str, Any]]:
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", TWINS)
def test_each_twin_takes_the_sync_methods_parameters(name: str) -> None:
    sync, asyn = getattr(StreamBase, name), getattr(StreamBase, "a" + name)
    assert inspect.iscoroutinefunction(asyn)
    assert _params(asyn) == _params(sync)
    assert asyn.__doc__ == f"Async twin of :meth:`{name}`."


def _texts(records: list[MemoryRecord]) -> list[str]:
    return [r.text for r in records]


async def test_reads_answer_as_the_sync_methods(pair: tuple[MemoryStream, MemoryStream]) -> None:
    sync, asyn = pair
    assert _texts(await asyn.aget(["m3", "nope", "m1"])) == _texts(sync.get(["m3", "nope", "m1"]))
    assert _texts(await asyn.aget("m2")) == _texts(sync.get("m2")) == ["Bob moved to Paris"]
    for kwargs in ({}, {"kinds": ["observation"]}, {"since_last_reflection": True}):
        assert _texts(await asyn.arecent(2, **kwargs)) == _texts(sync.recent(2, **kwargs))
    assert _texts(await asyn.arecent()) == _texts(sync.recent())
    assert _texts(await asyn.amost_important(3)) == _texts(sync.most_important(3))
    assert _texts(await asyn.amost_important(3, kinds="reflection")) == ["Erin is a reflection"]
    assert await asyn.acount() == sync.count() == 5
    assert await asyn.acount(namespace="other") == sync.count(namespace="other") == 0
    assert await asyn.anamespaces() == sync.namespaces() == ["default"]
    assert await asyn.areflection_state() == sync.reflection_state()


async def test_writes_answer_as_the_sync_methods(pair: tuple[MemoryStream, MemoryStream]) -> None:
    sync, asyn = pair
    assert await asyn.adelete(["m1", "nope"]) == sync.delete(["m1", "nope"]) == 1
    assert _texts(await asyn.arecent()) == _texts(sync.recent())

    later = NOW + timedelta(hours=1)
    await asyn.amark_reflected(now=later)
    sync.mark_reflected(now=later)
    assert await asyn.areflection_state() == sync.reflection_state()
    assert sync.reflection_state().last_reflection_at == later
    assert await asyn.arecent(since_last_reflection=True) == []

    queued = [p.id for p in asyn.enqueue(["one", "two"])]
    sync_queued = [p.id for p in sync.enqueue(["one", "two"])]
    assert await asyn.adiscard_pending(queued[:1]) == sync.discard_pending(sync_queued[:1]) == 1
    assert [p.text for p in asyn.pending()] == [p.text for p in sync.pending()] == ["two"]

    assert await asyn.apurge() == sync.purge() == 4
    assert await asyn.acount() == sync.count() == 0


async def test_bad_arguments_and_a_closed_stream_fail_as_in_sync(
    pair: tuple[MemoryStream, MemoryStream],
) -> None:
    sync, asyn = pair
    bad: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("get", (1,), {}),
        ("recent", (-1,), {}),
        ("recent", (2,), {"kinds": [""]}),
        ("most_important", (True,), {}),
        ("delete", (None,), {}),
        ("purge", (), {"namespace": ""}),
        ("count", (), {"namespace": 3}),
    ]
    for name, args, kwargs in bad:
        with pytest.raises(InvalidMemoryError) as expected:
            getattr(sync, name)(*args, **kwargs)
        with pytest.raises(InvalidMemoryError) as got:
            await getattr(asyn, "a" + name)(*args, **kwargs)
        assert str(got.value) == str(expected.value), name
    await asyn.aclose()
    for name in ("count", "namespaces", "reflection_state", "purge", "mark_reflected"):
        with pytest.raises(StorageError, match="closed"):
            await getattr(asyn, "a" + name)()


async def test_twins_await_the_backends_async_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    """No sync backend call on the event loop: each twin awaits the backend's ``a*`` method."""
    stream = _filled()
    backend = stream.backend
    assert isinstance(backend, SQLiteBackend)
    awaited: list[str] = []
    for name in (
        *("get", "recent", "delete", "discard_pending", "purge", "count", "namespaces"),
        *("reflection_state", "update_counter"),
    ):
        sync_twin = getattr(SQLiteBackend, name)
        monkeypatch.setattr(backend, name, _refuse(name))
        monkeypatch.setattr(backend, "a" + name, _spy(awaited, name, sync_twin, backend))
    await stream.aget("m1")
    await stream.arecent(1)
    await stream.amost_important(1)
    await stream.adelete("m1")
    await stream.adiscard_pending("nope")
    await stream.acount()
    await stream.anamespaces()
    await stream.areflection_state()
    await stream.amark_reflected()
    await stream.apurge()
    assert awaited == [
        "get",
        "recent",
        "recent",
        "delete",
        "discard_pending",
        "count",
        "namespaces",
        "reflection_state",
        "update_counter",
        "purge",
    ]
    monkeypatch.undo()
    stream.close()


def _refuse(name: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"sync backend.{name} called from an async twin")

    return refuse


def _spy(awaited: list[str], name: str, sync_twin: Any, backend: Any) -> Any:
    async def spy(*args: Any, **kwargs: Any) -> Any:
        awaited.append(name)
        return sync_twin(backend, *args, **kwargs)

    return spy


# -- the queue, the files and the table ---------------------------------------------------------

STREAM_TWINS = ["enqueue", "pending", "to_dataframe", "export_jsonl", "import_jsonl"]
FLOWS = ["add", "retrieve", "complete_pending", "close"]


@pytest.mark.parametrize("name", [*STREAM_TWINS, *FLOWS])
def test_each_stream_twin_takes_the_sync_methods_parameters(name: str) -> None:
    sync, asyn = getattr(MemoryStream, name), getattr(MemoryStream, "a" + name)
    assert inspect.iscoroutinefunction(asyn)
    assert _params(asyn) == _params(sync)
    assert inspect.signature(asyn).return_annotation == inspect.signature(sync).return_annotation
    assert asyn.__doc__.startswith(f"Async twin of :meth:`{name}`")


def _queued(items: list[Any]) -> list[tuple[Any, ...]]:
    return [(p.namespace, p.text, p.kind, p.created_at, p.importance, p.metadata) for p in items]


async def test_enqueue_and_pending_answer_as_the_sync_methods(
    pair: tuple[MemoryStream, MemoryStream],
) -> None:
    sync, asyn = pair
    args: dict[str, Any] = {
        "importances": [0.4, None],
        "kinds": "observation",
        "metadatas": {"source": "chat"},
        "now": NOW,
    }
    got = await asyn.aenqueue(["Alice likes tea", "Bob moved"], **args)
    expected = sync.enqueue(["Alice likes tea", "Bob moved"], **args)
    assert _queued(got) == _queued(expected) and len(got) == 2
    await asyn.aenqueue("Carol has a dog", namespace="carol", now=NOW)
    sync.enqueue("Carol has a dog", namespace="carol", now=NOW)
    for kwargs in ({}, {"n": 1}, {"namespace": "carol"}, {"all_namespaces": True, "n": 2}):
        assert _queued(await asyn.apending(**kwargs)) == _queued(sync.pending(**kwargs))
    assert [p.id for p in await asyn.apending()] == [p.id for p in got]  # durably queued
    for bad in ({"texts": ""}, {"texts": "x", "importances": 2.0}, {"texts": "x", "kinds": ""}):
        with pytest.raises(InvalidMemoryError) as expected_error:
            sync.enqueue(**bad)
        with pytest.raises(InvalidMemoryError) as got_error:
            await asyn.aenqueue(**bad)
        assert str(got_error.value) == str(expected_error.value)
    assert len(asyn.pending(all_namespaces=True)) == 3  # nothing queued by the refusals


async def test_enqueue_awaits_the_backends_async_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _filled()
    backend = stream.backend
    awaited: list[str] = []
    for name in ("enqueue", "pending"):
        sync_twin = getattr(SQLiteBackend, name)
        monkeypatch.setattr(backend, name, _refuse(name))
        monkeypatch.setattr(backend, "a" + name, _spy(awaited, name, sync_twin, backend))
    await stream.aenqueue("queued", now=NOW)
    assert [p.text for p in await stream.apending()] == ["queued"]
    assert awaited == ["enqueue", "pending"]
    monkeypatch.undo()
    stream.close()


async def test_dataframe_answers_as_the_sync_method(
    pair: tuple[MemoryStream, MemoryStream],
) -> None:
    pandas = pytest.importorskip("pandas")
    sync, asyn = pair
    later = NOW + timedelta(hours=2)
    for query, kwargs in ((None, {}), ("Bob Paris", {}), ("tea", {"namespace": "default"})):
        got = await asyn.ato_dataframe(query, now=later, **kwargs)
        pandas.testing.assert_frame_equal(got, sync.to_dataframe(query, now=later, **kwargs))
        assert len(got) == 5
    assert (await asyn.ato_dataframe("Bob Paris", now=later))["description"].iloc[0] == FACTS[1]
    assert (await asyn.ato_dataframe(namespace="other")).empty
    assert asyn.recent()[0].accessed_at == NOW  # nothing touched
    with pytest.raises(InvalidMemoryError):
        await asyn.ato_dataframe("  ")


async def test_export_and_import_answer_as_the_sync_methods(tmp_path: Path) -> None:
    source = _filled()
    source.add("Frank is elsewhere", namespace="frank", ids=["f1"], importances=0.3, now=NOW)
    for kwargs in ({}, {"namespaces": "all"}, {"namespaces": ["frank"], "include_vectors": False}):
        sync_file, async_file = tmp_path / "sync.jsonl", tmp_path / "async.jsonl"
        written = await source.aexport_jsonl(async_file, **kwargs)
        assert written == source.export_jsonl(sync_file, **kwargs)
        assert async_file.read_bytes() == sync_file.read_bytes()
    everything = tmp_path / "all.jsonl"
    source.export_jsonl(everything, namespaces="all")
    for kwargs in ({}, {"namespace": "moved", "batch_size": 2}):
        sync, asyn = MemoryStream(WordEmbeddings()), MemoryStream(WordEmbeddings())
        assert await asyn.aimport_jsonl(everything, **kwargs) == sync.import_jsonl(
            everything, **kwargs
        )
        assert await asyn.aimport_jsonl(everything, **kwargs) == 0  # existing ids are skipped
        again_sync, again_async = tmp_path / "again-sync.jsonl", tmp_path / "again-async.jsonl"
        sync.export_jsonl(again_sync, namespaces="all")
        asyn.export_jsonl(again_async, namespaces="all")
        assert again_async.read_bytes() == again_sync.read_bytes()
        sync.close()
        asyn.close()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "something else"}\n', encoding="utf-8")
    with pytest.raises(InvalidMemoryError, match="not a langchain-reflective export"):
        await source.aimport_jsonl(bad)
    await source.aclose()
    for call in (source.aexport_jsonl(tmp_path / "x.jsonl"), source.aimport_jsonl(everything)):
        with pytest.raises(StorageError, match="closed"):
            await call


def test_every_public_method_with_io_has_a_twin() -> None:
    """The API surface: a public sync method that reads or writes has an ``a`` twin (checked
    above to take its parameters); the exceptions do no storage I/O."""
    public = {n for n, _ in inspect.getmembers(MemoryStream, inspect.isfunction) if n[0] != "_"}
    sync = {n for n in public if not inspect.iscoroutinefunction(getattr(MemoryStream, n))}
    no_twin = {"resolve_namespace", "models_accept"}  # pure; the drain's model probe
    assert {n for n in sync if "a" + n not in public} == no_twin
    assert {n for n in public - sync if n[1:] not in sync} == set()
    assert {*TWINS, *STREAM_TWINS, *FLOWS} == sync - no_twin
