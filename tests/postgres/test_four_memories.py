"""Four OS processes, each a ``ReflectiveMemory`` over ``MemoryStream(backend=PostgresBackend)``
on one database and one namespace: adds and retrievals with reflections triggered by the
importance threshold. Exact counts, no duplicates, never two reflections of the namespace at
once (each reflection graph run logs its start and end with the server's clock)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from langchain_reflective.backends.postgres import PostgresBackend

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

CHILD = Path(__file__).with_name("memory_child.py")
ROOT = Path(__file__).resolve().parents[2]
WORKERS = 4
ADDS = 20


def test_four_reflective_memories_share_one_namespace(postgres_url: str) -> None:
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE reflection_log "
            "(n bigserial, pid int, phase text, at timestamptz, consumed float8)"
        )
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), postgres_url, "team", str(w), str(ADDS)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WORKERS)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["errors"] == [] for r in results), results
    assert all(r["retrieved"] > 0 for r in results)
    added = [i for r in results for i in r["added"]]
    assert len(added) == WORKERS * ADDS == len(set(added))

    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT id, seq, kind, evidence FROM reflective_memories "
            "WHERE namespace = 'team' ORDER BY seq"
        ).fetchall()
        log = conn.execute("SELECT pid, phase FROM reflection_log ORDER BY at, n").fetchall()
        (consumed,) = conn.execute("SELECT sum(consumed) FROM reflection_log").fetchone()
        other = conn.execute(
            "SELECT count(*) FROM reflective_memories WHERE namespace <> 'team'"
        ).fetchone()
    observations = [r for r in rows if r[2] == "observation"]
    insights = [r for r in rows if r[2] == "reflection"]
    # exact counts: every acknowledged add stored once, nothing else but insights
    assert sorted(r[0] for r in observations) == sorted(added)
    assert len(rows) == len(observations) + len(insights) and other == (0,)
    assert insights, "the threshold must have triggered reflections"
    assert all(
        set(r[3]) <= {o[0] for o in observations} | {i[0] for i in insights} for r in insights
    )
    # never two reflections of the namespace at once
    assert log and len(log) % 2 == 0
    for (pid_a, start), (pid_b, end) in zip(log[::2], log[1::2], strict=True):
        assert (start, end) == ("start", "end") and pid_a == pid_b, log
    # the counter is exact: every observation's importance (0.5 each) was either taken off by
    # the reflection whose gate counted it or is still counted, including observations stored
    # while a reflection ran (they count towards the next one); none is lost or counted twice
    last = max(r[1] for r in insights)
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        state = backend.reflection_state("team")
        since = backend.recent("team", since_last_reflection=True)
    after = [r for r in observations if r[1] > last]
    assert [r.id for r in since] == [r[0] for r in after]
    assert consumed + state.importance_sum == pytest.approx(0.5 * len(observations))
    assert state.importance_sum == pytest.approx(0.5 * state.adds_since)
    assert state.adds_since >= len(after)
