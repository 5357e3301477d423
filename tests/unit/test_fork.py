"""A forked child cannot use the memory file its parent opened (SQLite forbids carrying a
connection across ``fork()``): every use raises a :class:`StorageError` that says what to do,
and ``close()`` in the child only forgets the stream, so the parent carries on. An in-memory
stream is the child's own copy and keeps working there."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream, StorageError
from tests.fakes import WordEmbeddings

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def in_child(run: Callable[[], Any]) -> Any:
    """``run()`` in a forked child: what it returned, or ``{"error": [type, message]}``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once, whatever happens
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
    os.waitpid(pid, 0)
    return json.loads(text)


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

    def close() -> Any:
        stream.close()  # only forgets it: no error, the parent's connection untouched
        try:
            stream.retrieve("tea", k=1)
        except StorageError as exc:
            return str(exc)
        return "retrieved after close"

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
