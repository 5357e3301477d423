"""Concurrency: 8 threads (and 8 asyncio tasks) doing mixed operations on one stream and file.

Operations: add (1-2 memories, ``observation`` or deletable ``scratch``), retrieve (random
queries, k and filters), delete (own acknowledged scratch memories), reflect (forced, scripted
model, evidence restricted to observations), get. Checked: no exception anywhere; every
retrieved record is whole (text, metadata, importance exactly as written) and was not deleted
before the retrieval started; at the end the file holds exactly the acknowledged adds minus the
acknowledged deletes plus the acknowledged reflections, each once, also after reopening it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import subprocess
import sys
import threading
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import (
    MemoryStream,
    ReflectionConfig,
    ScoringConfig,
    create_reflection_graph,
)
from tests.fakes import WordEmbeddings
from tests.reliability.conftest import Figures, Scale
from tests.unit.test_reflection_fakes import ScriptedChatModel

THREADS = 8
WORDS = (
    *("alice", "bob", "carol", "tea", "coffee", "paper", "library", "paris", "lisbon", "exam"),
    *("wedding", "garden", "piano", "train", "museum", "river", "report", "deadline"),
)
REFLECT = ReflectionConfig(min_relevance=-1.0, evidence_kinds=("observation",), evidence_k=5)
OPS = (("add", 0.40), ("retrieve", 0.30), ("delete", 0.13), ("reflect", 0.05), ("get", 0.12))


def text_of(rid: str) -> str:
    h = zlib.crc32(rid.encode())
    return f"{rid} note about {WORDS[h % len(WORDS)]} and {WORDS[(h >> 8) % len(WORDS)]}"


def importance_of(rid: str) -> float:
    return (zlib.crc32(rid.encode()) % 10 + 1) / 10


def owner_of(rid: str) -> int:
    return int(rid.split("-")[0][1:])


@dataclass
class Books:
    """Shared bookkeeping of acknowledged operations."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, str] = field(default_factory=dict)  # id -> kind
    deleted: set[str] = field(default_factory=set)
    reflections: set[str] = field(default_factory=set)
    ops: Counter[str] = field(default_factory=Counter)
    hits_checked: int = 0

    def snapshot_deleted(self) -> frozenset[str]:
        with self.lock:
            return frozenset(self.deleted)


