"""The documented LangGraph ``BaseStore`` contract, run against ReflectiveStore, sync and async.

LangGraph ships no store test suite a third-party store can run (``checkpoint-conformance``
covers checkpointers only), so the contract tests of ``libs/checkpoint/tests/test_store.py`` and
``libs/checkpoint-sqlite/tests/test_store.py`` (langgraph @ f09cfe8) are ported here: batch
order, get/put/delete, search with filters and pagination, list_namespaces with prefixes,
suffixes, wildcards and depth, namespace segment boundaries and literal metacharacters, query
search with updates and ``index=False``, non-ASCII text, namespace validation, TTL refusal.
Every test runs twice: on the store's sync methods and on its async twins.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from langchain_reflective import MemoryStream, ReflectiveStore
from langchain_reflective.errors import InvalidFilterError, InvalidMemoryError
from tests.fakes import WordEmbeddings


class AsyncTwins:
    """The store's async methods behind its sync names (each call in a fresh event loop)."""

    def __init__(self, store: ReflectiveStore) -> None:
        self.inner = store
        self.stream = store.stream

    def __getattr__(self, name: str) -> Any:
        amethod = getattr(self.inner, "a" + name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run(amethod(*args, **kwargs))

        return call


@pytest.fixture(params=["sync", "async"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "store.db") as stream:
        inner = ReflectiveStore(stream)
        yield inner if request.param == "sync" else AsyncTwins(inner)


# -- batches (checkpoint-sqlite: test_batch_*) ------------------------------------------------


def test_batch_order(store: Any) -> None:
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})
    results = store.batch(
        [
            GetOp(namespace=("test", "foo"), key="key1"),
            PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
            SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(namespace=("test",), key="key3"),
        ]
    )
    assert len(results) == 5
    assert isinstance(results[0], Item)
    assert results[0].value == {"data": "value1"}
    assert results[0].key == "key1" and results[0].namespace == ("test", "foo")
    assert results[1] is None
    assert [i.key for i in results[2]] == ["key1"] and results[2][0].value == {"data": "value1"}
    assert ("test", "foo") in results[3] and ("test", "bar") in results[3]
    assert results[4] is None

    results = store.batch(
        [
            SearchOp(namespace_prefix=("test",), filter=None, limit=5, offset=0),
            GetOp(namespace=("test", "bar"), key="key2"),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
            PutOp(namespace=("test",), key="key3", value={"data": "value3"}),
            GetOp(namespace=("test", "foo"), key="key1"),
        ]
    )
    assert len(results[0]) == 2
    assert results[1].value == {"data": "value2"} and results[1].namespace == ("test", "bar")
    assert results[3] is None
    assert results[4].value == {"data": "value1"}
    assert store.get(("test",), "key3").value == {"data": "value3"}


def test_batch_get_put_and_delete_ops(store: Any) -> None:
    assert store.batch(
        [
            PutOp(namespace=("test",), key="key1", value={"data": "value1"}),
            PutOp(namespace=("test",), key="key2", value={"data": "value2"}),
            PutOp(namespace=("test",), key="key3", value=None),
        ]
    ) == [None, None, None]
    results = store.batch(
        [GetOp(("test",), "key1"), GetOp(("test",), "key2"), GetOp(("test",), "key3")]
    )
    assert [r.key if r else None for r in results] == ["key1", "key2", None]
    assert results[0].value == {"data": "value1"}


