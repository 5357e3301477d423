"""Postgres: top-10 agreement with exact scoring and retrieval p50 for several candidate settings.

One database of ``--n`` memories (the synthetic data of :mod:`scale`, batched adds, the default
IVFFlat index), then, for each ``--configs`` entry (JSON keyword arguments of
``PostgresBackend.from_conn_string``), ``retrieve(k=10, touch=False)`` on queries never touched
(``scale.AGREEMENT_SEED``) against the exact hybrid ranking of the same queries. This is the
run behind ``PostgresBackend``'s default ``dense_candidates`` (docs/benchmarks.md).

A config may also hold ``"dense_depth_from"``: the number of memories past which the dense
candidates grow with the square root of the namespace (``DENSE_DEPTH_FROM`` of
``langchain_reflective.backends.postgres.queries``, set for that config's retrievals only; a
number larger than ``--n`` turns the growth off). With ``--rounds`` above 1 the configs take
turns, one pass each per round, so a drifting machine slows them alike; agreement does not
change between rounds (nothing is touched).

Usage::

    python benchmarks/pg_candidates.py --n 100000 --queries 300 \\
        --configs '{}' '{"dense_candidates": 192}' '{"dense_candidates": 256}'
    python benchmarks/pg_candidates.py --n 1000000 --queries 100 --rounds 3 \\
        --configs '{}' '{"dense_depth_from": 1e12}'

``--url`` runs on that server instead of a throwaway one; with ``--reuse`` a database
``candidates_<n>`` already holding the ``n`` memories (from an earlier run there) is used
as it is, not filled again (a 1M fill takes ~15 minutes here).

Prints one JSON line per setting and writes ``benchmarks/results/pg_candidates.json``.
Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import AGREEMENT_SEED, K, make_queries
from scale_postgres import (
    _analyze,
    _fake_embeddings,
    add_scale_data,
    database_url,
    exact_top_ids,
    fresh_database,
    machine,
    server,
)

from langchain_reflective.backends.postgres import queries

RESULTS = Path(__file__).resolve().parent / "results" / "pg_candidates.json"


def _database(admin: str, n: int, reuse: bool) -> tuple[str, datetime | None]:
    """The URL of ``candidates_<n>``, and, when ``reuse`` finds it holding ``n`` memories, the
    ``end`` they were created up to (the first was created 365 days before it); else a fresh,
    empty database and ``None``."""
    name = f"candidates_{n}"
    url = database_url(admin, name)
    if reuse:
        with contextlib.suppress(psycopg.OperationalError), psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT count(*), min(created_at) FROM reflective_memories"
            ).fetchone()
            if row is not None and row[0] == n:
                return url, row[1] + timedelta(days=365)
    return fresh_database(admin, name), None


@contextlib.contextmanager
def _depth_from(value: float | None) -> Iterator[None]:
    """``DENSE_DEPTH_FROM`` set to ``value`` (``None``: left alone) for the block."""
    saved = queries.DENSE_DEPTH_FROM
    if value is not None:
        queries.DENSE_DEPTH_FROM = int(value)
    try:
        yield
    finally:
        queries.DENSE_DEPTH_FROM = saved


def main(argv: list[str] | None = None) -> None:
    from langchain_reflective import MemoryStream, PostgresBackend

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--configs", nargs="+", default=["{}", '{"dense_candidates": 128}'])
    parser.add_argument("--rounds", type=int, default=1, help="passes per config, in turns")
    parser.add_argument("--url", help="admin URL of a Postgres server (default: embedded)")
    parser.add_argument("--reuse", action="store_true", help="keep a filled candidates_<n>")
    parser.add_argument("--shared-buffers", default="1GB")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    configs: list[dict[str, Any]] = [json.loads(c) for c in args.configs]
    emb = _fake_embeddings()
    agree: list[list[float]] = [[] for _ in configs]
    lat: list[list[list[float]]] = [[] for _ in configs]
    with server(args.url, args.shared_buffers or None) as admin:
        url, end = _database(admin, args.n, args.reuse)
        backend = PostgresBackend.from_conn_string(url)
        backend.setup()
        with MemoryStream(emb, backend=backend) as stream:
            if end is None:
                end = datetime.now(UTC)
                add_scale_data(stream, args.n, end)
                backend.wait_for_index()
                _analyze(url, "reflective_memories, reflective_terms, reflective_access")
            qs = make_queries(args.n, args.queries, seed=AGREEMENT_SEED)
            exact_ids = []
            for _, vec, text in qs:
                exact_ids.append(exact_top_ids(stream, backend, vec, text, end))
        for round_no in range(args.rounds):
            for i, cfg in enumerate(configs):
                kwargs = {key: v for key, v in cfg.items() if key != "dense_depth_from"}
                b = PostgresBackend.from_conn_string(url, **kwargs)
                with _depth_from(cfg.get("dense_depth_from")), MemoryStream(emb, backend=b) as s:
                    times = []
                    for (_, vec, text), want in zip(qs, exact_ids, strict=True):
                        emb.query = vec
                        t0 = time.perf_counter()
                        got = {h.record.id for h in s.retrieve(text, k=K, now=end, touch=False)}
                        times.append(time.perf_counter() - t0)
                        if round_no == 0:
                            agree[i].append(len(got & want) / K)
                lat[i].append(times)
                print(
                    json.dumps({"round": round_no, "config": cfg, "p50_ms": _p50(times)}),
                    flush=True,
                )
    rows: list[dict[str, Any]] = []
    for i, cfg in enumerate(configs):
        row = {"config": cfg, "agreement_at_10": float(np.mean(agree[i]))}
        row["p50_ms"] = _p50([t for times in lat[i] for t in times])
        row["p50_ms_per_round"] = [_p50(times) for times in lat[i]]
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "machine": machine(),
        "n": args.n,
        "queries": args.queries,
        "rounds": args.rounds,
        "results": rows,
    }
    args.output.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    print(f"wrote {args.output}")


def _p50(times: list[float]) -> float:
    return float(np.median(times) * 1000)


if __name__ == "__main__":
    main()
