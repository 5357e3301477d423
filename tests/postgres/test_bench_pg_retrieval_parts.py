"""``benchmarks/pg_retrieval_parts.py`` times what it says: every timed retrieval is answered by
the local index and split into its catch-up, candidates and touch, and it counts the touches
answered in memory (real server, small)."""

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

    saved = (
        local_index.partition_candidates,
        local_index.send_statement,
        local_index.receive_row,
        local_index.LocalIndex._apply,
        local_index.LocalIndex.held,
    )
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
    assert row["peer_searches"] == 5 * 2  # once beside each timed retrieval of ours
    assert row["ratio"] == pytest.approx(row["retrieve_p50_ms"] / row["peer_p50_ms"])
    assert row["reranked"] == 0  # its own touches applied: each ranking made meanwhile stood
    # the timed passes repeat the untimed pass's queries: every hit's record is kept by then
    assert row["touches_in_memory"] == 5 * 2
    assert row["first_pass_p50_ms"] > 0
    assert row["block"] == bench.BLOCK
    assert row["block_retrieve_p50_ms"] > 0 and row["block_peer_p50_ms"] > 0
    assert row["block_ratio"] == pytest.approx(
        row["block_retrieve_p50_ms"] / row["block_peer_p50_ms"]
    )
    assert saved == (  # put back
        local_index.partition_candidates,
        local_index.send_statement,
        local_index.receive_row,
        local_index.LocalIndex._apply,
        local_index.LocalIndex.held,
    )


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


def test_the_peer_is_searched_beside_each_of_our_retrievals(
    bench: ModuleType, postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each query goes to both systems back to back, which goes first alternating, so drift in
    the machine's speed reaches both alike; then the same queries in blocks, each block to
    both systems, which goes first alternating."""
    from langchain_reflective.backends.postgres.local_index import LocalIndex

    calls: list[tuple[str, str]] = []
    real = LocalIndex.candidates
    queries = bench.make_queries(300, 4)
    vectors = {text: vec.tolist() for _, vec, text in queries}

    def candidates(
        self: LocalIndex, namespace: str, query: str, *a: object, **kw: object
    ) -> object:
        calls.append(("ours", query))
        return real(self, namespace, query, *a, **kw)

    def peer(vector: list[float], text: str) -> None:
        assert vector == vectors[text]  # the query's own vector, as ours gets
        calls.append(("peer", text))

    monkeypatch.setattr(LocalIndex, "candidates", candidates)
    monkeypatch.setattr(bench, "BLOCK", 3)
    url = bench.fresh_database(postgres_server, "bench_parts_beside")
    row = bench.run_size(url, 300, 4, 1, peer)
    texts = [text for _, _, text in queries]
    expected = []
    for i, text in enumerate(texts * 2):  # the untimed pass, then the timed one
        pair = [("ours", text), ("peer", text)]
        expected += pair[::-1] if i % 2 else pair
    first, second = texts[:3], texts[3:]  # the blocks: ours first, then the peer first
    expected += [("ours", t) for t in first] + [("peer", t) for t in first]
    expected += [("peer", t) for t in second] + [("ours", t) for t in second]
    assert calls == expected
    assert row["peer_searches"] == 4
