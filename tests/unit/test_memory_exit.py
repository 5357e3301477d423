"""What the interpreter's exit does with a :class:`ReflectiveMemory` left open: it waits (up to
``MemoryConfig.shutdown_timeout``) for its background reflections and completes its pending
memories. Each test runs a child interpreter that exits right after a write, without a flush
or a close, and reads the file it left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import atexit, sys, time
from datetime import UTC, datetime
from langchain_reflective import MemoryStream, ReflectiveMemory
from langchain_reflective.importance import ImportanceConfig, LLMImportanceScorer, RetryConfig
from langchain_reflective.memory_config import MemoryConfig
from langchain_reflective.reflection import ReflectionConfig
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

path, what, slow_kind, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
once = RetryConfig(attempts=1)
model = ScriptedChatModel(gate=lambda kind: time.sleep(60 if kind == slow_kind else 0.05))
scorer = LLMImportanceScorer(model, config=ImportanceConfig(retry=once))
memory = ReflectiveMemory(
    model,
    MemoryStream(WordEmbeddings(), path=path, importance_scorer=scorer),
    config=MemoryConfig(reflect_threshold=2.5, shutdown_timeout=timeout),
    reflection=ReflectionConfig(retry=once),
)
start = time.monotonic()
# an atexit function runs after the package's exit flush (and after Python's own thread joins)
atexit.register(lambda: print(
    f"LEFT {time.monotonic() - start:.2f} ERRORS {[str(e.error) for e in memory.errors]}",
    flush=True,
))
texts = [f"Klaus works on his research paper topic {i}" for i in range(5)]
if what == "add":
    memory.add(texts, importances=0.5, now=datetime(2025, 6, 1, tzinfo=UTC))
else:
    memory.enqueue(texts * 6)  # rated by the model when completed
"""


def _exit_after(
    path: Path, what: str, *, slow_kind: str = "-", timeout: float = 20.0
) -> tuple[float, str]:
    """Run the child; return how long its exit took after the write, and its errors."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), what, slow_kind, str(timeout)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=40,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("LEFT ")]
    seconds, errors = line.removeprefix("LEFT ").split(" ERRORS ", 1)
    assert "cannot schedule new futures" not in done.stderr, done.stderr[-3000:]
    return float(seconds), errors


def test_a_reflection_running_at_exit_is_completed(tmp_path: Path) -> None:
    """The exit waits for the background reflection an add started, which stores its
    insights: it used to run once ``concurrent.futures`` refused new work, and failed with
    "cannot schedule new futures after interpreter shutdown" (nothing stored, the wait that
    ``shutdown_timeout`` promises never held)."""
    path = tmp_path / "m.db"
    _, errors = _exit_after(path, "add")
    assert errors == "[]"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert stream.recent(kinds=["reflection"])
        assert stream.reflection_state("default").importance_sum == 0.0


def test_the_exit_waits_no_longer_than_shutdown_timeout(tmp_path: Path) -> None:
    """A reflection whose model call hangs (60 s) holds the exit for ``shutdown_timeout``
    (0.5 s), not longer; nothing of it is written, the counter keeps the namespace due."""
    path = tmp_path / "m.db"
    seconds, _ = _exit_after(path, "add", slow_kind="questions", timeout=0.5)
    assert 0.5 <= seconds < 4.0
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert stream.recent(kinds=["reflection"]) == []
        assert stream.reflection_state("default").importance_sum == 2.5


def test_pending_memories_are_completed_at_exit(tmp_path: Path) -> None:
    """Memories enqueued right before the exit are rated and stored by it, none left
    pending (and the reflection their importance starts runs too)."""
    path = tmp_path / "m.db"
    _, errors = _exit_after(path, "enqueue")
    assert errors == "[]"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert stream.backend.count_pending() == 0
        assert len(stream.recent(100, kinds=["observation"])) == 30


_CHILD_FLUSH_RAISES = """
import logging, sys, threading, time
from langchain_reflective import MemoryStream, ReflectiveMemory, _at_exit
from langchain_reflective.importance import ImportanceConfig, LLMImportanceScorer, RetryConfig
from langchain_reflective.memory_config import MemoryConfig
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

logging.basicConfig(stream=sys.stderr)
model = ScriptedChatModel()
scorer = LLMImportanceScorer(model, config=ImportanceConfig(retry=RetryConfig(attempts=1)))
made = [
    ReflectiveMemory(
        model,
        MemoryStream(WordEmbeddings(), path=p, importance_scorer=scorer),
        config=MemoryConfig(reflect_threshold=0.0, shutdown_timeout=20.0),
    )
    for p in sys.argv[1:3]
]
first, second = list(_at_exit._LIVE)  # in the order the exit flushes them
print("GOOD", sys.argv[1:3][made.index(second)], flush=True)
def broken(timeout=None):
    raise RuntimeError("flush broke")
first.flush = broken
second.enqueue([f"Klaus works on his research paper topic {i}" for i in range(30)])
def worker():
    time.sleep(0.5)
    print("WORKER DONE", flush=True)
threading.Thread(target=worker).start()  # not a daemon: the exit joins it
"""


def test_a_flush_that_raises_at_exit_does_not_stop_the_rest(tmp_path: Path) -> None:
    """One memory's flush raising at exit is logged, and the exit goes on: the next memory's
    pending memories are completed, and a thread still running is joined. The flush runs as
    one of :mod:`threading`'s exit hooks, which Python calls without a ``try``: the exception
    skipped the later memories, the later hooks (``concurrent.futures``') and the join."""
    paths = [tmp_path / "a.db", tmp_path / "b.db"]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD_FLUSH_RAISES, *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=40,
    )
    assert "WORKER DONE" in done.stdout, done.stderr[-3000:]
    assert "flush broke" in done.stderr and "Exception ignored" not in done.stderr
    (good,) = [x.removeprefix("GOOD ") for x in done.stdout.splitlines() if x.startswith("GOOD ")]
    with MemoryStream(WordEmbeddings(), path=good) as stream:
        assert stream.backend.count_pending() == 0
        assert len(stream.recent(100, kinds=["observation"])) == 30
