"""The ``BaseStore`` contract (tests/unit/store_contract.py): what a put may store. Bad
operations, keys and values are refused before any put of their batch is written; values
nested too deep are refused; an unindexed value of any length is stored whole; TTL is
refused plainly."""

from __future__ import annotations

import math
from typing import Any

import pytest
from langgraph.store.base import (
    GetOp,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from langchain_reflective import ReflectiveStore
from langchain_reflective.errors import InvalidMemoryError
from tests.unit import store_contract

store = store_contract.store  # (the fixture: every test runs on the sync and async methods)


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
