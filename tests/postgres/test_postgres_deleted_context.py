"""A deleted observation in the middle of the stream leaves the BM25 document of the one after
it, on the Postgres backend: the conformance check (``conformance_deleted_context.py``) on the
server's statement and on the local index, the server's scores equal to the SQLite backend's on
the same data, and a local index catching up another process's delete."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from langchain_reflective.backends.base import BaseMemoryBackend
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.sqlite import SQLiteBackend
from tests.backends.conformance_base import MODEL, QUERIES, vectors_of
from tests.backends.conformance_deleted_context import (
    HYBRID,
    SECRET,
    DeletedContextConformance,
    deleted_context_corpus,
    lexical_by_id,
)
from tests.postgres.conftest import create_database, fresh_backends

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


class TestPostgresServer(DeletedContextConformance):
    @pytest.fixture
    def make_backend(self, postgres_server: str) -> Callable[[], BaseMemoryBackend]:
        return fresh_backends(postgres_server)


class TestPostgresLocalIndex(DeletedContextConformance):
    @pytest.fixture
    def make_backend(self, postgres_server: str) -> Callable[[], BaseMemoryBackend]:
        return fresh_backends(postgres_server, local_index=True, local_index_wait=True)


def _open(url: str, **kwargs: object) -> PostgresBackend:
    backend = PostgresBackend.from_conn_string(url, max_size=4, **kwargs)  # type: ignore[arg-type]
    backend.setup()
    backend.bind_embeddings(MODEL, 32)
    backend.configure(HYBRID)
    return backend


@pytest.fixture
def url(postgres_server: str) -> str:
    return create_database(postgres_server)


@pytest.fixture
def server(url: str) -> Iterator[PostgresBackend]:
    backend = _open(url)
    yield backend
    backend.close()


@pytest.fixture
def local(url: str) -> Iterator[PostgresBackend]:
    backend = _open(url, local_index=True, local_index_wait=True)
    yield backend
    backend.close()


def _all(backend: BaseMemoryBackend) -> dict[str, tuple[dict[str, float], float]]:
    return {q: lexical_by_id(backend, q) for q in [*QUERIES, SECRET, "rain"]}


def _assert_close(
    got: dict[str, tuple[dict[str, float], float]],
    want: dict[str, tuple[dict[str, float], float]],
) -> None:
    for query, (scores, best) in want.items():
        assert got[query][0] == pytest.approx(scores, rel=1e-5), query
        assert got[query][1] == pytest.approx(best, rel=1e-5), query


def test_the_server_and_a_local_index_elsewhere_score_as_sqlite(
    server: PostgresBackend, local: PostgresBackend
) -> None:
    """The same writes on SQLite and on the server (another backend's local index following
    them, as another process's would): after a delete in the middle all three agree."""
    records, deleted, new, replaced = deleted_context_corpus()
    with SQLiteBackend(None) as sqlite:
        sqlite.configure(HYBRID)
        for backend in (sqlite, server):
            backend.bind_embeddings(MODEL, 32)
            backend.put(records, vectors_of(records))
        _assert_close(_all(local), _all(sqlite))  # loaded before the deletes
        for backend in (sqlite, server):
            backend.delete("alice", deleted)
            backend.replace("alice", [replaced], [new], vectors_of([new]))
        want = _all(sqlite)
    assert set(want[SECRET][0].values()) == {0.0}
    _assert_close(_all(server), want)
    _assert_close(_all(local), want)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_deletes_elsewhere_keep_the_three_in_step(
    server: PostgresBackend, local: PostgresBackend, seed: int
) -> None:
    """Rounds of random deletes (single observations, runs of them, the newest, other kinds)
    made on the server and on SQLite, a local index following the server's: after each, the
    server and the local index score every memory as SQLite does."""
    import numpy as np

    from tests.backends.conformance_base import corpus

    rng = np.random.default_rng(seed)
    records = corpus(70)
    with SQLiteBackend(None) as sqlite:
        sqlite.configure(HYBRID)
        for backend in (sqlite, server):
            backend.bind_embeddings(MODEL, 32)
            backend.put(records, vectors_of(records))
        left = list(records)
        for _ in range(4):
            _assert_close(_all(local), _all(sqlite))  # (held before each round)
            start = int(rng.integers(0, len(left) - 4))
            picked = {start, start + 1, start + 2} if rng.random() < 0.5 else {start}
            picked |= set(rng.integers(0, len(left), 3).tolist()) | {len(left) - 1}
            gone = sorted({left[i].id for i in picked})
            for backend in (sqlite, server):
                assert backend.delete("alice", gone) == len(gone)
            left = [r for r in left if r.id not in set(gone)]
            want = _all(sqlite)
            _assert_close(_all(server), want)
            _assert_close(_all(local), want)


def test_a_local_document_the_index_does_not_hold_is_refused() -> None:
    """``DocumentIndex.replace_document`` changes a row's postings in place, and refuses
    (changing nothing) when they do not hold the terms it kept for the row."""
    import numpy as np

    from langchain_reflective.backends.postgres.local_docs import DocumentIndex
    from langchain_reflective.backends.sqlite.lexical import BM25Index

    index = DocumentIndex()
    index.add_flat_terms(["tea", "pari", "dog", "tea"], np.array([2, 1, 1]), np.array([1, 2, 1, 3]))
    assert index.replace_document(0, ["dog", "river"], [1, 1])
    want = BM25Index()
    want.add_terms([["dog", "river"], ["dog"], ["tea"]], [[1, 1], [1], [3]])
    for query in ("tea", "dog", "river", "paris"):
        assert index.matches(query)[0].tolist() == want.matches(query)[0].tolist()
        np.testing.assert_allclose(index.matches(query)[1], want.matches(query)[1])
    index._replaced[1] = np.array([index._stem_id("river")], dtype=np.int32)  # kept wrong
    assert not index.replace_document(1, ["tea"], [1])
    assert index.matches("dog")[0].tolist() == [0, 1]
