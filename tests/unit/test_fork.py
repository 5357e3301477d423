"""A forked child cannot use the memory file its parent opened (SQLite forbids carrying a
connection across ``fork()``): every use raises a :class:`StorageError` that says what to do --
at once, even when a parent thread held the backend's lock at the fork -- and ``close()`` in
the child only forgets the stream, so the parent carries on. An in-memory stream is the
child's own copy and keeps working there. A ``ReflectiveMemory`` whose background drain was
running at the fork does not make the child wait for it."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryConfig, MemoryStream, ReflectiveMemory, StorageError
from langchain_reflective.memory import _drain_at_exit
from tests.fakes import WordEmbeddings

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

CHILD_SECONDS = 20
"""A child still running after this is killed (its report is then missing): a hang fails."""


def in_child(run: Callable[[], Any]) -> Any:
    """``run()`` in a forked child: what it returned, or ``{"error": [type, message]}``. The
    child leaves with ``os._exit`` (``sys.exit`` would carry on with pytest's session there,
    and the exit handlers would stop this session's Postgres server)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave, whatever happens
        signal.alarm(CHILD_SECONDS)  # (SIGALRM's default action ends the process)
        try:
            try:
                out: Any = run()
            except Exception as exc:
                out = {"error": [type(exc).__name__, str(exc)]}
            os.write(write, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the child ended with {status} ({text!r})"
    return json.loads(text)


@contextmanager
def held_by_a_thread(lock: Any) -> Iterator[None]:
    """``lock`` held by another thread of this process meanwhile (as at a fork in a busy
    process: nothing in the child ever releases it)."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            done.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait()
    try:
        yield
    finally:
        done.set()
        thread.join()


def test_a_forked_child_cannot_use_the_parents_memory_file(tmp_path: Path) -> None:
    stream = MemoryStream(WordEmbeddings(), path=tmp_path / "m.db")
    stream.add(["tea by the river", "a walk in the park"], importances=0.5)
    assert stream.retrieve("tea", k=1)[0].record.text == "tea by the river"

    def use() -> Any:
        return [h.record.text for h in stream.retrieve("tea", k=1)]

    out = in_child(use)
    assert out["error"][0] == "StorageError"
    assert f"opened in process {os.getpid()}" in out["error"][1]
    assert "after the fork" in out["error"][1]
    for lock in (stream.backend._lock, stream.backend.store._lock):  # type: ignore[attr-defined]
        with held_by_a_thread(lock):  # raises at once rather than wait for it
            assert in_child(use)["error"][0] == "StorageError"
            assert in_child(lambda: stream.add(["more"]))["error"][0] == "StorageError"

    def close() -> Any:
        stream.close()  # only forgets it: no error, the parent's connection untouched
        try:
            stream.retrieve("tea", k=1)
        except StorageError as exc:
            return str(exc)
        return "retrieved after close"

    with held_by_a_thread(stream.backend._lock):  # type: ignore[attr-defined]
        assert "closed" in in_child(close)
    stream.add(["music at night"], importances=0.5)  # the parent carries on
    assert [h.record.text for h in stream.retrieve("music", k=1)] == ["music at night"]
    stream.close()
    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as again:
        assert again.count() == 3


def test_an_in_memory_stream_is_the_childs_own_copy() -> None:
    stream = MemoryStream(WordEmbeddings())
    stream.add(["tea by the river"], importances=0.5)

    def use() -> Any:
        stream.add(["coffee in the morning"], importances=0.5)
        return [stream.count(), stream.retrieve("coffee", k=1)[0].record.text]

    assert in_child(use) == [2, "coffee in the morning"]
    assert stream.count() == 1
    stream.close()


class _HeldEmbeddings(WordEmbeddings):
    """Embeds documents only once ``go`` is set (a drain stays at work until then)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.go = threading.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.started.set()
        self.go.wait()
        return super().embed_documents(texts)


def test_a_child_does_not_wait_for_the_parents_background_drain(tmp_path: Path) -> None:
    embeddings = _HeldEmbeddings()
    memory = ReflectiveMemory(
        None,
        MemoryStream(embeddings, path=tmp_path / "m.db"),
        config=MemoryConfig(shutdown_timeout=3 * CHILD_SECONDS),
    )
    try:
        memory.enqueue(["tea by the river"], importances=0.5)
        assert embeddings.started.wait(10)  # the drain is at work in this process

        def leave() -> Any:
            flushed = memory.flush()
            _drain_at_exit()  # what the interpreter's exit runs for the live memories
            memory.close()
            return flushed

        # the child's flush, exit handler and close return at once: waiting for the drain
        # (whose thread is not in the child) would take shutdown_timeout, past CHILD_SECONDS
        assert in_child(leave) is False
    finally:
        embeddings.go.set()
        assert memory.flush(timeout=10)  # the parent's drain completes the memory
        assert memory.stream.count() == 1
        memory.close()
