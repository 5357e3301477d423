"""What the thinking API and the thinking graph do with odd input: a missing turn, a string where
a list is expected, bad sizes, unreadable tool calls of the model, turns it asks for that are not
stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import ContextMemory, MemoryStream, RetryConfig

NO_RETRY = RetryConfig(attempts=1)


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[MemoryStream]:
    from tests.fakes import WordEmbeddings

    with MemoryStream(WordEmbeddings(), path=tmp_path / "inputs.db") as s:
        yield s


@pytest.fixture
def memory(stream: MemoryStream) -> ContextMemory:
    mem = ContextMemory(stream)
    mem.record_turn(1, "alpha beta", "alpha", ["first insight"])
    mem.record_turn(2, "gamma delta", "gamma", [])
    return mem


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_missing_turn_reads_no_other_snapshot(
    memory: ContextMemory, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    """A recall of a turn not stored read every snapshot of the namespace (a fallback for ids
    imports no longer give: 57 MB for 300 large turns); it is one read by id."""
    stream = memory.stream
    scans: list[Any] = []
    recent, arecent = stream.recent, stream.arecent

    def spy(n: Any = None, **kwargs: Any) -> Any:
        scans.append(n)
        return recent(n, **kwargs)

    async def aspy(n: Any = None, **kwargs: Any) -> Any:
        scans.append(n)
        return await arecent(n, **kwargs)

    monkeypatch.setattr(stream, "recent", spy)
    monkeypatch.setattr(stream, "arecent", aspy)
    if use_async:
        found = await memory.arecall(turn_numbers=[1, 350])
        assert await memory.asummary_by_turn(350) is None
        assert await memory.acontext_by_turn(350) is None
    else:
        found = memory.recall(turn_numbers=[1, 350])
        assert memory.summary_by_turn(350) is None and memory.context_by_turn(350) is None
    assert [s.turn for s in found.snapshots] == [1] and found.missing == ["turn 350"]
    assert None not in scans
