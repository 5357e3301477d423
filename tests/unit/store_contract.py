"""The ``store`` fixture of the documented LangGraph ``BaseStore`` contract tests
(tests/unit/test_store_contract_*.py), run against ReflectiveStore, sync and async.

LangGraph ships no store test suite a third-party store can run (``checkpoint-conformance``
covers checkpointers only), so the contract tests of ``libs/checkpoint/tests/test_store.py`` and
``libs/checkpoint-sqlite/tests/test_store.py`` (langgraph @ f09cfe8) are ported there: batch
order, get/put/delete, search with filters and pagination, list_namespaces with prefixes,
suffixes, wildcards and depth, namespace segment boundaries and literal metacharacters, query
search with updates and ``index=False``, non-ASCII text, namespace validation, TTL refusal.
Every test runs twice: on the store's sync methods and on its async twins. A test module takes
the fixture with ``store = store_contract.store``; tests/postgres/test_postgres_store.py
collects the same tests again with a ``store`` over Postgres.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from langchain_reflective import MemoryStream, ReflectiveStore
from tests.fakes import WordEmbeddings


class AsyncTwins:
    """The store's async methods behind its sync names (each call in a fresh event loop)."""

    def __init__(self, store: ReflectiveStore) -> None:
        self.inner = store
        self.stream = store.stream

    def __getattr__(self, name: str) -> Any:
        amethod = getattr(self.inner, "a" + name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run(amethod(*args, **kwargs))

        return call


@pytest.fixture(params=["sync", "async"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "store.db") as stream:
        inner = ReflectiveStore(stream)
        yield inner if request.param == "sync" else AsyncTwins(inner)
