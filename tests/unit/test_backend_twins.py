"""BaseMemoryBackend's async twins, by introspection: every public sync method that does I/O
has an ``a`` twin taking its parameters (the backend conformance suite checks what they
answer); ``aget_one`` answers as ``get_one`` inside a running loop, off it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from blockbuster import blockbuster_ctx

from langchain_reflective import MemoryStream, SQLiteBackend
from langchain_reflective.backends.base import BaseMemoryBackend
from langchain_reflective.records import MemoryRecord
from tests.conftest import NOW
from tests.fakes import WordEmbeddings
from tests.twins import assert_twins

NO_TWIN = {
    "configure": "no I/O: remembers the stream's scoring",
    "iter_records": "a sync iterator (exports run it in a worker thread: aexport_jsonl)",
}
SQLITE_NO_TWIN = {**NO_TWIN, "in_memory": "no I/O: a constructor of an in-memory backend"}


@pytest.mark.parametrize(
    ("cls", "no_twin"), [(BaseMemoryBackend, NO_TWIN), (SQLiteBackend, SQLITE_NO_TWIN)]
)
def test_every_public_method_with_io_has_a_twin_taking_its_parameters(
    cls: type[BaseMemoryBackend], no_twin: dict[str, str]
) -> None:
    assert {"get_one", "most_important", "mark_reflected"} <= assert_twins(cls, no_twin)


@pytest.fixture
async def backend() -> AsyncIterator[SQLiteBackend]:
    stream = MemoryStream(WordEmbeddings())
    stream.add(["Alice drinks tea", "Bob moved to Paris"], ids=["m1", "m2"], now=NOW)
    stream.add(["Carol has a dog"], ids=["m1"], namespace="other", now=NOW)
    assert isinstance(stream.backend, SQLiteBackend)
    yield stream.backend
    await stream.aclose()


async def test_aget_one_answers_as_get_one_off_the_loop(backend: SQLiteBackend) -> None:
    """Found, unknown, and an id of another namespace (stored there under the same id)."""
    cases = [("default", "m1"), ("default", "m2"), ("default", "m9"), ("other", "m1")]
    expected = [backend.get_one(namespace, id) for namespace, id in cases]
    with blockbuster_ctx("langchain_reflective"):
        got = [await backend.aget_one(namespace, id) for namespace, id in cases]
    assert got == expected
    assert [None if r is None else r.text for r in got] == [
        "Alice drinks tea",
        "Bob moved to Paris",
        None,
        "Carol has a dog",
    ]


async def test_aget_one_awaits_aget(
    backend: SQLiteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built on the async twin, as ``amost_important`` is on ``arecent``: a backend with a
    native ``aget`` serves ``aget_one`` natively too."""
    awaited: list[tuple[str, list[str]]] = []
    aget = backend.aget

    async def spied(namespace: str, ids: Any) -> list[MemoryRecord]:
        awaited.append((namespace, list(ids)))
        return await aget(namespace, ids)

    monkeypatch.setattr(backend, "aget", spied)
    record = await backend.aget_one("default", "m2")
    assert record is not None and record.id == "m2"
    assert awaited == [("default", ["m2"])]
