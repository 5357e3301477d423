"""BM25 snapshots (``lexical_cache``): a loaded index scores exactly like the one saved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from langchain_reflective.backends.sqlite.lexical import BM25Index
from langchain_reflective.backends.sqlite.lexical_cache import load_bm25, save_bm25

WORDS = ["running", "runs", "park", "tea", "paris", "ünïcode", "the", "a" * 80, "b" * 70, "cook"]


def _docs(rng: np.random.Generator, n: int) -> list[str]:
    return [" ".join(rng.choice([*WORDS, f"m{i}"], int(rng.integers(0, 9)))) for i in range(n)]


def _same(a: BM25Index, b: BM25Index, queries: list[str]) -> None:
    for q in queries:
        ra, sa = a.search(q)
        rb, sb = b.search(q)
        np.testing.assert_array_equal(ra, rb)
        np.testing.assert_array_equal(sa, sb)


def test_snapshot_round_trip_renumbers_live_rows_and_keeps_scores(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    docs = _docs(rng, 500)
    saved = BM25Index()
    saved.add(docs)
    dead = sorted(set(rng.integers(0, 500, 60).tolist()))
    saved.remove(dead)
    digest, rows = save_bm25(saved, tmp_path / "x.bm25")
    assert rows == 500 - len(dead)
    live_docs = [d for i, d in enumerate(docs) if i not in set(dead)]
    fresh = BM25Index()
    fresh.add(live_docs)  # what a rebuild from the file would give
    loaded = load_bm25(tmp_path / "x.bm25", expected_sha256=digest, template=BM25Index())
    assert loaded is not None and len(loaded) == rows
    queries = ["running park", "tea tea paris", "ünïcode", "a" * 80, "b" * 70 + " cook", "m7"]
    queries += ["nothing here", "the"]
    _same(loaded, fresh, queries)
    more = _docs(rng, 80)  # appends after loading (copy-on-write postings, new terms)
    loaded.add(more)
    fresh.add(more)
    loaded.remove([3, 100, rows + 5])
    fresh.remove([3, 100, rows + 5])
    _same(loaded, fresh, [*queries, "m499 m3"])
    assert loaded.vocabulary_size >= fresh.vocabulary_size  # terms of removed rows stay
    loaded.compact()
    _same(loaded, fresh, queries)
    again, _ = save_bm25(loaded, tmp_path / "y.bm25")  # a snapshot of a loaded index
    reloaded = load_bm25(tmp_path / "y.bm25", expected_sha256=again, template=BM25Index())
    assert reloaded is not None
    fresh_live = BM25Index()
    fresh_live.add([d for i, d in enumerate(live_docs + more) if i not in {3, 100, rows + 5}])
    _same(reloaded, fresh_live, queries)


def test_tampered_foreign_or_mismatched_snapshots_are_refused(tmp_path: Path) -> None:
    index = BM25Index()
    index.add(["running in the park", "tea in paris"])
    path = tmp_path / "x.bm25"
    digest, _ = save_bm25(index, path)
    assert load_bm25(path, expected_sha256="0" * 64, template=BM25Index()) is None
    assert load_bm25(path, expected_sha256=digest, template=BM25Index(k1=1.2)) is None
    assert load_bm25(tmp_path / "missing", expected_sha256=digest, template=BM25Index()) is None
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert load_bm25(path, expected_sha256=digest, template=BM25Index()) is None


@pytest.mark.parametrize("n", [0, 1])
def test_tiny_indexes_round_trip(tmp_path: Path, n: int) -> None:
    index = BM25Index()
    index.add(["park runs"] * n)
    digest, rows = save_bm25(index, tmp_path / "x.bm25")
    loaded = load_bm25(tmp_path / "x.bm25", expected_sha256=digest, template=BM25Index())
    assert loaded is not None and rows == n
    _same(loaded, index, ["park", "run"])
