from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def now() -> datetime:
    """A frozen clock."""
    return NOW


@pytest.fixture
def embeddings() -> WordEmbeddings:
    return WordEmbeddings()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def stream(embeddings: WordEmbeddings, db_path: Path) -> Iterator[MemoryStream]:
    with MemoryStream(embeddings, path=db_path) as s:
        yield s
