"""MemoryStream's adds and retrievals: one embedding call per batch, ranking and its
components, touches, filters, the neighbour context, namespaces, reads, deletes, evidence
depth and the reflection counter."""

from __future__ import annotations

from datetime import timedelta

import pytest

from langchain_reflective import InvalidMemoryError, MemoryStream, RetrievalFilter, ScoringConfig
from tests.fakes import WordEmbeddings
from tests.unit.stream_facts import FACTS


def test_add_is_one_embedding_call_per_batch(stream: MemoryStream, embeddings, now) -> None:
    records = stream.add(FACTS, importances=[0.2, 0.8, 0.6, 0.4, 0.1], now=now)
    assert embeddings.document_calls == 1
    assert [r.text for r in records] == FACTS
    assert all(r.created_at == now and r.last_accessed_at == now for r in records)
    assert all(r.namespace == "default" and r.kind == "observation" for r in records)
    assert len({r.id for r in records}) == 5
    assert len(stream) == 5


def test_missing_importance_uses_the_scorer(stream: MemoryStream, now) -> None:
    records = stream.add(["My grandmother died today", "I had coffee"], now=now)
    assert [r.importance_source for r in records] == ["heuristic", "heuristic"]
    assert records[0].importance > records[1].importance


def test_retrieve_ranks_relevant_first_and_exposes_components(stream, now) -> None:
    stream.add(FACTS, importances=0.5, now=now)
    hits = stream.retrieve("Where did Bob move?", k=2, now=now, touch=False)
    assert len(hits) == 2
    assert hits[0].score >= hits[1].score
    assert FACTS[1] in {h.record.text for h in hits}
    # independent facts stored back to back: without the conversational context both Bob
    # facts lead (with it, the fact next to "Bob moved" is pulled up by its neighbour)
    with MemoryStream(WordEmbeddings(), scoring=ScoringConfig.hybrid(context=False)) as facts:
        facts.add(FACTS, importances=0.5, now=now)
        hits = facts.retrieve("Where did Bob move?", k=2, now=now, touch=False)
    assert [h.record.text for h in hits] == [FACTS[1], FACTS[3]]
    top = hits[0]
    assert 0 <= top.lexical <= 1 and top.lexical > 0
    assert top.recency == pytest.approx(1.0)
    assert top.importance == 0.5
    doc = top.to_document()
    assert doc.id == top.record.id
    for key in ("score", "relevance", "lexical", "recency", "importance", "kind", "evidence"):
        assert key in doc.metadata


def test_retrieve_touches_durably_unless_disabled(embeddings, db_path, now) -> None:
    later = now + timedelta(hours=5)
    with MemoryStream(embeddings, path=db_path) as s:
        s.add(FACTS, importances=0.5, now=now)
        hit = s.retrieve("Carol dog", k=1, now=later, touch=False)[0]
        assert s.get(hit.record.id)[0].last_accessed_at == now
        hit = s.retrieve("Carol dog", k=1, now=later)[0]
        assert hit.record.last_accessed_at == later
    with MemoryStream(embeddings, path=db_path) as s:
        assert s.get(hit.record.id)[0].last_accessed_at == later
        # the touched memory is now the most recent one
        hits = s.retrieve("x", k=5, now=later, touch=False, scoring=ScoringConfig.paper())
        by_id = {h.record.id: h for h in hits}
        assert by_id[hit.record.id].recency == pytest.approx(1.0)


