from __future__ import annotations

import os
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


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker runs with ``COLUMNS`` set to 80 (the width of its own report);
    without xdist it is unset. Tests of the command line's tables read it, so each test sees
    the same environment however the suite is run."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), keep the tests of each expensive session
    server on one worker: one Postgres server and one llama.cpp server per run, as without
    xdist, instead of one of each per worker competing for the machine's cores."""
    for item in items:
        for server in ("postgres", "local_llm"):
            if item.get_closest_marker(server) is not None:
                item.add_marker(pytest.mark.xdist_group(server))
                break
