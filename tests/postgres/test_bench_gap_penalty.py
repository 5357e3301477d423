"""``benchmarks/gap_penalty.py`` times what it says: each workload after each kind of gap, the
gap itself outside the timing (real server, small)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import benchmark_script

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


@pytest.fixture
def bench() -> Iterator[ModuleType]:
    with benchmark_script("gap_penalty") as module:
        yield module


def test_every_workload_is_timed_after_every_gap(
    bench: ModuleType, postgres_server: str, tmp_path: Path
) -> None:
    out = tmp_path / "gap.json"
    args = ["--url", postgres_server, "--size", "600", "--queries", "4", "--rounds", "1"]
    args += ["--gap-ms", "2"]
    bench.main([*args, "--output", str(out)])
    rows = json.loads(out.read_text())["results"]
    assert [r["workload"] for r in rows] == ["numpy", "ours", "peer"]
    for row in rows:
        assert (row["n"], row["queries"], row["rounds"], row["gap_ms"]) == (600, 4, 1, 2)
        assert all(row[f"after_{gap}_p50_ms"] > 0 for gap in bench.GAPS)


def test_the_gap_comes_before_the_timing_and_is_not_in_it(
    bench: ModuleType,
) -> None:
    order: list[str] = []

    def work(vec: object, text: str) -> None:
        order.append(text)

    found = bench.measure({"w": work}, [(0, None, "a"), (1, None, "b")], rounds=1, gap_s=0.05)
    # the untimed pass, then each gap in turn over both queries
    assert order == ["a", "b"] * (1 + len(bench.GAPS))
    assert all(p50 < 50 for p50 in found["w"].values())  # a 50 ms gap is not in the timing
    t0 = time.perf_counter()
    bench._gaps(0.05)["spin"]()
    assert time.perf_counter() - t0 >= 0.05
