"""The backend conformance suite (tests/backends/conformance.py): the reflection counter
(directly and through the stream, resets refused after another reset) and the reflection
lock of each namespace."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.base import BaseMemoryBackend, CounterUpdate, ReflectionState
from langchain_reflective.errors import ReflectionConflictError
from langchain_reflective.records import REFLECTION
from tests.backends.conformance_base import MODEL, NOW, ConformanceBase, corpus, vectors_of
from tests.fakes import WordEmbeddings


class ReflectionConformance(ConformanceBase):
    """The reflection counter and the reflection lock."""

    # -- the reflection counter ----------------------------------------------------------------

    def test_reflection_counter(self, backend: BaseMemoryBackend) -> None:
        records = corpus(10)
        self.fill(backend, records[:4], counter=CounterUpdate("alice", importance=1.5, adds=4))
        self.fill(backend, records[4:6])  # no counter: an import, not counted
        state = backend.reflection_state("alice")
        assert state.importance_sum == pytest.approx(1.5) and state.adds_since == 4
        assert state.last_reflection_at is None
        backend.update_counter(CounterUpdate("alice", importance=0.25, adds=1))
        assert backend.reflection_state("alice").adds_since == 5
        reflected = NOW + timedelta(hours=1)
        self.fill(
            backend,
            [records[6]],
            counter=CounterUpdate("alice", importance=9.0, adds=1, reset_at=reflected),
        )
        state = backend.reflection_state("alice")
        assert (state.importance_sum, state.adds_since) == (0.0, 0)
        assert state.last_reflection_at == reflected
        assert backend.recent("alice", since_last_reflection=True) == []
        self.fill(backend, records[7:9], counter=CounterUpdate("alice", importance=0.7, adds=2))
        assert backend.recent("alice", since_last_reflection=True) == records[7:9]
        assert backend.reflection_state("alice").adds_since == 2
        backend.mark_reflected("alice", reflected + timedelta(hours=1))
        assert backend.reflection_state("alice").adds_since == 0

    def test_reflection_counter_through_the_stream(
        self, backends: Callable[[], BaseMemoryBackend]
    ) -> None:
        stream = MemoryStream(WordEmbeddings(32), backend=backends(), embedding_model=MODEL)
        stream.add(["a", "b", "c"], importances=[0.2, 0.3, 0.5], now=NOW)
        stored = stream.add(
            "insight", importances=0.9, kinds=REFLECTION, now=NOW, reset_reflection_counter=True
        )
        assert stream.reflection_state().adds_since == 0
        stream.add("d", importances=0.4, now=NOW)
        stream.add("e", importances=0.6, kinds=REFLECTION, evidence=[[stored[0].id]], now=NOW)
        state = stream.reflection_state()
        assert state.importance_sum == pytest.approx(0.4) and state.adds_since == 2
        assert stream.get(stream.recent(1)[0].id)[0].depth == 1
        stream.close()

    def test_a_reset_after_another_reset_since_its_read_writes_nothing(
        self, backend: BaseMemoryBackend, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Optimistic concurrency of reflections: a reset carrying the generation it read is
        refused, with everything written with it, once another reset came in between -- also
        when both carry the same timestamp. Only resets move the generation."""
        records = corpus(8)
        self.fill(backend, records[:3], counter=CounterUpdate("alice", importance=1.5, adds=3))
        seen = backend.reflection_state("alice")
        assert seen.generation == 0 and backend.reflection_state("bob").generation == 0
        first = CounterUpdate("alice", reset_at=NOW, consumed=seen)
        self.fill(backend, [records[3]], counter=first)  # the reflection that stores first
        won = backend.reflection_state("alice")
        assert (won.importance_sum, won.adds_since, won.generation) == (0.0, 0, 1)
        self.fill(backend, [records[4]], counter=CounterUpdate("alice", importance=0.5, adds=1))
        late = CounterUpdate("alice", reset_at=NOW, consumed=seen)  # same read, same clock
        with pytest.raises(ReflectionConflictError):
            backend.put([records[5]], vectors_of([records[5]]), counter=late)
        with pytest.raises(ReflectionConflictError):
            backend.replace(
                "alice", [records[0].id], [records[5]], vectors_of([records[5]]), counter=late
            )
        with pytest.raises(ReflectionConflictError):
            backend.mark_reflected("alice", NOW, consumed=seen)
        with pytest.raises(ReflectionConflictError):
            loop.run_until_complete(
                backend.aput([records[5]], vectors_of([records[5]]), counter=late)
            )
        with pytest.raises(ReflectionConflictError):
            loop.run_until_complete(backend.amark_reflected("alice", NOW, consumed=seen))
        assert backend.get("alice", [records[0].id, records[5].id]) == [records[0]]
        now = backend.reflection_state("alice")
        assert (now.importance_sum, now.adds_since, now.generation) == (0.5, 1, 1)
        # adds, deletes and purges leave the generation alone; every reset raises it
        backend.delete("alice", [records[1].id])
        assert backend.reflection_state("alice").generation == 1
        backend.mark_reflected("alice", NOW, consumed=backend.reflection_state("alice"))
        backend.mark_reflected("alice", NOW)  # unconditional
        hand_made = ReflectionState(importance_sum=1.0, adds_since=1)  # no generation: as before
        self.fill(backend, [records[6]], counter=CounterUpdate("alice", reset_at=NOW,
                                                               consumed=hand_made))  # fmt: skip
        assert backend.reflection_state("alice").generation == 4
        backend.purge("alice")
        state = backend.reflection_state("alice")
        assert (state.importance_sum, state.adds_since, state.generation) == (0.0, 0, 4)
        assert state.last_reflection_at is None
        with pytest.raises(ReflectionConflictError):  # a read from before the purge
            backend.mark_reflected("alice", NOW, consumed=won)
        self.fill(backend, [records[7]], counter=CounterUpdate("alice", reset_at=NOW,
                                                               consumed=state))  # fmt: skip
        assert backend.reflection_state("alice").generation == 5
        assert backend.reflection_state("bob").generation == 0

    # -- the reflection lock -------------------------------------------------------------------

    def test_reflection_lock_excludes_others_per_namespace(
        self, backend: BaseMemoryBackend
    ) -> None:
        outcome: dict[str, Any] = {}

        def contend(namespace: str) -> None:
            try:
                with backend.reflection_lock(namespace, timeout=0):
                    outcome[namespace] = "acquired"
            except TimeoutError:
                outcome[namespace] = "busy"

        with backend.reflection_lock("alice"):
            for ns in ("alice", "bob"):
                thread = threading.Thread(target=contend, args=(ns,))
                thread.start()
                thread.join()
        assert outcome == {"alice": "busy", "bob": "acquired"}
        contend("alice")  # released on exit
        assert outcome["alice"] == "acquired"
        with pytest.raises(RuntimeError), backend.reflection_lock("alice"):
            raise RuntimeError("reflection failed")
        contend("alice")  # released on errors too
        assert outcome["alice"] == "acquired"
