"""A retrieval's ``now`` is checked with its other arguments, before the query is embedded:
a naive or non-datetime ``now`` costs no embedding call (a paid one with a hosted model), as
an add's ``now`` is checked before its texts are embedded."""

from __future__ import annotations

from datetime import datetime

import pytest

from langchain_reflective import InvalidMemoryError, MemoryStream
from tests.fakes import WordEmbeddings


@pytest.mark.parametrize("bad", [datetime(2025, 6, 1), "2025-06-01T00:00:00Z"])
async def test_a_bad_now_fails_before_the_query_is_embedded(now: datetime, bad: object) -> None:
    embeddings = WordEmbeddings()
    with MemoryStream(embeddings) as stream:
        stream.add("Bob moved to Paris", importances=0.5, now=now)
        with pytest.raises(InvalidMemoryError):
            stream.retrieve("Bob", now=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidMemoryError):
            await stream.aretrieve("Bob", now=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidMemoryError):
            stream.add("Alice drinks tea", importances=0.5, now=bad)  # type: ignore[arg-type]
        assert embeddings.query_calls == 0 and embeddings.document_calls == 1
        (hit,) = stream.retrieve("Bob", k=1, now=now)
        assert hit.record.last_accessed_at == now
