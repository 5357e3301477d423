"""A deleted observation in the middle of the stream leaves the BM25 document of the one after
it, on the SQLite backend: the conformance check (``conformance_deleted_context.py``) on a file,
in memory and on the approximate path, and a file reopened -- with its lexical snapshot or
without -- ranking as the open one did."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from langchain_reflective.backends.base import BaseMemoryBackend
from langchain_reflective.backends.sqlite import SQLiteBackend
from langchain_reflective.records import MemoryRecord
from tests.backends.conformance_base import MODEL, QUERIES, vectors_of
from tests.backends.conformance_deleted_context import (
    HYBRID,
    SECRET,
    DeletedContextConformance,
    deleted_context_corpus,
    lexical_by_id,
)


class TestSQLiteFile(DeletedContextConformance):
    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> Callable[[], BaseMemoryBackend]:
        files = iter(tmp_path / f"memory-{i}.db" for i in range(1000))
        return lambda: SQLiteBackend(next(files))


class TestSQLiteMemory(DeletedContextConformance):
    @pytest.fixture
    def make_backend(self) -> Callable[[], BaseMemoryBackend]:
        return lambda: SQLiteBackend(None)


class TestSQLiteApproximate(DeletedContextConformance):
    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> Callable[[], BaseMemoryBackend]:
        files = iter(tmp_path / f"memory-{i}.db" for i in range(1000))
        return lambda: SQLiteBackend(next(files), exact_limit=20, ann_candidates=16)


def _filled(path: Path, records: list[MemoryRecord]) -> SQLiteBackend:
    """A backend on ``path`` with the hybrid scoring, holding ``records``."""
    backend = SQLiteBackend(path)
    backend.configure(HYBRID)
    backend.bind_embeddings(MODEL, 32)
    backend.put(records, vectors_of(records))
    return backend


def _scores(backend: SQLiteBackend) -> dict[str, dict[str, float]]:
    return {q: lexical_by_id(backend, q)[0] for q in [*QUERIES, SECRET, "rain"]}


@pytest.mark.parametrize("cache", ["snapshot", "rebuilt"])
def test_a_reopened_file_scores_as_the_open_one(tmp_path: Path, cache: str) -> None:
    """The open file's in-memory index after the deletes, the file reopened from the lexical
    snapshot saved at close, and the file reopened without it (rebuilt from the rows) agree."""
    path = tmp_path / "memory.db"
    records, deleted, new, replaced = deleted_context_corpus()
    with _filled(path, records) as backend:
        assert lexical_by_id(backend, SECRET)[1] > 0  # indexed before the deletes
        backend.delete("alice", deleted)
        backend.replace("alice", [replaced], [new], vectors_of([new]))
        open_scores = _scores(backend)
    assert {s for q in open_scores.values() for s in q.values()} != {0.0}
    assert set(open_scores[SECRET].values()) == {0.0}
    if cache == "rebuilt":
        shutil.rmtree(tmp_path / "memory.db.index")
    with SQLiteBackend(path) as reopened:
        reopened.configure(HYBRID)
        assert _scores(reopened) == open_scores


def test_deleting_after_a_reopen_from_the_snapshot(tmp_path: Path) -> None:
    """Deletes applied to an index loaded from its snapshot give what a rebuild gives."""
    path = tmp_path / "memory.db"
    records, deleted, new, replaced = deleted_context_corpus()
    with _filled(path, records) as backend:
        lexical_by_id(backend, SECRET)  # the index, saved as a snapshot at close
    with SQLiteBackend(path) as reopened:
        reopened.configure(HYBRID)
        lexical_by_id(reopened, SECRET)  # loaded from the snapshot
        reopened.delete("alice", deleted)
        reopened.replace("alice", [replaced], [new], vectors_of([new]))
        live = _scores(reopened)
    shutil.rmtree(tmp_path / "memory.db.index")
    with SQLiteBackend(path) as rebuilt:
        rebuilt.configure(HYBRID)
        assert _scores(rebuilt) == live


def test_a_snapshot_saved_before_deletes_relinked_the_context_is_rebuilt(tmp_path: Path) -> None:
    """A lexical snapshot of a namespace with deletes, saved by a version whose deletes left
    the next observation's context (no ``relinked`` mark), is rebuilt from the file."""
    import json

    path = tmp_path / "memory.db"
    records, deleted, _, _ = deleted_context_corpus()
    with _filled(path, records) as backend:
        lexical_by_id(backend, SECRET)
        backend.delete("alice", deleted)
    for mark, loaded in ((True, True), (False, False)):
        with SQLiteBackend(path) as reopened:
            if not mark:
                info = json.loads(reopened.store.get_meta("lexical_cache:alice") or "{}")
                del info["relinked"]
                reopened.store.set_meta("lexical_cache:alice", json.dumps(info))
            reopened.configure(HYBRID)
            lexical_by_id(reopened, SECRET)
            part = reopened._partitions["alice"]
            assert (part.lexical_generation is not None) == loaded


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_deletes_score_as_written_without(seed: int) -> None:
    """Rounds of random deletes (single observations, runs of them, the newest, other kinds)
    on an index built before them: after each, every memory scores as in a backend written
    with the memories left."""
    import numpy as np

    from langchain_reflective.backends.sqlite import SQLiteBackend as Backend
    from tests.backends.conformance_base import corpus

    rng = np.random.default_rng(seed)
    records = corpus(80)
    with Backend(None) as backend:
        backend.configure(HYBRID)
        backend.bind_embeddings(MODEL, 32)
        backend.put(records, vectors_of(records))
        left = list(records)
        for _ in range(5):
            lexical_by_id(backend, "tea")  # (the index is in memory)
            start = int(rng.integers(0, len(left) - 4))
            picked = {start, start + 1, start + 2} if rng.random() < 0.5 else {start}
            picked |= set(rng.integers(0, len(left), 3).tolist()) | {len(left) - 1}
            gone = {left[i].id for i in picked}
            assert backend.delete("alice", sorted(gone)) == len(gone)
            left = [r for r in left if r.id not in gone]
            with Backend(None) as fresh:
                fresh.configure(HYBRID)
                fresh.bind_embeddings(MODEL, 32)
                fresh.put(left, vectors_of(left))
                for query in [*QUERIES, "tea w1 w2"]:
                    assert lexical_by_id(backend, query) == lexical_by_id(fresh, query)
