"""The approximate candidate path (partitions above ``exact_limit``) against exact scoring."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from langchain_reflective import MemoryStream
from langchain_reflective.backends.sqlite.index.ivf import IVFCandidateIndex

DIM = 32
N = 3000
NOW = datetime(2024, 5, 1, tzinfo=UTC)


class TableEmbeddings(Embeddings):
    """Looks texts up in a table of precomputed vectors (texts must be known)."""

    model_name = "table"

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t].tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text].tolist()


def _clustered(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((30, DIM))
    x = centers[rng.integers(0, 30, n)] + 0.35 * rng.standard_normal((n, DIM))
    out: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


@pytest.fixture(scope="module")
def data() -> tuple[list[str], TableEmbeddings, list[str], list[float]]:
    rng = np.random.default_rng(7)
    vectors = _clustered(N, 1)
    words = [f"w{i}" for i in range(400)]
    texts = [f"m{i} " + " ".join(rng.choice(words, 6)) for i in range(N)]
    table = dict(zip(texts, vectors, strict=True))
    queries = []
    for i in rng.choice(N, 25, replace=False):
        noisy = vectors[i] + 0.05 * rng.standard_normal(DIM)
        query = " ".join(texts[i].split()[1:4]) + f" q{i}"
        table[query] = noisy / np.linalg.norm(noisy)
        queries.append(query)
    importances = rng.uniform(0.1, 1.0, N).round(3).tolist()
    return texts, TableEmbeddings(table), queries, importances


def _fill(stream: MemoryStream, texts: list[str], importances: list[float]) -> None:
    for start in range(0, len(texts), 500):
        stream.add(
            texts[start : start + 500],
            importances=importances[start : start + 500],
            now=NOW + timedelta(minutes=start),
        )


@contextmanager
def _approx_and_exact(
    emb: Embeddings,
    texts: list[str],
    importances: list[float],
    exact_limit: int,
    paths: tuple[Path, Path] | None = None,
) -> Iterator[tuple[MemoryStream, MemoryStream]]:
    """Two streams holding the same memories: one with ``exact_limit`` (the approximate path
    above it), one that always scores exactly."""
    a_path, e_path = paths if paths is not None else (None, None)
    with (
        MemoryStream(emb, path=a_path, exact_limit=exact_limit) as approx,
        MemoryStream(emb, path=e_path, exact_limit=None) as exact,
    ):
        for s in (approx, exact):
            _fill(s, texts, importances)
        yield approx, exact


def _filtered_agreement(
    approx: MemoryStream, exact: MemoryStream, queries: list[str], flt: dict[str, Any] | None
) -> list[float]:
    """Per query, the share of the exact top 10 under ``flt`` (``None``: no filter) that
    ``approx`` returns (both ranked two days after the first memory, no touch); every hit must
    pass the filter."""
    when = NOW + timedelta(days=2)
    after = NOW - timedelta(days=1) if flt is None else flt["created_after"]
    agree = []
    for q in queries:
        a = approx.retrieve(q, k=10, now=when, touch=False, filter=flt)
        e = exact.retrieve(q, k=10, now=when, touch=False, filter=flt)
        assert len(a) == 10 and all(h.record.created_at > after for h in a)
        agree.append(len({h.record.text for h in a} & {h.record.text for h in e}) / 10)
    return agree


def _far_queries(
    seed: int,
) -> tuple[list[str], TableEmbeddings, list[str], list[float]]:
    """N memories in clusters with no shared words, and 40 queries far from any memory: the
    query's near-ties are many and spread over IVF lists (texts, embeddings, queries,
    importances)."""
    rng = np.random.default_rng(seed)
    vectors = _clustered(N, seed)
    texts = [f"m{i} x{i}" for i in range(N)]
    table = dict(zip(texts, vectors, strict=True))
    queries = []
    for j in range(40):
        v = vectors[rng.integers(N)] + rng.standard_normal(DIM)  # far from any memory
        table[f"q{j}"] = v / np.linalg.norm(v)
        queries.append(f"q{j}")
    importances = rng.uniform(0.1, 1.0, N).round(3).tolist()
    return texts, TableEmbeddings(table), queries, importances


def _count_searches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Make ``IVFCandidateIndex.search_lists`` record ``(k, nprobe)`` of every search."""
    searches: list[tuple[int, int]] = []
    search_lists = IVFCandidateIndex.search_lists

    def counted(self: IVFCandidateIndex, query: np.ndarray, k: int, nprobe: int) -> Any:
        searches.append((k, nprobe))
        return search_lists(self, query, k, nprobe)

    monkeypatch.setattr(IVFCandidateIndex, "search_lists", counted)
    return searches


