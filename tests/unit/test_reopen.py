"""Instant reopen: a reopened memory file answers its first query from the saved lexical index
and (for large namespaces) the mapped vector file, not by re-reading and re-tokenising every
memory; appends since the caches were written are indexed on top, and the ranking is the one
a full rebuild gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.sqlite.lexical import BM25Index
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
from tests.fakes import WordEmbeddings

NOW = datetime(2025, 6, 1, tzinfo=UTC)
QUERIES = ["tea w3 m17", "paris w40", "garden w7 w8", "m1203 music"]


def _texts(n: int, start: int = 0) -> list[str]:
    topics = ["tea", "paris", "garden", "music", "train"]
    return [f"m{i} {topics[i % 5]} w{i % 50} w{(i * 7) % 50} turn" for i in range(start, start + n)]


def _ranked(stream: MemoryStream) -> list[list[str]]:
    return [[h.record.id for h in stream.retrieve(q, k=10, now=NOW, touch=False)] for q in QUERIES]


class _Spy:
    """Counts BM25 documents indexed and vectors read from the SQLite file."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.documents = 0
        self.vector_rows = 0
        add, iterate = BM25Index.add, SQLiteRecordStore.iter_partition

        def counting_add(index: BM25Index, texts: Any) -> None:
            self.documents += len(texts)
            add(index, texts)

        def counting_iter(store: SQLiteRecordStore, *args: Any, **kwargs: Any) -> Any:
            for chunk in iterate(store, *args, **kwargs):
                if chunk.vectors is not None:
                    self.vector_rows += chunk.vectors.shape[0]
                yield chunk

        monkeypatch.setattr(BM25Index, "add", counting_add)
        monkeypatch.setattr(SQLiteRecordStore, "iter_partition", counting_iter)


@pytest.mark.parametrize("exact_limit", [None, 300], ids=["exact", "ivf"])
def test_reopen_reads_no_text_again_and_ranks_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exact_limit: int | None
) -> None:
    db = tmp_path / "m.db"
    emb = WordEmbeddings(32)
    with MemoryStream(emb, path=db, exact_limit=exact_limit) as s:
        for b in range(3):
            s.add(_texts(400, 400 * b), importances=0.5, now=NOW - timedelta(hours=3 - b))
        want = _ranked(s)
    spy = _Spy(monkeypatch)
    with MemoryStream(emb, path=db, exact_limit=exact_limit) as s:
        assert _ranked(s) == want
        assert spy.documents == 0  # the BM25 snapshot, not 1,200 documents again
        if exact_limit is not None:
            assert spy.vector_rows == 0  # the mapped vector file (and the IVF cache)
        s.add(_texts(30, 5000), importances=0.5, now=NOW)
        s.delete([want[0][0]])
        s.exact_limit = None  # compare exact rankings (the IVF index is retrained on reopen)
        want = _ranked(s)
    spy.documents = spy.vector_rows = 0
    with MemoryStream(emb, path=db, exact_limit=None) as s:
        assert _ranked(s) == want  # after appends and a delete: snapshots rewritten on close
        assert spy.documents == 0


def test_appends_after_the_snapshot_are_indexed_on_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "m.db"
    emb = WordEmbeddings(32)
    with MemoryStream(emb, path=db, exact_limit=300) as s:
        s.add(_texts(1000), importances=0.5, now=NOW - timedelta(hours=1))
        s.retrieve("tea", k=3, now=NOW)  # builds the lexical index, saved on close
    crashed = MemoryStream(emb, path=db, exact_limit=300)
    crashed.add(_texts(40, 9000), importances=0.5, now=NOW)  # committed, caches not rewritten
    crashed.add("m9999 tea w3 m17 appended", importances=0.9, now=NOW)
    crashed.backend.store.close()  # a crash: close() never ran
    spy = _Spy(monkeypatch)
    with MemoryStream(emb, path=db, exact_limit=300) as s:
        got = _ranked(s)
        assert spy.documents == 41  # only the rows stored after the snapshot
        assert spy.vector_rows == 41
    for folder in (db.with_name(db.name + ".index"),):  # reference: no caches at all
        for file in folder.iterdir():
            file.unlink()
    with MemoryStream(emb, path=db, exact_limit=300) as s:
        assert _ranked(s) == got
        assert "m9999 tea w3 m17 appended" in {h.record.text for h in s.retrieve("m9999", k=1)}


def test_a_snapshot_of_other_lexical_documents_is_not_used(tmp_path: Path) -> None:
    from langchain_reflective import ScoringConfig

    db = tmp_path / "m.db"
    emb = WordEmbeddings(32)
    with MemoryStream(emb, path=db) as s:  # hybrid: observations indexed with their neighbour
        s.add(_texts(200), importances=0.5, now=NOW)
        s.retrieve("tea", k=3, now=NOW)
    facts = ScoringConfig.hybrid(context=False)
    with MemoryStream(emb, path=db, scoring=facts) as s:
        got = _ranked(s)
    for file in db.with_name(db.name + ".index").iterdir():
        file.unlink()
    with MemoryStream(emb, path=db, scoring=facts) as s:
        assert _ranked(s) == got


def test_a_vector_file_of_another_memory_file_is_not_used(tmp_path: Path) -> None:
    """The mapped vector file of a large namespace matched by size, dimension and generation
    alone, so another memory file's (same rows and dimension) was used silently: relevance
    off by up to 0.48 and wrong rankings. Sampled rows are now compared with the memory file,
    and a mismatch reads the vectors from the file."""
    emb = WordEmbeddings(32)
    paths = [tmp_path / "a.db", tmp_path / "b.db"]
    for path, start in zip(paths, (0, 5_000), strict=True):
        with MemoryStream(emb, path=path, exact_limit=300) as s:
            s.add(_texts(600, start), importances=0.5, now=NOW - timedelta(days=1))
            _ranked(s)  # (the caches are written)
    reference = tmp_path / "reference.db"  # (a copy without caches: a's stay as written)
    reference.write_bytes(paths[0].read_bytes())
    with MemoryStream(emb, path=reference, exact_limit=None) as s:
        expected = _ranked(s)
    (vector_file,) = (paths[0].parent / "a.db.index").glob("*.f32")
    (other,) = (paths[1].parent / "b.db.index").glob("*.f32")
    assert vector_file.name == other.name and vector_file.stat().st_size == other.stat().st_size
    vector_file.write_bytes(other.read_bytes())
    with MemoryStream(emb, path=paths[0], exact_limit=300) as s:
        s.retrieve("tea", k=1, now=NOW, touch=False)  # loads the partition (and its vectors)
        s.exact_limit = None  # compare exact rankings
        assert _ranked(s) == expected
