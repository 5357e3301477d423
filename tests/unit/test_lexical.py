"""Unit tests for the incremental BM25 index."""

from __future__ import annotations

import numpy as np
import pytest

from langchain_reflective.backends.sqlite import lexical, lexical_scores
from langchain_reflective.backends.sqlite.lexical import ENGLISH_STOPWORDS, BM25Index

CORPUS = [
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: That's awesome! I've been running a lot, training for a charity race.",
    "Caroline: Running is great. I ran my first marathon in May, it was hard.",
    "Melanie: My kids love painting; we painted a sunset together last weekend.",
    "Caroline: I'm researching adoption agencies, I want to adopt children.",
    "Melanie: The pottery class was relaxing, I made a bowl and a cup.",
    "Caroline: The support from my friends and family means a lot to me.",
    "Melanie: We went camping at the beach with the kids, the kids loved it.",
    "",
    "the and of to",
]

QUERIES = [
    "When did Caroline go to the support group?",
    "What does Melanie do to relax? pottery painting",
    "runs marathon race",
    "kids kids camping beach",
    "adoption agencies children",
    "family friends support",
]


def _bm25s_scores(corpus: list[str], query: str, k1: float, b: float) -> np.ndarray:
    bm25s = pytest.importorskip("bm25s")
    stemmer_mod = pytest.importorskip("Stemmer")
    stemmer = stemmer_mod.Stemmer("english")
    tokens = bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
    retriever.index(tokens, show_progress=False)
    q = bm25s.tokenize(
        [query], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )[0]
    q = [t for t in q if t in retriever.vocab_dict]
    if not q:
        return np.zeros(len(corpus), dtype=np.float32)
    return np.asarray(retriever.get_scores(q), dtype=np.float32)


def _dense(index: BM25Index, query: str, n: int) -> np.ndarray:
    rows, scores = index.search(query)
    out = np.zeros(n, dtype=np.float32)
    out[rows] = scores
    return out


def test_stopwords_match_bm25s() -> None:
    stopwords = pytest.importorskip("bm25s.stopwords")
    assert frozenset(stopwords.STOPWORDS_EN) == ENGLISH_STOPWORDS


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (1.2, 0.75), (0.9, 0.4)])
def test_scores_agree_with_bm25s(k1: float, b: float) -> None:
    index = BM25Index(k1=k1, b=b)
    index.add(CORPUS)
    for query in QUERIES:
        expected = _bm25s_scores(CORPUS, query, k1, b)
        got = _dense(index, query, len(CORPUS))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_tokenize_lowercases_drops_stopwords_and_stems() -> None:
    index = BM25Index()
    assert index.tokenize("The Runner was RUNNING to the parks, a b") == ["runner", "run", "park"]
    assert index.tokenize("") == []
    assert BM25Index(stopwords=False).tokenize("the cat") == ["the", "cat"]


def test_stemming_matches_inflections() -> None:
    index = BM25Index()
    index.add(["she runs every morning", "he swims daily"])
    rows, scores = index.search("running")
    assert rows.tolist() == [0]
    assert scores.dtype == np.float32 and scores[0] > 0


def test_search_sorted_and_k() -> None:
    index = BM25Index()
    index.add(CORPUS)
    rows, scores = index.search("kids support caroline")
    assert rows.dtype == np.int64 and scores.dtype == np.float32
    assert np.all(np.diff(scores) <= 0)
    top2_rows, top2_scores = index.search("kids support caroline", k=2)
    assert top2_rows.tolist() == rows[:2].tolist()
    np.testing.assert_array_equal(top2_scores, scores[:2])
    assert index.search("kids", k=0)[0].shape == (0,)


@pytest.mark.parametrize("query", ["", "   ", "the and of to", "zzzunknownword", "!!!"])
def test_empty_queries_return_empty_arrays(query: str) -> None:
    index = BM25Index()
    index.add(CORPUS)
    rows, scores = index.search(query)
    assert rows.shape == (0,) and scores.shape == (0,)
    assert rows.dtype == np.int64 and scores.dtype == np.float32


def test_empty_index() -> None:
    index = BM25Index()
    assert len(index) == 0
    rows, scores = index.search("anything")
    assert rows.shape == (0,) and scores.shape == (0,)


