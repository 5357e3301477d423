"""``benchmarks/filtered_agreement.py`` compares what it says: every filtered retrieval of its
approximate passes takes the approximate path, and its exact pass scores every match."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from langchain_reflective.backends.sqlite import candidates as cand
from tests.benchmark_scripts import benchmark_script


@pytest.fixture
def bench() -> Iterator[ModuleType]:
    with benchmark_script("filtered_agreement") as module:
        yield module


def test_the_approximate_passes_take_the_approximate_path(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gathered: list[bool] = []  # per filtered retrieval: approximate rows (True) or exact
    real = cand.gather

    def gather(part: Any, qvec: Any, k: int, mask: Any, *args: Any, **kwargs: Any) -> Any:
        rows = real(part, qvec, k, mask, *args, **kwargs)
        if mask is not None:
            gathered.append(rows is not None)
        return rows

    monkeypatch.setattr(cand, "gather", gather)
    out = tmp_path / "filtered.json"
    bench.main(["--size", "6000", "--fractions", "0.6", "--queries", "5", "--output", str(out)])
    (row,) = json.loads(out.read_text())["results"]
    assert (row["n"], row["fraction"], row["queries"]) == (6000, 0.6, 5)
    assert bench.APPROXIMATE_LIMIT < row["matches"] <= 6000
    # the exact pass never gathers (no limit, no IVF index); both approximate passes do
    assert gathered == [True] * 10
    assert 0 <= row["agreement"] <= 1
    assert row["approximate_p50_ms"] > 0 and row["exact_p50_ms"] > 0


def test_touching_retrievals_come_first_and_the_passes_rank_after_the_last(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_reflective import MemoryStream

    calls: list[tuple[bool, datetime | None, bool]] = []  # every retrieval: touch, now, filtered
    real = MemoryStream.retrieve

    def retrieve(self: Any, query: str, **kwargs: Any) -> Any:
        calls.append((kwargs["touch"], kwargs.get("now"), kwargs.get("filter") is not None))
        return real(self, query, **kwargs)

    monkeypatch.setattr(MemoryStream, "retrieve", retrieve)
    gathered: list[bool] = []  # per unfiltered retrieval of the passes: approximate rows or exact
    real_gather = cand.gather

    def gather(part: Any, qvec: Any, k: int, mask: Any, *args: Any, **kwargs: Any) -> Any:
        rows = real_gather(part, qvec, k, mask, *args, **kwargs)
        gathered.append(rows is not None)
        return rows

    monkeypatch.setattr(cand, "gather", gather)
    out = tmp_path / "touched.json"
    argv = ["--size", "6000", "--fractions", "1", "--queries", "3", "--output", str(out)]
    bench.main([*argv, "--touches", "4", "--touch-minutes", "30"])
    (row,) = json.loads(out.read_text())["results"]
    assert (row["touches"], row["fraction"], row["matches"]) == (4, 1.0, 6000)
    touching = [c for c in calls if c[0]]
    assert len(touching) == 4 and calls[2 : 2 + 4] == touching  # (after the index is built)
    times = [c[1] for c in touching]
    assert [b - a for a, b in itertools.pairwise(times)] == [timedelta(minutes=30)] * 3
    passes = [c for c in calls[2 + 4 :] if c[1] is not None]  # (not those building the index)
    assert len(passes) == 3 * 3  # exact, then the approximate passes: untimed, timed
    assert all(not touch and now == times[-1] for touch, now, _ in passes)
    assert not any(filtered for _, _, filtered in passes)  # a fraction of 1: no filter
    assert gathered[-3:] == [True] * 3  # the timed approximate pass gathers


def test_fractions_outside_zero_to_one_are_refused(bench: ModuleType) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--fractions", "0.5,1.5"])
