"""The ``BaseStore`` contract tests of ``tests/unit/test_store_contract_*.py``, run against a
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
from tests.unit.test_store_contract_batches import *  # noqa: F403 - collected again here
from tests.unit.test_store_contract_filters import *  # noqa: F403 - collected again here
from tests.unit.test_store_contract_namespaces import *  # noqa: F403 - collected again here
from tests.unit.test_store_contract_query import *  # noqa: F403 - collected again here
from tests.unit.test_store_contract_values import *  # noqa: F403 - collected again here

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


@pytest.fixture
def store(postgres_url: str) -> Iterator[ReflectiveStore]:
    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.setup()
    with MemoryStream(WordEmbeddings(), backend=backend) as stream:
        yield ReflectiveStore(stream)


def test_the_async_methods_in_one_event_loop(postgres_url: str) -> None:
    """The async twins over Postgres (the stream's async connections, in the loop that opened
    them): puts, a prefix query search, a filtered search, get, delete and listing."""
    import asyncio

    async def run() -> None:
        backend = PostgresBackend.from_conn_string(postgres_url)
        backend.setup()
        async with MemoryStream(WordEmbeddings(), backend=backend) as stream:
            store = ReflectiveStore(stream)
            await store.aput(("users", "ana"), "home", {"text": "Ana moved to Lisbon", "n": 1})
            await store.aput(("users", "ana"), "pet", {"text": "Ana has a cat", "n": 2})
            await store.aput(("users", "bo"), "home", {"text": "Bo moved to Oslo", "n": 3})
            hits = await store.asearch(("users",), query="moved to Lisbon", limit=2)
            assert (hits[0].namespace, hits[0].key) == (("users", "ana"), "home")
            assert all(h.score is not None for h in hits)
            only = await store.asearch(("users",), filter={"n": {"$gte": 2}})
            assert sorted(h.key for h in only) == ["home", "pet"]
            item = await store.aget(("users", "bo"), "home")
            assert item is not None and item.value == {"text": "Bo moved to Oslo", "n": 3}
            await store.adelete(("users", "ana"), "pet")
            assert await store.aget(("users", "ana"), "pet") is None
            assert await store.alist_namespaces() == [("users", "ana"), ("users", "bo")]
            assert backend._pools._apools  # the async pool of this loop was used ...
        assert backend._pools.closed and not backend._pools._apools  # ... and closed in it

    asyncio.run(run())
