"""ReflectiveStore's write turns: a cancelled async write keeps its namespace until the write it
started has finished; the turns belong to the stream, not to one store object; and the lock
table keeps no entry for a namespace nobody writes.

A write of the stream runs in a worker thread (SQLite), which cancelling the awaiting task does
not stop: the tests hold the backend inside such a write with an event, cancel the task, and
check that no later write of the key gets ahead of it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import PutOp

from langchain_reflective import MemoryStream, ReflectiveStore
from tests.fakes import WordEmbeddings


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[MemoryStream]:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "cancel.db") as s:
        yield s


class Gate:
    """Holds the first call of a backend method until opened (the write stays in its thread)."""

    def __init__(self, stream: MemoryStream, method: str) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        backend = stream._backend
        real: Callable[..., Any] = getattr(backend, method)
        first = [True]

        def held(*args: Any, **kwargs: Any) -> Any:
            if first[0]:
                first[0] = False
                self.entered.set()
                assert self.opened.wait(30), "the gate was never opened"
            return real(*args, **kwargs)

        setattr(backend, method, held)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 30), "the write never started"


async def _cancelled(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def _stale_write(store: ReflectiveStore, first: str) -> asyncio.Task[None]:
    """The write the test cancels: a put of key ``k`` of ``("ns",)``, or its delete."""
    if first == "put":
        return asyncio.create_task(store.aput(("ns",), "k", {"v": "cancelled"}))
    return asyncio.create_task(store.adelete(("ns",), "k"))


@pytest.mark.parametrize("first", ["put", "delete"])
def test_a_cancelled_write_keeps_its_namespace_until_it_has_landed(
    stream: MemoryStream, first: str
) -> None:
    """The cancelled write still lands (its thread cannot be stopped), so a later put of the key
    must wait for it: the later, acknowledged put is the value that stays. The cancellation
    itself reaches the caller at once, while the write is still held."""
    store = ReflectiveStore(stream)
    store.put(("ns",), "k", {"v": "original"})
    gate = Gate(stream, "replace" if first == "put" else "delete")

    async def scenario() -> None:
        stale = _stale_write(store, first)
        await gate.wait_entered()
        await asyncio.wait_for(_cancelled(stale), timeout=5)  # at once, the write still held
        assert not gate.opened.is_set()
        later = asyncio.ensure_future(store.aput(("ns",), "k", {"v": "acknowledged"}))
        await asyncio.sleep(0.3)
        assert not later.done()  # it waits for the cancelled write's turn to end
        gate.opened.set()
        await asyncio.wait_for(later, timeout=30)

    asyncio.run(scenario())
    item = store.get(("ns",), "k")
    assert item is not None and item.value == {"v": "acknowledged"}
    assert stream.count(namespace="ns") == 1
    assert len(store._locks) == 0


def test_a_cancelled_batch_starts_no_further_write(stream: MemoryStream) -> None:
    """Cancelled inside the write of its first namespace, a batch finishes that write and writes
    no other namespace; a sync put of the held namespace from another thread waits for it."""
    store = ReflectiveStore(stream)
    gate = Gate(stream, "put")  # (a new key: no memory to replace)
    done: list[str] = []

    async def scenario() -> None:
        batch = asyncio.ensure_future(
            store.abatch([PutOp(("a",), "k", {"v": 1}), PutOp(("b",), "k", {"v": 2})])
        )
        await gate.wait_entered()
        await _cancelled(batch)
        waiter = threading.Thread(
            target=lambda: (store.put(("a",), "k", {"v": 3}), done.append("sync put"))
        )
        waiter.start()
        await asyncio.sleep(0.3)
        assert done == []  # ("a",) is still the cancelled batch's
        gate.opened.set()
        await asyncio.to_thread(waiter.join, 30)

    asyncio.run(scenario())
    assert done == ["sync put"]
    assert store.get(("a",), "k").value == {"v": 3}  # type: ignore[union-attr]
    assert store.get(("b",), "k") is None
    assert len(store._locks) == 0


def test_two_stores_over_one_stream_take_turns(stream: MemoryStream) -> None:
    """One wrapper per request or per graph over one stream: a new key put through both at
    once is inserted once and replaced once, never inserted twice (a duplicate id)."""
    first, second = ReflectiveStore(stream), ReflectiveStore(stream)
    gate = Gate(stream, "put")
    errors: list[BaseException] = []

    def put(store: ReflectiveStore, value: str) -> None:
        try:
            store.put(("ns",), "new", {"v": value})
        except BaseException as exc:  # pragma: no cover - the failure being tested for
            errors.append(exc)

    one = threading.Thread(target=put, args=(first, "one"))
    one.start()
    assert gate.entered.wait(30)
    two = threading.Thread(target=put, args=(second, "two"))
    two.start()
    two.join(0.5)  # (waits for its turn: the first write is held)
    gate.opened.set()
    one.join(30)
    two.join(30)
    assert errors == []
    assert store_value(first) == {"v": "two"}
    assert stream.count(namespace="ns") == 1
    assert first._locks is second._locks


def store_value(store: ReflectiveStore) -> Any:
    item = store.get(("ns",), "new")
    return None if item is None else item.value


def test_the_lock_table_forgets_namespaces_nobody_writes(stream: MemoryStream) -> None:
    """One namespace per user or thread: the table holds an entry only while a batch holds or
    waits for it, so it does not grow with the namespaces ever written."""
    store = ReflectiveStore(stream)
    for i in range(300):
        store.batch([PutOp(("users", f"u{i}"), "k", None)])
        store.put(("users", f"u{i}"), "k", {"v": i})

    async def writes() -> None:
        await asyncio.gather(*(store.aput(("t", str(i % 7)), "k", {"v": i}) for i in range(40)))

    asyncio.run(writes())
    assert len(store._locks) == 0
    assert ReflectiveStore(stream)._locks is store._locks  # (still the stream's table)


class SlowEmbeddings(WordEmbeddings):
    """Embeds after a pause (async), so a cancellation can come while the add embeds."""

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        await asyncio.sleep(0.5)
        return self.embed_documents(texts)


def test_a_put_cancelled_while_it_embeds_writes_nothing_and_frees_its_namespace(
    tmp_path: Path,
) -> None:
    """The first version of the turn kept the whole add running (its embedding, then its
    write) after a cancellation, and the namespace held meanwhile: a put that timed out while
    the embedding service hung was written later anyway, and held its namespace as long."""

    async def scenario(store: ReflectiveStore) -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(store.aput(("u",), "k", {"text": "hello"}), 0.1)
        assert len(store._locks) == 0  # free at once
        await asyncio.sleep(0.8)  # (past the embedding's pause)
        assert await store.aget(("u",), "k") is None

    with MemoryStream(SlowEmbeddings(), path=tmp_path / "slow.db") as slow:
        store = ReflectiveStore(slow)
        asyncio.run(scenario(store))
        assert slow.count() == 0


def test_a_stream_add_cancelled_in_its_write_returns_once_the_write_has_landed(
    stream: MemoryStream,
) -> None:
    """Without a store keeping order, a cancelled ``aadd`` whose write has started waits for it:
    the caller that gave up and adds again never has the older write land after the newer.
    Cancelled while it embeds, it writes nothing."""
    gate = Gate(stream, "put")

    async def scenario() -> None:
        adding = asyncio.ensure_future(stream.aadd("the older memory", importances=0.5))
        await gate.wait_entered()
        adding.cancel()
        await asyncio.sleep(0.2)
        assert not adding.done()  # waits for the write it started
        gate.opened.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(adding, timeout=30)
        assert [r.text for r in await stream.arecent(None)] == ["the older memory"]

    asyncio.run(scenario())


@pytest.mark.parametrize("first", ["put", "delete"])
def test_a_cancelled_write_keeps_its_namespace_through_the_event_loops_teardown(
    stream: MemoryStream, first: str
) -> None:
    """``asyncio.run`` cancels every task left when its coroutine returns, the task awaiting a
    cancelled batch's write among them, then waits for the worker threads: the namespace
    stayed the write's until its thread ended, not until that task was cancelled (a sync put of
    another thread could land first, and the older write then overwrote it)."""
    store = ReflectiveStore(stream)
    store.put(("ns",), "k", {"v": "original"})
    gate = Gate(stream, "replace" if first == "put" else "delete")
    returned = threading.Event()

    async def scenario() -> None:
        stale = _stale_write(store, first)
        await gate.wait_entered()
        await _cancelled(stale)
        returned.set()  # (asyncio.run now cancels the tasks left, then joins the threads)

    loop_thread = threading.Thread(target=asyncio.run, args=(scenario(),))
    loop_thread.start()
    later = threading.Thread(target=store.put, args=(("ns",), "k", {"v": "acknowledged"}))
    try:
        assert returned.wait(30)
        loop_thread.join(0.2)  # (the teardown cancels the tasks left at once)
        assert loop_thread.is_alive()  # (it waits for the held write's thread)
        later.start()
        later.join(0.3)
        assert later.is_alive()  # the namespace is still the cancelled write's
    finally:
        gate.opened.set()
        loop_thread.join(30)
        if later.ident is not None:
            later.join(30)
    item = store.get(("ns",), "k")
    assert item is not None and item.value == {"v": "acknowledged"}
    assert len(store._locks) == 0
