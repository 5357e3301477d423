"""``lexical_rows.revise_row``: a row's document changed in place scores as an index built
with the new document from the start, and a change the row's postings cannot hold is refused
without changing anything."""

from __future__ import annotations

import numpy as np
import pytest

from langchain_reflective.backends.sqlite.lexical import BM25Index
from langchain_reflective.backends.sqlite.lexical_cache import load_bm25, save_bm25
from langchain_reflective.backends.sqlite.lexical_rows import revise_text

WORDS = ["tea", "paris", "dog", "run", "running", "garden", "music", "river", "the", "w1", "w2"]
QUERIES = ["tea paris", "running dog", "garden music river", "w1 w2 w1", "the"]


def _docs(rng: np.random.Generator, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, int(rng.integers(0, 9)))) for _ in range(n)]


def _same(got: BM25Index, want: BM25Index) -> None:
    assert got.n_live == want.n_live
    for query in QUERIES:
        rows, scores = got.matches(query)
        want_rows, want_scores = want.matches(query)
        assert rows.tolist() == want_rows.tolist(), query
        np.testing.assert_allclose(scores, want_scores, rtol=1e-6)


@pytest.mark.parametrize("snapshot", [False, True])
def test_revised_rows_score_as_built_with_their_new_documents(tmp_path, snapshot: bool) -> None:
    rng = np.random.default_rng(5)
    docs = _docs(rng, 80)
    index = BM25Index()
    index.add(docs)
    index.remove([3, 40])
    if snapshot:  # postings read in place from a snapshot until changed
        digest, _ = save_bm25(index, tmp_path / "x.bm25")
        loaded = load_bm25(tmp_path / "x.bm25", expected_sha256=digest, template=BM25Index())
        assert loaded is not None
        index, docs = loaded, [d for i, d in enumerate(docs) if i not in (3, 40)]
    for _ in range(60):
        row = int(rng.integers(0, len(docs)))
        new = _docs(rng, 1)[0]
        assert revise_text(index, row, docs[row], new)
        docs[row] = new
    want = BM25Index()
    want.add(docs)
    if not snapshot:
        want.remove([3, 40])
    _same(index, want)


def test_a_change_the_row_does_not_hold_is_refused() -> None:
    index = BM25Index()
    index.add(["tea paris", "dog river", "tea"])
    want = BM25Index()
    want.add(["tea paris", "dog river", "tea"])
    assert not revise_text(index, 1, "dog river garden", "river")  # 'garden' is not there
    assert not revise_text(index, 1, "dog dog river", "river")  # nor a second 'dog'
    _same(index, want)
    assert revise_text(index, 1, "dog river", "tea tea")
    assert index.matches("dog")[0].tolist() == []
    assert index.matches("tea")[0].tolist() == [0, 1, 2]