def test_incremental_adds_equal_one_batch() -> None:
    batch = BM25Index()
    batch.add(CORPUS)
    incremental = BM25Index()
    for text in CORPUS[:3]:
        incremental.add([text])
    incremental.add(CORPUS[3:7])
    incremental.add([])
    incremental.add(CORPUS[7:])
    assert len(incremental) == len(batch) == len(CORPUS)
    for query in QUERIES:
        r1, s1 = batch.search(query)
        r2, s2 = incremental.search(query)
        np.testing.assert_array_equal(r1, r2)
        np.testing.assert_array_equal(s1, s2)


def test_remove_is_a_tombstone_equal_to_rebuilding_without_the_rows() -> None:
    index = BM25Index()
    index.add(CORPUS)
    removed = {1, 2, 7}
    index.remove([1, 2, 7, 7, 999, -1])
    assert len(index) == len(CORPUS)
    assert index.n_live == len(CORPUS) - 3
    assert not index.is_live(1) and index.is_live(0)
    kept = [i for i in range(len(CORPUS)) if i not in removed]
    rebuilt = BM25Index()
    rebuilt.add([CORPUS[i] for i in kept])
    for query in QUERIES:
        rows, scores = index.search(query)
        assert not set(rows.tolist()) & removed
        r2, s2 = rebuilt.search(query)
        got = dict(zip(rows.tolist(), scores.tolist(), strict=True))
        want = {kept[r]: s for r, s in zip(r2.tolist(), s2.tolist(), strict=True)}
        assert got.keys() == want.keys()
        for row, score in want.items():
            assert got[row] == pytest.approx(score, rel=1e-6)
    # rows keep their numbers after further adds
    index.add(["a new memory about running"])
    assert index.search("run")[0].tolist()[0] == len(CORPUS)


def test_compaction_keeps_scores() -> None:
    texts = [f"memory number {i} about topic{i % 7} and running" for i in range(10_000)]
    index = BM25Index()
    index.add(texts)
    before_rows, before_scores = index.search("topic3 running", k=50)
    index.remove(range(0, 10_000, 2))
    index.compact()
    reference = BM25Index()
    reference.add(texts)
    reference.remove(range(0, 10_000, 2))
    r1, s1 = index.search("topic3 running", k=50)
    r2, s2 = reference.search("topic3 running", k=50)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_allclose(s1, s2, rtol=1e-6)
    assert before_rows.shape == (50,) and before_scores.shape == (50,)
    index.add(["topic3 running"])
    assert index.search("topic3 running", k=1)[0].tolist() == [10_000]


def test_score_rows() -> None:
    index = BM25Index()
    index.add(CORPUS)
    rows, scores = index.search("kids camping")
    wanted = [int(rows[0]), 0, 8, 12345, int(rows[0])]
    got = index.score_rows("kids camping", wanted)
    assert got[0] == scores[0] and got[4] == scores[0]
    assert got[2] == 0 and got[3] == 0


def test_clear() -> None:
    index = BM25Index()
    index.add(CORPUS)
    index.clear()
    assert len(index) == 0 and index.n_live == 0
    assert index.search("kids")[0].shape == (0,)
    index.add(["kids"])
    assert index.search("kids")[0].tolist() == [0]


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        BM25Index(b=1.5)
    with pytest.raises(ValueError):
        BM25Index(k1=-1)
    with pytest.raises(ValueError):
        BM25Index(language="klingon")
    with pytest.raises(TypeError):
        BM25Index().add("a single string")  # type: ignore[arg-type]


def test_word_split_matches_bm25s_token_pattern() -> None:
    import random
    import re
    import string

    from langchain_reflective.backends.sqlite.lexical import _split_words

    pattern = re.compile(r"(?u)\b\w\w+\b")
    rng = random.Random(0)
    alphabet = string.printable + "éÄßø日本’–"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert _split_words(text) == pattern.findall(text.lower()), repr(text)