def _count_training(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make ``IVFCandidateIndex.train`` (as patched so far) record the rows of every training."""
    trained: list[int] = []
    original = IVFCandidateIndex.train

    def counting_train(self: IVFCandidateIndex, sample: np.ndarray, rows: int) -> None:
        trained.append(rows)
        original(self, sample, rows)

    monkeypatch.setattr(IVFCandidateIndex, "train", counting_train)
    return trained


def _top(stream: MemoryStream, query: str, k: int = 10) -> list[str]:
    hits = stream.retrieve(query, k=k, now=NOW + timedelta(days=2), touch=False)
    return [h.record.id for h in hits]


def test_ann_top10_equals_exact_on_clustered_data(tmp_path: Path, data) -> None:
    texts, emb, queries, imps = data
    paths = (tmp_path / "a.db", tmp_path / "e.db")
    with _approx_and_exact(emb, texts, imps, 500, paths) as (approx, exact):
        assert approx.backend._partitions["default"].ann is not None
        assert exact.backend._partitions["default"].ann is None
        agree = []
        for q in queries:
            a = [approx.get(i)[0].text for i in _top(approx, q)]
            e = [exact.get(i)[0].text for i in _top(exact, q)]
            agree.append(len(set(a) & set(e)) / 10)
        assert np.mean(agree) >= 0.98
        assert sum(x == 1.0 for x in agree) >= len(agree) - 1


def test_scores_on_the_ann_path_are_the_exact_scores(tmp_path: Path, data) -> None:
    texts, emb, queries, imps = data
    with _approx_and_exact(emb, texts, imps, 500) as (approx, exact):
        when = NOW + timedelta(days=1)
        for q in queries[:5]:
            a = {h.record.text: h.score for h in approx.retrieve(q, k=5, now=when, touch=False)}
            e = {h.record.text: h.score for h in exact.retrieve(q, k=50, now=when, touch=False)}
            for text, score in a.items():
                assert score == pytest.approx(e[text], abs=1e-9)


def test_deleted_memories_never_come_back(tmp_path: Path, data) -> None:
    texts, emb, queries, imps = data
    db = tmp_path / "m.db"
    with MemoryStream(emb, path=db, exact_limit=500) as s:
        _fill(s, texts, imps)
        gone = set()
        for q in queries[:8]:
            ids = _top(s, q, k=3)
            s.delete(ids)
            gone.update(ids)
        for q in queries:
            assert not gone & set(_top(s, q))
    with MemoryStream(emb, path=db, exact_limit=500) as s:
        for q in queries:
            assert not gone & set(_top(s, q))


def test_rows_added_after_the_index_was_built_are_found(data) -> None:
    texts, emb, _, imps = data
    with MemoryStream(emb, exact_limit=500) as s:
        _fill(s, texts[:-5], imps[:-5])
        part = s.backend._partitions["default"]
        upto = part.ann_upto
        late = s.add(texts[-5:], importances=1.0, now=NOW + timedelta(days=1))
        assert part.ann_upto == upto  # still pending: scanned exactly
        for record in late:
            query = " ".join(record.text.split()[1:])
            emb.table.setdefault(query, emb.table[record.text])
            assert _top(s, query, k=1) == [record.id]


def test_reopen_uses_the_ivf_cache_and_a_tampered_one_is_rebuilt(
    tmp_path: Path, data, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts, emb, queries, imps = data
    db = tmp_path / "m.db"
    with MemoryStream(emb, path=db, exact_limit=500) as s:
        _fill(s, texts, imps)
        want = [_top(s, q) for q in queries]
    trained = _count_training(monkeypatch)
    with MemoryStream(emb, path=db, exact_limit=500) as s:
        assert [_top(s, q) for q in queries] == want
        assert s.backend._partitions["default"].ann is not None
    assert trained == []  # loaded from the cache, not retrained
    (cache,) = (db.parent / (db.name + ".index")).glob("*.faiss")
    data_bytes = bytearray(cache.read_bytes())
    data_bytes[len(data_bytes) // 2] ^= 0xFF
    cache.write_bytes(bytes(data_bytes))
    with MemoryStream(emb, path=db, exact_limit=500) as s:
        assert [_top(s, q) for q in queries] == want
    assert trained  # the tampered cache was not trusted: rebuilt from the vectors


def test_a_scalar_quantised_cache_of_an_earlier_version_still_loads(
    tmp_path: Path, data, monkeypatch: pytest.MonkeyPatch
) -> None:
    import faiss

    texts, emb, queries, imps = data
    db = tmp_path / "m.db"

    def scalar_init(self: IVFCandidateIndex, dimension: int, nlist: int) -> None:
        # what versions before product quantisation built (8-bit scalar codes)
        self.dimension, self.nlist = int(dimension), int(nlist)
        self._quantizer = faiss.IndexFlatIP(self.dimension)
        self._index = faiss.IndexIVFScalarQuantizer(
            self._quantizer,
            self.dimension,
            self.nlist,
            faiss.ScalarQuantizer.QT_8bit,
            faiss.METRIC_INNER_PRODUCT,
            False,
        )
        self.trained_on, self._params, self._list_ids, self._coarse = 0, None, None, None

    with monkeypatch.context() as patched:
        patched.setattr(IVFCandidateIndex, "__init__", scalar_init)
        with MemoryStream(emb, path=db, exact_limit=500) as s:
            _fill(s, texts, imps)
            want = [_top(s, q) for q in queries]
            assert isinstance(
                s.backend._partitions["default"].ann._index, faiss.IndexIVFScalarQuantizer
            )
    trained = _count_training(monkeypatch)
    with MemoryStream(emb, path=db, exact_limit=500) as s:
        assert [_top(s, q) for q in queries] == want
        ann = s.backend._partitions["default"].ann
        assert ann is not None and isinstance(ann._index, faiss.IndexIVFScalarQuantizer)
    assert trained == []  # the old cache was used as it is


def test_filters_on_the_ann_path(data) -> None:
    texts, emb, queries, imps = data
    with MemoryStream(emb, exact_limit=500) as s:
        _fill(s, texts, imps)
        s.add(texts[:3], kinds="plan", importances=0.5, ids=["p0", "p1", "p2"], now=NOW)
        hits = s.retrieve(queries[0], k=10, filter={"kind": "plan"}, touch=False)
        assert {h.record.id for h in hits} == {"p0", "p1", "p2"}
        late = NOW + timedelta(minutes=2500)
        hits = s.retrieve(queries[0], k=10, filter={"created_after": late}, touch=False)
        assert hits and all(h.record.created_at >= late for h in hits)


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("exact_limit", 0),
        ("exact_limit", "1000"),
        ("exact_limit", True),
        ("ann_candidates", 0),
        ("ann_candidates", 12.5),
        ("ann_nprobe", "8"),
    ],
)
def test_bad_retrieval_settings_are_rejected_by_name(data, setting: str, value: object) -> None:
    from langchain_reflective.backends.sqlite import SQLiteBackend

    _, emb, _, _ = data
    with pytest.raises(ValueError, match=f"{setting} must be a positive integer"):
        SQLiteBackend(None, **{setting: value})
    if setting == "exact_limit":
        with pytest.raises(ValueError, match=setting):
            MemoryStream(emb, exact_limit=value)  # type: ignore[arg-type]


def _texts(stream: MemoryStream, query: str, k: int = 10) -> list[str]:
    hits = stream.retrieve(query, k=k, now=NOW + timedelta(days=2), touch=False)
    return [h.record.text for h in hits]


def test_large_indexes_build_on_a_worker_thread_without_blocking(
    tmp_path: Path, data, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adds return while the IVF index trains; retrieval meanwhile scores exactly; the index is
    installed by a later call and saved by close()."""
    import threading

    from langchain_reflective.backends.sqlite import ann as stream_module

    texts, emb, queries, imps = data
    monkeypatch.setattr(stream_module, "_ANN_BACKGROUND_MIN", 0)
    release = threading.Event()
    started = threading.Event()
    original = IVFCandidateIndex.train

    def slow_train(self: IVFCandidateIndex, sample: np.ndarray, rows: int) -> None:
        started.set()
        assert release.wait(30)
        original(self, sample, rows)

    monkeypatch.setattr(IVFCandidateIndex, "train", slow_train)
    db = tmp_path / "m.db"
    with MemoryStream(emb, exact_limit=None) as exact:
        _fill(exact, texts, imps)
        want = [_texts(exact, q) for q in queries]
    with MemoryStream(emb, path=db, exact_limit=500) as s:
        try:
            _fill(s, texts, imps)  # returns although training is blocked
            assert started.wait(30)
            part = s.backend._partitions["default"]
            assert part.ann is None and part.ann_build is not None
            assert [_texts(s, q) for q in queries] == want  # exact meanwhile
        finally:
            release.set()
        part.ann_build.join()
        _top(s, queries[0])  # installs the finished index
        assert part.ann_build is None and part.ann is not None
        assert part.ann_upto == len(part)
        assert [_texts(s, q) for q in queries] == want
    monkeypatch.setattr(IVFCandidateIndex, "train", original)
    with MemoryStream(emb, path=db, exact_limit=500) as s:
        assert [_texts(s, q) for q in queries] == want
        assert s.backend._partitions["default"].ann is not None  # from the cache close() wrote


def test_close_waits_for_a_running_build_and_saves_it(
    tmp_path: Path, data, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from langchain_reflective.backends.sqlite import ann as stream_module

    texts, emb, queries, imps = data
    monkeypatch.setattr(stream_module, "_ANN_BACKGROUND_MIN", 0)
    original = IVFCandidateIndex.train
    threads: list[str] = []

    def slow_train(self: IVFCandidateIndex, sample: np.ndarray, rows: int) -> None:
        threads.append(threading.current_thread().name)
        time.sleep(0.5)
        original(self, sample, rows)

    monkeypatch.setattr(IVFCandidateIndex, "train", slow_train)
    db = tmp_path / "m.db"
    with caplog.at_level("WARNING"), MemoryStream(emb, path=db, exact_limit=500) as s:
        _fill(s, texts, imps)
        assert s.backend._partitions["default"].ann_build is not None  # still training at close
    # close waited for the worker's index: nothing trained inline, nothing reported failed
    assert threads and set(threads) == {"langchain-reflective-ivf-build"}
    assert "failed" not in caplog.text
    trained = _count_training(monkeypatch)
    with MemoryStream(emb, path=db, exact_limit=500) as s:
        _top(s, queries[0])
        part = s.backend._partitions["default"]
        assert part.ann is not None and part.ann_build is None
        assert part.ann_upto == len(part)
    assert trained == []


def test_a_failed_background_build_is_retried_inline(
    data, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from langchain_reflective.backends.sqlite import ann as stream_module

    texts, emb, queries, imps = data
    monkeypatch.setattr(stream_module, "_ANN_BACKGROUND_MIN", 0)
    original = IVFCandidateIndex.train
    calls: list[str] = []

    def flaky_train(self: IVFCandidateIndex, sample: np.ndarray, rows: int) -> None:
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise MemoryError("simulated")
        original(self, sample, rows)

    monkeypatch.setattr(IVFCandidateIndex, "train", flaky_train)
    with caplog.at_level("WARNING"), MemoryStream(emb, exact_limit=500) as s:
        _fill(s, texts, imps)
        part = s.backend._partitions["default"]
        if part.ann_build is not None:
            part.ann_build.join()
        _top(s, queries[0])  # installs (here: finds the failure and builds inline)
        assert part.ann is not None and part.ann_build is None
        assert part.ann_upto == len(part)
    assert "simulated" in caplog.text
    assert calls[0] == "langchain-reflective-ivf-build" and calls[1] == "MainThread"


def test_a_retrieval_waits_for_a_rebuild_rather_than_fill_the_old_index(
    data, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_reflective.backends.sqlite import ann as stream_module

    texts, emb, queries, imps = data
    monkeypatch.setattr(stream_module, "_ANN_BACKGROUND_MIN", 0)
    monkeypatch.setattr(stream_module, "_FILL_CHUNK", 1000)
    original_train, original_add = IVFCandidateIndex.train, IVFCandidateIndex.add
    added: dict[int, int] = {}

    threads: list[str] = []

    def slow_train(self: IVFCandidateIndex, sample: np.ndarray, rows: int) -> None:
        threads.append(threading.current_thread().name)
        time.sleep(0.3)
        original_train(self, sample, rows)

    def counting_add(self: IVFCandidateIndex, vectors: np.ndarray, ids: np.ndarray) -> None:
        added[id(self)] = added.get(id(self), 0) + len(ids)
        original_add(self, vectors, ids)

    monkeypatch.setattr(IVFCandidateIndex, "train", slow_train)
    monkeypatch.setattr(IVFCandidateIndex, "add", counting_add)
    with MemoryStream(emb, exact_limit=200) as s:
        s.add(texts[:500], importances=imps[:500], now=NOW)
        part = s.backend._partitions["default"]
        _top(s, queries[0])  # no index yet: scored exactly, nothing to wait for
        if part.ann_build is not None:
            part.ann_build.join()
        _top(s, queries[0])  # installs the first index
        old = part.ann
        assert old is not None and old.trained_on == 500
        s.add(texts[500:], importances=imps[500:], now=NOW)  # 3000 rows: a rebuild starts
        assert part.ann_build is not None
        _top(s, queries[0])  # 2,500 rows pending: waits for the rebuild
        assert part.ann is not old and part.ann is not None
        assert part.ann.trained_on == len(texts) and part.ann_upto == len(part)
        assert added[id(old)] == 500  # the old index was not filled with the new rows
        assert set(threads) == {"langchain-reflective-ivf-build"}  # waited, not rebuilt inline


def test_a_failing_build_never_fails_an_add(data, monkeypatch: pytest.MonkeyPatch) -> None:
    """The add's memory is committed before index maintenance runs: a broken IVF build must
    not turn it into an error (the caller would retry and store it twice). Retrieval reports
    the error instead."""
    from langchain_reflective.backends.sqlite import ann as stream_module

    texts, emb, queries, imps = data
    monkeypatch.setattr(stream_module, "_ANN_BACKGROUND_MIN", 0)

    def broken_train(self: IVFCandidateIndex, sample: np.ndarray, rows: int) -> None:
        raise RuntimeError("simulated FAISS failure")

    monkeypatch.setattr(IVFCandidateIndex, "train", broken_train)
    s = MemoryStream(emb, exact_limit=500)
    _fill(s, texts, imps)  # no exception, though every build fails
    part = s.backend._partitions["default"]
    assert part.ann_build is not None
    part.ann_build.join()
    emb.table.setdefault("one more memory", emb.table[texts[0]])
    s.add(["one more memory"], importances=0.5, now=NOW)
    assert len(s) == len(texts) + 1
    with pytest.raises(RuntimeError, match="simulated"):
        _top(s, queries[0])
    s.close()  # closing does not raise either (the index cache is optional)


def test_a_build_whose_thread_never_finished_is_not_installed(
    data, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build thread that ended without finishing (e.g. the process forked while it ran: the
    child has no such thread) must not hand over a half-built index."""
    from langchain_reflective.backends.sqlite import ann as stream_module

    texts, emb, queries, imps = data
    monkeypatch.setattr(stream_module, "_ANN_BACKGROUND_MIN", 0)
    monkeypatch.setattr(stream_module.AnnBuild, "_run", lambda self: None)  # ends at once
    with MemoryStream(emb, exact_limit=500) as s:
        _fill(s, texts, imps)
        part = s.backend._partitions["default"]
        assert part.ann_build is not None
        part.ann_build.join()
        _top(s, queries[0])
        assert part.ann is not None and part.ann_build is None
        assert part.ann.is_trained and len(part.ann) == part.live  # rebuilt inline, complete


def test_a_selective_filter_on_the_ann_path_agrees_with_exact_scoring() -> None:
    """A filter matching a sixth of the memories, above ``exact_limit``: the approximate path
    takes the best BM25 rows among the filter's (the namespace's best, on a small vocabulary,
    are mostly outside it), so its top 10 are exact scoring's."""
    rng = np.random.default_rng(11)
    vectors = _clustered(N, 2)
    words = [f"w{i}" for i in range(30)]  # each word in ~600 memories
    texts = [f"m{i} " + " ".join(rng.choice(words, 6)) for i in range(N)]
    table = dict(zip(texts, vectors, strict=True))
    queries = []
    for j in range(30):
        v = rng.standard_normal(DIM)
        query = " ".join(rng.choice(words, 3)) + f" q{j}"
        table[query] = v / np.linalg.norm(v)
        queries.append(query)
    emb = TableEmbeddings(table)
    importances = rng.uniform(0.1, 1.0, N).round(3).tolist()
    newest = {"created_after": NOW + timedelta(minutes=2499)}  # the last batch of 500
    with _approx_and_exact(emb, texts, importances, 100) as (approx, exact):
        agree = _filtered_agreement(approx, exact, queries, newest)
        assert approx.backend._partitions["default"].ann is not None
        assert np.mean(agree) >= 0.99 and min(agree) >= 0.9


def test_a_selective_filter_probes_more_ivf_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries away from the data's clusters, a filter keeping a sixth of the memories and no
    shared words: the filter's nearest rows lie beyond the query's nearest IVF lists, so the
    approximate path probes twice as many (at 1M memories and a filter keeping 3%, top-10
    agreement 0.973 -> 0.992: benchmarks/filtered_agreement.py)."""
    texts, emb, queries, importances = _far_queries(2)
    newest = {"created_after": NOW + timedelta(minutes=2499)}  # the last batch of 500
    searches = _count_searches(monkeypatch)
    with _approx_and_exact(emb, texts, importances, 100) as (approx, exact):
        agree = _filtered_agreement(approx, exact, queries, newest)
        assert [p for _, p in searches] == [2 * approx.backend.ann_nprobe] * len(queries)
        searches.clear()
        approx.retrieve(queries[0], k=10, touch=False)  # no filter: as many as set
        assert [p for _, p in searches] == [approx.backend.ann_nprobe]
    assert np.mean(agree) >= 0.975  # 0.9525 with the lists of an unfiltered retrieval


def test_a_large_namespace_gathers_deeper_dense_candidates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Queries away from the data's clusters and no shared words: many memories lie within a
    near-tie of the tenth best, and middling cosines reach the top 10 through their neighbours,
    recency and importance. Past ``DENSE_DEPTH_FROM`` live memories the dense candidates grow
    with the square root of the namespace (set here so that 3,000 memories count as 16 times
    it, as 1.6M would by default: 4 x ``ann_candidates``; at 1M memories top-10 agreement
    0.968 -> 0.999, benchmarks/filtered_agreement.py), and a filter's as deep among its rows."""
    from langchain_reflective.backends.sqlite import candidates

    texts, emb, queries, importances = _far_queries(2)
    searches = _count_searches(monkeypatch)
    monkeypatch.setattr(candidates, "DENSE_DEPTH_FROM", N // 16)
    depth = math.sqrt(N / (N // 16))  # ~4
    with _approx_and_exact(emb, texts, importances, 100) as (approx, exact):
        want = approx.backend.ann_candidates
        agree = _filtered_agreement(approx, exact, queries, None)
        assert [k for k, _ in searches] == [math.ceil(want * depth)] * len(queries)
        searches.clear()
        half = {"created_after": NOW + timedelta(minutes=1499)}  # the newest 1,500
        _filtered_agreement(approx, exact, queries[:1], half)
        assert [k for k, _ in searches] == [math.ceil(want * 2 * depth)]  # as deep, among half
    assert np.mean(agree) >= 0.97  # 0.80 with the dense candidates of a small namespace
