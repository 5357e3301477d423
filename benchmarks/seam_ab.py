"""Interleaved A/B of two source trees: warm retrieval p50 and one-memory-per-call adds.

The machine this runs on is shared and noisy, so single runs of :mod:`scale` are not comparable
across trees. Here every measurement runs in a fresh process with ``PYTHONPATH`` pointing at one
tree (the same interpreter and packages for all), and the trees take turns, round after round,
in alternating order, so a slow minute hits them alike:

* **retrieve**: one ``--n``-memory file (the synthetic data of :mod:`scale`, batched adds),
  copied once per tree (each keeps its own index caches next to its copy) and opened once to
  write them; then per round and tree a process opens its copy, runs warm-up queries until
  retrieval is warm (a reopened large partition copies its mapped vectors on a worker thread),
  and times ``--queries`` retrievals (``k=10``, default scoring, ``touch=False`` so every run
  sees the same file);
* **add**: per round and tree a process adds ``--adds`` memories one per ``add`` call to a new
  file (precomputed vectors, given importances: the stream's own cost plus the SQLite commit).

Usage::

    python benchmarks/seam_ab.py --trees base=/work/wt-base,new=. --n 100000 --rounds 4

Prints a table per measure (every round's figure and the median per tree) and writes
``benchmarks/results/seam_ab.json`` (``--output`` to change). Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "seam_ab.json"
K = 10


def _scale() -> Any:
    sys.path.insert(0, str(HERE))
    import scale

    return scale


def build(path: Path, n: int) -> None:
    """Write ``n`` synthetic memories (batched adds) with the tree on ``sys.path``."""
    from langchain_reflective import MemoryStream

    scale = _scale()
    emb = scale._fake_embeddings()
    end = datetime.now(UTC)
    times = scale.created_times(n, end)
    stream = MemoryStream(emb, path=path)
    for _, vectors, texts, imps in scale.iter_chunks(n):
        for b in range(0, len(texts), scale.BATCH):
            emb.pending = vectors[b : b + scale.BATCH]
            stream.add(
                texts[b : b + scale.BATCH], importances=imps[b : b + scale.BATCH], now=next(times)
            )
    stream.close()


def retrieve(path: Path, n: int, queries: int, warmup: int) -> dict[str, Any]:
    from langchain_reflective import MemoryStream

    scale = _scale()
    emb = scale._fake_embeddings()
    qs = scale.make_queries(n, queries)
    stream = MemoryStream(emb, path=path)
    when = datetime.now(UTC)
    for i in range(warmup):  # loads the partition, the lexical index, the IVF index
        _, vec, text = qs[i % len(qs)]
        emb.query = vec
        stream.retrieve(text, k=K, touch=False, now=when)
        if i == warmup // 2:
            time.sleep(2.0)  # let a reopened partition finish copying its mapped vectors
    lat = []
    for _, vec, text in qs:
        emb.query = vec
        t0 = time.perf_counter()
        stream.retrieve(text, k=K, touch=False, now=when)
        lat.append(time.perf_counter() - t0)
    stream.close()
    arr = np.asarray(lat) * 1000
    return {"p50_ms": float(np.percentile(arr, 50)), "p90_ms": float(np.percentile(arr, 90))}


def add_one(adds: int) -> dict[str, Any]:
    from langchain_reflective import MemoryStream

    scale = _scale()
    emb = scale._fake_embeddings()
    end = datetime.now(UTC)
    step = timedelta(days=1) / adds
    with tempfile.TemporaryDirectory() as tmp:
        stream = MemoryStream(emb, path=Path(tmp) / "memory.db")
        spent = 0.0
        for start, vectors, texts, imps in scale.iter_chunks(adds):
            for i in range(len(texts)):
                emb.pending = vectors[i : i + 1]
                when = end - step * (adds - start - i)
                t0 = time.perf_counter()
                stream.add([texts[i]], importances=[imps[i]], now=when)
                spent += time.perf_counter() - t0
        stream.close()
    return {"us_per_add": spent / adds * 1e6}


def _worker(tree: Path, args: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", *args]
    # cwd outside every tree: the script's own directory must not shadow PYTHONPATH
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env=env, cwd=tempfile.gettempdir()
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"{cmd} (tree {tree}) failed:\n{proc.stderr[-4000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", default="base=/work/wt-base,new=.")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=900)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--adds", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--measures", default="retrieve,add")
    parser.add_argument("--workdir", default=None, help="keep the files here (reused if present)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if args.job == "build":
            build(args.path, args.n)
            result: dict[str, Any] = {}
        elif args.job == "retrieve":
            result = retrieve(args.path, args.n, args.queries, args.warmup)
        else:
            result = add_one(args.adds)
        import langchain_reflective

        result["source"] = langchain_reflective.__file__
        print("RESULT " + json.dumps(result))
        return
    trees = {}
    for item in args.trees.split(","):
        name, _, where = item.partition("=")
        trees[name] = Path(where).resolve()
    measures = args.measures.split(",")
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="seam-ab-"))
    work.mkdir(parents=True, exist_ok=True)
    first = next(iter(trees.values()))
    common = ["--n", str(args.n), "--queries", str(args.queries), "--warmup", str(args.warmup)]
    if "retrieve" in measures:
        source = work / f"built-{args.n}.db"
        if not source.exists():
            t0 = time.perf_counter()
            _worker(first, ["--job", "build", "--path", str(source), *common])
            print(f"built {args.n} memories in {time.perf_counter() - t0:.0f} s", flush=True)
        for name, tree in trees.items():
            copy = work / f"{name}-{args.n}.db"
            if not copy.exists():
                shutil.copy(source, copy)  # closed cleanly: no WAL to copy
                _worker(tree, ["--job", "retrieve", "--path", str(copy), *common])  # caches
    rows: dict[str, dict[str, list[float]]] = {m: {t: [] for t in trees} for m in measures}
    order = list(trees)
    for r in range(args.rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            tree = trees[name]
            if "retrieve" in measures:
                copy = work / f"{name}-{args.n}.db"
                res = _worker(tree, ["--job", "retrieve", "--path", str(copy), *common])
                assert res["source"].startswith(str(tree)), res["source"]
                rows["retrieve"][name].append(res["p50_ms"])
                print(f"round {r} {name:>8} retrieve p50 {res['p50_ms']:.3f} ms", flush=True)
            if "add" in measures:
                res = _worker(tree, ["--job", "add", "--adds", str(args.adds)])
                assert res["source"].startswith(str(tree)), res["source"]
                rows["add"][name].append(res["us_per_add"])
                print(f"round {r} {name:>8} add {res['us_per_add']:.1f} us", flush=True)
    print()
    units = {"retrieve": "warm p50 ms, no touch", "add": "us per add, one per call"}
    summary: dict[str, Any] = {}
    for m in measures:
        print(f"{m} ({units[m]}), n={args.n if m == 'retrieve' else args.adds}:")
        for name in trees:
            values = rows[m][name]
            med = statistics.median(values)
            summary.setdefault(m, {})[name] = {"median": med, "runs": values}
            print(f"  {name:>8}: median {med:.3f}  runs " + " ".join(f"{v:.3f}" for v in values))
    out = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "trees": {k: str(v) for k, v in trees.items()},
        "n": args.n,
        "queries": args.queries,
        "adds": args.adds,
        "rounds": args.rounds,
        "load_average": os.getloadavg(),
        "results": summary,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
