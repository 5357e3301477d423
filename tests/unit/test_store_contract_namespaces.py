"""The ``BaseStore`` contract (tests/unit/store_contract.py): list_namespaces with prefixes,
suffixes, wildcards, depth and pages; namespace label boundaries and literal metacharacters;
the namespaces a put refuses."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    PutOp,
)

from tests.unit import store_contract

store = store_contract.store  # (the fixture: every test runs on the sync and async methods)


# -- list_namespaces (checkpoint: test_list_namespaces_*) -------------------------------------


def _put_all(store: Any, namespaces: list[tuple[str, ...]]) -> None:
    store.batch(
        [PutOp(ns, f"id_{i}", {"data": f"value_{i:02d}"}) for i, ns in enumerate(namespaces)]
    )


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
