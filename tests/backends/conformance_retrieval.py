"""The backend conformance suite (tests/backends/conformance.py): rankings equal to the
reference's under exact scoring, the candidate set contract, touches, a given query
embedding, several namespaces ranked as one, and store items ranked on their own."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from langchain_reflective import MemoryStream, ReflectiveStore
from langchain_reflective.backends.base import BaseMemoryBackend, RetrievalFilter
from langchain_reflective.backends.types import concat_candidates
from langchain_reflective.errors import DimensionMismatchError, EmbeddingError, InvalidMemoryError
from langchain_reflective.records import OBSERVATION
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k
from tests.backends.conformance_base import (
    MODEL,
    NOW,
    QUERIES,
    SHARED_SCORINGS,
    ConformanceBase,
    corpus,
    exact_top,
    query_vector,
    vectors_of,
)
from tests.fakes import WordEmbeddings


class RetrievalConformance(ConformanceBase):
    """Candidates, rankings and touches."""

    # -- rankings ------------------------------------------------------------------------------

    def test_same_top10_as_the_reference_under_exact_scoring(
        self, backend: BaseMemoryBackend, reference: BaseMemoryBackend
    ) -> None:
        records = corpus(160)
        for b in (backend, reference):
            self.fill(b, records[:100])
            self.fill(b, records[100:])  # two batches
        configs = list(SHARED_SCORINGS)
        if self.lexical_matches_reference:
            configs += [ScoringConfig.hybrid(), ScoringConfig.hybrid(context=False)]
        filters = [None, RetrievalFilter(kinds=frozenset({OBSERVATION}))]
        filters.append(RetrievalFilter(created_after=NOW - timedelta(days=20)))
        for config in configs:
            backend.configure(config)
            reference.configure(config)
            for query in QUERIES:
                for flt in filters:
                    got = exact_top(backend, "alice", query, config, filter=flt)
                    want = exact_top(reference, "alice", query, config, filter=flt)
                    assert got == want, (config.name, query, flt)
                    assert len(got) == 10

    def test_candidate_set_contract(self, backend: BaseMemoryBackend) -> None:
        records = corpus(60)
        self.fill(backend, records)
        config = ScoringConfig.hybrid()
        backend.configure(config)
        q = "tea paris w1"
        found = backend.candidates(
            "alice", q, query_vector(q), k=5, filter=RetrievalFilter(), config=config, exact=True
        )
        assert found.size == 60 and found.exact
        keys = found.keys[: found.size]
        assert (np.diff(keys) > 0).all()  # insertion order
        by_key = backend.fetch("alice", keys.tolist())
        assert [by_key[key].id for key in keys.tolist()] == [r.id for r in records]
        cosine = vectors_of(records) @ query_vector(q)
        np.testing.assert_allclose(found.relevance[: found.size], cosine, atol=1e-5)
        np.testing.assert_allclose(
            found.importance[: found.size], [r.importance for r in records], atol=1e-9
        )
        np.testing.assert_allclose(
            found.created[: found.size], [r.created_at.timestamp() for r in records], atol=1e-6
        )
        np.testing.assert_allclose(
            found.accessed[: found.size], [r.accessed_at.timestamp() for r in records], atol=1e-6
        )
        kinds = [found.kind_names[c] for c in found.kinds[: found.size].tolist()]
        assert kinds == [r.kind for r in records]
        assert found.lexical is not None and found.previous is not None and found.next is not None
        assert found.lexical_max >= float(found.lexical.max()) > 0
        observations = [i for i, r in enumerate(records) if r.kind == OBSERVATION]
        for before, after in itertools.pairwise(observations):
            assert found.keys[found.previous[after]] == keys[before]
            assert found.keys[found.next[before]] == keys[after]
        for i, r in enumerate(records):
            if r.kind != OBSERVATION:
                assert found.previous[i] == found.next[i] == -1
        flt = RetrievalFilter(kinds=frozenset({"plan"}), min_relevance=-1.0)
        plans = backend.candidates(
            "alice", q, query_vector(q), k=5, filter=flt, config=config, exact=True
        )
        assert plans.size == sum(r.kind == "plan" for r in records)

    # -- touch ---------------------------------------------------------------------------------

    def test_touch_sets_the_access_time_durably_and_only_that(
        self, backend: BaseMemoryBackend
    ) -> None:
        records = corpus(12)
        self.fill(backend, records)
        config = ScoringConfig.paper()
        found = backend.candidates(
            "alice", "w1", query_vector("w1"), k=3, filter=RetrievalFilter(), config=config
        )
        keys = found.keys[:3].tolist()
        when = NOW + timedelta(days=2)
        touched = backend.touch("alice", keys, when)
        assert set(touched) == set(keys)
        before = {r.id: r for r in records}
        for record in touched.values():
            assert record.last_accessed_at == when
            old = before[record.id]
            assert (record.text, record.created_at, record.importance) == (
                old.text,
                old.created_at,
                old.importance,
            )
        stored = backend.get("alice", [r.id for r in touched.values()])
        assert all(r.last_accessed_at == when for r in stored)
        again = backend.candidates(
            "alice", "w1", query_vector("w1"), k=3, filter=RetrievalFilter(), config=config
        )
        at = {int(k): i for i, k in enumerate(again.keys[: again.size].tolist())}
        for key in keys:
            assert again.accessed[at[key]] == pytest.approx(when.timestamp())
        assert backend.fetch("alice", keys) == touched  # fetch writes nothing
        assert backend.touch("alice", [], when) == {}

    def test_retrieval_through_the_stream_touches_what_it_returns(
        self, backends: Callable[[], BaseMemoryBackend]
    ) -> None:
        stream = MemoryStream(
            WordEmbeddings(32),
            backend=backends(),
            embedding_model=MODEL,
            scoring=ScoringConfig.paper(),
        )
        stream.add([r.text for r in corpus(30)], importances=0.5, now=NOW)
        later = NOW + timedelta(hours=5)
        hits = stream.retrieve("tea paris", k=4, now=later)
        assert len(hits) == 4
        assert all(h.record.last_accessed_at == later for h in hits)
        assert all(r.last_accessed_at == later for r in stream.get([h.record.id for h in hits]))
        quiet = stream.retrieve("tea paris", k=4, now=later + timedelta(hours=1), touch=False)
        assert all(h.record.last_accessed_at == later for h in quiet)
        stream.close()

    def test_a_given_query_embedding_ranks_as_the_embedded_query(
        self, backends: Callable[[], BaseMemoryBackend]
    ) -> None:
        """``retrieve(..., query_embedding=...)`` skips the embedding call and ranks exactly as
        the embedded query (normalised alike); unusable vectors are the usual typed errors."""
        embeddings = WordEmbeddings(32)
        stream = MemoryStream(embeddings, backend=backends(), embedding_model=MODEL)
        stream.add([r.text for r in corpus(30)], importances=0.5, now=NOW)

        def ranked(hits: list[Any]) -> list[tuple[str, float]]:
            return [(h.record.id, h.score) for h in hits]

        query = "tea paris w3"
        expected = ranked(stream.retrieve(query, k=6, now=NOW, touch=False))
        vector = [3.0 * x for x in embeddings.embed_query(query)]  # not unit length
        calls = embeddings.query_calls
        got = ranked(stream.retrieve(query, k=6, now=NOW, touch=False, query_embedding=vector))
        assert [i for i, _ in got] == [i for i, _ in expected]
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-6)
        assert embeddings.query_calls == calls
        with pytest.raises(DimensionMismatchError):
            stream.retrieve(query, k=3, query_embedding=vector[:31])
        with pytest.raises(EmbeddingError):
            stream.retrieve(query, k=3, query_embedding=[float("nan")] * 32)

        async def run() -> list[tuple[str, float]]:
            async with stream:
                hits = await stream.aretrieve(
                    query, k=6, now=NOW, touch=False, query_embedding=vector
                )
            return ranked(hits)

        assert [i for i, _ in asyncio.run(run())] == [i for i, _ in expected]
        assert embeddings.query_calls == calls

    # -- several namespaces and store items ----------------------------------------------------

    def test_several_namespaces_rank_as_one(self, backend: BaseMemoryBackend) -> None:
        """``retrieve(namespaces=[...])`` ranks the namespaces' memories as one namespace
        holding them all would (min-max over all of them), touches each in its own namespace,
        and never reads one it was not given."""
        alice, bob = corpus(70, namespace="alice"), corpus(70, seed=9, namespace="bob")
        both = [dataclasses.replace(r, id="both-" + r.id, namespace="both") for r in alice + bob]
        for records in (alice, bob, both):
            self.fill(backend, records)
        backend.put(corpus(5, seed=4, namespace="carol"), vectors_of(corpus(5, seed=4)))
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)

        def ranked(hits: list[Any]) -> list[tuple[str, float]]:
            return [(h.record.id.removeprefix("both-"), h.score) for h in hits]

        def same(got: list[Any], want: list[Any]) -> bool:
            return [i for i, _ in got] == [i for i, _ in want] and [s for _, s in got] == (
                pytest.approx([s for _, s in want], abs=1e-6)
            )

        def exact(namespaces: list[str], query: str, config: ScoringConfig) -> list[Any]:
            sets = [
                backend.candidates(
                    ns,
                    query,
                    query_vector(query),
                    k=10,
                    filter=RetrievalFilter(),
                    config=config,
                    exact=True,
                )
                for ns in namespaces
            ]
            found, origin = concat_candidates(sets) if len(sets) > 1 else (sets[0], None)
            comps, _ = score_candidates(config, found, NOW.timestamp())
            best = top_k(comps.score, 10)
            owners = [0] * len(best) if origin is None else origin[best].tolist()
            return [
                (backend.fetch(namespaces[o], [k])[k].id.removeprefix("both-"), sc)
                for k, o, sc in zip(
                    found.keys[best].tolist(), owners, comps.score[best].tolist(), strict=True
                )
            ]

        for config in (ScoringConfig.paper(), ScoringConfig.dense()):  # (no neighbour links)
            for query in QUERIES:
                want = exact(["both"], query, config)
                assert same(exact(["alice", "bob"], query, config), want)
                kw: dict[str, Any] = {"k": 10, "now": NOW, "touch": False, "scoring": config}
                joint = stream.retrieve(query, namespaces=["alice", "bob"], **kw)
                assert {h.record.namespace for h in joint} <= {"alice", "bob"}
                if backend.candidates(
                    "both",
                    query,
                    query_vector(query),
                    k=10,
                    filter=RetrievalFilter(),
                    config=config,
                ).exact:  # (an approximate backend's candidates depend on its index)
                    assert same(ranked(joint), want)
        later = NOW + timedelta(hours=3)
        hits = stream.retrieve("tea paris", k=12, now=later, namespaces=["bob", "alice"])
        assert {h.record.namespace for h in hits} == {"alice", "bob"}
        for h in hits:
            (stored,) = backend.get(h.record.namespace, [h.record.id])
            assert stored.last_accessed_at == later == h.record.last_accessed_at
        for bad in ({"namespaces": "alice"}, {"namespaces": []}):
            with pytest.raises(InvalidMemoryError, match="namespaces"):
                stream.retrieve("tea", **bad)
        with pytest.raises(InvalidMemoryError, match="not both"):
            stream.retrieve("tea", namespace="alice", namespaces=["bob"])

    def test_a_namespace_ranked_with_others_is_not_its_own_best_match(
        self, backend: BaseMemoryBackend
    ) -> None:
        """The lexical half is relative to the best match of every namespace ranked: a lone
        memory sharing one word with the query is its namespace's best match (1.0 alone) but
        not the others' (a store's prefix search over both used to rank it as 1.0)."""
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)
        stream.add(
            ["tea in paris", "coffee on the train", "music in the garden", "tea at home"],
            importances=0.5,
            namespace="rich",
            now=NOW,
        )
        stream.add(["a train to nowhere"], importances=0.5, namespace="solo", now=NOW)
        kw: dict[str, Any] = {"k": 5, "now": NOW, "touch": False}
        (alone,) = stream.retrieve("coffee train", namespace="solo", **kw)
        assert alone.lexical == pytest.approx(1.0)
        joint = {
            h.record.text: h
            for h in stream.retrieve("coffee train", namespaces=["rich", "solo"], **kw)
        }
        assert joint["coffee on the train"].lexical == pytest.approx(1.0)
        assert joint["a train to nowhere"].lexical < 0.9
        assert joint["a train to nowhere"].score < alone.score

    @pytest.mark.parametrize("kind", ["item", OBSERVATION])
    def test_store_items_rank_on_their_own(self, backend: BaseMemoryBackend, kind: str) -> None:
        """Store items (kind ``"item"``) are independent facts: an unrelated item put right
        after a relevant one scores as it does alone. Items stored as observations are a
        stream of related events, and the default scoring's neighbour context pulls it up."""
        stream = MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)
        store = ReflectiveStore(stream) if kind == "item" else ReflectiveStore(stream, kind=kind)
        store.put(("a",), "pet", {"text": "alice has a cat named miso"})
        store.put(("a",), "colour", {"text": "bob likes blue"})
        store.put(("b",), "colour", {"text": "bob likes blue"})

        def scores(ns: tuple[str, ...]) -> dict[str, float]:
            hits = store.search(ns, query="cat named miso", limit=5)
            return {h.key: float(h.score or 0.0) for h in hits}

        after, alone = scores(("a",)), scores(("b",))
        assert after["pet"] > after["colour"]
        if kind == "item":
            assert after["colour"] == pytest.approx(alone["colour"], abs=1e-4)
        else:
            assert after["colour"] > alone["colour"] + 0.2
