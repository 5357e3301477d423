"""Postgres: top-10 agreement with exact scoring and retrieval p50 for several candidate settings.

One database of ``--n`` memories (the synthetic data of :mod:`scale`, batched adds, the default
IVFFlat index), then, for each ``--configs`` entry (JSON keyword arguments of
``PostgresBackend.from_conn_string``), ``retrieve(k=10, touch=False)`` on queries never touched
(``scale.AGREEMENT_SEED``) against the exact hybrid ranking of the same queries. This is the
run behind ``PostgresBackend``'s default ``dense_candidates`` (docs/benchmarks.md).

Usage::

    python benchmarks/pg_candidates.py --n 100000 --queries 300 \\
        --configs '{}' '{"dense_candidates": 192}' '{"dense_candidates": 256}'

Prints one JSON line per setting and writes ``benchmarks/results/pg_candidates.json``.
Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from scale import AGREEMENT_SEED, K, make_queries
from scale_postgres import (
    _analyze,
    _fake_embeddings,
    add_scale_data,
    exact_top_ids,
    fresh_database,
    machine,
    server,
)

RESULTS = Path(__file__).resolve().parent / "results" / "pg_candidates.json"


def main(argv: list[str] | None = None) -> None:
    from langchain_reflective import MemoryStream, PostgresBackend

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--configs", nargs="+", default=["{}", '{"dense_candidates": 128}'])
    parser.add_argument("--shared-buffers", default="1GB")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    configs: list[dict[str, Any]] = [json.loads(c) for c in args.configs]
    end = datetime.now(UTC)
    emb = _fake_embeddings()
    rows: list[dict[str, Any]] = []
    with server(None, args.shared_buffers or None) as admin:
        url = fresh_database(admin, f"candidates_{args.n}")
        backend = PostgresBackend.from_conn_string(url)
        backend.setup()
        with MemoryStream(emb, backend=backend) as stream:
            add_scale_data(stream, args.n, end)
            backend.wait_for_index()
            _analyze(url, "reflective_memories, reflective_terms, reflective_access")
            qs = make_queries(args.n, args.queries, seed=AGREEMENT_SEED)
            exact_ids = []
            for _, vec, text in qs:
                exact_ids.append(exact_top_ids(stream, backend, vec, text, end))
        for cfg in configs:
            with MemoryStream(emb, backend=PostgresBackend.from_conn_string(url, **cfg)) as s:
                agree, lat = [], []
                for (_, vec, text), want in zip(qs, exact_ids, strict=True):
                    emb.query = vec
                    t0 = time.perf_counter()
                    got = {h.record.id for h in s.retrieve(text, k=K, now=end, touch=False)}
                    lat.append(time.perf_counter() - t0)
                    agree.append(len(got & want) / K)
            row = {"config": cfg, "agreement_at_10": float(np.mean(agree))}
            row["p50_ms"] = float(np.median(lat) * 1000)
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine(), "n": args.n, "queries": args.queries, "results": rows}
    args.output.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
