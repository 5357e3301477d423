"""``benchmarks/pg_touch_gather.py`` compares what it says: the same retrievals with their
touches written one by one and gathered, beside the peer, and the statements each wrote (real
server, small)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmark_scripts import benchmark_script

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def test_both_settings_are_timed_and_gathering_writes_fewer_statements(
    postgres_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_reflective.backends.postgres import touches

    # gathering until the block's end writes them (a busy machine can take longer than 20 ms
    # over a block, which would split it in two statements)
    monkeypatch.setattr(touches, "GATHER", 60.0)
    gather, write = touches.GATHER, touches.Touches._write
    out = tmp_path / "gather.json"
    with benchmark_script("pg_touch_gather") as bench:
        bench.main(
            [
                "--url", postgres_server, "--sizes", "600", "--queries", "10", "--rounds", "2",
                "--output", str(out),
            ]
        )  # fmt: skip
    assert (touches.GATHER, touches.Touches._write) == (gather, write)  # (put back)
    (row,) = json.loads(out.read_text())["results"]
    assert (row["n"], row["queries"], row["rounds"]) == (600, 10, 2)
    assert row["one_by_one_p50_ms"] > 0 and row["gathered_p50_ms"] > 0 and row["peer_p50_ms"] > 0
    # one statement per block of ten retrievals, against more (one per retrieval, but
    # touches made while the writer is busy meet in one)
    assert row["gathered_statements_per_100"] == pytest.approx(10.0)
    assert row["one_by_one_statements_per_100"] > 10.0
    assert row["gathered_ratio"] == pytest.approx(row["gathered_p50_ms"] / row["peer_p50_ms"])
