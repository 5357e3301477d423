"""What ReflectiveStore adds to the BaseStore contract: items are memories of the stream.

Same key -> same memory; the namespace encoding is reversible and isolates namespaces; query
search ranks with the stream's scores; stream memories (observations, reflections) are items
too; a failed update loses nothing; filters read past the first candidates.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import PutOp

from langchain_reflective import MemoryStream, ReflectiveStore
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
from langchain_reflective.errors import EmbeddingError, InvalidMemoryError, StorageError
from langchain_reflective.store import ITEM_METADATA_KEY, StoreNamespaceError
from langchain_reflective.store_codec import decode_namespace, encode_namespace, render_value
from tests.fakes import WordEmbeddings


class ExplodingEmbeddings(WordEmbeddings):
    """Fails on any text containing EXPLODE (a model outage for one batch)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if any("EXPLODE" in t for t in texts):
            raise EmbeddingError("the embedding service is down")
        return super().embed_documents(texts)


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[MemoryStream]:
    with MemoryStream(ExplodingEmbeddings(), path=tmp_path / "m.db") as s:
        yield s


@pytest.fixture
def store(stream: MemoryStream) -> ReflectiveStore:
    return ReflectiveStore(stream)


# -- namespaces ----------------------------------------------------------------------------


def test_namespace_encoding_is_readable_reversible_and_injective() -> None:
    assert encode_namespace(("alice",)) == "alice"
    assert encode_namespace(("users", "alice")) == "users/alice"
    assert encode_namespace(("a/b", "50%")) == "a%2Fb/50%25"
    rng = random.Random(7)
    alphabet = ["a", "/", "%", "2", "F", "5", "f", "é", " ", "*", "."]
    seen: dict[str, tuple[str, ...]] = {}
    for _ in range(3000):
        ns = tuple(
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
            for _ in range(rng.randint(1, 3))
        )
        name = encode_namespace(ns)
        assert decode_namespace(name) == ns
        assert seen.setdefault(name, ns) == ns  # no two tuples share a stream namespace
    for foreign in ["", "a//b", "/a", "a/", "a%zz", "a%2f", "a%", "x\x00"]:
        assert decode_namespace(foreign) is None


def test_empty_or_bad_namespaces_give_a_clear_typed_error() -> None:
    for bad in [(), ("",), ("a", ""), ("a", None), "alice", ("nul\x00",)]:
        with pytest.raises(StoreNamespaceError) as info:
            encode_namespace(bad)  # type: ignore[arg-type]
        assert isinstance(info.value, InvalidMemoryError)  # one of the package's typed errors
    with pytest.raises(StoreNamespaceError, match="cannot be empty"):
        encode_namespace(())


def test_a_key_that_is_not_unicode_is_a_typed_error(store: ReflectiveStore) -> None:
    """A lone surrogate in a key (a bad decode upstream) escaped from the key's id hash as a
    raw UnicodeEncodeError; puts, gets and deletes refuse it and write nothing."""
    for call in (
        lambda: store.put(("a",), "k\ud800", {"text": "hi"}),
        lambda: store.get(("a",), "k\ud800"),
        lambda: store.delete(("a",), "k\udfff"),
    ):
        with pytest.raises(InvalidMemoryError, match="lone surrogate"):
            call()
    assert store.search(("a",)) == []


def test_prefix_search_never_reads_another_namespace(store: ReflectiveStore) -> None:
    users = ["a", "ab", "a/b", "a%", "b"]
    for user in users:
        store.put((user,), "secret", {"text": f"the tea secret of user {user}"})
        store.put((user, "b"), "secret", {"text": f"the tea secret of user {user} in b"})
    store.stream.add("the tea secret of a foreign namespace", namespace="a//b")
    store.stream.add("the tea secret of another foreign namespace", namespace="a%zz")
    for user in users:
        for query in (None, "tea secret"):
            hits = store.search((user,), query=query, limit=100)
            assert {h.namespace for h in hits} == {(user,), (user, "b")}, (user, query)
            assert all(user in h.value["text"] for h in hits)
        assert {h.namespace for h in store.search((user, "b"), query="tea", limit=100)} == {
            (user, "b")
        }
    everything = store.search((), query="tea secret", limit=100)
    assert len(everything) == 2 * len(users)  # the foreign stream namespaces stay invisible
    assert ("a", "b") in store.list_namespaces() and ("a/b",) in store.list_namespaces()


