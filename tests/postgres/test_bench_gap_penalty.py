"""``benchmarks/gap_penalty.py`` times what it says: each workload after each kind of gap, the
gap itself outside the timing (real server, small)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
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
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a fake clock: each gap runs right before its query and its time is not counted."""
    clock = [0.0]
    order: list[str] = []

    def gap(kind: str) -> Callable[[], None]:
        def run() -> None:
            order.append(kind)
            clock[0] += 1000.0  # a gap far longer than the work

        return run

    def work(vec: object, text: str) -> None:
        order.append(text)
        clock[0] += 0.002  # 2 ms of work

    fake = {g: None if g == "none" else gap(g) for g in bench.GAPS}
    monkeypatch.setattr(bench, "_gaps", lambda gap_s: fake)
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock[0])
    found = bench.measure({"w": work}, [(0, None, "a"), (1, None, "b")], rounds=1)
    expected = ["a", "b"]  # the untimed pass, then each gap before each query, in turn
    for g in bench.GAPS:
        expected += ["a", "b"] if g == "none" else [g, "a", g, "b"]
    assert order == expected
    assert found["w"] == {g: pytest.approx(2.0) for g in bench.GAPS}  # ms: the work alone


def test_each_gap_lasts_its_length_on_the_clock(
    bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [0.0]

    def tick() -> float:
        clock[0] += 0.001
        return clock[0]

    monkeypatch.setattr(bench.time, "perf_counter", tick)
    monkeypatch.setattr(bench.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    gaps = bench._gaps(0.05)
    assert gaps["none"] is None
    for kind in bench.GAPS[1:]:
        start = clock[0]
        gaps[kind]()
        assert 0.05 <= clock[0] - start < 0.06
