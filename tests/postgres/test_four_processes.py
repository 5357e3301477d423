"""Four OS processes on one Postgres database, one namespace: adds, retrievals, reflections.

Acceptance of issue 13: exact counts, no duplicates, never two reflections of one namespace at
once (each reflection logs its start and end with the server's clock; the log must alternate
start/end of the same process).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from langchain_reflective.backends.postgres import PostgresBackend

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

CHILD = Path(__file__).with_name("concurrent_child.py")
ROOT = Path(__file__).resolve().parents[2]
WORKERS = 4
ADDS = 40


@pytest.mark.parametrize("local", [False, True], ids=["server", "local-index"])
def test_four_processes_share_one_namespace(postgres_url: str, local: bool) -> None:
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        backend.bind_embeddings("test-model", 16)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE reflection_log (n bigserial, pid int, phase text, at timestamptz)"
        )
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), postgres_url, "shared", str(w), str(ADDS)]
            + (["local"] if local else []),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WORKERS)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))

    added = [i for r in results for i in r["added"]]
    reflections = [x for r in results for x in r["reflections"] if x["id"] is not None]
    assert len(added) == WORKERS * ADDS and len(set(added)) == len(added)
    assert len(reflections) >= 2, "the test must trigger reflections to prove anything"
    assert all(r["retrieved"] > 0 for r in results)
    # every retrieval saw the memory its process had just added (a candidate), and
    # with a local index every process answered from memory
    assert all(r["own_first"] == r["retrievals"] > 0 for r in results)
    held = [r["local"] for r in results]
    assert (
        all(list(h) == ["shared"] and h["shared"] > 0 for h in held)
        if local
        else held == [{}] * WORKERS
    )

    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT id, seq, kind FROM reflective_memories WHERE namespace = 'shared' ORDER BY seq"
        ).fetchall()
        log = conn.execute("SELECT pid, phase FROM reflection_log ORDER BY at, n").fetchall()
    # exact counts, nothing lost, nothing duplicated
    stored = [r[0] for r in rows]
    assert len(stored) == len(set(stored)) == len(added) + len(reflections)
    assert set(stored) == set(added) | {x["id"] for x in reflections}

    # never two reflections of the namespace at once: start/end strictly alternate per process
    assert len(log) % 2 == 0 and log
    for (pid_a, start), (pid_b, end) in zip(log[::2], log[1::2], strict=True):
        assert (start, end) == ("start", "end") and pid_a == pid_b, log

    # each reflection cites memories since the previous one, and no memory twice
    seq_of = {r[0]: r[1] for r in rows}
    cut = sorted(seq_of[x["id"]] for x in reflections)
    cited: set[str] = set()
    for x in reflections:
        mine = seq_of[x["id"]]
        before = max((c for c in cut if c < mine), default=0)
        assert all(before < seq_of[e] < mine for e in x["evidence"])
        assert cited.isdisjoint(x["evidence"])
        cited.update(x["evidence"])
        assert len(x["evidence"]) >= x["counted"] > 0

    # the counter is exact: it counts precisely the memories after the last reflection
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        state = backend.reflection_state("shared")
        since = backend.recent("shared", since_last_reflection=True)
    after_last = [r for r in rows if r[1] > cut[-1]]
    assert [r.id for r in since] == [r[0] for r in after_last]
    assert state.adds_since == len(after_last)
    assert state.importance_sum == pytest.approx(0.5 * len(after_last))