class Worker:
    """One thread's (or task's) random operations; the sync and async paths share the checks."""

    def __init__(self, n: int, stream: MemoryStream, graph: Any, books: Books, seed: int):
        self.n, self.stream, self.graph, self.books = n, stream, graph, books
        self.rng = random.Random(seed)
        self.counter = 0
        self.scratch: list[str] = []
        self.mine: list[str] = []

    def pick(self) -> str:
        roll, acc = self.rng.random(), 0.0
        for op, p in OPS:
            acc += p
            if roll < acc:
                return op if op != "delete" or self.scratch else "add"
        return "add"

    def add_args(self) -> dict[str, Any]:
        n = self.rng.choice((1, 1, 2))
        ids = [f"t{self.n}-{self.counter + i}" for i in range(n)]
        self.counter += n
        kinds = [self.rng.choice(("observation", "scratch")) for _ in ids]
        return {
            "texts": [text_of(i) for i in ids],
            "ids": ids,
            "kinds": kinds,
            "importances": [importance_of(i) for i in ids],
            "metadatas": [{"owner": self.n} for _ in ids],
        }

    def added(self, args: dict[str, Any], records: list[Any]) -> None:
        assert [r.id for r in records] == args["ids"]
        with self.books.lock:
            for rid, kind in zip(args["ids"], args["kinds"], strict=True):
                self.books.acked[rid] = kind
        for rid, kind in zip(args["ids"], args["kinds"], strict=True):
            self.mine.append(rid)
            if kind == "scratch":
                self.scratch.append(rid)

    def retrieve_args(self) -> dict[str, Any]:
        query = " ".join(self.rng.sample(WORDS, 2))
        flt = self.rng.choice((None, {"kinds": ["scratch"]}, {"kinds": ["observation"]}))
        return {"query": query, "k": self.rng.randint(1, 8), "filter": flt}

    def check_hits(self, hits: list[Any], deleted_before: frozenset[str], flt: Any) -> None:
        for h in hits:
            r = h.record
            assert r.id not in deleted_before, f"retrieved {r.id} after its delete returned"
            assert math.isfinite(h.score) and math.isfinite(h.relevance)
            if flt is not None:
                assert r.kind in flt["kinds"]
            if r.kind == "reflection":
                assert r.evidence and r.depth >= 1
                continue
            # whole: every field as written
            assert r.text == text_of(r.id)
            assert r.importance == importance_of(r.id)
            assert dict(r.metadata) == {"owner": owner_of(r.id)}
        with self.books.lock:
            self.books.hits_checked += len(hits)

    def delete_id(self) -> str:
        return self.scratch.pop(self.rng.randrange(len(self.scratch)))

    def deleted(self, rid: str, n: int) -> None:
        assert n == 1, f"delete({rid}) returned {n}"
        with self.books.lock:
            self.books.deleted.add(rid)

    def reflected(self, out: dict[str, Any]) -> None:
        with self.books.lock:
            self.books.reflections.update(r.id for r in out["reflections"])

    def check_get(self, ids: list[str], records: list[Any]) -> None:
        with self.books.lock:
            gone = self.books.deleted & set(ids)
        got = {r.id: r for r in records}
        assert set(got) == set(ids) - gone
        assert all(r.text == text_of(r.id) for r in got.values())

    # -- the two drivers -----------------------------------------------------------------

    def run(self, ops: int) -> None:
        for _ in range(ops):
            op = self.pick()
            with self.books.lock:
                self.books.ops[op] += 1
            if op == "add":
                args = self.add_args()
                self.added(args, self.stream.add(**args))
            elif op == "retrieve":
                args = self.retrieve_args()
                before = self.books.snapshot_deleted()
                self.check_hits(self.stream.retrieve(**args), before, args["filter"])
            elif op == "delete":
                rid = self.delete_id()
                self.deleted(rid, self.stream.delete(rid))
            elif op == "reflect":
                self.reflected(self.graph.invoke({"force": True}))
            else:
                ids = self.rng.sample(self.mine, min(5, len(self.mine)))
                self.check_get(ids, self.stream.get(ids))

    async def arun(self, ops: int) -> None:
        for _ in range(ops):
            op = self.pick()
            with self.books.lock:
                self.books.ops[op] += 1
            if op == "add":
                args = self.add_args()
                self.added(args, await self.stream.aadd(**args))
            elif op == "retrieve":
                args = self.retrieve_args()
                before = self.books.snapshot_deleted()
                self.check_hits(await self.stream.aretrieve(**args), before, args["filter"])
            elif op == "delete":
                rid = self.delete_id()
                self.deleted(rid, await asyncio.to_thread(self.stream.delete, rid))
            elif op == "reflect":
                self.reflected(await self.graph.ainvoke({"force": True}))
            else:
                ids = self.rng.sample(self.mine, min(5, len(self.mine)))
                self.check_get(ids, await asyncio.to_thread(self.stream.get, ids))


def check_final(path: Path, books: Books) -> dict[str, int]:
    expected = (set(books.acked) - books.deleted) | books.reflections
    with MemoryStream(WordEmbeddings(), path=path) as stream:  # reopened from the file
        records = stream.recent(None)
        ids = Counter(r.id for r in records)
        duplicated = [i for i, n in ids.items() if n > 1]
        lost = expected - set(ids)
        extra = set(ids) - expected
        assert not duplicated, duplicated[:5]
        assert not lost, sorted(lost)[:5]
        assert not extra, sorted(extra)[:5]
        assert len(stream) == len(expected)
        for r in records:
            if r.kind != "reflection":
                assert r.text == text_of(r.id) and r.kind == books.acked[r.id]
            else:
                assert all(e in ids for e in r.evidence)
        probe = next(i for i in sorted(expected) if books.acked.get(i) == "observation")
        hits = stream.retrieve(text_of(probe), k=3, touch=False)
        assert probe in [h.record.id for h in hits]
    return {"lost": len(lost), "duplicated": len(duplicated)}


