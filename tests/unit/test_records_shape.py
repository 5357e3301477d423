"""The shape check of metadata and store values (``records.check_json_shape``): a value that
holds one list or dict in many places is measured as JSON writes it (once per place), and
refused at once when that is too long, instead of being encoded for hours."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream, ReflectiveStore
from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.records import MAX_JSON_CHARS, check_json_shape, validate_metadata
from tests.fakes import WordEmbeddings


def _doubled(times: int) -> list[Any]:
    """Ten zeros, then ``times`` times a list holding the previous one twice: ``2**times``
    copies of the ten zeros once written out, ``times + 1`` lists in memory."""
    value: list[Any] = [0] * 10
    for _ in range(times):
        value = [value, value]
    return value


def test_a_value_repeating_a_shared_list_past_the_limit_is_refused_at_once() -> None:
    """``[a, a]`` nested 19 times is 5 million zeros of JSON (about 16 million characters):
    it used to be encoded whole (seconds; 40 times would never finish, and fill the memory).
    It is refused, saying why, before anything is encoded."""
    started = time.perf_counter()
    with pytest.raises(InvalidMemoryError, match=r"^metadata holds the same dict or list"):
        validate_metadata({"v": _doubled(19)})
    with pytest.raises(InvalidMemoryError, match=f"{MAX_JSON_CHARS:,} characters"):
        validate_metadata({"v": _doubled(40)})
    assert time.perf_counter() - started < 2  # (measured once per list: well under 1 ms)


def test_a_shared_list_within_the_limit_is_stored_whole() -> None:
    """Sharing itself is fine: a value that holds one list in several places is kept, each
    place written out (a row shared by two fields, the ten-doubled list)."""
    row = {"name": "x", "tags": ["a", "b"]}
    assert validate_metadata({"a": row, "b": [row, row]}) == {"a": row, "b": [row, row]}
    assert validate_metadata({"v": _doubled(10)}) == {"v": _doubled(10)}


def test_only_values_with_shared_containers_are_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value without shared containers is as long as it looks: it is not measured (large
    ordinary values cost nothing more), whatever its length; the same length reached by
    repeating one list is refused."""
    monkeypatch.setattr("langchain_reflective.records.MAX_JSON_CHARS", 100)
    tree = {"rows": [[0] * 10 for _ in range(20)]}  # ~500 characters, no list twice
    check_json_shape(tree, "metadata")
    one = [0] * 10
    with pytest.raises(InvalidMemoryError, match="than 100 characters"):
        check_json_shape({"rows": [one] * 20}, "metadata")
    looped: list[Any] = []  # a list inside itself: left to the encoder, which refuses it
    looped.append(looped)
    with pytest.raises(InvalidMemoryError, match="Circular reference"):
        validate_metadata({"v": looped})


def test_the_store_and_the_stream_refuse_such_a_value_before_writing(tmp_path: Path) -> None:
    """A ``ReflectiveStore`` put and a stream add say which value is refused; nothing is
    written."""
    with MemoryStream(WordEmbeddings(), path=tmp_path / "shape.db") as stream:
        store = ReflectiveStore(stream)
        with pytest.raises(InvalidMemoryError, match=r"^the value of 'k' holds the same"):
            store.put(("ns",), "k", {"text": "t", "v": _doubled(40)})
        with pytest.raises(InvalidMemoryError, match=r"holds the same dict or list"):
            stream.add("a memory", metadatas={"v": _doubled(40)})
        assert stream.count(namespace="ns") == 0 and stream.count() == 0
