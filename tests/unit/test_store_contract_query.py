"""The ``BaseStore`` contract (tests/unit/store_contract.py): query search, ranked with the
stream, with updates, ``index=False``, filters, pages, odd and non-ASCII queries, and prefixes
over several namespaces."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.store.base import (
    PutOp,
)

from langchain_reflective.errors import InvalidMemoryError
from tests.unit import store_contract

store = store_contract.store  # (the fixture: every test runs on the sync and async methods)


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
