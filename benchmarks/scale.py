"""Scale benchmark: retrieval latency, add time and peak memory at 10k / 100k / 1M memories.

Synthetic data, no embedding model, so the figures measure the memory stream itself:

* vectors: 384-dimensional unit vectors from a two-level mixture of Gaussians on the sphere
  (100 topics x 20 subtopics; cosine ~0.6 within a subtopic, ~0.3 within a topic, ~0 across),
  a rough stand-in for sentence embeddings. Queries are noisy copies of stored vectors
  (cosine ~0.89 to their source). Clustered data is easier for an IVF index than uniform noise;
  the agreement column says how close the approximate path came to exact scoring on *this* data.
* texts: 8 words drawn uniformly from a 5,000-word vocabulary; a query's text is 4 words of its
  source memory plus 2 random words. Importance: a 1-10 rating / 10. Creation times spread over
  the year before the run.
* embeddings: a fake ``Embeddings`` that hands out the precomputed vectors (numpy arrays), so
  add times exclude embedding.

Every (system, size, add mode) runs in its own subprocess in a fresh temporary directory, so
peak RSS (``ru_maxrss``) is that run's alone. Systems: ``MemoryStream`` (SQLite file, default
scoring) and LangChain's ``TimeWeightedVectorStoreRetriever`` over the langchain-community FAISS
vector store (in memory, nothing persisted), fed the same vectors.

Usage::

    python benchmarks/scale.py                      # 10k, 100k, 1M (takes a while)
    python benchmarks/scale.py --quick              # 2k and 30k, a few minutes
    python benchmarks/scale.py --sizes 10000,100000
    python benchmarks/scale.py --plot-only           # redraw docs/img/scale.png from the JSON
    python benchmarks/scale.py --backend postgres --sizes 10000,100000  # see scale_postgres.py

Prints a table, writes ``benchmarks/results/scale.json`` and plots it to ``docs/img/scale.png``
(with ``--output X.json``: to ``X.png`` unless ``--plot`` says otherwise). Timings are
wall-clock on the machine that runs it; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

DIM = 384
VOCAB = 5000
WORDS = 8
TOPICS = 100
SUBTOPICS = 20
CHUNK = 10_000
BATCH = 1000
K = 10
OURS = "MemoryStream"
FLOOR = "bare SQLite: INSERT + COMMIT (the floor)"
RESULTS = Path(__file__).resolve().parent / "results" / "scale.json"
PLOT = Path(__file__).resolve().parent.parent / "docs" / "img" / "scale.png"


# -- synthetic data (generated chunk by chunk: the driver never holds all vectors) -------------


def _centers() -> np.ndarray:
    rng = np.random.default_rng(12345)
    topics = rng.standard_normal((TOPICS, DIM)).astype(np.float32)
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    subs = topics[:, None, :] + 0.051 * rng.standard_normal(
        (TOPICS, SUBTOPICS, DIM), dtype=np.float32
    )
    subs = subs.reshape(-1, DIM)
    out: np.ndarray = subs / np.linalg.norm(subs, axis=1, keepdims=True)
    return out


def chunk_data(
    index: int, size: int, centers: np.ndarray
) -> tuple[np.ndarray, list[str], list[float]]:
    """Vectors, texts and importances of rows ``index*CHUNK ..`` (deterministic)."""
    rng = np.random.default_rng(1000 + index)
    labels = rng.integers(0, centers.shape[0], size)
    x = centers[labels] + 0.0417 * rng.standard_normal((size, DIM), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    words = rng.integers(0, VOCAB, (size, WORDS))
    texts = [" ".join(f"w{w}" for w in row) for row in words]
    importances = (rng.integers(1, 11, size) / 10).tolist()
    return x, texts, importances


def iter_chunks(n: int) -> Iterator[tuple[int, np.ndarray, list[str], list[float]]]:
    centers = _centers()
    for c, start in enumerate(range(0, n, CHUNK)):
        size = min(CHUNK, n - start)
        vectors, texts, imps = chunk_data(c, size, centers)
        yield start, vectors, texts, imps


AGREEMENT_SEED = 7
"""Seed of the agreement queries: not the latency queries, whose answers those runs touched
(a touched memory is recent, so it is a candidate on every path and agrees for free)."""


def make_queries(n: int, count: int, seed: int = 99) -> list[tuple[int, np.ndarray, str]]:
    """(source row, query vector, query text) for ``count`` queries over ``n`` rows."""
    rng = np.random.default_rng(seed)
    centers = _centers()
    sources = np.sort(rng.choice(n, size=count, replace=False))
    out = []
    cache: dict[int, tuple[np.ndarray, list[str], list[float]]] = {}
    for row in sources.tolist():
        c = row // CHUNK
        if c not in cache:
            cache.clear()
            cache[c] = chunk_data(c, min(CHUNK, n - c * CHUNK), centers)
        vectors, texts, _ = cache[c]
        v = vectors[row - c * CHUNK] + 0.0255 * rng.standard_normal(DIM).astype(np.float32)
        words = texts[row - c * CHUNK].split()
        picked = [words[i] for i in rng.choice(WORDS, 4, replace=False)]
        picked += [f"w{w}" for w in rng.integers(0, VOCAB, 2)]
        out.append((row, v / np.linalg.norm(v), " ".join(picked)))
    return out


def created_times(n: int, end: datetime) -> Iterator[datetime]:
    step = timedelta(days=365) / max(n, 1)
    start = end - timedelta(days=365)
    for i in range(0, n, BATCH):
        yield start + step * i


def _fake_embeddings() -> Any:
    from langchain_core.embeddings import Embeddings

    class Precomputed(Embeddings):
        """Hands out precomputed vectors: set ``pending`` before adds, ``query`` before reads."""

        model_name = "synthetic-clustered-384"

        def __init__(self) -> None:
            self.pending: np.ndarray = np.zeros((0, DIM), np.float32)
            self.query: np.ndarray = np.zeros(DIM, np.float32)

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            out = self.pending
            assert out.shape[0] == len(texts)
            return out  # type: ignore[return-value]  # numpy rows: no list conversion timed

        def embed_query(self, text: str) -> list[float]:
            return self.query  # type: ignore[return-value]

    return Precomputed()


def _peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` (reset by exec, unlike ``ru_maxrss``, which a child
    inherits from the parent's size at fork)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _pcts(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values) * 1000
    return {"p50_ms": float(np.percentile(arr, 50)), "p90_ms": float(np.percentile(arr, 90))}


# -- workers (each runs in its own process) ------------------------------------------------------


def run_ours(
    n: int, mode: str, queries: int, workdir: Path, agreement_queries: int
) -> dict[str, Any]:
    from langchain_reflective import MemoryStream

    emb = _fake_embeddings()
    path = workdir / "memory.db"
    end = datetime.now(UTC)
    out: dict[str, Any] = {"system": OURS, "n": n, "mode": mode}
    stream = MemoryStream(emb, path=path)
    out["exact_limit"] = stream.exact_limit
    add_time = 0.0
    times = created_times(n, end)
    for start, vectors, texts, imps in iter_chunks(n):
        if mode == "one":
            step = timedelta(days=365) / max(n, 1)
            base = end - timedelta(days=365)
            for i in range(len(texts)):
                emb.pending = vectors[i : i + 1]
                when = base + step * (start + i)
                t0 = time.perf_counter()
                stream.add([texts[i]], importances=[imps[i]], now=when)
                add_time += time.perf_counter() - t0
        else:
            for b in range(0, len(texts), BATCH):
                emb.pending = vectors[b : b + BATCH]
                when = next(times)
                t0 = time.perf_counter()
                stream.add(texts[b : b + BATCH], importances=imps[b : b + BATCH], now=when)
                add_time += time.perf_counter() - t0
    out["add_s"] = add_time
    out["add_us_per_memory"] = add_time / n * 1e6
    if mode == "one":
        t0 = time.perf_counter()
        stream.close()
        out["close_s"] = time.perf_counter() - t0
        out["peak_rss_mb"] = _peak_rss_mb()
        return out
    qs = make_queries(n, queries)
    # first query: builds the BM25 index from the file (lazily) and the IVF index if pending
    emb.query = qs[0][1]
    t0 = time.perf_counter()
    stream.retrieve(qs[0][2], k=K)
    out["first_query_s"] = time.perf_counter() - t0
    lat = []
    for _, vec, text in qs:
        emb.query = vec
        t0 = time.perf_counter()
        stream.retrieve(text, k=K)
        lat.append(time.perf_counter() - t0)
    out["retrieve"] = _pcts(lat)
    lat = []
    for _, vec, text in qs:
        emb.query = vec
        t0 = time.perf_counter()
        stream.retrieve(text, k=K, touch=False)
        lat.append(time.perf_counter() - t0)
    out["retrieve_no_touch"] = _pcts(lat)
    part = stream.backend._partitions[stream.namespace]
    out["ann"] = part.ann is not None
    out["ivf_lists"] = part.ann.nlist if part.ann is not None else None
    del part  # keep no reference: close() must free the partition
    t0 = time.perf_counter()
    stream.close()  # writes the IVF / vector cache
    out["close_s"] = time.perf_counter() - t0
    out["peak_rss_mb"] = _peak_rss_mb()
    # reopen in a fresh process: cold-start time and memory, then top-10 agreement with exact
    reopened = _child(
        [
            "--reopen",
            str(path),
            "--n",
            str(n),
            "--queries",
            str(queries),
            "--agreement-queries",
            str(agreement_queries),
        ]
    )
    out.update(reopened)
    return out


def run_reopen(path: Path, n: int, queries: int, agreement_queries: int) -> dict[str, Any]:
    from langchain_reflective import MemoryStream
    from langchain_reflective.backends.sqlite.index.ivf import IVFCandidateIndex

    trained: list[int] = []
    original = IVFCandidateIndex.train

    def train(self: IVFCandidateIndex, sample: np.ndarray, rows: int) -> None:
        trained.append(rows)
        original(self, sample, rows)

    IVFCandidateIndex.train = train  # type: ignore[method-assign]
    emb = _fake_embeddings()
    qs = make_queries(n, queries)
    emb.query = qs[0][1]
    t0 = time.perf_counter()
    stream = MemoryStream(emb, path=path)
    stream.retrieve(qs[0][2], k=K, touch=False)
    out: dict[str, Any] = {"reopen_first_query_s": time.perf_counter() - t0}
    part = stream.backend._partitions[stream.namespace]
    out["reopen_used_ivf_cache"] = part.ann is not None and not trained
    seqs = part.seqs.view.copy()
    del part
    out["reopen_peak_rss_mb"] = _peak_rss_mb()
    # agreement with exact scoring (same state: touch=False, fixed now), on more queries than
    # the latency runs: 200 queries put a +-0.02 sampling error on the agreement
    qs = make_queries(n, min(agreement_queries, n), seed=AGREEMENT_SEED)
    out["agreement_queries"] = len(qs)
    when = datetime.now(UTC)
    approx_ids, exact_ids, sources = [], [], []
    for _, vec, text in qs:
        emb.query = vec
        approx_ids.append([h.record.id for h in stream.retrieve(text, k=K, now=when, touch=False)])
    for (row, _, _), ids in zip(qs, approx_ids, strict=True):
        rec = stream.store.get_by_seq([int(seqs[row])])
        sources.append(any(r.id in ids for r in rec.values()))
    out["source_in_top10"] = float(np.mean(sources))
    if out["reopen_used_ivf_cache"] or trained:
        stream.exact_limit = None  # every row scored: the reference ranking
        lat = []
        for _, vec, text in qs:
            emb.query = vec
            t0 = time.perf_counter()
            hits = stream.retrieve(text, k=K, now=when, touch=False)
            lat.append(time.perf_counter() - t0)
            exact_ids.append([h.record.id for h in hits])
        out["retrieve_exact_no_touch"] = _pcts(lat)
        pairs = list(zip(approx_ids, exact_ids, strict=True))
        out["agreement_top10"] = float(np.mean([len(set(a) & set(e)) / K for a, e in pairs]))
        out["identical_top10_lists"] = float(np.mean([a == e for a, e in pairs]))
    stream.store.close()  # leave the caches as they are
    return out


def _child(extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"{cmd} failed:\n{proc.stderr[-4000:]}")


def run_sqlite_floor(n: int, mode: str, workdir: Path) -> dict[str, Any]:
    """The floor under durable adds on this machine: bare SQLite, same row bytes, no indexes.

    One ``BEGIN IMMEDIATE; INSERT; COMMIT`` per row ("one") or per 1,000 rows ("batch"), WAL with
    ``synchronous=NORMAL`` and SQLite's default automatic checkpoints: what any store that
    commits every acknowledged add pays before doing anything else.
    """
    import sqlite3

    conn = sqlite3.connect(workdir / "floor.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY, id TEXT, text TEXT, vector BLOB)")
    out: dict[str, Any] = {"system": FLOOR, "n": n, "mode": mode}
    add_time = 0.0
    counter = 0
    for _, vectors, texts, _ in iter_chunks(n):
        size = 1 if mode == "one" else BATCH
        for b in range(0, len(texts), size):
            rows = []
            for i in range(b, min(b + size, len(texts))):
                counter += 1
                rows.append((f"{counter:032x}", texts[i], vectors[i].tobytes()))
            t0 = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO t (id, text, vector) VALUES (?, ?, ?)", rows)
            conn.execute("COMMIT")
            add_time += time.perf_counter() - t0
    conn.close()
    out["add_s"] = add_time
    out["add_us_per_memory"] = add_time / n * 1e6
    return out


def run_twvsr(n: int, mode: str, queries: int, workdir: Path) -> dict[str, Any]:
    import faiss
    from langchain_classic.retrievers import TimeWeightedVectorStoreRetriever
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS
    from langchain_community.vectorstores.utils import DistanceStrategy
    from langchain_core.documents import Document

    emb = _fake_embeddings()
    store = FAISS(
        embedding_function=emb,
        index=faiss.IndexFlatIP(DIM),
        docstore=InMemoryDocstore(),
        index_to_docstore_id={},
        distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
    )
    retriever = TimeWeightedVectorStoreRetriever(
        vectorstore=store, decay_rate=0.005, k=K, other_score_keys=["importance"]
    )
    end = datetime.now(UTC).replace(tzinfo=None)  # the retriever uses naive datetimes
    out: dict[str, Any] = {"system": "TimeWeightedVectorStoreRetriever+FAISS", "n": n, "mode": mode}
    add_time = 0.0
    step = timedelta(days=365) / max(n, 1)
    base = end - timedelta(days=365)
    for start, vectors, texts, imps in iter_chunks(n):
        size = 1 if mode == "one" else BATCH
        for b in range(0, len(texts), size):
            emb.pending = vectors[b : b + size]
            docs = [
                Document(page_content=t, metadata={"importance": imp})
                for t, imp in zip(texts[b : b + size], imps[b : b + size], strict=True)
            ]
            when = base + step * (start + b)
            t0 = time.perf_counter()
            retriever.add_documents(docs, current_time=when)
            add_time += time.perf_counter() - t0
    out["add_s"] = add_time
    out["add_us_per_memory"] = add_time / n * 1e6
    if mode == "batch":
        qs = make_queries(n, queries)
        lat = []
        for _, vec, text in qs:
            emb.query = vec
            t0 = time.perf_counter()
            retriever.invoke(text)
            lat.append(time.perf_counter() - t0)
        out["retrieve"] = _pcts(lat)
    out["peak_rss_mb"] = _peak_rss_mb()
    return out


def worker(args: argparse.Namespace) -> None:
    if args.reopen is not None:
        result = run_reopen(args.reopen, args.n, args.queries, args.agreement_queries)
        print("RESULT " + json.dumps(result), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        if args.system == "ours":
            result = run_ours(args.n, args.mode, args.queries, Path(tmp), args.agreement_queries)
        elif args.system == "sqlite":
            result = run_sqlite_floor(args.n, args.mode, Path(tmp))
        else:
            result = run_twvsr(args.n, args.mode, args.queries, Path(tmp))
    print("RESULT " + json.dumps(result), flush=True)


# -- driver ------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    import faiss

    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "ram_gb": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "faiss": faiss.__version__,
        "numpy": np.__version__,
        "load_average_at_start": os.getloadavg(),
    }


def spawn(system: str, n: int, mode: str, queries: int, agreement_queries: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--system",
        system,
        "--n",
        str(n),
        "--mode",
        mode,
        "--queries",
        str(queries),
        "--agreement-queries",
        str(agreement_queries),
    ]
    print(f"  running {system} n={n:,} adds={mode} ...", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            result["wall_s"] = time.perf_counter() - t0
            result["load_average_after"] = os.getloadavg()
            shown = {k: v for k, v in result.items() if k not in ("system", "n", "mode")}
            print(f"    {json.dumps(shown)}", flush=True)
            return result
    raise RuntimeError(f"{cmd} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _find(results: list[dict[str, Any]], system: str, n: int, mode: str) -> dict[str, Any]:
    for r in results:
        if (r["system"], r["n"], r["mode"]) == (system, n, mode):
            return r
    return {}


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| system | N | p50 ms | p90 ms | top-10 agreement | add one/call s | add batched s "
        "| peak RSS MB (batched run) |\n|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = [head]
    order = {OURS: 0, FLOOR: 2}
    keys = sorted({(r["system"], r["n"]) for r in results}, key=lambda t: (order.get(t[0], 1), t))
    for system, n in keys:
        batch = _find(results, system, n, "batch")
        one = _find(results, system, n, "one")
        if batch.get("ann"):
            agreement = fmt(batch.get("agreement_top10"), ".3f")
        else:
            agreement = "exact" if system == OURS else "-"
        retrieve = batch.get("retrieve", {})
        rows.append(
            f"| {system} | {n:,} | {fmt(retrieve.get('p50_ms'))} | {fmt(retrieve.get('p90_ms'))} "
            f"| {agreement} | {fmt(one.get('add_s'), '.1f')} | {fmt(batch.get('add_s'), '.1f')} "
            f"| {fmt(batch.get('peak_rss_mb'), '.0f')} |"
        )
    return "\n".join(rows)


def plot(results: list[dict[str, Any]], path: Path, title: str) -> None:
    """Retrieval p50 and add time per memory against N, for every system in ``results``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lat_ax, add_ax) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=120)
    systems = sorted({r["system"] for r in results}, key=lambda s: (s != OURS, s))
    for number, system in enumerate(systems):
        color = f"C{number}"  # one colour per system in both panels
        batch = sorted(
            (r for r in results if r["system"] == system and r["mode"] == "batch"),
            key=lambda r: r["n"],
        )
        timed = [r for r in batch if "retrieve" in r]
        if timed:
            lat_ax.plot(
                [r["n"] for r in timed],
                [r["retrieve"]["p50_ms"] for r in timed],
                marker="o",
                linewidth=2.4 if system == OURS else 1.2,
                label=system,
                color=color,
            )
        exact = [r for r in batch if "retrieve_exact_no_touch" in r]
        if exact:
            lat_ax.plot(
                [r["n"] for r in exact],
                [r["retrieve_exact_no_touch"]["p50_ms"] for r in exact],
                ":",
                marker=".",
                label=f"{system}, every memory scored exactly",
                color=color,
            )
        for mode, style in (("one", "-"), ("batch", "--")):
            rows = sorted(
                (r for r in results if r["system"] == system and r["mode"] == mode),
                key=lambda r: r["n"],
            )
            if rows:
                label = f"{system}, {'one per call' if mode == 'one' else f'{BATCH} per call'}"
                add_ax.plot(
                    [r["n"] for r in rows],
                    [r["add_us_per_memory"] for r in rows],
                    style,
                    marker="o",
                    label=label,
                    color=color,
                )
    lat_ax.set_ylabel("retrieval p50, k=10 (ms)")
    add_ax.set_ylabel("add time per memory (us)")
    for ax in (lat_ax, add_ax):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("memories in the namespace (N)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    if "--backend" in sys.argv:  # --backend postgres: benchmarks/scale_postgres.py
        at = sys.argv.index("--backend")
        if sys.argv[at + 1 : at + 2] == ["postgres"]:
            from scale_postgres import main as postgres_main

            postgres_main(sys.argv[1:at] + sys.argv[at + 2 :])
            return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--quick", action="store_true", help="sizes 2000,30000 and 50 queries")
    parser.add_argument("--queries", type=int, default=200, help="latency queries per run")
    parser.add_argument(
        "--agreement-queries",
        type=int,
        default=1000,
        help="queries for the top-10 agreement with exact scoring",
    )
    parser.add_argument("--twvsr-max", type=int, default=100_000)
    parser.add_argument("--one-per-call-max", type=int, default=100_000)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--plot", type=Path, help="PNG to draw the results to (see above)")
    parser.add_argument(
        "--plot-only", action="store_true", help="redraw --plot from --output; run nothing"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--system", choices=["ours", "twvsr", "sqlite"], help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["one", "batch"], help=argparse.SUPPRESS)
    parser.add_argument("--reopen", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.plot is None:
        args.plot = PLOT if args.output == RESULTS else args.output.with_suffix(".png")
    if args.plot_only:
        report = json.loads(args.output.read_text())
        plot(report["results"], args.plot, f"{report['command']} ({report['date'][:10]})")
        print(f"wrote {args.plot}")
        return
    sizes = [2000, 30000] if args.quick else [int(s) for s in args.sizes.split(",")]
    queries = 50 if args.quick else args.queries
    agreement = 100 if args.quick else args.agreement_queries
    info = machine()
    print(f"machine: {info}")
    results: list[dict[str, Any]] = []
    for n in sizes:
        print(f"N = {n:,}")
        results.append(spawn("ours", n, "batch", min(queries, n), agreement))
        if n <= args.one_per_call_max:
            results.append(spawn("ours", n, "one", min(queries, n), agreement))
            results.append(spawn("sqlite", n, "one", 0, 0))
            results.append(spawn("sqlite", n, "batch", 0, 0))
        if n <= args.twvsr_max:
            results.append(spawn("twvsr", n, "batch", min(queries, n), agreement))
            if n <= args.one_per_call_max:
                results.append(spawn("twvsr", n, "one", min(queries, n), agreement))
        print(table(results), flush=True)
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": info,
        "data": {
            "dimension": DIM,
            "vectors": f"mixture of Gaussians on the sphere: {TOPICS} topics x {SUBTOPICS} "
            "subtopics; queries are noisy copies of stored vectors (cosine ~0.89)",
            "texts": f"{WORDS} words uniform over {VOCAB}; queries: 4 source words + 2 random",
            "k": K,
            "queries": queries,
            "agreement_queries": agreement,
            "batch_size": BATCH,
        },
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    plot(results, args.plot, f"{report['command']} ({report['date'][:10]})")
    print()
    print(table(results))
    print(f"\nwrote {args.output} and {args.plot}")


if __name__ == "__main__":
    main()
