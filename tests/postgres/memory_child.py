"""One of the OS processes of ``test_four_memories``: a ``ReflectiveMemory`` over a
``MemoryStream`` on a shared Postgres database, adding and retrieving for one namespace with
reflections triggered inline by the importance threshold (a scripted chat model answers).

Run as ``python memory_child.py URL NAMESPACE WORKER ADDS``; prints one JSON line. Each
reflection graph run logs its start and end (server clock) in ``reflection_log``, the end
with the importance it took off the counter (``NULL`` when it did not reset it); the
package's own ``reflect`` takes the namespace's reflection lock around it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for tests.*

import psycopg

from langchain_reflective import MemoryStream, PostgresBackend
from langchain_reflective.memory import MemoryConfig, ReflectiveMemory
from langchain_reflective.reflection import ReflectionConfig
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel


class _LoggedGraph:
    """The reflection graph, logging each run's start and end."""

    def __init__(self, graph: Any, url: str) -> None:
        self._graph = graph
        self._log = psycopg.connect(url, autocommit=True)

    def _mark(self, phase: str, consumed: float | None = None) -> None:
        self._log.execute(
            "INSERT INTO reflection_log (pid, phase, at, consumed) "
            "VALUES (%s, %s, clock_timestamp(), %s)",
            (os.getpid(), phase, consumed),
        )

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        self._mark("start")
        consumed = None
        try:
            out = self._graph.invoke(*args, **kwargs)
            if out.get("skipped") in (None, "no_questions", "no_insights"):  # it reset
                consumed = out["importance_sum"]  # what it took off the counter
            return out
        finally:
            self._mark("end", consumed)


class LoggedMemory(ReflectiveMemory):
    url = ""

    @property
    def graph(self) -> Any:
        graph = super().graph
        if not isinstance(graph, _LoggedGraph):
            graph = self._graph = _LoggedGraph(graph, self.url)  # type: ignore[assignment]
        return graph


def main(url: str, namespace: str, worker: int, adds: int) -> None:
    LoggedMemory.url = url
    backend = PostgresBackend.from_conn_string(url, max_size=3)
    stream = MemoryStream(WordEmbeddings(), backend=backend, namespace=namespace)
    memory = LoggedMemory(
        ScriptedChatModel(),
        stream,
        config=MemoryConfig(reflect_threshold=3.0, background=False),
        reflection=ReflectionConfig(min_relevance=-1.0),
    )
    added: list[str] = []
    retrieved = 0
    with memory:
        i = 0
        while i < adds:
            n = min(1 + (i + worker) % 3, adds - i)
            texts = [f"worker {worker} saw Klaus writing paper {i + j}" for j in range(n)]
            added.extend(r.id for r in memory.add(texts, importances=0.5))
            i += n
            retrieved += len(memory.retrieve("Klaus paper", k=3))
        errors = [repr(e.error) for e in memory.errors]
    print(json.dumps({"added": added, "retrieved": retrieved, "errors": errors}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
