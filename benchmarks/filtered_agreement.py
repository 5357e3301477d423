"""Filtered retrievals on the approximate candidate path: top-10 agreement with exact scoring,
and time, for filters of several selectivities.

A filter matching more than ``exact_limit`` memories takes the approximate path (IVF, BM25,
recent and important rows, restricted to the filter); one matching fewer is scored exactly.
This script fills one SQLite-backed stream (in memory) with ``scale.py``'s synthetic data, then
for each fraction in ``--fractions`` takes the ``created_after`` filter that keeps about that
share of the newest memories and retrieves ``--queries`` queries (k=10, the default hybrid
scoring, no touch) twice: with ``exact_limit`` below the filter's matches (the approximate
path, the IVF index built first) and with none (every matching memory scored). It reports the
agreement of the two top 10s and the p50 of each. A fraction of 1 is no filter at all.

With ``--touches N``, N other retrievals (``k=10``, with the touch) run first, each
``--touch-minutes`` after the one before, as an agent's retrievals would: the memories they
return become recent, so the recency candidates of the approximate path (the 40 most recently
accessed) no longer hold every memory whose recency can lift it into a top 10. The passes then
rank at the time of the last of them.

    python benchmarks/filtered_agreement.py [--size 100000] [--fractions 0.6,0.24,0.06]
        [--touches 0] [--touch-minutes 1]

Prints a table and writes ``benchmarks/results/filtered_agreement.json``. Timings are
wall-clock on the machine that runs it; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import AGREEMENT_SEED, K, _fake_embeddings, make_queries
from scale_postgres import add_scale_data, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "filtered_agreement.json"
APPROXIMATE_LIMIT = 2_048
"""``exact_limit`` for the approximate runs: below every filter's matches here."""


TOUCH_SEED = 1234
"""Seed of the touching retrievals' queries: neither the agreement queries nor the latency ones."""


def run(
    n: int, fractions: list[float], queries: int, touches: int = 0, touch_minutes: float = 1.0
) -> list[dict[str, Any]]:
    from langchain_reflective import MemoryStream

    emb = _fake_embeddings()
    end = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    with MemoryStream(emb) as stream:
        add_scale_data(stream, n, end)
        created = np.sort([r.created_at.timestamp() for r in stream.recent(None)])
        qs = make_queries(n, queries, seed=AGREEMENT_SEED)
        now = end  # when the passes rank
        if touches:
            _index_built(stream, emb, qs[0])  # (they touch on the path an agent's would take)
            now = _touch(stream, emb, make_queries(n, touches, seed=TOUCH_SEED), end, touch_minutes)

        def top(flt: dict[str, Any] | None, limit: int | None) -> tuple[list[list[str]], float]:
            stream.exact_limit = limit
            ids, spent = [], []
            for _, vec, text in qs:
                emb.query = vec
                t0 = time.perf_counter()
                hits = stream.retrieve(text, k=K, now=now, filter=flt, touch=False)
                spent.append(time.perf_counter() - t0)
                ids.append([h.record.id for h in hits])
            return ids, float(np.median(spent)) * 1e3

        for fraction in fractions:
            flt: dict[str, Any] | None = None  # (a fraction of 1: no filter)
            matches = n
            if fraction < 1:
                cut = float(created[int(len(created) * (1 - fraction))])
                flt = {"created_after": datetime.fromtimestamp(cut, UTC)}
                matches = int(np.count_nonzero(created >= cut))  # (created_after keeps equal times)
            exact, exact_ms = top(flt, None)  # (no limit: the IVF index is dropped)
            _index_built(stream, emb, qs[0])
            top(flt, APPROXIMATE_LIMIT)  # untimed: the caches the approximate path builds
            approx, approx_ms = top(flt, APPROXIMATE_LIMIT)
            pairs = zip(approx, exact, strict=True)
            agreement = np.mean([len(set(a) & set(e)) / K for a, e in pairs])
            rows.append(
                {
                    "n": n,
                    "fraction": fraction,
                    "touches": touches,
                    "matches": matches,
                    "queries": queries,
                    "agreement": float(agreement),
                    "approximate_p50_ms": approx_ms,
                    "exact_p50_ms": exact_ms,
                }
            )
            print(table(rows[-1:]), flush=True)
    return rows


def _touch(
    stream: Any, emb: Any, queries: list[tuple[int, Any, str]], start: datetime, minutes: float
) -> datetime:
    """Retrieve ``queries`` with the touch, each ``minutes`` after the one before (from
    ``start``); the time of the last."""
    now = start
    for _, vec, text in queries:
        now += timedelta(minutes=minutes)
        emb.query = vec
        stream.retrieve(text, k=K, now=now, touch=True)
    return now


def _index_built(stream: Any, emb: Any, query: tuple[int, Any, str]) -> None:
    """Build the namespace's IVF index now and wait for it (above 16,384 memories a retrieval
    starts it on a worker thread and scores exactly until it is installed)."""
    stream.exact_limit = APPROXIMATE_LIMIT
    emb.query = query[1]
    stream.retrieve(query[2], k=K, touch=False)  # starts the build
    part = stream.backend._partitions[stream.namespace]
    if part.ann_build is not None:
        part.ann_build.join()
    stream.retrieve(query[2], k=K, touch=False)  # installs it
    if part.ann is None or part.ann_build is not None:
        raise RuntimeError("the IVF index was not built")
    del part  # (keep no reference to the partition)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| memories | touching retrievals first | filter keeps | matches | top-10 agreement | "
        "approximate p50 ms | exact p50 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['touches']:,} | {r['fraction']:.0%} | {r['matches']:,} | "
            f"{r['agreement']:.3f} | "
            f"{r['approximate_p50_ms']:.2f} | {r['exact_p50_ms']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=100_000, help="memories")
    parser.add_argument("--fractions", default="0.6,0.24,0.06")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--touches", type=int, default=0, help="touching retrievals first")
    parser.add_argument("--touch-minutes", type=float, default=1.0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    fractions = [float(f) for f in args.fractions.split(",")]
    if not all(0 < f <= 1 for f in fractions):
        parser.error("--fractions: each must be above 0 and at most 1")
    rows = run(args.size, fractions, args.queries, args.touches, args.touch_minutes)
    print(table(rows))
    write_results(args.output, {"results": rows})


if __name__ == "__main__":
    main()
