"""``benchmarks/pg_retrieval_parts.py`` times what it says: every timed retrieval is answered by
the local index and split into its catch-up, candidates and touch (real server, small)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import benchmark_script

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


@pytest.fixture
def bench() -> Iterator[ModuleType]:
    with benchmark_script("pg_retrieval_parts") as module:
        yield module


def test_each_retrieval_is_split_into_its_steps(
    bench: ModuleType, postgres_server: str, tmp_path: Path
) -> None:
    from langchain_reflective.backends.postgres import local_index

    gather = local_index.partition_candidates
    out = tmp_path / "parts.json"
    bench.main(
        [
            "--url",
            postgres_server,
            "--sizes",
            "600",
            "--queries",
            "5",
            "--passes",
            "2",
            "--output",
            str(out),
        ]
    )
    (row,) = json.loads(out.read_text())["results"]
    assert (row["n"], row["queries"], row["passes"]) == (600, 5, 2)
    parts = [row[f"{p}_p50_ms"] for p in bench.PARTS]
    assert all(p > 0 for p in parts)
    assert sum(parts) < row["retrieve_p50_ms"]  # (medians: the steps are inside the whole)
    assert row["round_trip_p50_ms"] > 0
    assert row["peer_p50_ms"] > 0  # the peer searched the same data in the same run
    assert local_index.partition_candidates is gather  # put back


def test_a_retrieval_the_server_answered_stops_the_run(
    bench: ModuleType, postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_reflective.backends.postgres.local_index import LocalIndex

    real = LocalIndex.candidates
    answered = iter([True, False])  # the second retrieval goes to the server's statement

    def candidates(self: LocalIndex, *args: object, **kwargs: object) -> object:
        return real(self, *args, **kwargs) if next(answered, True) else None

    monkeypatch.setattr(LocalIndex, "candidates", candidates)
    url = bench.fresh_database(postgres_server, "bench_parts_server")
    with pytest.raises(RuntimeError, match="not answered by the local index"):
        bench.run_size(url, 300, 3)
