"""``benchmarks/filtered_agreement.py`` compares what it says: every filtered retrieval of its
approximate passes takes the approximate path, and its exact pass scores every match."""

from __future__ import annotations

import json
from collections.abc import Iterator
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