def make(path: Path, scoring: ScoringConfig | None = None) -> tuple[MemoryStream, Any]:
    stream = MemoryStream(WordEmbeddings(), path=path, scoring=scoring)
    return stream, create_reflection_graph(ScriptedChatModel(), stream, config=REFLECT)


def run_threads(workers: list[Worker], ops: int) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(workers))

    def body(w: Worker) -> None:
        try:
            barrier.wait()
            w.run(ops)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("streams", [1, 2], ids=["one-stream", "two-streams-one-file"])
def test_threads_mixed_operations(
    tmp_path: Path, scale: Scale, figures: Figures, streams: int
) -> None:
    path = tmp_path / "c.db"
    books = Books()
    opened = [make(path, None) for _ in range(streams)]  # the default (hybrid, BM25) scoring
    workers = [Worker(i, *opened[i % streams], books=books, seed=1000 + i) for i in range(THREADS)]
    try:
        run_threads(workers, scale.ops // THREADS)
    finally:
        for stream, _ in opened:
            stream.close()
    result = check_final(path, books)
    figures.record(
        "concurrency_threads" if streams == 1 else "concurrency_two_streams",
        scale.name,
        threads=THREADS,
        streams=streams,
        ops=sum(books.ops.values()),
        ops_by_type=dict(books.ops),
        retrieved_records_checked=books.hits_checked,
        final_records=len((set(books.acked) - books.deleted) | books.reflections),
        exceptions=0,
        **result,
    )


async def test_asyncio_mixed_operations(tmp_path: Path, scale: Scale, figures: Figures) -> None:
    path = tmp_path / "a.db"
    books = Books()
    stream, graph = make(path)
    workers = [Worker(i, stream, graph, books=books, seed=2000 + i) for i in range(THREADS)]
    try:
        await asyncio.gather(*(w.arun(scale.ops // THREADS) for w in workers))
    finally:
        stream.close()
    result = check_final(path, books)
    figures.record(
        "concurrency_asyncio",
        scale.name,
        tasks=THREADS,
        ops=sum(books.ops.values()),
        ops_by_type=dict(books.ops),
        retrieved_records_checked=books.hits_checked,
        final_records=len((set(books.acked) - books.deleted) | books.reflections),
        exceptions=0,
        **result,
    )


def test_lexical_index_built_while_another_stream_writes(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    with (
        MemoryStream(WordEmbeddings(), path=path) as first,
        MemoryStream(WordEmbeddings(), path=path) as second,
    ):
        first.add(["alice drinks tea in the garden"], importances=0.5)  # partition loaded
        original = first.store.iter_partition
        calls = 0

        def iter_partition(*args: Any, **kwargs: Any) -> Any:
            # the other writer commits between first's partition snapshot and its BM25 build:
            # the window two processes (or two streams in threads) hit under load
            nonlocal calls
            calls += 1
            if calls == 1:
                second.add(["bob drinks coffee in paris"], importances=0.5)
            return original(*args, **kwargs)

        first.store.iter_partition = iter_partition  # type: ignore[method-assign]
        hits = first.retrieve("tea garden", k=2)
        assert [h.record.text for h in hits][:1] == ["alice drinks tea in the garden"]


_WRITER = """
import sys
from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings

import pathlib
import time

path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with MemoryStream(WordEmbeddings(), path=path) as stream:
    ready = pathlib.Path(path + "." + tag + ".ready")
    ready.touch()
    deadline = time.monotonic() + 60
    while len(list(ready.parent.glob("*.ready"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # start adding together
    for i in range(n):
        stream.add([f"{tag} memory {i}"], ids=[f"{tag}-{i}"], importances=[0.5])
        if i % 40 == 39:
            stream.delete([f"{tag}-{i - 1}"])
    print(len(stream), flush=True)
"""


def test_two_exports_to_one_path_at_once_both_succeed_whole(tmp_path: Path) -> None:
    # both wrote <path>.tmp: the later export truncated and renamed the earlier one's file,
    # which then kept writing into the renamed file and failed with a raw FileNotFoundError
    out = tmp_path / "out.jsonl"
    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as stream:
        stream.add([f"alice note {i}" for i in range(5)], importances=0.5, namespace="a")
        stream.add(["bob note"], importances=0.5, namespace="b")
        original = stream.backend.iter_records
        first_wrote, second_done = threading.Event(), threading.Event()

        def iter_records(namespace: str, **kwargs: Any) -> Any:
            for batch in original(namespace, **kwargs):
                yield batch
                if namespace == "a":  # the first export waits here, its header written
                    first_wrote.set()
                    assert second_done.wait(10)

        stream.backend.iter_records = iter_records  # type: ignore[method-assign]
        errors: list[BaseException] = []

        def first() -> None:
            try:
                assert stream.export_jsonl(out, namespaces=["a"]) == 5
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=first)
        thread.start()
        assert first_wrote.wait(10)
        try:
            assert stream.export_jsonl(out, namespaces=["b"]) == 1
        finally:
            second_done.set()
            thread.join(10)
        assert errors == []
        lines = out.read_text(encoding="utf-8").splitlines()
        assert [json.loads(line).get("namespace") for line in lines[1:]] == ["a"] * 5
        assert json.loads(lines[0])["format"]
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out")) == [
            "out.jsonl"
        ]


def _python(script: str, *args: str) -> subprocess.Popen[bytes]:
    """``script`` run by this Python in a process of its own, the checkout importable."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_two_processes_adding_one_by_one_lose_nothing(tmp_path: Path) -> None:
    """Single adds are one autocommit INSERT: it waits for the other process's write lock (the
    busy timeout) like ``BEGIN IMMEDIATE`` did, and each stream notices the other's writes."""
    path = tmp_path / "shared.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(["created first"], ids=["seed"], importances=[0.5])
    n = 600
    procs = [_python(_WRITER, str(path), tag, str(n)) for tag in ("p", "q")]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    deletes = n // 40
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        expected = {"seed"} | {f"{tag}-{i}" for tag in "pq" for i in range(n) if i % 40 != 38}
        assert len(stream) == len(expected) == 1 + 2 * (n - deletes)
        assert {r.id for r in stream.recent(n=None)} == expected
        # every retrievable memory is one of them (the partition loads the other's rows too)
        hits = stream.retrieve("q memory 123", k=1)
        assert hits[0].record.id == "q-123"
        # deletes of not-yet-folded memories leave the counter; folded ones stay counted
        adds = stream.reflection_state().adds_since
        assert len(expected) <= adds <= 1 + 2 * n


_OPENER = """
import sys, time
from pathlib import Path
from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings
path, tag, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
(go.parent / f"ready-{tag}").touch()
while not go.exists():
    time.sleep(0.001)
with MemoryStream(WordEmbeddings(), path=path) as stream:
    stream.add([f"memory of {tag}"], ids=[tag], importances=[0.5])
"""


def test_processes_opening_one_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """All but one failed with ForeignFileError ("UNIQUE constraint failed: seq_floor.seq",
    "a database of another program", "database is locked") or "File exists": each saw a new
    file and created its schema, or lost the race to create the file itself."""
    import time

    tags = ["a", "b", "c", "d"]
    for trial in range(2):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        path, go = folder / "new.db", folder / "go"
        procs = [_python(_OPENER, str(path), tag, str(go)) for tag in tags]
        deadline = time.monotonic() + 120
        while len(list(folder.glob("ready-*"))) < len(tags) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err.decode()[-2000:]
        with MemoryStream(WordEmbeddings(), path=path) as stream:
            assert sorted(r.id for r in stream.recent(n=None)) == tags