# -- items are memories --------------------------------------------------------------------


def test_same_key_is_the_same_memory(store: ReflectiveStore, stream: MemoryStream) -> None:
    ns = ("users", "alice")
    store.put(ns, "drink", {"text": "Alice drinks green tea"})
    memory_id = ReflectiveStore.memory_id("users/alice", "drink")
    (record,) = stream.get(memory_id, namespace="users/alice")
    assert record.text == "Alice drinks green tea" and record.kind == "item"
    assert record.metadata[ITEM_METADATA_KEY]["key"] == "drink"

    store.put(ns, "drink", {"text": "Alice switched to black coffee"})
    assert stream.count(namespace="users/alice") == 1
    (record,) = stream.get(memory_id, namespace="users/alice")
    assert record.text == "Alice switched to black coffee"
    assert stream.retrieve("black coffee", k=1, namespace="users/alice")[0].record.id == memory_id
    # the same key in another namespace is another memory
    store.put(("users", "bob"), "drink", {"text": "Bob drinks water"})
    assert stream.get(memory_id, namespace="users/bob") == []
    assert store.get(ns, "drink").value == {"text": "Alice switched to black coffee"}

    store.put(ns, "drink", None)  # put(value=None) deletes
    assert stream.count(namespace="users/alice") == 0 and store.get(ns, "drink") is None


def test_items_are_rated_and_count_towards_reflection(
    store: ReflectiveStore, stream: MemoryStream
) -> None:
    store.batch([PutOp(("u",), f"k{i}", {"text": f"memory number {i}"}) for i in range(3)])
    state = stream.reflection_state("u")
    assert state.adds_since == 3 and state.importance_sum > 0
    (record,) = stream.get(ReflectiveStore.memory_id("u", "k0"), namespace="u")
    assert record.importance_source == "heuristic"


def test_stream_memories_are_items_and_a_put_replaces_them(
    store: ReflectiveStore, stream: MemoryStream
) -> None:
    (obs,) = stream.add("Maria works at the bakery", namespace="maria", importances=0.4)
    (insight,) = stream.add(
        "Maria values her job", kinds="reflection", evidence=[[obs.id]], namespace="maria"
    )
    item = store.get(("maria",), insight.id)
    assert item.value == {
        "text": "Maria values her job",
        "kind": "reflection",
        "importance": insight.importance,
        "evidence": [obs.id],
        "depth": 1,
        "metadata": {},
    }
    kinds = {h.value["kind"] for h in store.search(("maria",), query="Maria job")}
    assert kinds == {"observation", "reflection"}
    assert store.search(("maria",), filter={"kind": "reflection"})[0].key == insight.id

    store.put(("maria",), obs.id, {"text": "Maria now works at the library"})
    assert stream.count(namespace="maria") == 2  # replaced, not duplicated
    (replaced,) = stream.get(obs.id, namespace="maria")  # same id: the insight's evidence holds
    assert replaced.text == "Maria now works at the library"
    store.put(("maria",), obs.id, {"text": "Maria works at the library again"})
    assert stream.get(obs.id, namespace="maria")[0].text == "Maria works at the library again"
    assert stream.count(namespace="maria") == 2
    assert store.get(("maria",), obs.id).value == {"text": "Maria works at the library again"}
    assert [h.key for h in store.search(("maria",), limit=10)].count(obs.id) == 1
    store.delete(("maria",), insight.id)
    assert stream.get(insight.id, namespace="maria") == []


def test_query_scores_are_the_streams_and_searches_do_not_touch(
    store: ReflectiveStore, stream: MemoryStream
) -> None:
    for key, text in [("a", "the cat sat on the mat"), ("b", "dogs chase cats"), ("c", "rain")]:
        store.put(("pets",), key, {"text": text})
    before = {r.id: r.accessed_at for r in stream.recent(namespace="pets")}
    hits = store.search(("pets",), query="cat on a mat", limit=3)
    expected = stream.retrieve("cat on a mat", k=3, namespace="pets", touch=False)
    assert [(h.key, h.score) for h in hits] == [
        (r.record.metadata[ITEM_METADATA_KEY]["key"], pytest.approx(r.score)) for r in expected
    ]
    assert {r.id: r.accessed_at for r in stream.recent(namespace="pets")} == before


