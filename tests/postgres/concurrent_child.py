"""One of the OS processes of ``test_four_processes``: adds, retrieves and reflects on one
namespace of a shared Postgres database, then prints what it did as one JSON line.

Run as ``python concurrent_child.py URL NAMESPACE WORKER ADDS [local]`` (``local``: the
backend keeps a local index, so each retrieval gathers its candidates in the process after
catching up with the others' writes). Each retrieval asks for the vector of the memory the
process has just added and checks it is among the candidates. Reflections follow the
package's protocol: when the counter crosses the threshold, try the namespace's reflection
lock; holding it, re-read the counter (another process may just have reflected), read the
memories since the last reflection, and store a reflection citing them together with the
counter reset, in one transaction. Every reflection logs its start and end (server clock) in
``reflection_log`` so the parent can check that no two overlapped.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime

import numpy as np

from langchain_reflective.backends.base import CounterUpdate, RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.records import MemoryRecord, new_memory_id
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k

DIM = 16
THRESHOLD = 3.0
IMPORTANCE = 0.5


def main(url: str, namespace: str, worker: int, adds: int, local: bool) -> None:
    rng = np.random.default_rng(worker)
    config = ScoringConfig.hybrid()
    added: list[str] = []
    reflections: list[dict[str, object]] = []
    busy = retrieved = retrievals = own_first = 0
    with PostgresBackend.from_conn_string(
        url, max_size=3, local_index=local, local_index_wait=local
    ) as backend:
        backend.configure(config)
        backend.bind_embeddings("test-model", DIM)
        i = 0
        while i < adds:
            n = min(int(rng.integers(1, 4)), adds - i)
            records = [
                MemoryRecord(
                    id=new_memory_id(),
                    text=f"worker {worker} event {i + j} tea paris",
                    importance=IMPORTANCE,
                    namespace=namespace,
                )
                for j in range(n)
            ]
            vectors = rng.normal(size=(n, DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            backend.put(records, vectors, counter=CounterUpdate(namespace, IMPORTANCE * n, n))
            added.extend(r.id for r in records)
            i += n
            # retrieve: candidates -> pure scoring -> touch
            cands = backend.candidates(
                namespace, "paris", vectors[0], k=5, filter=RetrievalFilter(), config=config
            )
            comps, _ = score_candidates(config, cands, time.time())
            best = cands.keys[top_k(comps.score, 5)].tolist()
            retrieved += len(backend.touch(namespace, best, datetime.now(UTC)))
            retrievals += 1
            # the memory just added is a candidate (every memory of a namespace this small is):
            # the retrieval saw this process's write. (Not necessarily in the best five: with
            # neighbour context, memories next to ones like the query can outrank it.)
            shown = backend.fetch(namespace, cands.keys[: cands.size].tolist())
            own_first += records[0].id in {r.id for r in shown.values()}
            if backend.reflection_state(namespace).importance_sum < THRESHOLD:
                continue
            try:
                with backend.reflection_lock(namespace, timeout=0):
                    reflections.append(_reflect(backend, url, namespace, worker, rng))
            except TimeoutError:
                busy += 1  # another process is reflecting on this namespace
        held = backend.local_namespaces()
    print(
        json.dumps(
            {
                "added": added,
                "reflections": reflections,
                "busy": busy,
                "retrieved": retrieved,
                "retrievals": retrievals,
                "own_first": own_first,
                "local": held,
            }
        )
    )


def _reflect(
    backend: PostgresBackend, url: str, namespace: str, worker: int, rng: np.random.Generator
) -> dict[str, object]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as log:
        log.execute(
            "INSERT INTO reflection_log (pid, phase, at) VALUES (%s, 'start', clock_timestamp())",
            (os.getpid(),),
        )
        state = backend.reflection_state(namespace)
        if state.importance_sum < THRESHOLD:  # someone reflected between our check and lock
            out: dict[str, object] = {"id": None, "evidence": [], "counted": 0}
        else:
            evidence = backend.recent(namespace, since_last_reflection=True)
            time.sleep(0.05)  # "thinking": long enough for the others to try the lock
            insight = MemoryRecord(
                id=new_memory_id(),
                text=f"insight of worker {worker}",
                kind="reflection",
                evidence=tuple(r.id for r in evidence),
                depth=1,
                namespace=namespace,
            )
            vec = rng.normal(size=(1, DIM)).astype(np.float32)
            vec /= np.linalg.norm(vec)
            backend.put(
                [insight], vec, counter=CounterUpdate(namespace, reset_at=datetime.now(UTC))
            )
            out = {
                "id": insight.id,
                "evidence": list(insight.evidence),
                "counted": state.adds_since,
            }
        log.execute(
            "INSERT INTO reflection_log (pid, phase, at) VALUES (%s, 'end', clock_timestamp())",
            (os.getpid(),),
        )
    return out


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:] == ["local"])
