"""Crash consistency: a child process writing memories is SIGKILLed at random points.

The child (``crash_child.py``) adds memories one call at a time with known ids, runs forced
reflections and closes/reopens the stream (which writes the FAISS cache), printing each
acknowledged operation. After every kill the parent opens the file and checks: it opens without
error; every acknowledged memory and reflection is present exactly once with its text; the
in-flight add is all there or not at all; nothing else is there; the reflection counter matches
the records since the last reflection; retrieval works and finds the newest acknowledged memory
(never in a cache written earlier, so a stale FAISS cache must have been rebuilt).
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings
from tests.reliability.conftest import Figures, Scale
from tests.reliability.crash_child import memory_text

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("crash_child.py")
LINE_TIMEOUT = 60.0
"""Longest wait for one line from the child before the test fails (bounds every run)."""


class Zygote:
    """The child script, with its stdout read by a thread into a queue."""

    def __init__(self, stderr: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"  # the zygote forks: no BLAS/OpenMP thread pools before that
        self._stderr = stderr.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode().rstrip("\n"))
        self.lines.put(None)

    def send(self, **cmd: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()

    def line(self) -> str:
        try:
            line = self.lines.get(timeout=LINE_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"the child printed nothing for {LINE_TIMEOUT} s") from None
        if line is None:
            raise AssertionError("the child exited unexpectedly")
        if line.startswith("ERROR "):
            raise AssertionError("the child failed:\n" + json.loads(line[6:]))
        return line

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=30)  # (until the end of the child's output)
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()
        self._stderr.close()


@pytest.fixture
def zygote(tmp_path: Path) -> Iterator[Zygote]:
    z = Zygote(tmp_path / "child.stderr")
    yield z
    z.close()


@dataclass
class Ledger:
    """What the children acknowledged, across all runs on one file."""

    acked: set[str] = field(default_factory=set)
    reflections: set[str] = field(default_factory=set)
    next_index: int = 0
    phases: Counter[str] = field(default_factory=Counter)


def run_and_kill(z: Zygote, path: Path, ledger: Ledger, rng: random.Random) -> list[str]:
    """One kill point; returns the ids of the add that was in flight (maybe empty)."""
    z.send(path=str(path), start=ledger.next_index, seed=rng.randrange(2**31))
    first = z.line()
    assert first.startswith("PID "), first
    pid = int(first.split()[1])
    early = rng.random() < 0.1  # sometimes kill while the file is being opened
    target = 0 if early else rng.randint(1, 80)
    seen, last, inflight = 0, "open", []
    while seen < target:
        line = z.line()
        seen += 1
        words = line.split()
        if words[0] == "ACK":
            ledger.acked.update(words[1:])
            inflight = []
            last = "between operations"
        elif words[0] == "REFLECT":
            ledger.reflections.update(words[1:])
            last = "between operations"
        elif words[0] == "REOPENED" or words[0] == "READY":
            last = "between operations"
        elif words[0] == "BEGIN":
            last = words[1]
            if words[1] == "add":
                inflight = words[2:]
                ledger.next_index = int(words[-1][1:]) + 1
    time.sleep(rng.uniform(0, 0.3 if early else 0.01))
    os.kill(pid, signal.SIGKILL)
    # drain what the child printed before it died
    while True:
        line = z.line()
        words = line.split()
        if words[0] == "EXIT":
            assert int(words[1]) == pid
            status = int(words[2])
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
            break
        if words[0] == "ACK":
            ledger.acked.update(words[1:])
            inflight = []
            last = "between operations"
        elif words[0] == "REFLECT":
            ledger.reflections.update(words[1:])
            last = "between operations"
        elif words[0] in ("REOPENED", "READY"):
            last = "between operations"
        elif words[0] == "BEGIN":
            last = words[1]
            if words[1] == "add":
                inflight = words[2:]
                ledger.next_index = int(words[-1][1:]) + 1
    ledger.phases[last] += 1
    return inflight


def verify(path: Path, ledger: Ledger, inflight: list[str], rng: random.Random) -> dict[str, int]:
    """Open the file after a kill and check every invariant; returns counts."""
    with MemoryStream(WordEmbeddings(), path=path) as stream:  # opens without error
        records = stream.recent(None)
        ids = Counter(r.id for r in records)
        dup = [i for i, n in ids.items() if n > 1]
        assert not dup, f"duplicated records: {dup[:5]}"
        texts = Counter(r.text for r in records if r.kind == "observation")
        assert max(texts.values(), default=1) == 1
        lost = sorted((ledger.acked | ledger.reflections) - set(ids))
        assert not lost, f"acknowledged writes lost: {lost[:5]}"
        # the add in flight is atomic: all of it or none of it
        present = [i for i in inflight if i in ids]
        assert present in ([], inflight), f"partial add: {present} of {inflight}"
        ledger.acked.update(present)  # durable now: it must stay
        observations = {r.id: r for r in records if r.kind == "observation"}
        assert set(observations) == ledger.acked  # nothing unacknowledged either
        for rid, r in observations.items():
            assert r.text == memory_text(int(rid[1:]))
        insights = [r for r in records if r.kind == "reflection"]
        ledger.reflections.update(r.id for r in insights)  # an in-flight one may have landed
        for r in insights:
            assert r.evidence and all(e in ids for e in r.evidence)
        assert max(Counter(r.created_at for r in insights).values(), default=0) <= 5
        assert len(stream) == len(records)
        # the counter matches the records since the last reflection
        state = stream.reflection_state()
        since = stream.recent(None, since_last_reflection=True)
        assert state.adds_since == len(since)
        expected = sum(r.importance for r in since if r.kind != "reflection")
        assert math.isclose(state.importance_sum, expected, abs_tol=1e-9)
        # retrieval works: the newest acknowledged memory (never in an older cache) and a
        # random one are found by their text
        found = 0
        if ledger.acked:
            newest = max(ledger.acked)
            probe = rng.choice(sorted(ledger.acked))
            for rid in {newest, probe}:
                hits = stream.retrieve(memory_text(int(rid[1:])), k=5, touch=False)
                assert rid in [h.record.id for h in hits], rid
                found += 1
        return {"records": len(records), "retrieval_checks": found, "in_flight": len(inflight)}


def test_sigkill_at_random_points_loses_nothing(
    tmp_path: Path,
    scale: Scale,
    figures: Figures,
    zygote: Zygote,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="langchain_reflective")
    rng = random.Random(2024)
    path = tmp_path / "crash.db"
    ledger = Ledger()
    in_flight_landed = in_flight_absent = retrieval_checks = 0
    for _ in range(scale.kill_points):
        inflight = run_and_kill(zygote, path, ledger, rng)
        before = set(ledger.acked)
        counts = verify(path, ledger, inflight, rng)
        retrieval_checks += counts["retrieval_checks"]
        if inflight:
            if set(inflight) <= ledger.acked and not set(inflight) <= before:
                in_flight_landed += 1
            else:
                in_flight_absent += 1
    rebuilds = sum(
        1
        for r in caplog.records
        if "cache" in r.getMessage() and ("stale" in r.getMessage() or "rebuild" in r.getMessage())
    )
    assert ledger.acked, "no write was acknowledged before the kills"
    figures.record(
        "crash",
        scale.name,
        kill_points=scale.kill_points,
        kill_phase=dict(ledger.phases),
        acknowledged_memories=len(ledger.acked),
        acknowledged_reflections=len(ledger.reflections),
        in_flight_adds_committed=in_flight_landed,
        in_flight_adds_absent=in_flight_absent,
        retrieval_checks=retrieval_checks,
        stale_cache_rebuilds_logged=rebuilds,
        lost=0,
        duplicated=0,
    )
