"""The values a stream hands back are the same on Postgres as on SQLite: metadata that reads back
equal (and of the same type), and the same answer to an argument out of range.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream, PostgresBackend
from langchain_reflective.errors import InvalidMemoryError
from tests.fakes import WordEmbeddings

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


@pytest.fixture(params=["sqlite", "postgres"])
def stream(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStream]:
    """A stream on each backend."""
    if request.param == "sqlite":
        with MemoryStream(WordEmbeddings(8), path=tmp_path / "m.db") as opened:
            yield opened
        return
    backend = PostgresBackend.from_conn_string(request.getfixturevalue("postgres_url"))
    backend.setup()
    with MemoryStream(WordEmbeddings(8), backend=backend) as opened:
        yield opened


@pytest.mark.parametrize("n", [-1, -5, 1.5, True, "2"])
def test_pending_refuses_a_negative_or_non_integer_n_on_every_backend(
    stream: MemoryStream, n: Any
) -> None:
    """``pending(-1)`` returned the whole queue on SQLite (``LIMIT -1``) and raised a
    ``StorageError`` on Postgres (``LIMIT must not be negative``); ``pending(1.5)`` returned
    one. Now both refuse it, as ``recent`` does, before asking the backend."""
    stream.enqueue(["one", "two"])
    with pytest.raises(InvalidMemoryError, match="n must be a non-negative integer"):
        stream.pending(n)
    with pytest.raises(InvalidMemoryError, match="n must be a non-negative integer"):
        stream.pending(n, all_namespaces=True)
    with pytest.raises(InvalidMemoryError, match="n must be a non-negative integer"):
        asyncio.run(stream.apending(n))
    assert [p.text for p in stream.pending(1)] == ["two"]
    assert [p.text for p in stream.pending(0)] == []
    assert [p.text for p in stream.pending()] == ["one", "two"]
