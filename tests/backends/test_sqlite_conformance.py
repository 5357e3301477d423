"""The backend conformance suite on the SQLite backend: a file, and in memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from langchain_reflective.backends.base import BaseMemoryBackend
from langchain_reflective.backends.sqlite import SQLiteBackend
from tests.backends.conformance import BackendConformance


class TestSQLiteFileBackend(BackendConformance):
    lexical_matches_reference = True

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> Callable[[], BaseMemoryBackend]:
        files = iter(tmp_path / f"memory-{i}.db" for i in range(1000))
        return lambda: SQLiteBackend(next(files))


class TestSQLiteMemoryBackend(BackendConformance):
    lexical_matches_reference = True

    @pytest.fixture
    def make_backend(self) -> Callable[[], BaseMemoryBackend]:
        return lambda: SQLiteBackend(None)


class TestSQLiteApproximateBackend(BackendConformance):
    """A tiny ``exact_limit``: retrieval goes through the IVF candidate path, while
    ``candidates(exact=True)`` must still rank exactly like the reference."""

    lexical_matches_reference = True

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> Callable[[], BaseMemoryBackend]:
        files = iter(tmp_path / f"memory-{i}.db" for i in range(1000))
        return lambda: SQLiteBackend(next(files), exact_limit=20, ann_candidates=16)
