"""A forked child cannot use the ``PostgresBackend`` its parent opened: the pooled connections
are the parent's sockets (used by both, the two processes' messages mix -- one could read the
other's rows, of any namespace). Every use in the child raises a :class:`StorageError` that
says what to do (before it would wait for a lock a parent thread held at the fork), and
``close()`` there only forgets the pools: closing them would end the parent's sessions (it
did: the parent's next statement found its connection gone)."""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg
import pytest

from langchain_reflective import MemoryStream, PostgresBackend
from tests.fakes import WordEmbeddings
from tests.unit.test_fork import held_by_a_thread, in_child

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.integration,
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork"),
]


def _sessions(url: str) -> set[int]:
    """The server sessions connected to the test's database, but the one asking."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return {pid for (pid,) in rows}


@pytest.mark.parametrize("local_index", [False, True])
def test_a_forked_child_cannot_use_the_parents_connections(
    postgres_url: str, local_index: bool
) -> None:
    backend = PostgresBackend.from_conn_string(
        postgres_url, min_size=1, max_size=2, local_index=local_index, local_index_wait=True
    )
    backend.setup()
    stream = MemoryStream(WordEmbeddings(), backend=backend)
    stream.add(["tea by the river", "a walk in the park"], importances=0.5)
    assert stream.retrieve("tea", k=1)[0].record.text == "tea by the river"
    sessions = _sessions(postgres_url)  # the parent's pooled sessions, to be found alive
    assert sessions

    def use() -> Any:
        return [h.record.text for h in stream.retrieve("tea", k=1)]

    out = in_child(use)
    assert out["error"][0] == "StorageError"
    assert f"opened in process {os.getpid()}" in out["error"][1]
    for call in (  # what answers from this process's state raises too
        backend.index_state,
        backend.wait_for_index,
        backend.local_namespaces,
        lambda: backend.bind_embeddings(stream.embedding_model, 64),
    ):
        assert in_child(call)["error"][0] == "StorageError"
    if local_index:  # a parent thread in the local index at the fork: raised, not waited for
        local = backend._candidates.local
        assert local is not None
        with held_by_a_thread(local._lock):
            assert in_child(use)["error"][0] == "StorageError"
            assert in_child(lambda: backend.preload("default"))["error"][0] == "StorageError"

    def close() -> Any:
        stream.close()  # forgets the pools, leaves the parent's sessions alone
        return "closed"

    assert in_child(close) == "closed"
    deadline = time.monotonic() + 1.0  # (a session the child ended would be gone at once)
    while time.monotonic() < deadline and _sessions(postgres_url) == sessions:
        time.sleep(0.05)
    assert _sessions(postgres_url) == sessions
    stream.add(["music at night"], importances=0.5)  # the parent carries on
    assert [h.record.text for h in stream.retrieve("music", k=1)] == ["music at night"]
    stream.close()


def test_a_forked_child_raises_for_touches_its_parent_had_gathered(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Touches answered in memory wait ``touches.GATHER`` before the parent's writer thread
    writes them; a child forked meanwhile has no writer. Its reads, which first wait for the
    process's own touches, raise instead of waiting for a write that never comes."""
    from langchain_reflective.backends.postgres import touches

    monkeypatch.setattr(touches, "GATHER", 60.0)
    backend = PostgresBackend.from_conn_string(
        postgres_url, min_size=1, max_size=2, local_index=True, local_index_wait=True
    )
    backend.setup()
    stream = MemoryStream(WordEmbeddings(), backend=backend)
    try:
        [record] = stream.add(["tea by the river"], importances=0.5)
        stream.retrieve("tea", k=1)  # through the server: the record is kept from now on
        stream.retrieve("tea", k=1)  # answered in memory: its touch is gathered
        assert backend._touches.pending
        out = in_child(lambda: [r.text for r in stream.get([record.id])])
        assert out["error"][0] == "StorageError"
        assert f"opened in process {os.getpid()}" in out["error"][1]
    finally:
        stream.close()
