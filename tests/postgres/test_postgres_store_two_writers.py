"""tests/unit/test_store_two_writers.py on Postgres: two ``MemoryStream`` objects over one
database, each with its own connection pool, as two processes would have."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from langchain_reflective import MemoryStream, PostgresBackend, ReflectiveStore
from tests.fakes import WordEmbeddings
from tests.unit.test_store_two_writers import *  # noqa: F403 - the same tests, collected again here

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def _backend(url: str) -> PostgresBackend:
    backend = PostgresBackend.from_conn_string(url)
    backend.setup()  # (idempotent: the second finds the tables)
    return backend


@pytest.fixture
def writers(postgres_url: str) -> Iterator[tuple[ReflectiveStore, ReflectiveStore]]:
    with (
        MemoryStream(WordEmbeddings(), backend=_backend(postgres_url)) as first,
        MemoryStream(WordEmbeddings(), backend=_backend(postgres_url)) as second,
    ):
        yield ReflectiveStore(first), ReflectiveStore(second)