def test_results_from_several_namespaces_merge_by_score(store: ReflectiveStore) -> None:
    for i in range(6):
        store.put(("team", f"user{i}"), "note", {"text": f"note {i} about " + "tea " * i})
    hits = store.search(("team",), query="tea", limit=6)
    scores = [h.score for h in hits]
    assert len(hits) == 6 and scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    page = store.search(("team",), query="tea", limit=2, offset=2)
    assert [(h.namespace, h.key) for h in page] == [(h.namespace, h.key) for h in hits[2:4]]


def test_filtered_search_reads_past_the_first_candidates(store: ReflectiveStore) -> None:
    ops = [PutOp(("big",), f"k{i}", {"text": f"garden note {i}", "rare": False}) for i in range(90)]
    ops += [PutOp(("big",), f"r{i}", {"text": f"unrelated {i}", "rare": True}) for i in range(3)]
    store.batch(ops)
    hits = store.search(("big",), query="garden note", filter={"rare": True}, limit=10)
    assert sorted(h.key for h in hits) == ["r0", "r1", "r2"]
    newest = store.search(("big",), filter={"rare": True}, limit=10)  # newest first
    assert [h.key for h in newest] == ["r2", "r1", "r0"]
    assert [h.key for h in store.search(("big",), filter={"rare": True}, offset=1)] == ["r1", "r0"]
    unindexed = [PutOp(("hidden",), f"h{i}", {"text": "garden"}, index=False) for i in range(40)]
    store.batch([*unindexed, PutOp(("hidden",), "shown", {"text": "garden"})])
    assert [h.key for h in store.search(("hidden",), query="garden")] == ["shown"]


# -- values and text -------------------------------------------------------------------------


def test_default_rendering_and_configured_fields(stream: MemoryStream) -> None:
    assert render_value({"memory": "Will likes AI"}) == "Will likes AI"
    assert render_value({"a": 1, "b": "two", "c": [1, "x"]}) == 'a: 1\nb: two\nc: [1, "x"]'
    assert render_value({}) == "{}"
    assert render_value({"n": {"x": "y"}}, ["n.x", "missing"]) == "y"

    store = ReflectiveStore(stream, fields=["memory"])
    store.put(("f",), "k", {"memory": "Will likes AI", "source": "chat 12"})
    (record,) = stream.get(ReflectiveStore.memory_id("f", "k"), namespace="f")
    assert record.text == "Will likes AI"
    store.put(("f",), "k2", {"memory": "x", "title": "Paris trip"}, index=["title"])
    (record,) = stream.get(ReflectiveStore.memory_id("f", "k2"), namespace="f")
    assert record.text == "Paris trip"
    # fields that select nothing: stored (default rendering) but not indexed for query search
    store.put(("f",), "k3", {"other": "Paris trip"})
    assert store.get(("f",), "k3").value == {"other": "Paris trip"}
    assert "k3" not in {h.key for h in store.search(("f",), query="Paris trip")}
    assert "k3" in {h.key for h in store.search(("f",))}
    with pytest.raises(ValueError):
        ReflectiveStore(stream, fields="memory")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ReflectiveStore(object())  # type: ignore[arg-type]


def test_get_returns_the_value_exactly_as_json(store: ReflectiveStore) -> None:
    value = {"nested": {"list": [1, 2.5, None, True], "s": "x\ty"}, "emoji": "🍵", "n": -3}
    store.put(("v",), "k", value)
    assert store.get(("v",), "k").value == value
    # a NUL character: Postgres cannot store it, so no backend takes it (exports move)
    with pytest.raises(InvalidMemoryError, match="NUL"):
        store.put(("v",), "nul", {"s": "x\x00y"})
    assert store.get(("v",), "nul") is None
    store.put(("v",), "t", {"tuple": (1, 2)})
    assert store.get(("v",), "t").value == {"tuple": [1, 2]}  # JSON, as the docs say