def _reference_search(index: BM25Index, query: str, k: int | None = None) -> tuple:
    """The per-term implementation ``search`` had before the postings were joined (pins that
    the joined scoring returns the same rows and the same float32 bits)."""
    import math
    from collections import Counter

    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
    if (k is not None and k <= 0) or index.n_live == 0:
        return empty
    counts = Counter(index.tokenize(query))
    terms = [(index._vocab[t], c) for t, c in counts.items() if t in index._vocab]
    avgdl = index._total_len / index.n_live if index.n_live and index._total_len else 1.0
    parts = []
    for tid, qtf in terms:
        rows_view = np.frombuffer(index._post_rows[tid], dtype=np.int32)
        tf_view = np.frombuffer(index._post_tf[tid], dtype=np.uint16)
        live = index._live[rows_view]
        rows = rows_view[live].astype(np.int64)
        tf = tf_view[live].astype(np.float64)
        del rows_view, tf_view, live
        df = rows.shape[0]
        if df == 0:
            continue
        idf = math.log(1.0 + (index.n_live - df + 0.5) / (df + 0.5))
        norm = index.k1 * (1.0 - index.b + index.b * index._doclen[rows] / avgdl)
        parts.append((rows, (qtf * idf) * tf / (tf + norm)))
    if not parts:
        return empty
    if len(parts) == 1:
        rows, scores = parts[0]
    else:
        all_rows = np.concatenate([p[0] for p in parts])
        all_scores = np.concatenate([p[1] for p in parts])
        if all_rows.shape[0] * 8 >= len(index):
            dense = np.bincount(all_rows, weights=all_scores, minlength=len(index))
            rows = np.flatnonzero(dense > 0)
            scores = dense[rows]
        else:
            rows, inverse = np.unique(all_rows, return_inverse=True)
            scores = np.bincount(inverse, weights=all_scores)
    scores32 = scores.astype(np.float32)
    if k is not None and k < rows.shape[0]:
        kth = np.partition(scores32, rows.shape[0] - k)[rows.shape[0] - k]
        keep = scores32 >= kth
        rows, scores32 = rows[keep], scores32[keep]
    order = np.lexsort((rows, -scores32))
    if k is not None:
        order = order[:k]
    return rows[order], scores32[order]


def test_joined_postings_score_like_the_per_term_reference() -> None:
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(300)] + ["running", "runs", "the", "and", "kids"]
    docs = [" ".join(rng.choice(words, int(rng.integers(0, 14)))) for _ in range(3000)]
    index = BM25Index()
    index.add(docs[:1500])
    index.add(docs[1500:])
    queries = [" ".join(rng.choice(words, int(rng.integers(1, 9)))) for _ in range(60)]
    queries += ["running runs run", "w1 w1 w1 w2", "the and", "w7", "unknownword w3"]
    queries.append(" ".join(words[:120]))  # many terms: the dense accumulation path

    def check() -> None:
        for query in queries:
            for k in (None, 1, 7, 128):
                rows, scores = index.search(query, k)
                ref_rows, ref_scores = _reference_search(index, query, k)
                assert rows.dtype == np.int64 and scores.dtype == np.float32
                np.testing.assert_array_equal(rows, ref_rows)
                np.testing.assert_array_equal(scores, ref_scores)  # bit for bit
            rows, scores = index.matches(query)
            assert np.all(np.diff(rows) > 0)
            ref_rows, ref_scores = _reference_search(index, query)
            order = np.argsort(ref_rows)
            np.testing.assert_array_equal(rows, ref_rows[order])
            np.testing.assert_array_equal(scores, ref_scores[order])

    check()
    index.remove(rng.choice(3000, 700, replace=False).tolist())  # tombstones
    check()
    index.compact()
    check()


def test_query_terms_memo_equals_tokenize() -> None:
    index = BM25Index()
    index.add(CORPUS)
    for query in [*QUERIES, "Running RAN runs!", "the the and", "zzz unseen words"]:
        from collections import Counter

        expected = [
            (index._vocab[t], c)
            for t, c in Counter(index.tokenize(query)).items()
            if t in index._vocab
        ]
        assert index._query_terms(query) == expected


