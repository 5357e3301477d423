"""langchain-tests' standard retriever suite against real FAISS and a real SQLite file."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_reflective import MemoryStream, ReflectiveRetriever
from tests.fakes import WordEmbeddings

_DIR = Path(tempfile.mkdtemp(prefix="reflective-standard-"))
_STREAM: MemoryStream | None = None


def _stream() -> MemoryStream:
    global _STREAM
    if _STREAM is None:
        _STREAM = MemoryStream(WordEmbeddings(), path=_DIR / "memory.db")
        _STREAM.add(
            [
                "The cat sat on the mat",
                "Dogs love long walks in the park",
                "The stock market rose today",
                "Paris is the capital of France",
                "Cats and dogs can be friends",
            ],
            importances=0.5,
        )
    return _STREAM


@pytest.fixture(scope="module", autouse=True)
def _close_stream() -> Iterator[None]:
    yield
    if _STREAM is not None:
        _STREAM.close()


class TestReflectiveRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[ReflectiveRetriever]:
        return ReflectiveRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory_stream": _stream()}

    @property
    def retriever_query_example(self) -> str:
        return "cats and dogs"