def test_filters(stream: MemoryStream, now) -> None:
    old = stream.add(["Bob went hiking in May"], importances=0.5, now=now - timedelta(days=30))
    stream.add(["Bob went hiking again"], importances=0.5, kinds="plan", now=now)
    stream.add(["Bob went hiking a third time"], importances=0.5, kinds="reflection", now=now)
    q = "Bob hiking"
    assert {h.record.kind for h in stream.retrieve(q, k=5, now=now, filter={"kind": "plan"})} == {
        "plan"
    }
    kinds = RetrievalFilter(kinds=frozenset({"observation", "reflection"}))
    assert {h.record.kind for h in stream.retrieve(q, k=5, now=now, filter=kinds)} == {
        "observation",
        "reflection",
    }
    recent = stream.retrieve(q, k=5, now=now, filter={"created_after": now - timedelta(days=1)})
    assert old[0].id not in {h.record.id for h in recent} and len(recent) == 2
    before = stream.retrieve(q, k=5, now=now, filter={"created_before": now - timedelta(days=1)})
    assert [h.record.id for h in before] == [old[0].id]
    strict = stream.retrieve(q, k=5, now=now, filter={"min_relevance": 0.99})
    assert all(h.relevance >= 0.99 for h in strict)
    assert stream.retrieve(q, k=5, now=now, filter={"kinds": ["nothing"]}) == []


def test_neighbor_context_pulls_in_the_adjacent_turn(stream: MemoryStream, now) -> None:
    """In a conversation the answer often follows the question: the default scores a turn
    with half of its better neighbour's relevance (and indexes it with the previous turn)."""
    stream.add(
        [
            "Anna: what did you do last weekend?",
            "Ben: I went sailing on the lake with my uncle",
            "Anna: the weather forecast says rain tomorrow",
            "Ben: my favourite food is ramen",
            "Anna: I need to buy groceries",
        ],
        importances=0.5,
        now=now,
    )
    query = "what did Ben do last weekend"
    default = [h.record.text for h in stream.retrieve(query, k=2, now=now, touch=False)]
    assert "Ben: I went sailing on the lake with my uncle" in default
    no_context = ScoringConfig(
        relevance_weight=0.6,
        lexical_weight=0.4,
        recency_weight=0.05,
        importance_weight=0.05,
        normalization="none",
    )
    hits = stream.retrieve(query, k=5, now=now, touch=False)
    plain = stream.retrieve(query, k=5, now=now, touch=False, scoring=no_context)
    by_text = {h.record.text: h.score for h in hits}
    plain_by_text = {h.record.text: h.score for h in plain}
    answer = "Ben: I went sailing on the lake with my uncle"
    assert by_text[answer] > plain_by_text[answer]  # boosted by the question before it


def test_namespaces_never_leak(embeddings, db_path, now) -> None:
    with MemoryStream(embeddings, path=db_path) as s:
        s.add(["Alice secret: the code is 1234"], namespace="alice", importances=0.9, now=now)
        s.add(["Bob likes cheese"], namespace="bob", importances=0.1, now=now)
        bob = s.retrieve("secret code 1234", k=10, namespace="bob", now=now)
        assert [h.record.text for h in bob] == ["Bob likes cheese"]
        assert s.get([s.recent(namespace="alice")[0].id], namespace="bob") == []
        assert s.retrieve("secret", filter={"namespace": "carol"}) == []
        assert s.delete(s.recent(namespace="alice")[0].id, namespace="bob") == 0
        assert s.count(namespace="alice") == 1


def test_recent_is_oldest_first(stream: MemoryStream, now) -> None:
    stream.add(["one"], importances=0.5, now=now)
    stream.add(["two", "three"], importances=0.5, now=now)
    assert [r.text for r in stream.recent(2)] == ["two", "three"]
    assert [r.text for r in stream.recent()] == ["one", "two", "three"]


def test_most_important(stream: MemoryStream, now) -> None:
    stream.add(["low", "high", "mid"], importances=[0.2, 0.9, 0.5], kinds="reflection", now=now)
    stream.add(["obs top"], importances=1.0, now=now)
    stream.add(["high too"], importances=0.9, kinds="reflection", now=now)
    top = stream.most_important(3, kinds=["reflection"])
    assert [r.text for r in top] == ["high too", "high", "mid"]  # newer first among equals
    assert [r.text for r in stream.most_important(1)] == ["obs top"]
    assert stream.most_important(0) == []
    with pytest.raises(InvalidMemoryError):
        stream.most_important(-1)