def test_query_scores_lookup_top_and_release() -> None:
    rng = np.random.default_rng(6)
    words = [f"w{i}" for i in range(80)]
    index = BM25Index()
    index.add([" ".join(rng.choice(words, 5)) for _ in range(500)])
    index.remove(list(range(0, 500, 7)))
    for query in ["w1 w2 w3", "w4", "w5 w5 w6 nothing", "nothing at all"]:
        rows, scores = index.search(query)
        with index.query_scores(query) as found:
            dense = np.zeros(500, dtype=np.float32)
            dense[rows] = scores
            everything = np.arange(500)
            np.testing.assert_array_equal(found.lookup(everything), dense.astype(np.float64))
            assert found.max() == (float(scores.max()) if scores.size else 0.0)
            for k in (1, 3, 50, 1000):
                np.testing.assert_array_equal(found.top(k), index.search(query, k)[0])
            odd = everything % 2 == 1
            for k in (1, 3, 50, 1000):  # the best of the masked rows, in search's order
                np.testing.assert_array_equal(found.top_among(odd, k), rows[odd[rows]][:k])
            np.testing.assert_array_equal(found.matches()[0], np.sort(rows))
            np.testing.assert_array_equal(found.matched(everything), dense > 0)
        assert found.lookup(everything).sum() == 0.0 or not rows.size  # released: empty
    # the shared buffer is zero again after every release
    assert index._scratch is not None and not index._scratch.any()


def test_query_scores_concurrent_holders_get_their_own_buffer() -> None:
    index = BM25Index()
    index.add(CORPUS)
    first = index.query_scores("kids camping")
    second = index.query_scores("support group")  # the shared buffer is taken: a private one
    try:
        for query, held in (("kids camping", first), ("support group", second)):
            rows, scores = index.search(query)
            np.testing.assert_array_equal(held.lookup(rows), scores.astype(np.float64))
    finally:
        first.release()
        second.release()
        first.release()  # idempotent
    assert index._scratch_lock is not None and not index._scratch_lock.locked()
    with index.query_scores("kids") as again:  # the shared buffer is free again
        assert again._lock is index._scratch_lock


def test_query_scores_top_when_rows_match_many_terms() -> None:
    # every matching row matches all three terms: the postings repeat each row three times
    rng = np.random.default_rng(12)
    docs = [
        "alpha beta gamma " + " ".join(rng.choice(["x", "yy", "zz", "ww"], int(rng.integers(0, 9))))
        if i % 3
        else "other words only"
        for i in range(900)
    ]
    index = BM25Index()
    index.add(docs)
    for k in (1, 5, 40, 200, 599, 600, 601, 5000):
        with index.query_scores("alpha beta gamma") as found:
            np.testing.assert_array_equal(found.top(k), index.search("alpha beta gamma", k)[0])
            assert found.max() == float(index.search("alpha beta gamma", 1)[1][0])


