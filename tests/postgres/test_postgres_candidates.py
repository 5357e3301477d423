"""PostgresBackend's retrieval candidates against a real server: exact and approximate, in one
statement, filtered, kept to their namespace, their lexical scores (the SQLite backend's BM25)
and neighbour links, and the GIN index plan on a small analysed table."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.records import MemoryRecord, new_memory_id
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k
from tests.postgres.sample_memories import T0, WORDS, _fill, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def test_exact_candidates_carry_every_component(backend: PostgresBackend) -> None:
    records, vectors = _fill(backend, 60)
    _fill(backend, 20, namespace="other", seed=5)
    backend.configure(ScoringConfig.hybrid(context=False))
    query = _unit(np.random.default_rng(9), 1)[0]
    c = backend.candidates(
        "default", "Paris dogs", query, k=5, filter=RetrievalFilter(),
        config=ScoringConfig.hybrid(), exact=True,
    )  # fmt: skip
    assert c.exact and c.size == 60 and c.keys.shape == (60,)
    assert list(c.keys) == sorted(c.keys)
    by_key = dict(zip(c.keys.tolist(), range(60), strict=True))
    # keys increase with insertion order: the i-th key is the i-th record
    assert np.allclose(c.relevance, vectors @ query, atol=1e-5)
    assert np.allclose(c.importance, [r.importance for r in records])
    assert np.allclose(c.created, [r.created_at.timestamp() for r in records])
    # lexical: positive exactly where a stemmed query term ("paris", "dog") occurs
    assert c.lexical is not None
    matches = np.array([("paris" in r.text) or ("dog" in r.text) for r in records])
    assert np.array_equal(c.lexical > 0, matches)
    assert c.lexical_max == pytest.approx(float(c.lexical.max()))
    # neighbours: the previous/next observation in insertion order; none for reflections
    assert c.previous is not None and c.next is not None
    obs = [i for i, r in enumerate(records) if r.kind == "observation"]
    for j, i in enumerate(obs):
        row = by_key[int(c.keys[i])]
        assert c.previous[row] == (obs[j - 1] if j else -1)
        assert c.next[row] == (obs[j + 1] if j + 1 < len(obs) else -1)
    refl = [i for i, r in enumerate(records) if r.kind == "reflection"]
    assert all(c.previous[i] == -1 and c.next[i] == -1 for i in refl)


def test_candidates_are_one_statement(
    backend: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(backend, 40)
    calls: list[str] = []
    real = psycopg.Connection.execute

    def counting(self: psycopg.Connection, query: object, *a: object, **kw: object) -> object:
        calls.append(str(query)[:40])
        return real(self, query, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    for exact in (True, False):
        calls.clear()
        backend.candidates(
            "default", "tea", _unit(np.random.default_rng(1), 1)[0], k=4,
            filter=RetrievalFilter(kinds=frozenset({"observation"})),
            config=ScoringConfig.hybrid(), exact=exact,
        )  # fmt: skip
        assert len(calls) == 1, calls


def test_approximate_candidates_hold_the_exact_top_10(backend: PostgresBackend) -> None:
    """HNSW + lexical + recent + important candidates hold the exact top 10, with the same
    scores (the hybrid score of a memory does not depend on the other candidates)."""
    _fill(backend, 3000)
    rng = np.random.default_rng(3)
    config = ScoringConfig.hybrid()
    now = (T0 + timedelta(days=3)).timestamp()
    agree = 0
    for q in range(10):
        query = f"{WORDS[q]} {WORDS[q + 1]}"
        vec = _unit(rng, 1)[0]
        kw = {"k": 10, "filter": RetrievalFilter(), "config": config}
        exact = backend.candidates("default", query, vec, exact=True, **kw)  # type: ignore[arg-type]
        approx = backend.candidates("default", query, vec, exact=False, **kw)  # type: ignore[arg-type]
        assert not approx.exact and approx.size < exact.size
        e_comps, _ = score_candidates(config, exact, now)
        a_comps, _ = score_candidates(config, approx, now)
        e_top = exact.keys[top_k(e_comps.score, 10)]
        a_top = approx.keys[top_k(a_comps.score, 10)]
        agree += len(set(e_top.tolist()) & set(a_top.tolist()))
        common = np.intersect1d(e_top, a_top)
        e_score = dict(zip(exact.keys.tolist(), e_comps.score.tolist(), strict=False))
        a_score = dict(zip(approx.keys.tolist(), a_comps.score.tolist(), strict=False))
        assert all(abs(e_score[k] - a_score[k]) < 1e-9 for k in common.tolist())
    assert agree >= 98  # of 100


@pytest.mark.parametrize("exact", [True, False])
def test_filters_restrict_candidates_not_neighbours(backend: PostgresBackend, exact: bool) -> None:
    records, vectors = _fill(backend, 50)
    flt = RetrievalFilter(
        kinds=frozenset({"observation"}),
        created_after=T0 + timedelta(minutes=10),
        created_before=T0 + timedelta(minutes=40),
        min_relevance=-0.2,
    )
    vec = vectors[21]
    c = backend.candidates(
        "default", "tea", vec, k=3, filter=flt, config=ScoringConfig.hybrid(), exact=exact
    )
    expected = {
        i
        for i, r in enumerate(records)
        if r.kind == "observation"
        and T0 + timedelta(minutes=10) <= r.created_at < T0 + timedelta(minutes=40)
        and float(vectors[i] @ vec) >= -0.2
    }
    found = backend.fetch("default", c.keys[: c.size].tolist())
    got = {records.index(found[int(k)]) for k in c.keys[: c.size]}
    assert got <= expected and (got == expected if exact else 21 in got)
    # neighbour rows (outside the filter) are there only to lift their neighbours
    assert c.previous is not None
    outside = c.keys[c.size :].tolist()
    assert all(records.index(backend.fetch("default", [k])[k]) not in expected for k in outside)


def test_namespaces_never_see_each_other(backend: PostgresBackend) -> None:
    mine, vecs = _fill(backend, 10, namespace="alice")
    theirs, _ = _fill(backend, 10, namespace="bob", seed=7)
    vec = vecs[0]
    for exact in (True, False):
        c = backend.candidates(
            "bob", mine[0].text, vec, k=5, filter=RetrievalFilter(),
            config=ScoringConfig.hybrid(), exact=exact,
        )  # fmt: skip
        got = backend.fetch("bob", c.keys.tolist())
        assert {r.namespace for r in got.values()} == {"bob"}
    alice_keys = backend.candidates(
        "alice", "x", vec, k=5, filter=RetrievalFilter(), config=ScoringConfig.paper(), exact=True
    ).keys.tolist()
    assert backend.fetch("bob", alice_keys) == {}
    assert backend.touch("bob", alice_keys, T0) == {}
    assert backend.get("bob", [r.id for r in mine]) == []
    assert backend.delete("bob", [r.id for r in mine]) == 0
    assert backend.count("alice") == 10 and backend.namespaces() == ["alice", "bob"]
    assert backend.purge("bob") == 10
    assert backend.count("alice") == 10 and backend.count() == 10
    assert theirs[0].id not in {r.id for r in backend.recent("alice")}


def test_lexical_scores_are_the_sqlite_backends_bm25(backend: PostgresBackend) -> None:
    """BM25 computed in SQL equals the SQLite backend's index on the same documents (an
    observation's document includes the previous observation with ``lexical_context``),
    also after deletes change ``N``, the average length and the document frequencies."""
    from langchain_reflective.backends.sqlite.lexical import BM25Index

    backend.configure(ScoringConfig.hybrid())  # lexical_context
    records, vectors = _fill(backend, 80)
    gone = {records[3].id, records[40].id}
    assert backend.delete("default", sorted(gone)) == 2
    docs, prev = [], None
    for r in records:
        doc = r.text if r.kind != "observation" or prev is None else prev + "\n" + r.text
        # (a deleted observation is no one's context: its successor's is the one before it)
        prev = r.text if r.kind == "observation" and r.id not in gone else prev
        docs.append(doc)
    index = BM25Index()
    index.add(docs)
    index.remove([i for i, r in enumerate(records) if r.id in gone])
    live = [i for i, r in enumerate(records) if r.id not in gone]
    for query in ("paris paris dogs running", "tea in the garden", "nothing matches zzz"):
        c = backend.candidates(
            "default", query, vectors[0], k=5, filter=RetrievalFilter(),
            config=ScoringConfig.hybrid(), exact=True,
        )  # fmt: skip
        with index.query_scores(query) as expected:
            want = expected.lookup(np.asarray(live))
            assert c.lexical is not None and c.size == len(live)
            assert np.array_equal(c.lexical[: c.size], want)  # the same float32 values
            assert c.lexical_max == expected.max()


@pytest.mark.parametrize("exact", [True, False])
def test_neighbour_links_follow_deletes_and_later_writes(
    backend: PostgresBackend, exact: bool
) -> None:
    """Each observation's previous/next live observation, kept through deletes (of single,
    consecutive and last observations) and later batches."""
    records, _ = _fill(backend, 30)
    gone = {records[i].id for i in (2, 3, 4, 11, 29)}
    assert backend.delete("default", sorted(gone)) == 5
    more, _ = _fill(backend, 6, seed=12)
    live = [r for r in records + more if r.id not in gone]
    rng = np.random.default_rng(5)
    c = backend.candidates(
        "default", "tea", _unit(rng, 1)[0], k=40, filter=RetrievalFilter(),
        config=ScoringConfig.hybrid(), exact=exact,
    )  # fmt: skip
    assert c.previous is not None and c.next is not None
    ids = {k: r.id for k, r in backend.fetch("default", c.keys.tolist()).items()}
    row_id = [ids[int(k)] for k in c.keys]
    obs = [r.id for r in live if r.kind == "observation"]
    for row in range(c.size):
        rid = row_id[row]
        if rid not in obs:
            assert c.previous[row] == c.next[row] == -1
            continue
        j = obs.index(rid)
        assert (row_id[c.previous[row]] if c.previous[row] >= 0 else None) == (
            obs[j - 1] if j else None
        )
        assert (row_id[c.next[row]] if c.next[row] >= 0 else None) == (
            obs[j + 1] if j + 1 < len(obs) else None
        )


def test_a_small_analysed_table_still_finds_query_terms_through_the_gin_index(
    postgres_url: str,
) -> None:
    """With Postgres' default ``random_page_cost`` (4), a freshly analysed table of ~1k
    memories got a plan that read every row of ``reflective_terms`` and tested it against each
    query term; the backend's connections plan the GIN index lookup instead (the text
    terms here: the backend was not configured for `lexical_context`)."""
    rng = np.random.default_rng(7)
    vocabulary = [f"term{i}" for i in range(5000)]
    records = [
        MemoryRecord(
            id=new_memory_id(),
            text=" ".join(rng.choice(vocabulary, size=16)),
            kind="observation",
            created_at=T0 + timedelta(minutes=i),
            importance=0.5,
            namespace="default",
        )
        for i in range(1000)
    ]
    vectors = _unit(rng, len(records))
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        backend.put(records, vectors)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE")
        sql, params = backend._candidates._statement(
            "default", records[3].text[:40], vectors[3], 10, RetrievalFilter(),
            ScoringConfig.hybrid(), False,
        )  # fmt: skip
        with backend._pools.conn() as conn:
            plan = "\n".join(str(r[0]) for r in conn.execute("EXPLAIN " + sql, params))
    assert "Bitmap Index Scan on reflective_terms_lex" in plan
    assert "Seq Scan on reflective_terms" not in plan
