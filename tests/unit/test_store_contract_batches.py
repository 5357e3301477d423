"""The ``BaseStore`` contract (tests/unit/store_contract.py): batches of mixed operations, in
order, and single get / put / delete."""

from __future__ import annotations

from typing import Any

from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from tests.unit import store_contract

store = store_contract.store  # (the fixture: every test runs on the sync and async methods)


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
