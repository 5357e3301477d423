"""The vector-index read paths: in-place inner products, one-thread FAISS calls, IVF search."""

from __future__ import annotations

import numpy as np
import pytest

from langchain_reflective.backends.sqlite.index.base import inner_products
from langchain_reflective.backends.sqlite.index.faiss_flat import FaissFlatIndex, one_faiss_thread
from langchain_reflective.backends.sqlite.index.ivf import IVFCandidateIndex

faiss = pytest.importorskip("faiss")


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    out: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


@pytest.mark.parametrize("dim", [2, 8, 12, 13, 16, 31, 64, 384])
def test_scores_of_rows_equal_the_full_product_bit_for_bit(dim: int) -> None:
    rng = np.random.default_rng(dim)
    index = FaissFlatIndex(dim)
    index.add(_unit(rng, 3000, dim))
    query = _unit(rng, 1, dim)[0]
    full = index.scores(query)
    np.testing.assert_array_equal(full, inner_products(index.vectors(), query))
    for size in (0, 1, 17, 400, 749):  # below a quarter of the rows: read in place
        rows = np.sort(rng.choice(3000, size, replace=False)).astype(np.int64)
        got = index.scores(query, rows)
        assert got.dtype == np.float32 and got.shape == (size,)
        gathered = inner_products(np.ascontiguousarray(index.vectors()[rows]), query)
        np.testing.assert_array_equal(got, gathered)
        if dim > 12:  # FAISS's special small-dimension kernels may differ in the last bit
            np.testing.assert_array_equal(got, full[rows])
    rows = rng.integers(0, 3000, 50).astype(np.int64)  # unsorted, repeated
    gathered = inner_products(np.ascontiguousarray(index.vectors()[rows]), query)
    np.testing.assert_array_equal(index.scores(query, rows), gathered)


def test_scores_of_rows_out_of_range_raise() -> None:
    rng = np.random.default_rng(0)
    index = FaissFlatIndex(32)
    index.add(_unit(rng, 100, 32))
    query = _unit(rng, 1, 32)[0]
    with pytest.raises(IndexError):
        index.scores(query, np.array([3, 100], dtype=np.int64))
    with pytest.raises(IndexError):
        index.scores(query, np.array([-1], dtype=np.int64))


def test_one_faiss_thread_restores_the_callers_setting() -> None:
    before = faiss.omp_get_max_threads()
    try:
        faiss.omp_set_num_threads(3)
        with one_faiss_thread(faiss):
            assert faiss.omp_get_max_threads() == 1
        assert faiss.omp_get_max_threads() == 3
        with pytest.raises(RuntimeError), one_faiss_thread(faiss):
            raise RuntimeError("boom")
        assert faiss.omp_get_max_threads() == 3
        faiss.omp_set_num_threads(1)
        with one_faiss_thread(faiss):
            assert faiss.omp_get_max_threads() == 1
        assert faiss.omp_get_max_threads() == 1
    finally:
        faiss.omp_set_num_threads(before)


def test_ivf_search_matches_faiss_and_reuses_parameters() -> None:
    rng = np.random.default_rng(5)
    data = _unit(rng, 4000, 32)
    ids = np.arange(1000, 5000, dtype=np.int64)
    index = IVFCandidateIndex(32, 32)
    index.train(data, 4000)
    index.add(data, ids)
    before = faiss.omp_get_max_threads()
    for nprobe in (1, 4, 4, 8, 64):
        for query in _unit(rng, 5, 32):
            params = faiss.SearchParametersIVF()
            params.nprobe = min(nprobe, 32)
            _, expected = index._index.search(query.reshape(1, -1), 50, params=params)
            got = index.search(query, 50, nprobe)
            np.testing.assert_array_equal(got, expected[0])
        assert index._params.nprobe == min(nprobe, 32)
    assert faiss.omp_get_max_threads() == before
    # more wanted than stored: only real ids come back
    small = IVFCandidateIndex(32, 16)
    small.train(data[:1000], 1000)
    small.add(data[:5], ids[:5])
    got = small.search(data[0], 50, 16)
    assert sorted(got.tolist()) == ids[:5].tolist()
    with pytest.raises(ValueError):
        index.search(np.ones(16, dtype=np.float32), 5, 4)


def test_ivf_search_lists_returns_the_probed_lists_ids() -> None:
    rng = np.random.default_rng(9)
    data = _unit(rng, 3000, 32)
    ids = np.arange(7, 3007, dtype=np.int64)
    index = IVFCandidateIndex(32, 24)
    index.train(data, 3000)
    index.add(data, ids)
    invlists = index._index.invlists
    for nprobe in (1, 3, 24, 100):
        for query in _unit(rng, 4, 32):
            best, probed = index.search_lists(query, 40, nprobe)
            np.testing.assert_array_equal(best, index.search(query, 40, nprobe))
            _, lists = index._index.quantizer.search(query.reshape(1, -1), min(nprobe, 24))
            expected = [
                faiss.rev_swig_ptr(invlists.get_ids(int(i)), invlists.list_size(int(i))).copy()
                for i in lists[0]
                if invlists.list_size(int(i))
            ]
            np.testing.assert_array_equal(probed, np.concatenate(expected))
            assert set(best.tolist()) <= set(probed.tolist())
            if nprobe >= 24:
                assert sorted(probed.tolist()) == ids.tolist()
    # the ids copied for search_lists follow later adds
    index.add(data[:50], np.arange(10_000, 10_050, dtype=np.int64))
    _, probed = index.search_lists(data[0], 40, 24)
    assert sorted(probed.tolist()) == [*ids.tolist(), *range(10_000, 10_050)]
    empty = IVFCandidateIndex(32, 4)
    empty.train(data[:500], 500)
    best, probed = empty.search_lists(data[0], 5, 2)
    assert best.shape == probed.shape == (0,)