# -- a failed update loses nothing -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failed_update_keeps_the_old_memory(
    store: ReflectiveStore, stream: MemoryStream, mode: str
) -> None:
    store.put(("u",), "k", {"text": "the original value"})
    store.put(("u",), "other", {"text": "another value"})
    original = store.get(("u",), "k")
    ops = [PutOp(("u",), "k", {"text": "EXPLODE"}), PutOp(("u",), "other", None)]
    with pytest.raises(EmbeddingError):
        if mode == "sync":
            store.batch(ops)
        else:
            asyncio.run(store.abatch(ops))
    restored = store.get(("u",), "k")
    assert restored.value == original.value and restored.created_at == original.created_at
    assert store.get(("u",), "other").value == {"text": "another value"}
    assert stream.count(namespace="u") == 2
    hit = store.search(("u",), query="original value", limit=1)[0]
    assert hit.key == "k"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_update_failing_in_storage_never_deleted_the_old_memory(
    store: ReflectiveStore, stream: MemoryStream, tmp_path: Path, mode: str, monkeypatch: Any
) -> None:
    """The delete of the old memory and the insert of the new one are one transaction: when the
    insert fails after the delete ran, the old row is still there (the same row, not a copy
    written back afterwards, which a crash at that moment could not have done)."""
    store.put(("u",), "k", {"text": "the original value"})
    original = store.get(("u",), "k")

    def seq_of_k() -> list[tuple[int]]:
        with contextlib.closing(sqlite3.connect(tmp_path / "m.db")) as conn:
            rows = conn.execute("SELECT seq FROM memories WHERE text = 'the original value'")
            return rows.fetchall()

    before = seq_of_k()

    def failing_insert(*args: Any, **kwargs: Any) -> list[int]:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SQLiteRecordStore, "_insert_in", failing_insert)
    with pytest.raises(StorageError):
        if mode == "sync":
            store.put(("u",), "k", {"text": "the new value"})
        else:
            asyncio.run(store.aput(("u",), "k", {"text": "the new value"}))
    monkeypatch.undo()
    assert store.get(("u",), "k").value == original.value
    assert seq_of_k() == before and len(before) == 1
    assert stream.count(namespace="u") == 1


def test_a_failed_update_reports_its_own_error_when_storage_is_gone(
    store: ReflectiveStore, stream: MemoryStream, monkeypatch: Any
) -> None:
    """When the storage fails the put and then also the check of what is left, the caller sees
    the put's error (not the check's), and nothing is written back blindly."""
    store.put(("u",), "k", {"text": "the original value"})
    reads = {"n": 0}
    real_get = MemoryStream.get

    def get_then_fail(self: MemoryStream, *args: Any, **kwargs: Any) -> Any:
        reads["n"] += 1
        if reads["n"] > 1:
            raise StorageError("the check failed too")
        return real_get(self, *args, **kwargs)

    def failing_insert(*args: Any, **kwargs: Any) -> list[int]:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(MemoryStream, "get", get_then_fail)
    monkeypatch.setattr(SQLiteRecordStore, "_insert_in", failing_insert)
    with pytest.raises(StorageError, match="disk I/O error"):
        store.put(("u",), "k", {"text": "the new value"})
    monkeypatch.undo()
    assert reads["n"] == 2
    assert store.get(("u",), "k").value == {"text": "the original value"}
    assert stream.count(namespace="u") == 1


def test_a_new_item_failing_writes_nothing(store: ReflectiveStore, stream: MemoryStream) -> None:
    with pytest.raises(EmbeddingError):
        store.put(("u",), "k", {"text": "EXPLODE now"})
    assert store.get(("u",), "k") is None and stream.count(namespace="u") == 0


def test_created_at_survives_updates_and_updated_at_moves(store: ReflectiveStore) -> None:
    store.put(("t",), "k", {"v": 1})
    first = store.get(("t",), "k")
    store.put(("t",), "k", {"v": 2})
    second = store.get(("t",), "k")
    assert second.created_at == first.created_at
    assert second.updated_at >= first.updated_at
    assert first.created_at <= datetime.now(UTC)


