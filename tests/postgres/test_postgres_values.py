"""The values a stream hands back are the same on Postgres as on SQLite: metadata that reads back
equal (and of the same type), and the same answer to an argument out of range.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream, PostgresBackend, SQLiteBackend
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


TRICKY: dict[str, Any] = {
    "score": 1e23,  # jsonb printed it 100000000000000000000000: the int 10**23, != 1e23
    "max": 1.7976931348623157e308,  # a 309-digit int
    "neg": -1.5e300,
    "ts_ns": 1.7e18,  # equal as an int, but an int
    "e16": 1e16,  # the smallest power of ten repr writes with an exponent
    "tiny": 5e-324,
    "small": 1e-7,  # (numeric prints it 0.0000001: a fraction, read back as the float)
    "tenth": 0.1,
    "one": 1.0,
    "int53": 2**53 + 1,  # ints stay ints, exactly
    "big_int": 10**23,
    "huge_int": -(10**40),
    "nested": [[1e23, [0.1, -1e-7, 2**64]], {"x": 1e22, "y": [True, None, "1e+23", 2.5e16]}],
    "text": 'a "1e+23" \\ string',  # (a string that looks like a number stays a string)
    "e+": {"e+1": "1.5e+16"},
}


def _same(got: Any) -> None:
    """``got`` holds :data:`TRICKY`'s values, of the same types (JSON text compares floats and
    ints apart: ``1e+23`` is not ``100000000000000000000000``; keys in any order)."""
    assert json.dumps(got, sort_keys=True) == json.dumps(TRICKY, sort_keys=True)


def test_metadata_reads_back_as_written_on_every_backend(stream: MemoryStream) -> None:
    """Floats that ``repr`` writes with a positive exponent (1e16 and up) came back from
    Postgres as ints (``jsonb`` keeps numbers as ``numeric``, which prints ``1e+23`` as
    ``100000000000000000000000``): ``1e23`` read back as ``10**23`` (unequal), the largest
    float as a 309-digit int. They now read back as the floats written, from a stored memory
    (recent, get, retrieve) and from the queue (pending, then completed), as from SQLite."""
    [stored] = stream.add(["a memory about tea"], metadatas=[TRICKY])
    _same(stream.recent(1)[0].metadata)
    _same(stream.get(stored.id)[0].metadata)
    _same(stream.retrieve("tea", k=1)[0].record.metadata)
    stream.enqueue(["a queued memory about coffee"], metadatas=[TRICKY])
    [queued] = stream.pending()
    _same(queued.metadata)
    [completed] = stream.complete_pending([queued])
    _same(stream.get(completed.id)[0].metadata)


def test_negative_zero_metadata_reads_back_equal(stream: MemoryStream) -> None:
    """``-0.0`` compares equal on both backends; only SQLite (which keeps the JSON text) keeps
    its sign: ``numeric`` has no negative zero, so Postgres reads back ``0.0``
    (docs/architecture.md)."""
    stream.add(["a memory"], metadatas=[{"zero": -0.0, "list": [-0.0]}])
    got = stream.recent(1)[0].metadata
    assert got == {"zero": 0.0, "list": [0.0]}
    assert type(got["zero"]) is float and type(got["list"][0]) is float
    sign = math.copysign(1.0, got["zero"])
    assert sign == (-1.0 if isinstance(stream.backend, SQLiteBackend) else 1.0)
