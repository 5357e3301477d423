"""Long words and long identifiers: what every backend can index.

A word of kilobytes (a hex dump, a hash, base64 in a tool's output, CJK text without punctuation)
is cut to its first :data:`MAX_TERM_CHARS` characters by the tokenizer both backends share, so
the Postgres backend can put it in a GIN index; an id, namespace or kind over
:data:`MAX_IDENTIFIER_BYTES` bytes of UTF-8 is refused by every backend (Postgres cannot index
it; SQLite refuses it too, so memories move between backends). The Postgres side is in
``tests/postgres/test_postgres_limits.py``.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.sqlite.lexical import MAX_TERM_CHARS, BM25Index
from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.records import MAX_IDENTIFIER_BYTES, MemoryRecord
from langchain_reflective.scoring import ScoringConfig
from tests.fakes import WordEmbeddings

LONG = 5_000


def incompressible(n: int, seed: int = 0) -> str:
    """``n`` random hex digits: one word that no prefix or suffix of another shares."""
    return f"{random.Random(seed).getrandbits(4 * n):0{n}x}"


def test_a_long_word_is_the_term_of_its_first_characters() -> None:
    """Documents and queries cut a long word alike, so it still matches itself (and any word
    sharing its first ``MAX_TERM_CHARS`` characters); every term fits an index entry."""
    blob = incompressible(LONG)
    index = BM25Index()
    terms = index.tokenize(f"tool output {blob} zebra")
    assert terms == ["tool", "output", *index.tokenize(blob[:MAX_TERM_CHARS]), "zebra"]
    assert len(terms[2]) <= MAX_TERM_CHARS
    index.add([f"tool output {blob} zebra", "a giraffe", f"other {incompressible(LONG, 1)}"])
    assert index.search(blob)[0].tolist() == [0]
    assert index.search(blob[:MAX_TERM_CHARS] + "ffff")[0].tolist() == [0]  # cut alike
    assert index.search("zebra")[0].tolist() == [0]
    # a run of CJK characters is one \w word; 4-byte characters stay under Postgres's limit
    for text in ("记忆" * 450, "𝒜" * 1_000):
        (term,) = index.tokenize(text)
        assert len(term) == MAX_TERM_CHARS and len(term.encode()) <= 4 * MAX_TERM_CHARS
    # a word of exactly the bound stays whole
    assert index.tokenize("x" * MAX_TERM_CHARS) == ["x" * MAX_TERM_CHARS]


def test_the_word_memo_agrees_with_tokenize_for_long_words() -> None:
    """``add`` and queries go through a ``word -> term`` memo, ``tokenize`` does not: both
    give the same terms, and a long word does not become a memo key."""
    blob = incompressible(LONG, 2)
    index = BM25Index()
    index.add([f"{blob} alpha", f"{blob} beta"])
    assert index.vocabulary_size == 3
    assert all(len(word) <= MAX_TERM_CHARS for word in index._word_ids)
    rows, scores = index.search(blob)
    assert rows.tolist() == [0, 1] and scores[0] == scores[1] > 0


def test_sqlite_stores_and_retrieves_a_memory_with_a_long_word(tmp_path: Path) -> None:
    """The memory is stored, found by its other words and by the long word, also after the
    file is reopened (from the persisted lexical cache)."""
    blob = incompressible(LONG, 3)
    path = tmp_path / "m.db"
    # (last: with the hybrid scoring's lexical context, the next observation holds its words)
    texts = ["a walk in the park", "tea with milk", f"tool output {blob} zebra giraffe"]
    with MemoryStream(WordEmbeddings(), path=path, scoring=ScoringConfig.hybrid()) as stream:
        stored = stream.add(texts)
        assert stream.count() == 3
        found = stream.retrieve("zebra", k=3)
        assert found[0].record.id == stored[2].id and found[0].lexical == 1.0
        assert [s.lexical for s in found[1:]] == [0.0, 0.0]
        # a word sharing its first characters: the same term (before, the whole word was one)
        again = stream.retrieve(blob[:MAX_TERM_CHARS] + "0", k=1)
        assert again[0].record.id == stored[2].id and again[0].lexical == 1.0
    with MemoryStream(WordEmbeddings(), path=path, scoring=ScoringConfig.hybrid()) as stream:
        found = stream.retrieve(blob, k=3)
        assert found[0].record.text == texts[2] and found[0].lexical == 1.0
        assert [s.lexical for s in found[1:]] == [0.0, 0.0]


def test_identifiers_are_limited_in_utf8_bytes() -> None:
    """Ids, namespaces, kinds and evidence ids of up to 1,024 bytes, counted in UTF-8."""
    limit = MAX_IDENTIFIER_BYTES
    for char in ("a", "é", "😀"):  # 1, 2 and 4 bytes
        fits = char * (limit // len(char.encode()))
        for field in ("id", "namespace", "kind"):
            assert getattr(MemoryRecord(**{"id": "m", "text": "x", field: fits}), field) == fits
            with pytest.raises(InvalidMemoryError, match=f"^{field} is .* bytes long.*1,024"):
                MemoryRecord(**{"id": "m", "text": "x", field: fits + char})
        assert MemoryRecord(id="m", text="x", evidence=(fits,)).evidence == (fits,)
        with pytest.raises(InvalidMemoryError, match=r"^evidence id is"):
            MemoryRecord(id="m", text="x", evidence=(fits + "a",))


def test_sqlite_refuses_an_over_long_id_or_namespace(tmp_path: Path) -> None:
    """As Postgres must: so a memory stored by one backend can move to the other."""
    long = incompressible(3_000, 4)
    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as stream:
        with pytest.raises(InvalidMemoryError, match=r"id is 3,000 bytes long.*shorter"):
            stream.add(["hello world"], ids=[long])
        with pytest.raises(InvalidMemoryError, match="namespace is 3,000 bytes long"):
            stream.add(["hello world"], namespace=long)
        with pytest.raises(InvalidMemoryError, match="namespace is 3,000 bytes long"):
            stream.enqueue(["hello world"], namespace=long)
        with pytest.raises(InvalidMemoryError, match="kind is 3,000 bytes long"):
            stream.add(["hello", "world"], kinds=[long, "observation"])
        with pytest.raises(InvalidMemoryError, match="kind is 2,000 bytes long"):
            stream.add("hello", kinds="k" * 2_000)  # (one text: the add's quick path)
        assert stream.count() == 0 and stream.pending() == []
    with (
        MemoryStream(WordEmbeddings(), path=tmp_path / "n.db", namespace=long) as reader,
        pytest.raises(InvalidMemoryError, match="namespace is 3,000 bytes long"),
    ):
        reader.add("hello world")  # (it opens, so an older file's long namespace is readable)


def test_memories_stored_before_the_identifier_limit_can_be_read_deleted_and_purged(
    tmp_path: Path,
) -> None:
    """The limit applies to writes: a file written before it may hold longer ids and
    namespaces, which every read, delete and purge must still reach (they raised)."""
    import numpy as np

    from langchain_reflective.backends.types import trusted_record

    long_ns, long_id = "n" * 1_500, "y" * 1_500
    path = tmp_path / "old.db"
    when = datetime(2026, 1, 1, tzinfo=UTC)
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(["an ordinary memory"], importances=0.5)
        vectors = np.asarray(stream.embeddings.embed_documents(["kept", "older"]), np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        old = [  # as the version before the limit stored them (below the stream's checks)
            trusted_record(
                i, f"{i[:4]} memory", "observation", when, when, 0.5, "given", (), 0, long_ns, {}
            )
            for i in (long_id, "older")
        ]
        stream.backend.put(old, vectors)
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        assert long_ns in stream.namespaces()
        assert [r.id for r in stream.get(long_id, namespace=long_ns)] == [long_id]
        assert {r.id for r in stream.recent(None, namespace=long_ns)} == {long_id, "older"}
        assert stream.retrieve("yyyy", k=1, namespace=long_ns, touch=False)[0].record.id == long_id
        assert stream.delete([long_id], namespace=long_ns) == 1
        assert stream.purge(namespace=long_ns) == 1
        assert stream.namespaces() == [stream.namespace]
