"""A randomized differential check of the local index against the server's exact
scoring, after random writes by another backend and by the local one itself."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from langchain_reflective.backends.base import CounterUpdate, RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.errors import StorageError
from langchain_reflective.records import MemoryRecord, new_memory_id
from langchain_reflective.scoring import ScoringConfig, score_candidates
from tests.postgres.sample_memories import DIM, T0, WORDS, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

NOW = T0 + timedelta(days=30)
KINDS = ["observation", "observation", "reflection", "plan"]


def _open(url: str, config: ScoringConfig, **kwargs: Any) -> PostgresBackend:
    backend = PostgresBackend.from_conn_string(url, max_size=4, **kwargs)
    backend.setup()
    backend.bind_embeddings("test-model", DIM)
    backend.configure(config)
    return backend


def _records(rng: np.random.Generator, n: int, namespace: str) -> list[MemoryRecord]:
    out = []
    for _ in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(0, 6)), replace=True)
        out.append(
            MemoryRecord(
                id=new_memory_id(),
                text=f"note {' '.join(words)}",
                kind=str(rng.choice(KINDS)),
                created_at=T0 + timedelta(minutes=int(rng.integers(0, 10_000))),
                importance=float(rng.integers(0, 11)) / 10,
                namespace=namespace,
            )
        )
    return out


def _scores(found: Any, config: ScoringConfig) -> dict[int, float]:
    comps, _ = score_candidates(config, found, NOW.timestamp())
    return dict(zip(found.keys[: found.size].tolist(), comps.score.tolist(), strict=True))


def _compare(local: PostgresBackend, server: PostgresBackend, ns: str, config: ScoringConfig,
             rng: np.random.Generator, step: str) -> None:  # fmt: skip
    for _ in range(3):
        vector = _unit(rng, 1)[0]
        query = " ".join(rng.choice(WORDS, size=2))
        filters = [
            RetrievalFilter(),
            RetrievalFilter(kinds=frozenset({"observation"})),
            RetrievalFilter(created_after=T0 + timedelta(minutes=3000)),
            RetrievalFilter(min_relevance=0.1),
        ]
        for flt in filters:
            args = dict(k=10, filter=flt, config=config)
            got = local.candidates(ns, query, vector, **args)
            want = server.candidates(ns, query, vector, exact=True, **args)
            a, b = _scores(got, config), _scores(want, config)
            assert sorted(a) == sorted(b), (step, flt, set(a) ^ set(b))
            for key in a:
                assert abs(a[key] - b[key]) < 1e-6, (step, flt, key, a[key], b[key])
            assert abs(got.lexical_max - want.lexical_max) < 1e-9, step


@pytest.mark.parametrize("seed", range(int(os.environ.get("FUZZ_SEEDS", "3"))))
def test_random_writes_then_local_equals_server_exact(postgres_url: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    config = ScoringConfig.hybrid()
    server = _open(postgres_url, config)
    local = _open(postgres_url, config, local_index=True, local_index_wait=True)
    ids: dict[str, list[str]] = {"a": [], "b": []}
    try:
        for step in range(int(os.environ.get("FUZZ_STEPS", "60"))):
            ns = str(rng.choice(["a", "a", "a", "b"]))
            writer = server if rng.random() < 0.7 else local
            op = str(
                rng.choice(
                    ["add", "add", "add", "delete", "replace", "touch", "touch", "reset",
                     "purge", "context"],
                    p=[0.2, 0.1, 0.1, 0.15, 0.1, 0.1, 0.1, 0.05, 0.03, 0.07],
                )
            )  # fmt: skip
            if op == "add":
                n = int(rng.integers(1, 8))
                recs = _records(rng, n, ns)
                counter = CounterUpdate(ns, 0.5 * n, n) if rng.random() < 0.5 else None
                writer.put(recs, _unit(rng, n), counter=counter)
                ids[ns] += [r.id for r in recs]
            elif op == "delete" and ids[ns]:
                gone = list(rng.choice(ids[ns], size=min(len(ids[ns]), int(rng.integers(1, 4))),
                                       replace=False))  # fmt: skip
                writer.delete(ns, gone)
                ids[ns] = [i for i in ids[ns] if i not in gone]
            elif op == "replace" and ids[ns]:
                gone = [str(rng.choice(ids[ns]))]
                recs = _records(rng, int(rng.integers(1, 3)), ns)
                writer.replace(ns, gone, recs, _unit(rng, len(recs)))
                ids[ns] = [i for i in ids[ns] if i not in gone] + [r.id for r in recs]
            elif op == "touch" and ids[ns]:
                recs = writer.get(ns, list(rng.choice(ids[ns], size=min(3, len(ids[ns])))))
                keys = [k for k, r in writer.fetch(ns, list(range(1, 5000))).items()
                        if r.id in {x.id for x in recs}]  # fmt: skip
                when = T0 + timedelta(minutes=int(rng.integers(-1000, 60_000)))
                writer.touch(ns, keys, when)
            elif op == "reset":
                writer.update_counter(CounterUpdate(ns, reset_at=NOW))
            elif op == "purge":
                writer.purge(ns)
                ids[ns] = []
            elif op == "context":
                config = ScoringConfig.hybrid(context=not config.lexical_context)
                server.configure(config)
                local.configure(config)
            _compare(local, server, ns, config, rng, f"{step}:{op}:{ns}")
    finally:
        local.close()
        server.close()


@pytest.mark.parametrize("seed", range(int(os.environ.get("FUZZ_SEEDS", "3"))))
def test_concurrent_writers_and_readers_then_local_equals_server_exact(
    postgres_url: str, seed: int
) -> None:
    """Writers (other backends) and local readers run at once; once they stop, the local index
    must rank as the server does."""
    import threading

    config = ScoringConfig.hybrid()
    server = _open(postgres_url, config)
    writers = [_open(postgres_url, config) for _ in range(2)]
    local = _open(postgres_url, config, local_index=True, local_index_wait=True)
    errors: list[BaseException] = []
    deadlocks: list[BaseException] = []
    stop = threading.Event()
    first = np.random.default_rng(seed)
    local.put(_records(first, 20, "a"), _unit(first, 20))

    def write(w: PostgresBackend, wseed: int) -> None:
        rng = np.random.default_rng(wseed)
        mine: list[str] = []
        try:
            for _ in range(int(os.environ.get("FUZZ_OPS", "40"))):
                try:
                    op = rng.random()
                    if op < 0.45 or not mine:
                        recs = _records(rng, int(rng.integers(1, 5)), "a")
                        w.put(recs, _unit(rng, len(recs)))
                        mine += [r.id for r in recs]
                    elif op < 0.65:
                        gone = [mine.pop(int(rng.integers(len(mine))))]
                        w.delete("a", gone)
                    elif op < 0.75:
                        gone = [mine.pop(int(rng.integers(len(mine))))]
                        recs = _records(rng, 2, "a")
                        w.replace("a", gone, recs, _unit(rng, 2))
                        mine += [r.id for r in recs]
                    elif op < 0.97:
                        keys = list(w.fetch("a", list(range(1, 3000))))
                        pick = [int(k) for k in rng.choice(keys, size=min(4, len(keys)))]
                        when = T0 + timedelta(minutes=int(rng.integers(-1000, 60_000)))
                        w.touch("a", pick, when)
                    else:
                        w.purge("a")
                        mine = []
                except StorageError as exc:  # a touch and a delete deadlocking (reported apart)
                    if "deadlock detected" not in str(exc):
                        raise
                    deadlocks.append(exc)
        except BaseException as exc:
            errors.append(exc)

    def read(rseed: int) -> None:
        rng = np.random.default_rng(rseed)
        try:
            while not stop.is_set():
                local.candidates("a", "tea river", _unit(rng, 1)[0], k=10,
                                 filter=RetrievalFilter(), config=config)  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    wt = [threading.Thread(target=write, args=(w, 1000 * seed + i)) for i, w in enumerate(writers)]
    rt = [threading.Thread(target=read, args=(50 + i,)) for i in range(2)]
    try:
        for t in wt + rt:
            t.start()
        for t in wt:
            t.join(120)
        stop.set()
        for t in rt:
            t.join(60)
        assert not errors, errors
        assert not deadlocks, deadlocks  # (failed before the lock-order fix)
        _compare(local, server, "a", config, np.random.default_rng(seed), "final")
    finally:
        stop.set()
        for b in (local, server, *writers):
            b.close()
