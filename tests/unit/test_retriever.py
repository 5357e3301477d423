from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from langchain_core.documents import Document

from langchain_reflective import InvalidFilterError, ReflectiveRetriever


def test_documents_carry_record_and_scores(stream, now) -> None:
    stream.add(["Bob moved to Paris", "Alice likes tea"], importances=[0.8, 0.2], now=now)
    retriever = ReflectiveRetriever(memory_stream=stream, k=1, touch=False)
    (doc,) = retriever.invoke("Paris Bob", now=now)
    assert isinstance(doc, Document)
    assert doc.page_content == "Bob moved to Paris"
    meta = doc.metadata
    assert meta["kind"] == "observation" and meta["importance"] == 0.8
    assert meta["created_at"] == now.isoformat()
    assert {"score", "relevance", "lexical", "recency", "evidence", "depth"} <= set(meta)
    assert doc.id == meta["id"]


async def test_k_per_call_and_async(stream, now) -> None:
    stream.add([f"note {i} about gardening" for i in range(6)], importances=0.5, now=now)
    retriever = ReflectiveRetriever(memory_stream=stream, k=2)
    assert len(retriever.invoke("gardening")) == 2
    assert len(retriever.invoke("gardening", k=5)) == 5
    assert len(await retriever.ainvoke("gardening", k=3)) == 3


def test_namespace_and_filter(stream, now) -> None:
    stream.add(["Alice's diary"], namespace="alice", importances=0.5, now=now)
    stream.add(["Bob's diary"], namespace="bob", importances=0.5, now=now)
    stream.add(["Bob's plan"], namespace="bob", kinds="plan", importances=0.5, now=now)
    bob = ReflectiveRetriever(memory_stream=stream, namespace="bob", k=5)
    assert {d.page_content for d in bob.invoke("diary")} == {"Bob's diary", "Bob's plan"}
    plans = bob.invoke("diary", filter={"kind": "plan"})
    assert [d.page_content for d in plans] == ["Bob's plan"]
    # a filter's namespace (from a request, a model) does not widen a retriever bound to one
    alice = ReflectiveRetriever(memory_stream=stream, namespace="alice", k=5)
    with pytest.raises(InvalidFilterError, match="is not the namespace 'alice'"):
        alice.invoke("diary", filter={"namespace": "bob"})
    with pytest.raises(InvalidFilterError, match="is not the namespace 'alice'"):
        ReflectiveRetriever(
            memory_stream=stream, namespace="alice", filter={"namespace": "bob"}
        ).invoke("diary")
    same = alice.invoke("diary", filter={"namespace": "alice"})
    assert [d.page_content for d in same] == ["Alice's diary"]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_filter_given_per_call_never_chooses_the_namespace(stream, now, asynchronous) -> None:
    """A per-call filter (which may come from a request) replaced the retriever's own filter
    and with it the namespace that filter named: the retrieval then read the run's owner or
    the stream's default; with neither, the per-call filter's namespace was read; an explicit
    ``namespace=None`` dropped the retriever's namespace."""
    for ns in ("team-a", stream.namespace, "alice", "bob"):
        stream.add([f"{ns} launch code"], namespace=ns, importances=0.5, now=now)

    def read(retriever: ReflectiveRetriever, config: dict | None = None, **kwargs) -> set[str]:
        if asynchronous:
            docs = asyncio.run(retriever.ainvoke("launch code", config, **kwargs))
        else:
            docs = retriever.invoke("launch code", config, **kwargs)
        return {d.metadata["namespace"] for d in docs}

    alice = {"configurable": {"user_id": "alice"}}
    team = ReflectiveRetriever(memory_stream=stream, filter={"namespace": "team-a"}, k=5)
    assert read(team) == read(team, alice) == {"team-a"}
    assert read(team, filter={"kinds": ["observation"]}) == {"team-a"}
    assert read(team, alice, filter={"kinds": ["observation"]}) == {"team-a"}
    with pytest.raises(InvalidFilterError, match="'team-a'"):
        read(team, filter={"namespace": "bob"})
    nobody = ReflectiveRetriever(memory_stream=stream, namespace_key=None, k=5)
    assert read(nobody) == {stream.namespace}
    with pytest.raises(InvalidFilterError, match="is not the namespace"):
        read(nobody, filter={"namespace": "bob"})  # the stream's default is what it reads
    owned = ReflectiveRetriever(memory_stream=stream, k=5)
    with pytest.raises(InvalidFilterError, match="is not the namespace 'alice'"):
        read(owned, alice, filter={"namespace": "bob"})
    bound = ReflectiveRetriever(memory_stream=stream, namespace="alice", k=5)
    assert read(bound, namespace=None) == read(bound, filter=None) == {"alice"}
    assert read(bound, namespace="bob") == {"bob"}  # (the caller's code, not a request)


def test_several_namespaces_rank_as_one(stream, now) -> None:
    stream.add(["Alice's diary about tea"], namespace="alice", importances=0.5, now=now)
    stream.add(["The team's shared diary"], namespace="shared", importances=0.5, now=now)
    stream.add(["Bob's diary"], namespace="bob", importances=0.5, now=now)
    both = ReflectiveRetriever(memory_stream=stream, namespaces=["alice", "shared"], k=5)
    docs = both.invoke("diary")
    assert {(d.metadata["namespace"], d.page_content) for d in docs} == {
        ("alice", "Alice's diary about tea"),
        ("shared", "The team's shared diary"),
    }
    assert [d.metadata["namespace"] for d in both.invoke("diary", namespaces=["bob"])] == ["bob"]