def test_to_dataframe(stream: MemoryStream, now) -> None:
    stream.add(FACTS, importances=0.5, now=now)
    frame = stream.to_dataframe("Bob Paris", now=now)
    assert list(frame.columns[:8]) == [
        "id",
        "description",
        "kind",
        "importance",
        "recency",
        "relevance",
        "lexical",
        "score",
    ]
    assert len(frame) == 5
    assert frame["score"].is_monotonic_decreasing
    assert frame.iloc[0]["description"] in {FACTS[1], FACTS[3]}
    plain = stream.to_dataframe(now=now)
    assert plain["score"].isna().all() and list(plain["description"]) == FACTS


def test_delete_get_purge(stream: MemoryStream, now) -> None:
    records = stream.add(FACTS, importances=0.5, now=now)
    assert stream.delete([records[1].id, "unknown"]) == 1
    assert stream.get([records[1].id, records[0].id]) == [records[0]]
    hits = stream.retrieve("Bob moved to Paris for a new job", k=5, now=now)
    assert records[1].id not in {h.record.id for h in hits}
    assert len(hits) == 4
    assert stream.purge() == 4
    assert len(stream) == 0 and stream.retrieve("Bob", k=3) == []
    assert stream.reflection_state().importance_sum == 0


def test_delete_many_compacts_and_stays_correct(stream: MemoryStream, now) -> None:
    records = stream.add([f"memory number {i}" for i in range(1500)], importances=0.5, now=now)
    stream.delete([r.id for r in records[:1000]])
    hits = stream.retrieve("memory number 1200", k=3, now=now)
    assert hits[0].record.text == "memory number 1200"
    assert all(h.record.id not in {r.id for r in records[:1000]} for h in hits)


def test_evidence_sets_depth(stream: MemoryStream, now) -> None:
    obs = stream.add(["a", "b"], importances=0.5, now=now)
    r1 = stream.add(["insight"], kinds="reflection", evidence=[[obs[0].id, obs[1].id]])
    r2 = stream.add(["meta insight"], kinds="reflection", evidence=[[r1[0].id, obs[0].id]])
    assert (obs[0].depth, r1[0].depth, r2[0].depth) == (0, 1, 2)
    assert r2[0].evidence == (r1[0].id, obs[0].id)


def test_reflection_counter_persists_and_resets_atomically(embeddings, db_path, now) -> None:
    with MemoryStream(embeddings, path=db_path) as s:
        obs = s.add(["a", "b", "c"], importances=[0.5, 0.7, 0.9], now=now)
        state = s.reflection_state()
        assert state.importance_sum == pytest.approx(2.1) and state.adds_since == 3
    with MemoryStream(embeddings, path=db_path) as s:
        assert s.reflection_state().importance_sum == pytest.approx(2.1)
        assert [r.id for r in s.recent(since_last_reflection=True)] == [r.id for r in obs]
        s.add(
            ["insight"],
            kinds="reflection",
            importances=0.9,
            evidence=[[obs[0].id]],
            reset_reflection_counter=True,
            now=now,
        )
        state = s.reflection_state()
        assert state.importance_sum == 0 and state.adds_since == 0
        assert state.last_reflection_at == now
        assert s.recent(since_last_reflection=True) == []
        s.add(["d"], importances=0.4, now=now)
        assert s.reflection_state().importance_sum == pytest.approx(0.4)
        s.mark_reflected(now=now)
        assert s.reflection_state().importance_sum == 0


def test_failed_reflection_store_leaves_counter(stream: MemoryStream, now) -> None:
    stream.add(["a"], importances=0.5, now=now)
    with pytest.raises(InvalidMemoryError):
        stream.add(
            ["insight"],
            kinds="reflection",
            evidence=[["missing"]],
            reset_reflection_counter=True,
        )
    assert stream.reflection_state().importance_sum == 0.5
    assert len(stream) == 1


async def test_async_twins(stream: MemoryStream, embeddings, now) -> None:
    records = await stream.aadd(FACTS, importances=0.5, now=now)
    assert len(records) == 5 and embeddings.document_calls == 1
    hits = await stream.aretrieve("Carol dog Rex", k=1, now=now)
    assert hits[0].record.text == FACTS[2]