async def test_async_twins_share_the_flow(store: ReflectiveStore, stream: MemoryStream) -> None:
    await store.aput(("x",), "k", {"text": "async tea"})
    assert (await store.aget(("x",), "k")).value == {"text": "async tea"}  # type: ignore[union-attr]
    hits = await store.asearch(("x",), query="tea")
    assert [h.key for h in hits] == ["k"] and hits[0].score is not None
    assert await store.alist_namespaces() == [("x",)]
    await store.adelete(("x",), "k")
    assert stream.count(namespace="x") == 0
    results: list[Any] = await asyncio.gather(
        *(store.aput(("y",), f"k{i}", {"text": f"t{i}"}) for i in range(8))
    )
    assert results == [None] * 8 and stream.count(namespace="y") == 8


def test_concurrent_puts_to_one_key_take_turns(
    store: ReflectiveStore, stream: MemoryStream
) -> None:
    import threading

    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for j in range(15):
                store.put(("c",), "same", {"v": i * 100 + j})
                store.put(("c", str(i)), "mine", {"v": j})
        except BaseException as exc:  # pragma: no cover - the failure being tested for
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert stream.count(namespace="c") == 1
    assert store.get(("c",), "same").value["v"] % 100 == 14  # some writer's last put

    async def many() -> None:
        await asyncio.gather(*(store.aput(("d",), "same", {"v": i}) for i in range(10)))

    asyncio.run(many())
    assert stream.count(namespace="d") == 1 and store.get(("d",), "same") is not None


def test_a_cancelled_async_put_releases_its_namespace(store: ReflectiveStore) -> None:
    async def scenario() -> None:
        slow = asyncio.ensure_future(store.aput(("e",), "k", {"v": 1}))
        waiting = asyncio.ensure_future(store.aput(("e",), "k", {"v": 2}))
        await asyncio.sleep(0)
        waiting.cancel()
        await slow
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.wait_for(store.aput(("e",), "k", {"v": 3}), timeout=30)

    asyncio.run(scenario())
    assert store.get(("e",), "k").value == {"v": 3}


class SlowAsyncEmbeddings(WordEmbeddings):
    """Async embedding takes a moment (a model API call), so an ``aput`` holds its namespace."""

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        await asyncio.sleep(0.3)
        return self.embed_documents(texts)


def test_a_sync_put_in_the_loop_of_an_async_put_fails_instead_of_hanging(tmp_path: Path) -> None:
    """A sync put inside an async node while an ``aput`` of the same event loop writes that
    namespace could never get its turn (the waiting thread is the loop the ``aput`` needs):
    it raises at once, naming the async method. Other namespaces, and sync puts from other
    threads, still wait their turn and succeed."""
    import threading

    with MemoryStream(SlowAsyncEmbeddings(), path=tmp_path / "loop.db") as stream:
        store = ReflectiveStore(stream)

        async def scenario() -> None:
            slow = asyncio.ensure_future(store.aput(("u",), "a", {"text": "from a"}))
            await asyncio.sleep(0.05)  # the aput holds ("u",) while it embeds
            with pytest.raises(asyncio.InvalidStateError, match=r"await store\.aput"):
                store.put(("u",), "b", {"text": "from b"})
            store.put(("v",), "b", {"text": "another namespace"})
            other = threading.Thread(target=store.put, args=(("u",), "c", {"text": "from c"}))
            other.start()
            await slow
            await asyncio.to_thread(other.join, 30)
            store.put(("u",), "b", {"text": "from b"})  # the namespace is free again

        failed: list[BaseException] = []

        def run() -> None:  # in a thread: a loop blocked for good cannot time itself out
            try:
                asyncio.run(scenario())
            except BaseException as exc:  # pragma: no cover - the failure being tested for
                failed.append(exc)

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        runner.join(60)
        assert not runner.is_alive(), "the sync put waited forever for the loop's aput"
        assert failed == []
        assert sorted(i.key for i in store.search(("u",))) == ["a", "b", "c"]
        assert store.get(("v",), "b") is not None


def test_the_docstring_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    import textwrap

    doc = ReflectiveStore.__doc__ or ""
    code = textwrap.dedent(doc.split(".. code-block:: python", 1)[1]).strip()
    names: dict[str, Any] = {}
    exec(compile(code, "ReflectiveStore.__doc__", "exec"), names)
    assert names["stream"]._closed  # the example closes what it opens (with)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "{'text': 'Alice drinks green tea'}"
    assert out[1].startswith("tea ")
