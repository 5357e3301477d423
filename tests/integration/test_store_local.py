"""ReflectiveStore on the real things: a SQLite file and the embedded all-MiniLM-L6-v2.

Semantic search ranks the relevant item first for paraphrased questions (no shared words), a
reopened file serves the same items, and a graph compiled with the store works across runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.config import get_store
from langgraph.graph import START, StateGraph

from langchain_reflective import MemoryStream, ReflectiveStore

pytestmark = pytest.mark.integration

FACTS = {
    "diet": {"text": "Priya is vegetarian and never eats meat", "topic": "food"},
    "pet": {"text": "Priya adopted a grey kitten last spring", "topic": "animals"},
    "job": {"text": "Priya works as a nurse in the children's hospital", "topic": "work"},
    "trip": {"text": "Priya is flying to Tokyo in October", "topic": "travel"},
    "sport": {"text": "Priya swims three mornings a week", "topic": "health"},
}
QUESTIONS = {
    "What food should I avoid serving her?": "diet",
    "Does she have any animals at home?": "pet",
    "What is her profession?": "job",
    "Where is she travelling this autumn?": "trip",
}


def test_semantic_search_on_a_sqlite_file_survives_reopening(
    local_embeddings: Embeddings, tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    with MemoryStream(local_embeddings, path=path) as stream:
        store = ReflectiveStore(stream)
        for key, value in FACTS.items():
            store.put(("priya", "facts"), key, value)
        store.put(("sam", "facts"), "diet", {"text": "Sam eats meat with every meal"})
        for question, key in QUESTIONS.items():
            hits = store.search(("priya",), query=question, limit=3)
            assert hits[0].key == key, (question, [(h.key, h.score) for h in hits])
            assert all(h.namespace == ("priya", "facts") for h in hits)
        store.put(
            ("priya", "facts"), "trip", {"text": "Priya cancelled her trip", "topic": "travel"}
        )
        before = store.search(("priya",), query="Is she going to Japan?", limit=5)

    with MemoryStream(local_embeddings, path=path) as stream:  # a new process would do the same
        store = ReflectiveStore(stream)
        assert store.get(("priya", "facts"), "trip").value["text"] == "Priya cancelled her trip"
        assert stream.count(namespace="priya/facts") == len(FACTS)
        again = store.search(("priya",), query="Is she going to Japan?", limit=5)
        assert [h.key for h in again] == [h.key for h in before]
        assert [h.score for h in again] == pytest.approx([h.score for h in before], abs=0.02)
        food = store.search(("priya",), query="meat", filter={"topic": "food"})
        assert [h.key for h in food] == ["diet"]
        assert store.list_namespaces() == [("priya", "facts"), ("sam", "facts")]


class State(TypedDict, total=False):
    question: str
    answer: str


def answer(state: State) -> State:
    best = get_store().search(("priya",), query=state["question"], limit=1)
    return {"answer": best[0].value["text"] if best else ""}


def test_a_graph_answers_from_the_store_with_real_embeddings(
    local_embeddings: Embeddings, tmp_path: Path
) -> None:
    with MemoryStream(local_embeddings, path=tmp_path / "graph.db") as stream:
        store = ReflectiveStore(stream)
        store.batch([])  # an empty batch is fine
        for key, value in FACTS.items():
            store.put(("priya", "facts"), key, value)
        graph = StateGraph(State).add_node(answer).add_edge(START, "answer").compile(store=store)
        out = graph.invoke({"question": "Which sport does she practise?"})
        assert out["answer"] == FACTS["sport"]["text"]
