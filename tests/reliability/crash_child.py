"""Crash-test child: a zygote that imports everything once, then forks one worker per run.

The parent test starts this script with ``sys.executable`` (cwd and ``PYTHONPATH`` = the repo
root) and writes one JSON command per line to its stdin: ``{"path", "start", "seed"}``. For each
command the zygote forks a worker process, prints ``PID <pid>``, waits for it and prints
``EXIT <pid> <status>``. The worker opens a :class:`MemoryStream` on ``path`` and loops forever
(until the parent SIGKILLs it) over random operations, printing a line before each and after
each acknowledged one:

* ``BEGIN add <id>...`` / ``ACK <id>...``: one ``stream.add`` call of 1-3 memories with known
  ids, texts and importances (:func:`memory_id`, :func:`memory_text`, :func:`importance`);
* ``BEGIN reflect`` / ``REFLECT <id>...``: a forced reflection (scripted fake model);
* ``BEGIN reopen`` / ``REOPENED``: close the stream (writes the FAISS cache) and reopen it.

Lines are written with one ``os.write`` each (shorter than ``PIPE_BUF``, so atomic): a line the
parent reads was printed after its operation returned. Forking from a warm zygote keeps each
kill point cheap; every worker is still a separate process killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback

from langchain_reflective import MemoryStream, ReflectionConfig, create_reflection_graph
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

WORDS = (
    *("alice", "bob", "carol", "dave", "tea", "coffee", "paper", "library", "paris", "lisbon"),
    *("exam", "wedding", "garden", "piano", "train", "museum", "river", "report", "deadline"),
    "concert",
)


def memory_id(j: int) -> str:
    return f"m{j:07d}"


def memory_text(j: int) -> str:
    a, b = WORDS[j % len(WORDS)], WORDS[(j * 7 + 3) % len(WORDS)]
    return f"memory {j} about {a} and {b} token{j}"


def importance(j: int) -> float:
    return ((j * 7) % 10 + 1) / 10


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def open_stream(path: str) -> tuple[MemoryStream, object]:
    stream = MemoryStream(WordEmbeddings(), path=path)
    graph = create_reflection_graph(
        ScriptedChatModel(), stream, config=ReflectionConfig(min_relevance=-1.0)
    )
    return stream, graph


def worker(path: str, start: int, seed: int) -> None:
    rng = random.Random(seed)
    stream, graph = open_stream(path)
    say("READY")
    j = start
    while True:
        roll = rng.random()
        if roll < 0.07:
            say("BEGIN reflect")
            out = graph.invoke({"force": True})  # type: ignore[attr-defined]
            say("REFLECT " + " ".join(r.id for r in out["reflections"]))
        elif roll < 0.10:
            say("BEGIN reopen")
            stream.close()
            stream, graph = open_stream(path)
            say("REOPENED")
        else:
            n = rng.choice((1, 1, 1, 2, 3))
            ids = [memory_id(k) for k in range(j, j + n)]
            say("BEGIN add " + " ".join(ids))
            stream.add(
                [memory_text(k) for k in range(j, j + n)],
                ids=ids,
                importances=[importance(k) for k in range(j, j + n)],
            )
            say("ACK " + " ".join(ids))
            j += n


def warm_up() -> None:
    """Import everything the workers use lazily (FAISS, BM25, the graph's model plumbing), on an
    in-memory stream, so each forked worker starts in milliseconds. No thread outlives it."""
    stream = MemoryStream(WordEmbeddings())
    graph = create_reflection_graph(
        ScriptedChatModel(), stream, config=ReflectionConfig(min_relevance=-1.0)
    )
    stream.add(["warm up the stream", "and the reflection graph"], importances=0.5)
    stream.retrieve("warm up", k=1)
    graph.invoke({"force": True})
    stream.close()


def main() -> None:
    warm_up()
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the worker
            code = 0
            try:
                worker(cmd["path"], int(cmd["start"]), int(cmd["seed"]))
            except BaseException:
                say("ERROR " + json.dumps(traceback.format_exc()))
                code = 1
            finally:
                os._exit(code)
        say(f"PID {pid}")
        _, status = os.waitpid(pid, 0)
        say(f"EXIT {pid} {status}")


if __name__ == "__main__":
    main()
