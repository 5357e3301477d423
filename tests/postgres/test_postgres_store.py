"""The ``BaseStore`` contract tests of ``tests/unit/test_store.py``, run against a
ReflectiveStore whose stream lives in Postgres (a real server): the store's puts, replaces,
deletes, prefix searches and namespace listings go through the Postgres backend as they do
through SQLite.

Only the store's sync methods run here: its async twins drive the same flow (tested on SQLite),
and each of their calls would open an async connection pool in a new event loop.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from langchain_reflective import MemoryStream, PostgresBackend, ReflectiveStore
from tests.fakes import WordEmbeddings
from tests.unit.test_store import *  # noqa: F403 - the same tests, collected again here

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


@pytest.fixture
def store(postgres_url: str) -> Iterator[ReflectiveStore]:
    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.setup()
    with MemoryStream(WordEmbeddings(), backend=backend) as stream:
        yield ReflectiveStore(stream)