def _top_tiers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Spy on ``QueryScores.top``: the postings each try of a score floor kept."""
    kept: list[int] = []
    real = lexical_scores._row_keys

    def spy(rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
        kept.append(int(rows.shape[0]))
        return real(rows, scores)

    monkeypatch.setattr(lexical_scores, "_row_keys", spy)
    return kept


def test_query_scores_top_takes_the_sampled_floor_on_many_matches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Zipf-like words: a query of common words matches thousands of rows, a few of them twice
    rng = np.random.default_rng(21)
    words = [f"w{i}" for i in range(300)]
    weights = 1.0 / np.arange(1, 301)
    docs = [" ".join(rng.choice(words, 8, p=weights / weights.sum())) for _ in range(6000)]
    index = BM25Index()
    index.add(docs)
    index.remove(list(range(0, 6000, 11)))
    kept = _top_tiers(monkeypatch)
    for query in ("w1 w2", "w3 w7 w40", "w0"):
        for k in (1, 4, 10, 40):
            kept.clear()
            with index.query_scores(query) as found:
                postings = found._postings
                assert postings is not None
                np.testing.assert_array_equal(found.top(k), index.search(query, k)[0])
            # one try, with a floor that kept a small share of the postings
            assert len(kept) == 1 and kept[0] < postings.shape[0] // 4, (query, k, kept)


def test_query_scores_top_when_the_sampled_floor_keeps_too_few_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every matching row holds all six query terms: the best ~4k postings are ~4k/6 rows,
    # fewer than k, so the exact floor (k * 6 postings) answers
    rng = np.random.default_rng(5)
    fill = [f"f{i}" for i in range(50)]
    docs = [
        "ab cd ef gh ij kl " + " ".join(rng.choice(["ab", "cd", *fill], rng.integers(0, 60)))
        for _ in range(700)
    ]
    index = BM25Index()
    index.add(docs)
    kept = _top_tiers(monkeypatch)
    for k in (16, 32, 64):
        kept.clear()
        with index.query_scores("ab cd ef gh ij kl") as found:
            np.testing.assert_array_equal(found.top(k), index.search("ab cd ef gh ij kl", k)[0])
        assert len(kept) == 2 and kept[0] < 6 * k <= kept[1], (k, kept)


def test_query_scores_top_counts_every_match_when_the_floors_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a broken promise: told that the query has one term, k postings of rows that hold all
    # three terms are k / 3 rows; the answer still comes out whole, by counting every match
    index = BM25Index()
    index.add(["alpha beta gamma" + " xx" * i for i in range(300)] + ["alpha"] * 200)
    called: list[int] = []
    real = lexical.QueryScores._top_of_matches

    def spy(self: lexical.QueryScores, k: int) -> np.ndarray:
        called.append(k)
        return real(self, k)

    monkeypatch.setattr(lexical.QueryScores, "_top_of_matches", spy)
    for k in (1, 7, 120, 300, 500, 800, 1000, 1100, 2000):
        called.clear()
        with index.query_scores("alpha beta gamma") as found:
            found._terms = 1
            top = found.top(k)
        np.testing.assert_array_equal(top, index.search("alpha beta gamma", k)[0])
        # 1,100 postings: from k = 275 on, no sampled floor; from k = 1,100 on, no floor
        if k >= 275:
            assert called == ([k] if k < 1100 else []), k


def test_query_scores_top_breaks_ties_by_row() -> None:
    index = BM25Index()
    index.add(["alpha beta"] * 400 + ["beta alpha"] * 400 + ["gamma"] * 10)
    index.remove([0, 5, 401])
    live = np.array([r for r in range(800) if r not in (0, 5, 401)])
    for k in (1, 3, 50, 200, 797, 900):
        with index.query_scores("alpha beta") as found:
            np.testing.assert_array_equal(found.top(k), live[:k])


def _as_terms(index: BM25Index, texts: list[str]) -> tuple[list[list[str]], list[list[int]]]:
    from collections import Counter

    counted = [Counter(index.tokenize(t)) for t in texts]
    return [list(c) for c in counted], [list(c.values()) for c in counted]


@pytest.mark.parametrize("by_term", [False, True], ids=["pairs", "grouped-by-term"])
def test_add_terms_indexes_like_add(by_term: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Documents given as stored terms (what a database keeps) index like their texts: same
    rows, lengths and float32 scores, also when added on top of texts and after removals --
    appended pair by pair (a few documents) or grouped by term with numpy (a bulk load)."""
    from langchain_reflective.backends.sqlite import lexical

    monkeypatch.setattr(lexical, "_FLAT_BY_TERM_MIN", 0 if by_term else 10**9)
    by_text = BM25Index()
    by_terms = BM25Index()
    half = len(CORPUS) // 2
    by_text.add(CORPUS)
    by_terms.add(CORPUS[:half])
    by_terms.add_terms(*_as_terms(by_terms, CORPUS[half:]))
    by_text.remove([1, 6])
    by_terms.remove([1, 6])
    assert len(by_terms) == len(by_text) and by_terms.n_live == by_text.n_live
    for query in [*QUERIES, "pottery class relaxing bowl cup"]:
        expected = _dense(by_text, query, len(CORPUS))
        got = _dense(by_terms, query, len(CORPUS))
        assert got.tobytes() == expected.tobytes(), query
        assert expected.any()


def test_add_terms_refuses_mismatched_documents() -> None:
    index = BM25Index()
    with pytest.raises(ValueError, match="documents"):
        index.add_terms([["run"]], [])
    with pytest.raises(ValueError, match="number of terms"):
        index.add_terms([["run", "park"]], [[1]])
    with pytest.raises(ValueError, match="at least 1"):
        index.add_terms([["run"]], [[0]])
    assert len(index) == 0
    index.add_terms([[], ["run"]], [[], [2]])  # an empty document takes a row, never matches
    assert len(index) == 2
    assert index.search("running")[0].tolist() == [1]
