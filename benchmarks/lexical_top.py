"""The lexical half's best rows: ``QueryScores.top`` above a score floor vs sorting every match.

Every approximate retrieval (above ``exact_limit`` memories) asks the namespace's BM25 index for
its best ``ann_candidates`` rows (128 by default). At 1M memories a query's terms have ~10-20k
postings. ``QueryScores.top`` first sorted them all to count each row once, then partitioned
and lexsorted the matches (kept here as ``QueryScores._top_of_matches``, its fallback). It now
keeps the postings at or above a score floor estimated from every 16th posting and orders only
those (see its docstring for why the answer is exact).

This builds a ``BM25Index`` over the synthetic texts of ``benchmarks/scale.py`` (8 words from a
5,000-word vocabulary), each indexed with the previous text too, as the default scoring does
(``ScoringConfig.lexical_context``; ``--no-context``: each text alone). Then, for each query
of ``scale.make_queries``, it times both ways on the same ``query_scores`` buffer, one after
the other, and checks that they return the same rows. Median of ``--rounds`` passes after one
warm-up pass.

Run::

    python benchmarks/lexical_top.py --sizes 100000,1000000 [--no-context]

Prints a table and writes ``benchmarks/results/lexical_top.json``. Timings are wall-clock on the
machine that runs it; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import DIM, iter_chunks, machine, make_queries

from langchain_reflective.backends.sqlite.candidates import DEFAULT_ANN_CANDIDATES
from langchain_reflective.backends.sqlite.lexical import BM25Index
from langchain_reflective.backends.sqlite.partition import Partition
from langchain_reflective.records import OBSERVATION

RESULTS = Path(__file__).resolve().parent / "results" / "lexical_top.json"
WAYS = ("sort every match", "score floor")


def build(n: int, *, context: bool) -> BM25Index:
    """A BM25 index over the first ``n`` synthetic texts, as observations of one partition."""
    index = BM25Index()
    part = Partition("bench", DIM, 0)  # for its lexical documents only
    part.lexical_context = context
    for _, _, texts, _ in iter_chunks(n):
        index.add(part.lexical_documents(texts, [OBSERVATION] * len(texts)))
    return index


def measure(
    index: BM25Index, queries: list[str], k: int, rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Per way, the median pass's p50 of ``top(k)`` in ms; and the postings per query."""
    passes: dict[str, list[float]] = {way: [] for way in WAYS}
    postings: list[int] = []
    for round_ in range(rounds + 1):  # the first pass warms up and is not kept
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        for i, query in enumerate(queries):
            order = WAYS if (i + round_) % 2 == 0 else WAYS[::-1]
            found: dict[str, np.ndarray] = {}
            with index.query_scores(query) as scores:
                if round_ == 0:
                    held = scores._postings
                    postings.append(0 if held is None else int(held.shape[0]))
                for way in order:
                    scores._matches = None  # each way starts from the bare buffer
                    scores._max = None
                    t0 = time.perf_counter()
                    if way == "score floor":
                        found[way] = scores.top(k)
                    else:
                        found[way] = scores._top_of_matches(k)
                    times[way].append(time.perf_counter() - t0)
                scores._matches = None
            if not np.array_equal(found[WAYS[0]], found[WAYS[1]]):
                raise AssertionError(f"the two ways disagree on query {query!r}")
        if round_:
            for way in WAYS:
                passes[way].append(float(np.percentile(times[way], 50)) * 1e3)
    p50 = {way: float(np.median(passes[way])) for way in WAYS}
    spread = {
        "postings_p50": float(np.percentile(postings, 50)),
        "postings_p90": float(np.percentile(postings, 90)),
    }
    return p50, spread


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| memories | postings per query (p50) | sort every match p50 (ms) "
        "| score floor p50 (ms) |",
        "|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['n']:,} | {r['postings_p50']:,.0f} | {r['top_ms'][WAYS[0]]:.3f} "
            f"| {r['top_ms'][WAYS[1]]:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--k", type=int, default=DEFAULT_ANN_CANDIDATES)
    parser.add_argument(
        "--context",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="index each text with the previous one (the default scoring's lexical context)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    for n in (int(s) for s in args.sizes.split(",")):
        t0 = time.perf_counter()
        index = build(n, context=args.context)
        built = time.perf_counter() - t0
        queries = [text for _, _, text in make_queries(n, args.queries)]
        top_ms, spread = measure(index, queries, args.k, args.rounds)
        results.append(
            {"n": n, "k": args.k, "context": args.context, "build_s": built, "top_ms": top_ms}
            | spread
        )
        print(table(results[-1:]), flush=True)
    print()
    print(table(results))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"machine": machine(), "results": results}, indent=2))
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
