"""Two writers putting one new key at once: two ``MemoryStream`` objects over one file (as two
processes would be). Each put reads the key, then writes; when the other writer stores the key
between the two, the put used to fail with a duplicate id. The last to commit wins instead, as
for a key that existed, and one item remains."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream, ReflectiveStore
from langchain_reflective.errors import DuplicateIdError
from tests.fakes import WordEmbeddings

NS = ("alice", "memories")


@pytest.fixture
def writers(tmp_path: Path) -> Iterator[tuple[ReflectiveStore, ReflectiveStore]]:
    path = tmp_path / "shared.db"
    with (
        MemoryStream(WordEmbeddings(), path=path) as first,
        MemoryStream(WordEmbeddings(), path=path) as second,
    ):
        yield ReflectiveStore(first), ReflectiveStore(second)


def _interleave(
    store: ReflectiveStore, method: str, between: Any, times: int = 1, before: Any = None
) -> list[int]:
    """Make ``store``'s stream run ``between(n)`` right after each of its first ``times``
    reads of the key (the other writer lands between this put's read and its write), and
    ``before()`` right before each."""
    reads = [0]
    original = getattr(store.stream, method)

    def read(*args: Any, **kwargs: Any) -> Any:
        if before is not None and reads[0] < times:
            before()
        found = original(*args, **kwargs)
        reads[0] += 1
        if reads[0] <= times:
            between(reads[0])
        return found

    setattr(store.stream, method, read)
    return reads


def _only_item(store: ReflectiveStore) -> dict[str, Any]:
    items = store.search(NS, limit=10)
    assert [item.key for item in items] == ["home"]
    return items[0].value


def test_a_new_key_stored_by_another_writer_meanwhile_is_replaced(
    writers: tuple[ReflectiveStore, ReflectiveStore],
) -> None:
    first, second = writers
    reads = _interleave(
        second, "get", lambda _: first.put(NS, "home", {"text": "Alice lives in Lisbon"})
    )
    second.put(NS, "home", {"text": "Alice moved to Porto"})
    assert reads[0] == 2  # read, found nothing, failed on the id; read again, replaced
    assert _only_item(first) == {"text": "Alice moved to Porto"}
    assert _only_item(second) == {"text": "Alice moved to Porto"}


async def test_the_async_put_settles_the_same_way(
    writers: tuple[ReflectiveStore, ReflectiveStore],
) -> None:
    first, second = writers
    _interleave(second, "get", lambda _: first.put(NS, "home", {"text": "Alice lives in Lisbon"}))
    await second.aput(NS, "home", {"text": "Alice moved to Porto"})
    assert _only_item(first) == {"text": "Alice moved to Porto"}


def test_a_writer_that_keeps_winning_the_race_gets_a_duplicate_id_error(
    writers: tuple[ReflectiveStore, ReflectiveStore],
) -> None:
    """Bounded: three reads, each overtaken by a new put of the key, and the error is raised
    (nothing of this put stored; the other writer's item intact)."""
    first, second = writers

    def overtake(n: int) -> None:
        first.put(NS, "home", {"text": f"Alice, take {n}"})

    reads = _interleave(second, "get", overtake, times=3, before=lambda: first.delete(NS, "home"))
    with pytest.raises(DuplicateIdError):
        second.put(NS, "home", {"text": "Alice moved to Porto"})
    assert reads[0] == 3
    assert _only_item(first) == {"text": "Alice, take 3"}