def test_unknown_argument_is_an_error(stream) -> None:
    stream.add(["x"], importances=0.5)
    with pytest.raises(TypeError):
        ReflectiveRetriever(memory_stream=stream).invoke("x", top_k=3)
    with pytest.raises(TypeError):
        ReflectiveRetriever(memory_stream=stream).invoke("x", now=timedelta(1))


def test_langsmith_params_name_the_retriever(stream) -> None:
    params = ReflectiveRetriever(memory_stream=stream)._get_ls_params()
    assert params["ls_retriever_name"] == "reflective"


def test_copies_share_the_stream_and_pickling_says_why_not(stream, now) -> None:
    """A deep copy of a retriever (copy.deepcopy, model_copy(deep=True)) raised a bare
    TypeError from the stream's lock; a stream is a handle on its storage, so copies share it.
    Serializing cannot carry an open file or connection: a TypeError that says so."""
    import copy
    import pickle

    stream.add(["alice likes tea", "bob moved to paris"], importances=0.5, now=now)
    retriever = ReflectiveRetriever(memory_stream=stream, k=1)
    for clone in (copy.deepcopy(retriever), retriever.model_copy(deep=True)):
        assert clone.memory_stream is stream and clone is not retriever
        assert [d.page_content for d in clone.invoke("tea")] == ["alice likes tea"]
    with pytest.raises(TypeError, match="cannot be serialized"):
        pickle.dumps(retriever)


def test_a_retriever_without_a_namespace_reads_the_runs_owner(stream, now) -> None:
    """It read the stream's default namespace whatever the run's ``user_id``, unlike the
    middleware and the tools: in a chain serving several users, everyone shared it."""
    from langchain_core.runnables import RunnableLambda

    stream.add(["Alice's diary"], namespace="alice", importances=0.5, now=now)
    stream.add(["Bob's diary"], namespace="bob", importances=0.5, now=now)
    stream.add(["Nobody's diary"], importances=0.5, now=now)
    retriever = ReflectiveRetriever(memory_stream=stream, k=5)
    chain = retriever | RunnableLambda(lambda docs: [d.page_content for d in docs])
    assert chain.invoke("diary", {"configurable": {"user_id": "bob"}}) == ["Bob's diary"]
    alice = {"configurable": {"user_id": "alice"}}
    assert [[d.page_content for d in docs] for docs in retriever.batch(["diary"], alice)] == [
        ["Alice's diary"]
    ]
    docs = asyncio.run(retriever.ainvoke("diary", alice))
    assert [d.page_content for d in docs] == ["Alice's diary"]
    assert [d.page_content for d in retriever.invoke("diary")] == ["Nobody's diary"]
    # a namespace given (to the retriever or per call) wins over the run's owner
    pinned = ReflectiveRetriever(memory_stream=stream, namespace="alice", k=5)
    assert [
        d.page_content for d in pinned.invoke("diary", {"configurable": {"user_id": "bob"}})
    ] == ["Alice's diary"]
    bob = {"configurable": {"user_id": "bob"}}
    # the retriever's own filter naming a namespace is that namespace; one given per call
    # (perhaps from a request) must match the run's owner
    shared = ReflectiveRetriever(memory_stream=stream, filter={"namespace": "alice"})
    assert [d.page_content for d in shared.invoke("diary", bob)] == ["Alice's diary"]
    with pytest.raises(InvalidFilterError):
        retriever.invoke("diary", bob, filter={"namespace": "alice"})
    strict = ReflectiveRetriever(memory_stream=stream, require_namespace=True)
    with pytest.raises(ValueError, match=r"no memory owner.*'user_id'"):
        strict.invoke("diary")
    blind = ReflectiveRetriever(memory_stream=stream, require_namespace=True, namespace_key=None)
    with pytest.raises(ValueError, match=r"give the retriever a namespace$"):
        blind.invoke("diary", bob)
    assert [
        d.page_content for d in strict.invoke("diary", {"configurable": {"user_id": "bob"}})
    ] == ["Bob's diary"]


def test_the_retrievers_own_filter_keeps_every_key_or_says_which_it_refuses(stream, now) -> None:
    """A mapping given as the retriever's ``filter`` was turned into a ``RetrievalFilter`` by
    pydantic, by field name: ``kind`` (a key filters accept) and any unknown key were dropped
    without a word, so ``filter={"kind": "plan"}`` returned every kind; the same mapping per
    call filtered, and an unknown key per call is an ``InvalidFilterError``."""
    from pydantic import ValidationError

    stream.add(["team diary"], namespace="team", importances=0.5, now=now)
    stream.add(["team plan"], namespace="team", kinds="plan", importances=0.5, now=now)
    plans = ReflectiveRetriever(memory_stream=stream, filter={"namespace": "team", "kind": "plan"})
    assert [d.page_content for d in plans.invoke("team")] == ["team plan"]
    assert plans.filter == {"namespace": "team", "kind": "plan"}
    with pytest.raises(ValidationError, match=r"unknown filter key\(s\) \['knd'\]"):
        ReflectiveRetriever(memory_stream=stream, filter={"namespace": "team", "knd": "plan"})
