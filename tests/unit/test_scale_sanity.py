"""Structural checks that one-at-a-time adds stay linear in N (no timing assertions).

``benchmarks/scale.py`` measures the actual times; these tests pin the properties that make them
linear: the vector matrix and the per-row arrays grow geometrically (no per-add copy of the
store), and the IVF index of a large partition is topped up in batches, not per add.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.sqlite._arrays import GrowMatrix, TopRows
from langchain_reflective.backends.sqlite.index.faiss_flat import FaissFlatIndex
from langchain_reflective.backends.sqlite.index.ivf import IVFCandidateIndex
from tests.fakes import WordEmbeddings


def test_vector_matrix_grows_geometrically() -> None:
    index = FaissFlatIndex(8)
    vec = np.ones((1, 8), dtype=np.float32) / np.sqrt(8)
    reallocations = 0
    for _ in range(10_000):
        buf = index._matrix._buf
        index.add(vec)
        reallocations += index._matrix._buf is not buf
    assert reallocations <= 15  # log2(10_000) ~ 13.3
    assert len(index) == 10_000 and index.vectors().shape == (10_000, 8)


def test_grow_matrix_reserve_and_view() -> None:
    m = GrowMatrix(4, capacity=1)
    m.reserve(100)
    buf = m._buf
    for i in range(100):
        m.extend(np.full((1, 4), i, dtype=np.float32))
    assert m._buf is buf  # reserved: no regrowth
    np.testing.assert_array_equal(m.view[:, 0], np.arange(100))


def test_top_rows_keeps_the_best_rows() -> None:
    rng = np.random.default_rng(0)
    values = rng.random(5000)
    alive = np.ones(5000, dtype=bool)
    top = TopRows(64)
    top.rebuild(values, alive)
    values[10] = 2.0  # raised above everything
    top.offer(np.array([10]), np.array([2.0]))
    best = sorted(np.argsort(-values)[:64].tolist())
    assert set(best) <= set(top.rows().tolist())


def test_one_at_a_time_adds_use_batched_ivf_updates(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = IVFCandidateIndex.add

    def counting_add(self: IVFCandidateIndex, vectors: np.ndarray, ids: np.ndarray) -> None:
        calls.append(len(ids))
        original(self, vectors, ids)

    monkeypatch.setattr(IVFCandidateIndex, "add", counting_add)
    now = datetime(2024, 1, 1, tzinfo=UTC)
    with MemoryStream(WordEmbeddings(16), exact_limit=300) as stream:
        stream.add([f"seed memory {i}" for i in range(400)], importances=0.5, now=now)
        assert stream.backend._partitions["default"].ann is not None
        calls.clear()
        for i in range(3000):
            stream.add([f"memory {i} about topic {i % 37}"], importances=0.5, now=now)
        part = stream.backend._partitions["default"]
        # index rebuilds on growth aside, rows reach the IVF index in batches, not one by one:
        # the first retrieval indexes what the adds left pending
        from langchain_reflective.backends.sqlite.ann import ANN_FLUSH as _ANN_FLUSH

        assert _ANN_FLUSH >= 64
        assert len(calls) <= 8
        hits = stream.retrieve("memory 2999 about topic 2", k=1, touch=False)
        assert hits[0].record.text == "memory 2999 about topic 2"
        assert part.ann is not None and len(part) - part.ann_upto < _ANN_FLUSH
        assert len(calls) <= 9
        for i in range(3000, 3000 + 2 * _ANN_FLUSH):
            stream.add([f"memory {i} about topic {i % 37}"], importances=0.5, now=now)
            stream.retrieve(f"memory {i}", k=1, touch=False)
        assert len(calls) <= 9 + 2  # interleaved reads index in batches of _ANN_FLUSH too
        assert len(part) - part.ann_upto < _ANN_FLUSH
