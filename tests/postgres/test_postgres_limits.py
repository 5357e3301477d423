"""Postgres's limits on what it indexes, and the errors they raise.

Every lexical term is an entry of a GIN index and every id and namespace one of a btree, and
Postgres refuses an index entry over ~2.7 KB. A memory holding one long word (a hex dump, a
hash, base64 in a tool's output) is stored all the same, since the shared tokenizer cuts words
over ``MAX_TERM_CHARS``; an over-long id or namespace is refused up front, as the SQLite backend
refuses it; and a limit Postgres still hits is reported as a limit, not as a lost connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psycopg
import pytest
from psycopg import errors as pg_errors

from langchain_reflective import MemoryStream
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.failures import (
    ConnectionLostError,
    storage_error,
    typed_error,
)
from langchain_reflective.backends.sqlite.lexical import MAX_TERM_CHARS
from langchain_reflective.backends.types import CounterUpdate, trusted_record
from langchain_reflective.errors import InvalidMemoryError, StorageError
from langchain_reflective.scoring import ScoringConfig
from tests.fakes import WordEmbeddings
from tests.unit.test_long_terms import incompressible

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

DIM = 8


@pytest.fixture
def backend(postgres_url: str) -> Iterator[PostgresBackend]:
    b = PostgresBackend.from_conn_string(postgres_url, max_size=4)
    b.setup()
    yield b
    b.close()


def _found(stream: MemoryStream, query: str) -> list[tuple[str, float]]:
    """(text, lexical score) of every memory for ``query``, best first."""
    return [(s.record.text, s.lexical) for s in stream.retrieve(query, k=10, touch=False)]


def test_a_memory_with_a_long_word_is_stored_and_found_on_both_backends(
    backend: PostgresBackend, tmp_path: Path
) -> None:
    """Added or queued and completed, a memory holding a 5,000-character word is stored on
    Postgres as on SQLite (before: the add failed, and a queued one stayed queued forever),
    found by its other words and by the long word, with the same BM25 scores on both."""
    blob, other = incompressible(5_000, 10), incompressible(3_000, 11)
    # (the long words last: with lexical context, the next observation holds their words)
    texts = ["a walk in the park", "tea with milk", f"tool output {blob} zebra giraffe"]
    queued = f"hash {other} okapi"
    results = []
    for stream in (
        MemoryStream(WordEmbeddings(DIM), path=tmp_path / "m.db", scoring=ScoringConfig.hybrid()),
        MemoryStream(WordEmbeddings(DIM), backend=backend, scoring=ScoringConfig.hybrid()),
    ):
        with stream:
            stream.add(texts)
            stream.complete_pending(stream.enqueue([queued]))
            assert stream.count() == 4 and stream.pending() == []
            found = {q: _found(stream, q) for q in ("zebra", blob, "okapi", other, "park tea")}
            assert found["zebra"][0] == (texts[2], 1.0) and found[blob][0] == (texts[2], 1.0)
            assert found["okapi"][0] == (queued, 1.0) and found[other][0] == (queued, 1.0)
            cut = stream.retrieve(blob[:MAX_TERM_CHARS] + "f", k=1)  # the same first characters
            assert cut[0].record.text == texts[2] and cut[0].lexical == 1.0
            results.append(found)
    sqlite, postgres = results
    for query, hits in sqlite.items():  # the same lexical scores, up to float32 rounding
        want, got = dict(hits), dict(postgres[query])
        assert want.keys() == got.keys()
        assert [got[t] for t in want] == pytest.approx(list(want.values()), abs=1e-6)


def test_over_long_ids_and_namespaces_are_refused_up_front(backend: PostgresBackend) -> None:
    """As on SQLite (``tests/unit/test_long_terms.py``): an ``InvalidMemoryError`` that says
    what to do, before any embedding call; before, a ``StorageError`` blamed the connection."""
    long = incompressible(3_000, 12)
    embeddings = WordEmbeddings(DIM)
    with MemoryStream(embeddings, backend=backend) as stream:
        with pytest.raises(InvalidMemoryError, match=r"^id is 3,000 bytes long.*shorter"):
            stream.add(["hello world"], ids=[long])
        with pytest.raises(InvalidMemoryError, match=r"^namespace is 3,000 bytes long"):
            stream.add(["hello world"], namespace=long)
        with pytest.raises(InvalidMemoryError, match=r"^namespace is 3,000 bytes long"):
            stream.enqueue(["hello world"], namespace=long)
        assert stream.count() == 0 and stream.pending(all_namespaces=True) == []
        assert embeddings.document_calls == 0
        stream.add(["hello world"], ids=["x" * 1_024], namespace="n" * 1_024)  # at the limit
        assert stream.count(namespace="n" * 1_024) == 1
        # an older database's long namespace can be read and purged; only writes refuse it
        assert stream.recent(5, namespace=long) == [] and stream.purge(namespace=long) == 0
        reader = MemoryStream(WordEmbeddings(DIM), backend=backend, namespace=long)
        assert reader.count() == 0
        with pytest.raises(InvalidMemoryError, match=r"^namespace is 3,000 bytes long"):
            reader.add(["hello world"])


def test_an_older_databases_namespace_over_the_limit_is_purged(backend: PostgresBackend) -> None:
    """Postgres indexes a namespace of up to ~2.7 KB, so a database written before the
    1,024-byte limit may hold a longer one (written here past the checks: ``trusted_record``);
    a purge of it returned 0 and left its memories and counter (it took every namespace over
    the limit for one nothing could be stored in)."""
    backend.bind_embeddings("test-model", DIM)
    now, long = datetime(2025, 1, 1, tzinfo=UTC), incompressible(2_000, 14)
    fields = {
        "text": "hello", "kind": "observation", "created_at": now, "last_accessed_at": now,
        "importance": 0.5, "importance_source": "given", "evidence": (), "depth": 0,
        "namespace": long, "metadata": {},
    }  # fmt: skip
    records = [trusted_record(id=f"m{i}", **fields) for i in range(2)]  # type: ignore[arg-type]
    vectors = np.eye(2, DIM, dtype=np.float32)
    backend.put(records, vectors, counter=CounterUpdate(long, 1.0, 2))
    assert backend.count(long) == 2 and backend.reflection_state(long).adds_since == 2
    assert backend.purge(long) == 2
    assert backend.count(long) == 0 and backend.reflection_state(long).adds_since == 0


def test_a_program_limit_error_names_the_limit_not_a_connection(backend: PostgresBackend) -> None:
    """A value past Postgres's index limit that reaches the database anyway (written by code
    that bypasses the checks): the error quotes the server's limit and says it is not a
    connection failure, so it is not taken for one (and not retried as one)."""
    backend.bind_embeddings("test-model", DIM)
    now = datetime(2025, 1, 1, tzinfo=UTC)
    record = trusted_record(
        id="m1", text="hello", kind="observation", created_at=now, last_accessed_at=now,
        importance=0.5, importance_source="given", evidence=(), depth=0,
        namespace=incompressible(3_000, 13), metadata={},
    )  # fmt: skip
    vector = np.zeros((1, DIM), dtype=np.float32)
    vector[0, 0] = 1.0
    with pytest.raises(StorageError) as info:
        backend.put([record], vector)
    message = str(info.value)
    assert type(info.value) is StorageError  # not a ConnectionLostError
    assert "index row size" in message and "one of its limits" in message
    assert "SQLSTATE 54000" in message and "not a connection failure" in message
    assert "connection to Postgres failed" not in message
    assert backend.count("default") == 0  # nothing stored, and the backend still works


def test_only_connection_errors_say_the_connection_failed() -> None:
    """psycopg makes every SQLSTATE of classes 40 and 53-58 an ``OperationalError``; only
    libpq's own errors, class 08 and 57P (shutdown, starting up) are about the connection."""
    refused = {
        pg_errors.ProgramLimitExceeded: "one of its limits",
        pg_errors.StatementTooComplex: "one of its limits",
        pg_errors.DiskFull: "lacks a resource",
        pg_errors.OutOfMemory: "lacks a resource",
        pg_errors.DeadlockDetected: "conflict with another session",
        pg_errors.SerializationFailure: "conflict with another session",
        pg_errors.IoError: "SQLSTATE 58030",
    }
    for cls, says in refused.items():
        error = typed_error(cls("the server's reason"), lost=False)
        assert type(error) is StorageError, cls
        assert says in str(error) and "the server's reason" in str(error), cls
        assert "connection to Postgres failed" not in str(error), cls
    for exc in (
        psycopg.OperationalError("server closed the connection unexpectedly"),
        pg_errors.AdminShutdown("terminating connection due to administrator command"),
        pg_errors.CannotConnectNow("the database system is starting up"),
        pg_errors.ConnectionFailure("connection failure"),
    ):
        assert "the connection to Postgres failed" in str(storage_error(exc))
        assert type(typed_error(exc, lost=True)) is ConnectionLostError
