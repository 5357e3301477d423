"""A full disk or a file that cannot be written: typed errors that say what to do, nothing
acknowledged lost, no partial file left behind.

The faults are injected without root or a mount (CI runs on a fresh machine): ``os.fsync``
and the connection's statements are made to fail the way a full disk makes them fail
(``ENOSPC``; SQLite's ``database or disk is full``). The same behaviours were checked by hand on
a 2 MB tmpfs and as an unprivileged user (docs/reliability.md, "Disk full and permissions").
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings

TEXTS = [f"memory {i} about tea and paris" for i in range(40)]


def _enospc(*_: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _populated(path: Path) -> None:
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(TEXTS, ids=[f"m{i}" for i in range(len(TEXTS))], importances=0.5)


def test_close_on_a_full_disk_leaves_no_partial_cache_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memory.db"
    _populated(path)
    for cache in (tmp_path / "memory.db.index").iterdir():
        cache.unlink()  # the next close writes every cache again
    stream = MemoryStream(WordEmbeddings(), path=path)
    stream.add("one more about tea", ids=["late"], importances=0.5)
    assert stream.retrieve("tea", k=3, touch=False)  # loads the index and BM25
    with monkeypatch.context() as m:
        m.setattr(os, "fsync", _enospc)  # every cache file fails after being written
        stream.close()  # the caches are optional: no error
    leftovers = [p.name for p in tmp_path.rglob("*.tmp")]
    assert leftovers == []
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert len(stream) == len(TEXTS) + 1
        assert stream.retrieve("one more about tea", k=1, touch=False)[0].record.id == "late"
