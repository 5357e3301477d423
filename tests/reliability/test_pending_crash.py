"""Pending memories survive SIGKILL: every acknowledged ``enqueue`` is completed exactly once.

A child process enqueues memories one turn at a time (printing ``ACK <id>...`` after each
``enqueue`` returned) while its background drain embeds, rates (a slow fake rater) and moves
them into the memories; the parent SIGKILLs it at a random point, in the middle of the queue's
work. The parent then opens the file the way a restarted application does: the leftovers are
completed at open, and after ``flush()`` every acknowledged memory is stored exactly once with
its text, nothing is pending, and nothing else is there but at most the turn that was in flight.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.memory import ReflectiveMemory
from tests.fakes import WordEmbeddings
from tests.reliability.conftest import Figures, Scale

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import os, sys, time
from langchain_reflective import MemoryStream
from langchain_reflective.importance import BaseImportanceScorer, ImportanceResult
from langchain_reflective.memory import ReflectiveMemory
from tests.fakes import WordEmbeddings

class SlowRater(BaseImportanceScorer):
    def score(self, texts):
        time.sleep(0.02)
        return [ImportanceResult(0.5, "llm") for _ in texts]

path, start = sys.argv[1], int(sys.argv[2])
stream = MemoryStream(WordEmbeddings(), path=path, importance_scorer=SlowRater())
memory = ReflectiveMemory(None, stream)
os.write(1, b"READY\\n")
j = start
while True:
    texts = [f"turn {j} part {p} about tea and trains" for p in range(1 + j % 2)]
    ids = memory.enqueue(texts, namespace="user-1")
    os.write(1, ("ACK " + " ".join(f"{i}={j}" for i in ids) + "\\n").encode())
    j += 1
"""


def _run_and_kill(path: Path, start: int, rng: random.Random) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(start)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    acked: dict[str, str] = {}
    try:
        assert proc.stdout.readline().strip() == b"READY", "the child did not start"
        time.sleep(rng.uniform(0.3, 1.2))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    # every line the child wrote before it died was acknowledged (one atomic os.write each)
    for line in proc.stdout.read().decode().splitlines():
        pairs = line.split()[1:] if line.startswith("ACK ") else []
        if pairs and all(p.count("=") == 1 and p.split("=")[1].isdigit() for p in pairs):
            for pair in pairs:
                memory_id, turn = pair.split("=")
                acked[memory_id] = turn
    proc.stdout.close()
    return acked


@pytest.mark.parametrize("kills", [3])
def test_acknowledged_pending_memories_survive_sigkill(
    tmp_path: Path, scale: Scale, figures: Figures, kills: int
) -> None:
    path = tmp_path / "pending.db"
    rng = random.Random(17)
    acked: dict[str, str] = {}
    rounds = kills if scale.name == "bounded" else 3 * kills
    for round_ in range(rounds):
        acked |= _run_and_kill(path, start=round_ * 100_000, rng=rng)
        stream = MemoryStream(WordEmbeddings(), path=path)
        with ReflectiveMemory(None, stream) as memory:  # leftovers are completed at open
            assert memory.flush(timeout=60) and not memory.errors
            records = memory.stream.recent(None, namespace="user-1")
            assert memory.stream.pending(namespace="user-1") == []
            counts = Counter(r.id for r in records)
            assert max(counts.values(), default=1) == 1, "a pending memory was stored twice"
            stored = {r.id: r.text for r in records}
            missing = [i for i in acked if i not in stored]
            assert not missing, f"{len(missing)} acknowledged memories were lost"
            for memory_id, turn in acked.items():
                assert stored[memory_id].startswith(f"turn {turn} part ")
            # anything not acknowledged is the turn in flight at the kill (committed, unacked)
            extra = {stored[i].split(" part ")[0] for i in stored if i not in acked}
            assert len(extra) <= round_ + 1
            assert memory.retrieve("tea trains", k=1, namespace="user-1")
    assert acked, "the child never acknowledged a memory"
    figures.record(
        "pending_crash", scale.name, kills=rounds, acknowledged=len(acked), lost=0, duplicated=0
    )
