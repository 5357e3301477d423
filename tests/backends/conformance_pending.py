"""The backend conformance suite (tests/backends/conformance.py): the queue of pending
memories, completed only in its own namespace, and discarded entries."""

from __future__ import annotations

import pytest

from langchain_reflective.backends.base import BaseMemoryBackend
from langchain_reflective.errors import PendingConflictError, StorageError
from tests.backends.conformance_base import ConformanceBase, _fresh, _pending


class PendingConformance(ConformanceBase):
    """The pending queue."""

    # -- the pending queue ---------------------------------------------------------------------

    def test_pending_queue(self, backend: BaseMemoryBackend) -> None:
        items = [_pending(f"q{i}", "alice" if i % 3 else "bob") for i in range(6)]
        backend.enqueue(items[:1])
        backend.enqueue(items[1:])
        assert [p.id for p in backend.pending()] == [p.id for p in items]
        assert [p.id for p in backend.pending(limit=2)] == ["q0", "q1"]
        alice = [p.id for p in items if p.namespace == "alice"]
        assert [p.id for p in backend.pending(namespace="alice")] == alice
        assert [p.id for p in backend.pending(namespace="alice", limit=2, newest=True)] == alice[
            -2:
        ]
        assert backend.count_pending() == 6 and backend.count_pending("bob") == 2
        assert backend.pending(namespace="alice")[0] == items[1]
        done = [_fresh(p.text, id=p.id) for p in items if p.id in ("q1", "q2")]
        self.fill(backend, done, pending=["q1", "q2"])
        assert backend.count_pending() == 4
        assert [r.id for r in backend.get("alice", ["q1", "q2"])] == ["q1", "q2"]
        with pytest.raises(PendingConflictError):
            self.fill(backend, [_fresh("x", id="q1b")], pending=["q1"])
        assert backend.get("alice", ["q1b"]) == []
        # a record of bob's cannot take alice's queued memory away by completing its id
        with pytest.raises(PendingConflictError):
            self.fill(backend, [_fresh("bob's", id="q4", namespace="bob")], pending=["q4"])
        assert backend.get("bob", ["q4"]) == []
        assert "q4" in [p.id for p in backend.pending(namespace="alice")]
        with pytest.raises(StorageError):
            backend.enqueue([_pending("q3", "bob")])  # already queued

    def test_discard_pending(self, backend: BaseMemoryBackend) -> None:
        backend.enqueue([_pending("d0", "alice"), _pending("d1", "alice"), _pending("d2", "bob")])
        assert backend.discard_pending("alice", []) == 0
        # another namespace's id, an unknown one and a repeat are ignored
        assert backend.discard_pending("alice", ["d0", "d2", "nope", "d0"]) == 1
        assert [p.id for p in backend.pending()] == ["d1", "d2"]
        self.fill(backend, [_fresh("done", id="d1")], pending=["d1"])
        assert backend.discard_pending("alice", ["d1"]) == 0  # stored: not a pending memory
        assert backend.get("alice", ["d1"])[0].id == "d1"
        assert backend.count_pending() == 1 and backend.count_pending("bob") == 1
