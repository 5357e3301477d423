"""Conformance: a deleted observation leaves the BM25 document of the observation after it.

With the default scoring (``ScoringConfig.hybrid()``) an observation's BM25 document holds the
previous observation's words (the lexical context). When a memory in the middle of the stream
is deleted, or replaced in place, the next observation's document must become what it would be
had the data been written without the deleted memory: the backend that deleted it must score
every memory as a backend written without it does. Run by the SQLite backend's tests
(``tests/unit/test_deleted_context_conformance.py``) and the Postgres backend's
(``tests/postgres/test_postgres_deleted_context.py``), each with its own ``make_backend``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from langchain_reflective.backends.base import BaseMemoryBackend, RetrievalFilter
from langchain_reflective.records import OBSERVATION, MemoryRecord
from langchain_reflective.scoring import ScoringConfig
from tests.backends.conformance_base import (
    NOW,
    QUERIES,
    ConformanceBase,
    corpus,
    query_vector,
    vectors_of,
)

HYBRID = ScoringConfig.hybrid()
SECRET = "swordfish"
"""A word only the deleted memories hold."""


def lexical_by_id(
    backend: BaseMemoryBackend, query: str, namespace: str = "alice"
) -> tuple[dict[str, float], float]:
    """Every memory's raw BM25 score for ``query`` (by id) and the namespace's best."""
    found = backend.candidates(
        namespace, query, query_vector(query), k=10, filter=RetrievalFilter(),
        config=HYBRID, exact=True,
    )  # fmt: skip
    assert found.lexical is not None
    records = backend.fetch(namespace, found.keys[: found.size].tolist())
    scores = found.lexical[: found.size].tolist()
    keys = found.keys[: found.size].tolist()
    return {records[k].id: s for k, s in zip(keys, scores, strict=True)}, found.lexical_max


def deleted_context_corpus() -> tuple[list[MemoryRecord], list[str], MemoryRecord, str]:
    """The memories, the ids deleted from the middle (one observation alone, and two in a row
    with a memory of another kind between them), a replacement memory and the id it replaces
    (an observation in the middle). The deleted ones and the replaced one hold :data:`SECRET`."""
    records = corpus(60)
    observations = [i for i, r in enumerate(records) if r.kind == OBSERVATION]
    alone = observations[6]
    run = [i for i in observations[12:22] if records[i + 1].kind != OBSERVATION][:1]
    assert run, "the corpus has an observation followed by another kind"
    first = run[0]
    second = next(i for i in observations if i > first)
    replaced = observations[-5]
    marked = {alone, first, second, replaced}
    records = [
        dataclasses.replace(r, text=f"{r.text} {SECRET}") if i in marked else r
        for i, r in enumerate(records)
    ]
    new = dataclasses.replace(
        records[replaced], text="tea paris in the rain", created_at=NOW, last_accessed_at=NOW
    )
    deleted = [records[alone].id, records[first].id, records[second].id]
    return records, deleted, new, records[replaced].id


class DeletedContextConformance(ConformanceBase):
    """A deleted (or replaced) observation's words leave the document of the one after it."""

    def written_without(
        self,
        backends: Callable[[], BaseMemoryBackend],
        records: list[MemoryRecord],
        gone: set[str],
        new: MemoryRecord,
    ) -> BaseMemoryBackend:
        """A backend of the same kind written with the memories left, the new one last."""
        fresh = backends()
        fresh.configure(HYBRID)
        self.fill(fresh, [r for r in records if r.id not in gone])
        self.fill(fresh, [new])
        return fresh

    def assert_same_lexical(self, got: BaseMemoryBackend, want: BaseMemoryBackend) -> None:
        for query in [*QUERIES, SECRET, f"{SECRET} tea", "rain"]:
            ours, our_max = lexical_by_id(got, query)
            theirs, their_max = lexical_by_id(want, query)
            assert ours.keys() == theirs.keys()
            wrong = {
                i: (ours[i], theirs[i])
                for i in ours
                if not np.isclose(ours[i], theirs[i], rtol=1e-5, atol=1e-9)
            }
            assert not wrong, (query, wrong)
            assert our_max == pytest.approx(their_max, rel=1e-5)

    @pytest.mark.parametrize("indexed_first", [True, False])
    def test_deleting_in_the_middle_scores_as_written_without(
        self,
        backend: BaseMemoryBackend,
        backends: Callable[[], BaseMemoryBackend],
        indexed_first: bool,
    ) -> None:
        records, deleted, new, replaced = deleted_context_corpus()
        backend.configure(HYBRID)
        self.fill(backend, records)
        if indexed_first:  # the lexical index is in memory before the deletes
            assert lexical_by_id(backend, SECRET)[1] > 0
        assert backend.delete("alice", deleted) == 3
        vector = vectors_of([new])
        assert backend.replace("alice", [replaced], [new], vector) == 1
        ours, best = lexical_by_id(backend, SECRET)
        assert best == 0.0 and set(ours.values()) == {0.0}, ours
        want = self.written_without(backends, records, {*deleted, replaced}, new)
        self.assert_same_lexical(backend, want)
