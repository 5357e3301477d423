"""The ``BaseStore`` contract (tests/unit/store_contract.py): searches without a query, their
filters (operators, nested values, dotted keys, values that are never code) and their pages."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from langchain_reflective.errors import InvalidFilterError
from tests.unit import store_contract

store = store_contract.store  # (the fixture: every test runs on the sync and async methods)


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
