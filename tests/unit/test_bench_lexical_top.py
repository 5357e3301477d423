"""``benchmarks/lexical_top.py`` compares what it says: both ways on the same query buffer, with
the score floor actually taken, and it stops on the first query where they disagree."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from langchain_reflective.backends.sqlite import lexical
from tests.benchmark_scripts import benchmark_script
from tests.unit.test_lexical import _top_tiers


@pytest.fixture
def bench() -> Iterator[ModuleType]:
    with benchmark_script("lexical_top") as module:
        yield module


def test_the_run_times_both_ways_and_the_floor_is_taken(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = _top_tiers(monkeypatch)
    out = tmp_path / "result.json"
    argv = ["--sizes", "20000", "--queries", "5", "--rounds", "1", "--k", "8"]
    bench.main([*argv, "--output", str(out)])
    (row,) = json.loads(out.read_text())["results"]
    assert row["n"] == 20000 and row["context"] is True
    assert set(row["top_ms"]) == set(bench.WAYS)
    assert all(ms > 0 for ms in row["top_ms"].values())
    # 8 words of a 5,000-word vocabulary, with the previous text: a query's ~6 terms have
    # ~60 postings each; a floor kept a small share of them
    assert row["postings_p50"] > 150
    assert kept and max(kept) < row["postings_p50"] / 2


def test_a_disagreement_stops_the_run(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    index = bench.build(3000, context=False)
    queries = [text for _, _, text in bench.make_queries(3000, 4)]
    monkeypatch.setattr(
        lexical.QueryScores, "_top_of_matches", lambda self, k: np.arange(k, dtype=np.int64)
    )
    with pytest.raises(AssertionError, match="disagree"):
        bench.measure(index, queries, 4, 1)