def test_batch_search_ops(store: Any) -> None:
    for namespace, key, value in [
        (("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
        (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
        (("test", "baz"), "key3", {"data": "value3", "tag": "b"}),
    ]:
        store.put(namespace, key, value)
    results = store.batch(
        [
            SearchOp(namespace_prefix=("test",), filter={"tag": "a"}, limit=10, offset=0),
            SearchOp(namespace_prefix=("test",), filter=None, limit=2, offset=0),
            SearchOp(namespace_prefix=("test", "foo"), filter=None, limit=10, offset=0),
        ]
    )
    assert sorted(i.key for i in results[0]) == ["key1", "key2"]
    assert len(results[1]) == 2
    assert [(i.namespace, i.key) for i in results[2]] == [(("test", "foo"), "key1")]


def test_batch_list_namespaces_ops(store: Any) -> None:
    data = [
        (("test", "documents", "public"), "doc1", {"content": "public doc"}),
        (("test", "documents", "private"), "doc2", {"content": "private doc"}),
        (("test", "images", "public"), "img1", {"content": "public image"}),
        (("prod", "documents", "public"), "doc3", {"content": "prod doc"}),
    ]
    for namespace, key, value in data:
        store.put(namespace, key, value)
    results = store.batch(
        [
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=2, limit=10, offset=0),
            ListNamespacesOp(
                match_conditions=(MatchCondition("suffix", ("public",)),), limit=10, offset=0
            ),
        ]
    )
    assert sorted(results[0]) == sorted(ns for ns, _, _ in data)
    assert results[1] == [("prod", "documents"), ("test", "documents"), ("test", "images")]
    assert sorted(results[2]) == [
        ("prod", "documents", "public"),
        ("test", "documents", "public"),
        ("test", "images", "public"),
    ]


def test_reads_in_a_batch_see_the_store_before_its_puts_and_the_last_put_wins(store: Any) -> None:
    store.put(("ns",), "k", {"v": 1})
    results = store.batch(
        [
            PutOp(("ns",), "k", {"v": 2}),
            GetOp(("ns",), "k"),
            SearchOp(("ns",)),
            PutOp(("ns",), "k", {"v": 3}),
        ]
    )
    assert results[1].value == {"v": 1} and [i.value for i in results[2]] == [{"v": 1}]
    assert store.get(("ns",), "k").value == {"v": 3}
    assert store.stream.count(namespace="ns") == 1


# -- get / put / delete (checkpoint-sqlite: test_basic_store_ops) -----------------------------


def test_basic_store_ops(store: Any) -> None:
    namespace = ("test", "documents")
    store.put(namespace, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = store.get(namespace, "doc1")
    assert item.namespace == namespace and item.key == "doc1"
    assert item.value == {"title": "Test Document", "content": "Hello, World!"}
    assert item.created_at.tzinfo is not None and item.created_at == item.updated_at

    store.put(namespace, "doc1", {"title": "Updated Document", "content": "Hello, Updated!"})
    updated = store.get(namespace, "doc1")
    assert updated.value == {"title": "Updated Document", "content": "Hello, Updated!"}
    assert updated.created_at == item.created_at  # an update keeps the creation time
    assert updated.updated_at >= item.updated_at

    assert store.get(("test", "other_documents"), "doc1") is None
    store.delete(namespace, "doc1")
    assert store.get(namespace, "doc1") is None
    assert store.search(("test",)) == []


def test_search_filters_and_pagination(store: Any) -> None:
    for namespace, key, value in [
        (("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["imp"]}),
        (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
        (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]}),
    ]:
        store.put(namespace, key, value)
    assert len(store.search(["test"])) == 3  # a list prefix works too
    docs = store.search(("test", "docs"))
    assert {i.namespace for i in docs} == {("test", "docs")} and len(docs) == 2
    alice = store.search(("test",), filter={"author": "Alice"})
    assert sorted(i.key for i in alice) == ["doc1", "img1"]
    assert [i.key for i in store.search(("test",), filter={"tags": ["draft"]})] == ["doc2"]
    first, second = store.search(("test",), limit=2), store.search(("test",), offset=2)
    assert len(first) == 2 and len(second) == 1
    assert {i.key for i in first}.isdisjoint(i.key for i in second)
    # without a query: newest first, no score
    assert [i.key for i in store.search(("test",))] == ["img1", "doc2", "doc1"]
    assert all(i.score is None for i in store.search(("test",)))


def test_filter_operators(store: Any) -> None:
    store.put(("items",), "item1", {"price": 10, "quantity": 5, "name": "a"})
    store.put(("items",), "item2", {"price": 20, "quantity": 3, "name": "b"})
    store.put(("items",), "item3", {"price": 30, "quantity": 1, "name": "c"})

    def keys(flt: dict[str, Any]) -> list[str]:
        return sorted(i.key for i in store.search(("items",), filter=flt))

    assert keys({"price": {"$gt": 15}}) == ["item2", "item3"]
    assert keys({"price": {"$gte": 20, "$lt": 30}}) == ["item2"]
    assert keys({"price": {"$lte": 10}}) == ["item1"]
    assert keys({"price": {"$ne": 10}}) == ["item2", "item3"]
    assert keys({"price": {"$eq": 30}, "quantity": 1}) == ["item3"]
    assert keys({"price": {"$lt": math.inf}}) == ["item1", "item2", "item3"]
    assert keys({"price": {"$gt": -math.inf}}) == ["item1", "item2", "item3"]
    assert keys({"price": {"$eq": math.nan}}) == []
    assert keys({"price": {"$lt": 10**100}}) == ["item1", "item2", "item3"]
    assert keys({"name": {"$gt": "a"}}) == ["item2", "item3"]  # strings order as strings
    assert keys({"name": {"$gt": 1}}) == []  # a string is not comparable to a number
    assert keys({"missing": {"$gt": 1}}) == []
    assert keys({"price": "10"}) == []  # exact values are typed


def test_filter_mixing_operators_and_fields_is_refused(store: Any) -> None:
    """As LangGraph's InMemoryStore: a condition is operators or field values, never both (a
    plain key among operators was compared as ``$lte``, silently); an operator's operand is a
    value even when it is a dict whose keys start with ``$``."""
    store.put(("f",), "a", {"n": 5, "meta": {"$ref": 1}})
    store.put(("f",), "b", {"n": 500, "meta": {"owner": "bob"}})
    for flt in ({"n": {"$gt": 0, "owner": "zzz"}}, {"meta": {"owner": "bob", "$ne": 1}}):
        with pytest.raises(InvalidFilterError, match="either operators"):
            store.search(("f",), filter=flt)
    with pytest.raises(InvalidFilterError, match=r"unsupported filter operator '\$in'"):
        store.search(("f",), filter={"n": {"$in": [5]}})
    assert [i.key for i in store.search(("f",), filter={"meta": {"$eq": {"$ref": 1}}})] == ["a"]
    assert [i.key for i in store.search(("f",), filter={"meta": {"owner": "bob"}})] == ["b"]


def test_filter_booleans_nested_values_and_dotted_keys(store: Any) -> None:
    store.put(("docs",), "hyphen", {"access-level": "public", "user": {"access-level": "nested"}})
    store.put(("docs",), "digit", {"123abc": "ok", "user": {"123abc": "ok2"}, "active": True})
    store.put(("docs",), "off", {"active": False, "user": {"role": "admin", "id": 1}})

    def keys(flt: dict[str, Any]) -> list[str]:
        return sorted(i.key for i in store.search(("docs",), filter=flt))

    assert keys({"access-level": "public"}) == ["hyphen"]
    assert keys({"user.access-level": "nested"}) == ["hyphen"]
    assert keys({"123abc": "ok"}) == ["digit"]
    assert keys({"user.123abc": "ok2"}) == ["digit"]
    assert keys({"active": True}) == ["digit"]
    assert keys({"active": False}) == ["off"]
    assert keys({"user": {"role": "admin"}}) == ["off"]  # nested dicts match as subsets
    assert keys({"user": {"id": {"$gte": 1}}}) == ["off"]


def test_filter_values_are_data_never_code(store: Any) -> None:
    store.put(("docs",), "doc1", {"access": "public", "title": "O'Brien's Document"})
    store.put(("docs",), "doc2", {"access": "private"})
    for value in ["public' OR '1'='1", "public'; --", "''''", "public\x00' OR '1'='1"]:
        assert store.search(("docs",), filter={"access": value}) == []
    assert [i.key for i in store.search(("docs",), filter={"title": "O'Brien's Document"})] == [
        "doc1"
    ]


# -- list_namespaces (checkpoint: test_list_namespaces_*) -------------------------------------


def _put_all(store: Any, namespaces: list[tuple[str, ...]]) -> None:
    store.batch(
        [PutOp(ns, f"id_{i}", {"data": f"value_{i:02d}"}) for i, ns in enumerate(namespaces)]
    )


def test_pages_without_a_query_are_slices_of_one_order(store: Any) -> None:
    """Without a query, items come last written first, and every page is a slice of that one
    order. Memories whose times disagree with the order they were written in (imported with a
    past ``now=``) used to make pages repeat one item and skip another: each namespace was cut
    in write order and the cut pieces sorted by time."""
    now = datetime.now(UTC)
    store.put(("a",), "fresh", {"text": "put first"})
    store.stream.add("imported, a month old", namespace="a", now=now - timedelta(days=30))
    store.put(("a", "b"), "y", {"text": "put second"})
    store.stream.add("imported, ten days old", namespace="a/b", now=now - timedelta(days=10))
    store.put(("c",), "z", {"text": "put last"})
    store.put(("a",), "again", {"text": "put after the import"})
    for prefix in [("a",), ("a", "b"), ()]:
        full = [(i.namespace, i.key) for i in store.search(prefix, limit=10)]
        assert len(set(full)) == len(full)
        for size in [1, 2, 3]:
            pages = [
                (i.namespace, i.key)
                for offset in range(0, len(full) + size, size)
                for i in store.search(prefix, limit=size, offset=offset)
            ]
            assert pages == full, (prefix, size)
    assert next(k for ns, k in full if ns == ("a",)) == "again"  # within a namespace, write order
    assert full[0] == (("a",), "again") and full[1] == (("c",), "z")  # across them, time


def test_list_namespaces_basic(store: Any) -> None:
    _put_all(
        store,
        [
            ("a", "b", "c"),
            ("a", "b", "d", "e"),
            ("a", "b", "d", "i"),
            ("a", "b", "f"),
            ("a", "c", "f"),
            ("b", "a", "f"),
            ("users", "123"),
            ("users", "456", "settings"),
            ("admin", "users", "789"),
        ],
    )
    ls = store.list_namespaces
    ab = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert ls(prefix=("a", "b")) == ab
    assert ls(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert ls(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert ls(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert ls(prefix=("a", "b"), limit=2) == ab[:2]
    assert ls(prefix=("a", "b"), offset=2) == ab[2:]
    assert ls(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert ls(suffix=("*", "f")) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert ls(prefix=("nonexistent",)) == []
    assert ls(prefix=("users", "123")) == [("users", "123")]


def test_list_namespaces_wildcards_depth_and_pagination(store: Any) -> None:
    _put_all(
        store,
        [
            ("users", "123"),
            ("users", "456"),
            ("users", "789", "settings"),
            ("admin", "users", "789"),
            ("guests", "123"),
            ("guests", "456", "preferences"),
        ]
        + [("namespace", f"sub_{i:02d}") for i in range(12)],
    )
    ls = store.list_namespaces
    assert ls(prefix=("users", "*")) == [
        ("users", "123"),
        ("users", "456"),
        ("users", "789", "settings"),
    ]
    assert ls(suffix=("*", "preferences")) == [("guests", "456", "preferences")]
    assert ls(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert ls(prefix=("namespace",), limit=5, offset=5) == [
        ("namespace", f"sub_{i:02d}") for i in range(5, 10)
    ]
    assert ls(max_depth=1) == [("admin",), ("guests",), ("namespace",), ("users",)]
    assert ls(max_depth=0) == [()]  # (as `InMemoryStore`: every namespace cut to nothing)
    assert len(ls(limit=1000)) == 18
    assert ls(limit=3) == [
        ("admin", "users", "789"),
        ("guests", "123"),
        ("guests", "456", "preferences"),
    ]


def test_list_namespaces_of_an_empty_store(store: Any) -> None:
    assert store.list_namespaces() == []
    assert store.search(()) == []


# -- namespace boundaries (checkpoint-sqlite: test_*segment_boundary, metacharacters, ...) ----


def test_search_prefix_stops_at_label_boundaries(store: Any) -> None:
    _put_all(
        store,
        [
            ("foo",),
            ("foo", "child"),
            ("foo", "child", "deep"),
            ("foobar",),
            ("foobar", "baz"),
            ("foo2",),
            ("Foo",),
        ],
    )

    def found(prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        return {i.namespace for i in store.search(prefix, limit=100)}

    assert found(("foo",)) == {("foo",), ("foo", "child"), ("foo", "child", "deep")}
    assert found(("foobar",)) == {("foobar",), ("foobar", "baz")}
    assert found(("foo2",)) == {("foo2",)}
    assert found(("fo",)) == set()
    assert found(("Foo",)) == {("Foo",)}  # case-sensitive, like get and put
    assert found(()) == {ns for ns in store.list_namespaces(limit=100)}
    assert len(found(())) == 7


def test_metacharacters_and_separators_in_labels_are_literal(store: Any) -> None:
    pairs = [
        ("star*", "starX"),
        ("q?m", "qXm"),
        ("br[ack]et", "brXacXket"),
        ("user_1", "userX1"),
        ("a%b", "axxb"),
        ("a%25b", "a%b2"),
        ("plus+", "plusX"),
        ("sl/ash", "sl"),
        ("new\n", "new"),
    ]
    for label, decoy in pairs:
        _put_all(store, [(label,), (decoy,), (label, "child")])
    for label, decoy in pairs:
        assert set(store.list_namespaces(prefix=[label], limit=100)) == {(label,), (label, "child")}
        assert {i.namespace for i in store.search((label,), limit=100)} == {
            (label,),
            (label, "child"),
        }
        assert store.get((label, "child"), "id_2").namespace == (label, "child")
        assert {i.namespace for i in store.search((decoy,), limit=100)} == {(decoy,)}
    assert set(store.list_namespaces(suffix=["new"], limit=100)) == {("new",)}


def test_put_refuses_bad_namespaces(store: Any) -> None:
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", doc)  # BaseStore.put's own rules
    for bad in [(), ("a", ""), ("a", 1), ("nul\x00",), ("\ud800",), "a/b"]:
        with pytest.raises(InvalidNamespaceError):
            store.batch([PutOp(bad, "k", doc)])  # type: ignore[arg-type]
        with pytest.raises(InvalidNamespaceError):
            store.batch([GetOp(bad, "k")])  # type: ignore[arg-type]
    with pytest.raises(InvalidNamespaceError):
        store.search(("a", ""))
    # below the public API, labels with '.' and a 'langgraph' root are fine
    store.batch([PutOp(("langgraph", "x.y"), "bar", doc)])
    assert store.batch([GetOp(("langgraph", "x.y"), "bar")])[0].value == doc
    assert store.search(("langgraph",))[0].value == doc
    assert store.stream.namespaces() == ["langgraph/x.y"]


def test_a_namespace_too_long_to_store_is_refused_before_the_batch_writes(store: Any) -> None:
    """The stream's 1,024-byte limit was first met inside the write: a batch wrote its first
    put, then failed on the second (validated completely before anything is written, says the
    docstring), and with another error than every other bad namespace."""
    doc = {"text": "first"}
    long = ("a" * 600, "b" * 600)  # (1,201 bytes joined)
    with pytest.raises(InvalidNamespaceError, match="1,201 bytes"):
        store.batch([PutOp(("ok",), "k1", doc), PutOp(long, "k2", doc)])
    assert store.get(("ok",), "k1") is None
    with pytest.raises(InvalidNamespaceError, match="1,201 bytes"):
        store.batch([GetOp(long, "k")])
    assert store.search(long) == []  # (a prefix: nothing lives under it)
    fits = ("a" * 600, "b" * 423)  # 1,024 bytes
    store.put(fits, "k", doc)
    assert store.get(fits, "k").value == doc


def test_ttl_is_refused_plainly(store: Any) -> None:
    assert ReflectiveStore.supports_ttl is False
    with pytest.raises(NotImplementedError, match="TTL"):
        store.put(("a",), "k", {"v": 1}, ttl=5.0)
    with pytest.raises(NotImplementedError, match="TTL"):
        store.batch([PutOp(("a",), "k", {"v": 1}, ttl=1.0)])
    assert store.get(("a",), "k") is None
    store.put(("a",), "k", {"v": 1}, ttl=None)  # no TTL is fine, refresh_ttl is ignored
    assert store.get(("a",), "k", refresh_ttl=True).value == {"v": 1}
    assert store.search(("a",), refresh_ttl=False)[0].key == "k"


# -- query search (checkpoint: test_vector_*) ------------------------------------------------


def test_query_search_ranks_with_the_stream_and_follows_updates(store: Any) -> None:
    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})
    first = store.search(("test",), query="Zany Xerxes")
    assert first[0].key == "doc1" and first[0].score is not None
    assert [i.score for i in first] == sorted((i.score for i in first), reverse=True)
    before = first[0].score

    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = {i.key: i.score for i in store.search(("test",), query="Zany Xerxes")}
    assert after["doc1"] < before
    assert store.search(("test",), query="new text about dogs")[0].key == "doc1"

    store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    hits = store.search(("test",), query="new text about dogs", limit=10)
    assert "doc4" not in {i.key for i in hits}
    assert "doc4" in {i.key for i in store.search(("test",))}  # still listed without a query
    assert store.get(("test",), "doc4").value == {"text": "new text about dogs"}


def test_a_query_search_embeds_its_query_once_across_namespaces_and_rereads(store: Any) -> None:
    """A prefix over several namespaces ranks each with the stream, but the query is embedded
    once (not once per namespace, nor again when a filter makes a namespace be read twice),
    and the scores are those of each namespace's own retrieval."""
    for user in ("ana", "bo", "cy"):
        store.batch(
            [
                PutOp(("users", user), f"k{i}", {"text": f"{user} note {i} about tea", "n": i})
                for i in range(60)
            ]
        )
    embeddings = store.stream.embeddings
    calls = embeddings.query_calls
    # 5 of each namespace's 60 match: its first read (48) finds too few, so it is read whole
    hits = store.search(("users",), query="tea note", limit=12, filter={"n": {"$gte": 55}})
    assert embeddings.query_calls == calls + 1
    assert len(hits) == 12
    assert {h.namespace for h in hits} == {("users", u) for u in ("ana", "bo", "cy")}
    assert all(h.value["n"] >= 55 for h in hits)
    own = {
        (("users", u), h.record.metadata["langgraph_item"]["key"]): h.score
        for u in ("ana", "bo", "cy")
        for h in store.stream.retrieve("tea note", k=60, namespace=f"users/{u}", touch=False)
    }
    assert [h.score for h in hits] == pytest.approx([own[(h.namespace, h.key)] for h in hits])


def test_a_query_that_cannot_be_encoded_is_refused_before_any_embedding_call(store: Any) -> None:
    store.put(("test",), "doc1", {"text": "test document"})
    embeddings = store.stream.embeddings
    calls = embeddings.query_calls
    with pytest.raises(InvalidMemoryError, match="query"):
        store.search(("test",), query="lone \ud800 surrogate")
    assert embeddings.query_calls == calls


def test_query_search_with_filters(store: Any) -> None:
    for key, value in [
        ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
        ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
        ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
        ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
    ]:
        store.put(("test",), key, value)
    hits = store.search(("test",), query="apple", filter={"color": "red"})
    assert [i.key for i in hits] == ["doc1", "doc2"]
    hits = store.search(("test",), query="car", filter={"color": "red"})
    assert [i.key for i in hits] == ["doc2", "doc1"]
    hits = store.search(("test",), query="blue", filter={"score": {"$gt": 3.2}})
    assert len(hits) == 3 and hits[0].key == "doc4"
    hits = store.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
    assert [i.key for i in hits] == ["doc3"]


def test_query_search_pagination(store: Any) -> None:
    store.batch(
        [PutOp(("test",), f"doc{i}", {"text": f"test document number {i}"}) for i in range(5)]
    )
    page1 = store.search(("test",), query="test", limit=2)
    page2 = store.search(("test",), query="test", limit=2, offset=2)
    everything = store.search(("test",), query="test", limit=10)
    assert len(page1) == len(page2) == 2 and len(everything) == 5
    assert [i.key for i in everything[:4]] == [i.key for i in page1 + page2]
    assert store.search(("test",), query="test", limit=0) == []


def test_query_edge_cases(store: Any) -> None:
    store.put(("test",), "doc1", {"text": "test document"})
    for query in ["", "   ", None, "test " * 100, "test!@#$%^&*()"]:
        assert [i.key for i in store.search(("test",), query=query)] == ["doc1"]
    assert store.search(("test",), query="")[0].score is None  # an empty query is no query


def test_non_ascii(store: Any) -> None:
    texts = ["这是中文", "これは日本語です", "이건 한국어야", "Это русский", "यह रूसी है"]
    store.batch([PutOp(("user_123", "memories"), str(i), {"text": t}) for i, t in enumerate(texts)])
    for i, text in enumerate(texts):
        assert store.search(("user_123", "memories"), query=text)[0].key == str(i)
    assert store.get(("user_123", "memories"), "0").value == {"text": "这是中文"}


def test_bad_operations_are_refused_before_anything_is_written(store: Any) -> None:
    bad: list[Any] = [
        PutOp(("a",), "k", ["not", "a", "dict"]),  # type: ignore[arg-type]
        PutOp(("a",), "k", {"v": object()}),
        PutOp(("a",), "k", {"v": math.nan}),
        PutOp(("a",), "k", {"v": "\ud800"}),
        PutOp(("a",), 7, {"v": 1}),  # type: ignore[arg-type]
        PutOp(("a",), "k", {"v": 1}, index="v"),  # type: ignore[arg-type]
        SearchOp(("a",), limit=-1),
        SearchOp(("a",), filter={"v": {"$regex": "x"}}),
        SearchOp(("a",), filter="v"),  # type: ignore[arg-type]
        ListNamespacesOp(match_conditions=(MatchCondition("middle", ("a",)),)),  # type: ignore[arg-type]
        "not an op",
    ]
    for op in bad:
        with pytest.raises(ValueError):
            store.batch([PutOp(("a",), "good", {"v": 1}), op])
    assert store.stream.count(namespace="a") == 0


def test_a_key_no_backend_can_store_is_refused_before_any_put_of_the_batch(store: Any) -> None:
    """A NUL key (like a NUL label) is refused while the batch is validated: it used to pass,
    fail only at its own namespace's write, and leave the batch's earlier namespaces written."""
    for bad in ["k\x00", "\x00", "\ud800"]:
        with pytest.raises(InvalidMemoryError, match="an item key"):
            store.batch([PutOp(("a",), "good", {"v": 1}), PutOp(("b",), bad, {"v": 2})])
        with pytest.raises(InvalidMemoryError, match="an item key"):
            store.batch([GetOp(("a",), bad)])
    assert store.stream.count() == 0


def test_a_bad_value_is_named_as_the_items_value(store: Any) -> None:
    """The errors a value gets are about the item's value (a store user never passed any
    "metadata")."""
    for value, why in [
        ({"v": object()}, "not JSON-serialisable"),
        ({"v": math.inf}, "not JSON-serialisable"),
        ({"v": "a\x00b"}, "NUL"),
    ]:
        with pytest.raises(InvalidMemoryError, match=f"^the value of 'k' .*{why}"):
            store.put(("a",), "k", value)
    assert store.stream.count(namespace="a") == 0


def test_keys_that_are_not_strings_are_refused_at_every_depth(store: Any) -> None:
    """JSON keeps only string keys: a nested ``1``, ``True`` or ``None`` key would come back as
    ``"1"``, ``"true"`` or ``"null"`` and silently merge with a string key equal to that
    (``InMemoryStore`` keeps them as given): refused, as a top-level one is."""
    for value, where in [
        ({1: "x"}, "the value"),
        ({"a": {1: "x", "1": "y"}}, "a"),
        ({"a": {True: "t", "true": "u"}}, "a"),
        ({"a": [{"b": {None: 1}}]}, r"a\[0\]\.b"),
        ({"a": {2.5: 1}}, "a"),
    ]:
        with pytest.raises(
            InvalidMemoryError, match=f"^the value of 'k' .*not a string.* in {where}"
        ):
            store.put(("v",), "k", value)
        with pytest.raises(InvalidMemoryError):  # before any put of the batch is written
            store.batch([PutOp(("w",), "good", {"v": 1}), PutOp(("v",), "k", value)])
    assert store.stream.count() == 0


def _nested(levels: int) -> dict[str, Any]:
    """A value whose containers nest ``levels`` deep (the value itself is level 1)."""
    inner: Any = "leaf"
    for i in range(levels - 1):
        inner = {"x": inner} if i % 2 else [inner]
    return {"text": "deep", "v": inner}


def test_a_value_nested_deeper_than_the_limit_is_refused(store: Any) -> None:
    """A value nested deeper than ``MAX_VALUE_DEPTH`` used to raise a raw ``RecursionError``
    (from ~985 levels), or, a little less deep, be stored and then break every read of its
    namespace (decoding it needs a deep stack): refused, with what the limit is."""
    from langchain_reflective.store_codec import MAX_VALUE_DEPTH

    store.put(("deep", "ok"), "k", _nested(MAX_VALUE_DEPTH))
    for levels in [MAX_VALUE_DEPTH + 1, 970, 5000]:
        with pytest.raises(InvalidMemoryError, match=f"^the value of 'k' .*{MAX_VALUE_DEPTH}"):
            store.put(("deep", str(levels)), "k", _nested(levels))
    assert store.get(("deep", "ok"), "k").value == _nested(MAX_VALUE_DEPTH)
    assert [i.key for i in store.search(("deep",))] == ["k"]
    shared: list[Any] = []  # one container under itself: refused, never walked forever
    shared.append(shared)
    with pytest.raises(InvalidMemoryError):
        store.put(("deep",), "loop", {"v": shared})
    wide: Any = "leaf"  # a container shared 2**60 ways: checked once per depth, not per path
    for _ in range(60):
        wide = [wide, wide]
    with pytest.raises(InvalidMemoryError, match=str(MAX_VALUE_DEPTH)):
        store.put(("deep",), "wide", {"v": [[wide]] * 2 + [_nested(MAX_VALUE_DEPTH), [wide]]})


def test_an_unindexed_value_of_any_length_is_stored_whole(store: Any) -> None:
    """Text that a query search never reads is not held to a memory text's limit: the value is
    stored and read back whole; only its text (what the memory shows) is cut. An indexed text
    that long is refused, with what to do."""
    from langchain_reflective.records import CUT_MARKER, MAX_TEXT_CHARS

    body = "word " * (MAX_TEXT_CHARS // 4)
    store.put(("a",), "big", {"text": body}, index=False)
    store.put(("a",), "titled", {"title": "a short title", "text": body}, index=["title"])
    assert store.get(("a",), "big").value == {"text": body}
    assert store.get(("a",), "titled").value["text"] == body
    (record,) = [r for r in store.stream.recent(5, namespace="a") if CUT_MARKER in r.text]
    assert len(record.text) == MAX_TEXT_CHARS and record.text.startswith("word word")
    with pytest.raises(InvalidMemoryError, match="characters; the limit is"):
        store.put(("a",), "indexed", {"text": body})
    assert {i.key for i in store.search(("a",))} == {"big", "titled"}


def test_a_prefix_search_ranks_its_namespaces_as_one(store: Any) -> None:
    """One ranking over every namespace a prefix selects: a namespace's only lexical match is
    not scored as if it were the best match of them all (it was: per-namespace scores merged)."""
    store.put(("u", "a"), "best", {"text": "cat mat"})
    store.put(("u", "a"), "x", {"text": "mat dog"})
    store.put(("u", "b"), "y", {"text": "mat dog bird sun"})
    hits = store.search(("u",), query="cat mat", limit=3)
    assert [(h.namespace, h.key) for h in hits] == [
        (("u", "a"), "best"),
        (("u", "a"), "x"),
        (("u", "b"), "y"),
    ]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    page = store.search(("u",), query="cat mat", limit=1, offset=1)
    assert [h.key for h in page] == [hits[1].key]
    assert page[0].score == pytest.approx(hits[1].score, abs=1e-6)  # (recency moves on)
