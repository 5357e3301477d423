"""Incremental BM25 (Lucene variant) with stemming, for the lexical half of hybrid retrieval.

The memory stream keeps one :class:`BM25Index` per namespace partition. Rows are append-only
positions ``0 .. n-1`` (the stream maps them to memory ids); deletions are tombstones: a removed
row never scores again and stops counting in ``N``, the average document length and document
frequencies.

Scores follow Lucene's BM25, the default ``"lucene"`` method of ``bm25s``::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(q, d) = sum over query tokens t of
                  idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

so an index built here ranks and scores a corpus like ``bm25s`` with a PyStemmer stemmer and its
English stopwords (a repeated query token counts once per occurrence, as in ``bm25s``), except
that a word longer than :data:`MAX_TERM_CHARS` is cut to its first characters (a hash, a hex
dump, base64: every backend must be able to index a term).

Storage is compact: per term, one ``array('i')`` of rows and one ``array('H')`` of term
frequencies; per row, its length and a liveness flag in growable numpy arrays. Document
frequencies are counted at query time over the live postings of the query's terms, so removal
is O(1) per row and needs no per-document term lists. Search joins the query terms' postings
into one array and scores them with a fixed handful of numpy calls, however many terms the query
has (per-call overhead, not arithmetic, dominates at a few hundred postings per term).
Thread-safety is the caller's job.
"""

from __future__ import annotations

import math
import re
import threading
from array import array
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import Stemmer

from langchain_reflective.backends.sqlite.lexical_scores import QueryScores, top_matches

if TYPE_CHECKING:
    from langchain_reflective.backends.sqlite.lexical_cache import _Base

__all__ = ["ENGLISH_STOPWORDS", "MAX_TERM_CHARS", "BM25Index", "QueryScores", "top_matches"]

ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    (
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into",
        "is", "it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then",
        "there", "these", "they", "this", "to", "was", "will", "with",
    )
)  # fmt: skip
"""English stopwords, the same list as ``bm25s.stopwords.STOPWORDS_EN`` (Lucene's default)."""

MAX_TERM_CHARS = 128
"""Longest word the tokenizer keeps whole: a longer one becomes the term of its first 128
characters, in documents and queries alike (so a query holding the same long word still matches
it; the document's length in terms does not change).

No word of a language comes near it (dictionary words stop at ~45 letters, German compounds
rarely pass 60), while identifiers a user may search for whole fit: a SHA-512 hex digest (128),
a UUID, a long ``snake_case`` name. What it prevents is a term of kilobytes: a hex dump, a hash
or base64 in a tool's output, a paragraph of CJK text without punctuation (``\\w`` runs on),
which the Postgres backend could not store, since each term is an entry of a GIN index and
Postgres refuses index entries over ~2.7 KB. A term of 128 characters is at most 512 bytes of
UTF-8 even in 4-byte characters (stemming changes a few letters at most: German's ß -> ss keeps
the byte count), a fifth of that limit. The bound is on the word before stemming, so a long
word is never stemmed whole.

Terms stored before the bound existed (a SQLite file's persisted lexical cache, a Postgres
row's term arrays) stay valid: a longer term is one no query produces any more, so it never
matches (its memory stops matching a query on that one long word: harmless; a rebuilt SQLite
cache has the cut term), while every document keeps its length, so no other score changes."""

_TOKEN = re.compile(r"\w\w+")  # same matches as bm25s' r"(?u)\b\w\w+\b", faster
# For ASCII text, \w is [A-Za-z0-9_]: mapping every other ASCII character to a space and splitting
# gives the same words as the regex, about twice as fast.
_ASCII_SEPARATORS = str.maketrans(
    {chr(i): " " for i in range(128) if not (chr(i).isalnum() or chr(i) == "_")}
)
_TF_MAX = 65535
_MIN_CAPACITY = 1024
_COMPACT_MIN_DEAD = 4096
_WORD_CACHE_MAX = 1 << 18
_FLAT_BY_TERM_MIN = 20_000
"""Term pairs from which :meth:`BM25Index.add_flat_terms` groups them by term with numpy."""


def _split_words(text: str) -> list[str]:
    """Lowercased words of two or more word characters (the ``bm25s`` token pattern)."""
    lowered = text.lower()
    if lowered.isascii():
        return [w for w in lowered.translate(_ASCII_SEPARATORS).split() if len(w) > 1]
    return _TOKEN.findall(lowered)


class BM25Index:
    """An append-only BM25 index over rows ``0 .. n-1`` with tombstone deletion.

    Example:
        >>> index = BM25Index()
        >>> index.add(["I went running in the park", "She cooks pasta"])
        >>> rows, scores = index.search("runs", k=5)
        >>> rows.tolist()
        [0]
    """

    def __init__(
        self,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        language: str = "english",
        stopwords: bool = True,
    ) -> None:
        """Create an empty index.

        Args:
            k1: BM25 term-frequency saturation (Lucene default 1.2; ``bm25s`` default 1.5).
            b: BM25 length normalisation in [0, 1].
            language: A PyStemmer (Snowball) algorithm name, e.g. ``"english"``.
            stopwords: Remove English stopwords before stemming. Only English has a built-in list;
                for other languages no stopwords are removed.

        Raises:
            ValueError: If ``k1`` is negative, ``b`` is outside [0, 1] or ``language`` is unknown.
        """
        if k1 < 0:
            raise ValueError(f"k1 must be >= 0, got {k1}")
        if not 0.0 <= b <= 1.0:
            raise ValueError(f"b must be in [0, 1], got {b}")
        if language not in Stemmer.algorithms():
            raise ValueError(f"unknown stemmer language {language!r}")
        self.k1 = float(k1)
        self.b = float(b)
        self.language = language
        self._stemmer = Stemmer.Stemmer(language)
        self._stopwords: frozenset[str] = (
            ENGLISH_STOPWORDS if stopwords and language in ("english", "porter") else frozenset()
        )
        self._scratch: npt.NDArray[np.float64] | None = None
        """Per-row score buffer of :meth:`query_scores`: all zeros while no query holds it."""
        self._scratch_lock: threading.Lock | None = threading.Lock()
        self.clear()

    # ------------------------------------------------------------------ state

    def clear(self) -> None:
        """Remove every row and term; the next :meth:`add` starts again at row 0."""
        self._vocab: dict[str, int] = {}
        """Stem -> term id of terms added since the index was created or loaded."""
        self._word_ids: dict[str, int] = {}
        self._post_rows: list[array[int] | None] = []
        """Per term id its rows, or ``None`` while they are only in the loaded base (below)."""
        self._post_tf: list[array[int] | None] = []
        self._base: _Base | None = None
        """Postings and vocabulary loaded from a snapshot (see ``lexical_cache``), read in
        place: a term's postings become arrays only when a new row adds to them."""
        self._doclen: npt.NDArray[np.int32] = np.zeros(_MIN_CAPACITY, dtype=np.int32)
        self._live: npt.NDArray[np.bool_] = np.zeros(_MIN_CAPACITY, dtype=np.bool_)
        self._n_rows = 0
        self._n_live = 0
        self._total_len = 0
        self._n_dead = 0

    def __len__(self) -> int:
        """Number of rows ever added, including removed ones."""
        return self._n_rows

    @property
    def n_live(self) -> int:
        """Number of rows that have not been removed (``N`` in the idf)."""
        return self._n_live

    @property
    def vocabulary_size(self) -> int:
        """Number of distinct (stemmed) terms ever indexed."""
        return len(self._post_rows)

    def _find(self, stem: str) -> int | None:
        """The term id of ``stem``, or ``None``."""
        tid = self._vocab.get(stem)
        if tid is None and self._base is not None:
            tid = self._base.find(stem)
        return tid

    def _postings(self, tid: int) -> tuple[Any, Any]:
        """``(rows, tfs)`` of a term: its arrays, or int32/uint16 views of the loaded base."""
        rows = self._post_rows[tid]
        if rows is None:
            assert self._base is not None
            return self._base.postings(tid)
        return rows, self._post_tf[tid]

    def _writable(self, tid: int) -> tuple[array[int], array[int]]:
        """A term's postings as growable arrays (copied out of the loaded base once)."""
        rows = self._post_rows[tid]
        tfs = self._post_tf[tid]
        if rows is None or tfs is None:
            base_rows, base_tf = self._postings(tid)
            rows = self._post_rows[tid] = array("i", base_rows.tobytes())
            tfs = self._post_tf[tid] = array("H", base_tf.tobytes())
        return rows, tfs

    def is_live(self, row: int) -> bool:
        """Whether ``row`` was added and not removed."""
        return 0 <= row < self._n_rows and bool(self._live[row])

    # ------------------------------------------------------------------ text

    def tokenize(self, text: str) -> list[str]:
        """Split text into index terms.

        Lowercase, split with the regex ``\\w\\w+`` (as ``bm25s`` and scikit-learn do), drop
        stopwords, cut words longer than :data:`MAX_TERM_CHARS` to that many characters, then
        stem with PyStemmer.

        Args:
            text: Any string.

        Returns:
            The stemmed terms in order, duplicates kept.
        """
        words = _split_words(text)
        if self._stopwords:
            words = [w for w in words if w not in self._stopwords]
        if not words:
            return []
        if max(map(len, words)) > MAX_TERM_CHARS:
            words = [w[:MAX_TERM_CHARS] for w in words]
        stems: list[str] = self._stemmer.stemWords(words)
        return stems

    # ------------------------------------------------------------------ writes

    def _term_ids(self, text: str) -> list[int]:
        """Term ids of a document's tokens in order, creating new terms.

        Equivalent to looking up :meth:`tokenize` in the vocabulary, but memoises
        ``raw word -> term id`` (``-1`` for stopwords) so each distinct word is stemmed once
        (a word over :data:`MAX_TERM_CHARS` is cut when it is stemmed, and not memoised: the
        memo's keys stay small).
        """
        cache = self._word_ids
        out: list[int] = []
        for word in _split_words(text):
            tid = cache.get(word)
            if tid is None:
                if word in self._stopwords:
                    tid = -1
                else:
                    tid = self._stem_id(self._stemmer.stemWord(word[:MAX_TERM_CHARS]))
                if len(word) <= MAX_TERM_CHARS:
                    if len(cache) >= _WORD_CACHE_MAX:
                        cache.clear()
                    cache[word] = tid
            if tid >= 0:
                out.append(tid)
        return out

    def _ensure_capacity(self, n: int) -> None:
        cap = self._doclen.shape[0]
        if n <= cap:
            return
        new_cap = max(n, 2 * cap)
        doclen = np.zeros(new_cap, dtype=np.int32)
        doclen[: self._n_rows] = self._doclen[: self._n_rows]
        live = np.zeros(new_cap, dtype=np.bool_)
        live[: self._n_rows] = self._live[: self._n_rows]
        self._doclen, self._live = doclen, live

    def add(self, texts: Sequence[str]) -> None:
        """Append documents as rows ``len(self) .. len(self) + len(texts) - 1``.

        Args:
            texts: The documents, in row order. An empty document still takes a row (and counts
                in ``N`` and the average length, as in ``bm25s``) but never matches.
        """
        if isinstance(texts, str):
            raise TypeError("add() takes a sequence of strings, not a single string")
        if not texts:
            return
        start = self._n_rows
        self._ensure_capacity(start + len(texts))
        post_rows = self._post_rows
        post_tf = self._post_tf
        term_ids = self._term_ids
        lengths: list[int] = []
        for offset, text in enumerate(texts):
            row = start + offset
            ids = term_ids(text)
            n_terms = len(ids)
            lengths.append(n_terms)
            if n_terms == 0:
                continue
            if n_terms == 1:
                tid = ids[0]
                rows_of = post_rows[tid]
                tf_of = post_tf[tid]
                if rows_of is None or tf_of is None:
                    rows_of, tf_of = self._writable(tid)
                rows_of.append(row)
                tf_of.append(1)
                continue
            counts: dict[int, int] = {}
            for tid in ids:
                counts[tid] = counts.get(tid, 0) + 1
            for tid, tf in counts.items():
                rows_of = post_rows[tid]
                tf_of = post_tf[tid]
                if rows_of is None or tf_of is None:
                    rows_of, tf_of = self._writable(tid)
                rows_of.append(row)
                tf_of.append(tf if tf <= _TF_MAX else _TF_MAX)
        end = start + len(texts)
        self._live[start:end] = True
        self._n_rows = end
        self._n_live += len(texts)
        self._doclen[start:end] = lengths
        self._total_len += sum(lengths)

    def add_terms(self, terms: Sequence[Sequence[str]], counts: Sequence[Sequence[int]]) -> None:
        """Append documents given as their index terms, like :meth:`add` appends texts.

        For terms computed elsewhere with :meth:`tokenize` (e.g. stored by a database): the
        document ``terms[i]`` holds each of its distinct stems once, ``counts[i]`` how often
        each occurs. Indexing ``Counter(tokenize(text))`` this way gives the rows, lengths and
        scores :meth:`add` gives for ``text``. One pass over all the documents' terms, grouped
        per term with numpy: what a bulk load of a large corpus needs.

        Raises:
            ValueError: ``terms`` and ``counts`` differ in length, for the corpus or for one
                document, or a count is below 1.
        """
        n = len(terms)
        if len(counts) != n:
            raise ValueError(f"{n} documents of terms but {len(counts)} of counts")
        sizes = np.fromiter((len(t) for t in terms), dtype=np.int64, count=n)
        if not np.array_equal(sizes, np.fromiter((len(c) for c in counts), np.int64, count=n)):
            raise ValueError("a document has a different number of terms and counts")
        total = int(sizes.sum())
        self.add_flat_terms(
            [stem for t in terms for stem in t],
            sizes,
            np.fromiter((c for cs in counts for c in cs), dtype=np.int64, count=total),
        )

    def add_flat_terms(
        self,
        stems: Sequence[str],
        sizes: npt.NDArray[np.integer],
        counts: npt.NDArray[np.integer],
    ) -> npt.NDArray[np.int64]:
        """:meth:`add_terms` with the documents' terms concatenated: document ``i`` is the
        next ``sizes[i]`` of ``stems`` and ``counts`` (what a bulk load decodes without a
        Python list per document). Returns the term id of each stem, in their order.

        Raises:
            ValueError: ``sizes`` does not add up to the number of stems and counts, or a count
                is below 1.
        """
        n = int(sizes.shape[0])
        total = len(stems)
        if int(sizes.sum()) != total or counts.shape[0] != total:
            raise ValueError(
                f"{total} stems and {counts.shape[0]} counts for documents of "
                f"{int(sizes.sum())} terms in all"
            )
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        tfs = counts.astype(np.int64, copy=False)
        if total and int(tfs.min()) < 1:
            raise ValueError("term counts must be at least 1")
        start = self._n_rows
        self._ensure_capacity(start + n)
        if total <= _FLAT_BY_TERM_MIN:  # a few documents (catching up): append in place
            return self._add_pairs(start, stems, sizes.tolist(), tfs.tolist())
        term_id = self._stem_id
        ids = np.fromiter((term_id(stem) for stem in stems), np.int64, count=total)
        given = ids
        docs = np.repeat(np.arange(n, dtype=np.int64), sizes)
        lengths = np.bincount(docs, weights=tfs, minlength=n).astype(np.int64)
        order = np.argsort(ids, kind="stable")  # per term, its documents in row order
        ids = ids[order]
        rows32 = (docs[order] + start).astype(np.int32)
        tf16 = np.minimum(tfs[order], _TF_MAX).astype(np.uint16)
        if total:
            cuts = (np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist()
            for lo, hi in zip([0, *cuts], [*cuts, total], strict=True):
                rows_of, tf_of = self._writable(int(ids[lo]))
                rows_of.frombytes(rows32[lo:hi].tobytes())
                tf_of.frombytes(tf16[lo:hi].tobytes())
        end = start + n
        self._live[start:end] = True
        self._n_rows = end
        self._n_live += n
        self._doclen[start:end] = lengths
        self._total_len += int(lengths.sum())
        return given

    def _add_pairs(
        self, start: int, stems: Sequence[str], sizes: list[int], tfs: list[int]
    ) -> npt.NDArray[np.int64]:
        """:meth:`add_flat_terms` one (term, count) pair at a time: cheaper than grouping
        by term for a few documents (each term of the batch got its own numpy slices)."""
        term_id = self._stem_id
        writable = self._writable
        lengths: list[int] = []
        ids: list[int] = []
        at = 0
        for offset, size in enumerate(sizes):
            row = start + offset
            length = 0
            for i in range(at, at + size):
                tid = term_id(stems[i])
                ids.append(tid)
                rows_of, tf_of = writable(tid)
                rows_of.append(row)
                tf = tfs[i]
                tf_of.append(tf if tf <= _TF_MAX else _TF_MAX)
                length += tf
            at += size
            lengths.append(length)
        end = start + len(sizes)
        self._live[start:end] = True
        self._n_rows = end
        self._n_live += len(sizes)
        self._doclen[start:end] = lengths
        self._total_len += sum(lengths)
        return np.asarray(ids, dtype=np.int64)

    def _stem_id(self, stem: str) -> int:
        """The term id of an index term (a stem), created if new."""
        tid = self._vocab.get(stem)
        if tid is None:
            tid = self._find(stem)
            if tid is None:
                tid = len(self._post_rows)
                self._vocab[stem] = tid
                self._post_rows.append(array("i"))
                self._post_tf.append(array("H"))
        return tid

    def remove(self, rows: Iterable[int]) -> None:
        """Tombstone rows: they never score again and stop counting in ``N``, avgdl and df.

        Unknown or already removed rows are ignored. When most postings belong to removed rows,
        the postings are compacted (rows keep their numbers).

        Args:
            rows: Row positions to remove.
        """
        for row in rows:
            r = int(row)
            if 0 <= r < self._n_rows and self._live[r]:
                self._live[r] = False
                self._n_live -= 1
                self._total_len -= int(self._doclen[r])
                self._n_dead += 1
        if self._n_dead >= _COMPACT_MIN_DEAD and self._n_dead > self._n_live:
            self.compact()

    def compact(self) -> None:
        """Drop the postings of removed rows to reclaim memory. Row numbers do not change."""
        live = self._live
        for tid in range(len(self._post_rows)):
            rows_arr, tf_arr = self._postings(tid)
            if not len(rows_arr):
                continue
            rows = np.frombuffer(rows_arr, dtype=np.int32)
            keep = live[rows]
            if bool(keep.all()):
                del rows
                continue
            tfs = np.frombuffer(tf_arr, dtype=np.uint16)
            new_rows = array("i", rows[keep].tobytes())
            new_tf = array("H", tfs[keep].tobytes())
            del rows, tfs
            self._post_rows[tid] = new_rows
            self._post_tf[tid] = new_tf
        self._n_dead = 0

    # ------------------------------------------------------------------ reads

    def _query_terms(self, query: str) -> list[tuple[int, int]]:
        """(term id, occurrences in the query) for the query's indexed terms, in the order of
        their first occurrence (the order their scores are summed in).

        Same terms as counting :meth:`tokenize` and looking the stems up in the vocabulary, but
        words seen while indexing come from the ``word -> term id`` memo (no stemming).
        """
        cache = self._word_ids
        stopwords = self._stopwords
        counts: dict[int, int] = {}
        for word in _split_words(query):
            tid = cache.get(word)
            if tid is None:
                if word in stopwords:
                    continue
                tid = self._find(self._stemmer.stemWord(word[:MAX_TERM_CHARS]))
                if tid is None:
                    continue
                if len(cache) < _WORD_CACHE_MAX and len(word) <= MAX_TERM_CHARS:
                    cache[word] = tid  # an indexed term keeps its id: remember the word
            elif tid < 0:  # a stopword
                continue
            counts[tid] = counts.get(tid, 0) + 1
        return list(counts.items())

    def _avgdl(self) -> float:
        return self._total_len / self._n_live if self._n_live and self._total_len else 1.0

    def query_scores(self, query: str) -> QueryScores:
        """The query's BM25 score of every row, for scoring many rows against one query.

        The scores are summed into a dense per-row buffer that the index reuses, so a lookup is
        one gather; :meth:`QueryScores.release` (or leaving its ``with`` block) hands the buffer
        back. Concurrent queries each get one (a second one allocates its own).

        Args:
            query: The query text (tokenized like the documents).
        """
        if self._n_live == 0:
            return QueryScores(None, None, None)
        # a term of a loaded snapshot is read in place (joining its views costs ~0.02 us more
        # than joining arrays; copying it out cost ~3 us the first time a query used it)
        found = [(tid, c, self._postings(tid)) for tid, c in self._query_terms(query)]
        terms = [(tid, c) for tid, c, (rows_of, _) in found if len(rows_of)]
        if not terms:
            return QueryScores(None, None, None)
        # all the query terms' postings at once, term after term (each list is in row order)
        postings = [pair for _, _, pair in found if len(pair[0])]
        lengths = [len(rows_of) for rows_of, _ in postings]
        rows32 = np.frombuffer(b"".join([rows_of for rows_of, _ in postings]), np.int32)
        tf16 = np.frombuffer(b"".join([tf_of for _, tf_of in postings]), np.uint16)
        if self._n_live < self._n_rows:  # tombstones: only live postings count and score
            live = self._live[rows32]
            ends = np.cumsum(lengths)
            live_before = np.concatenate(([0], np.cumsum(live)))
            dfs = (live_before[ends] - live_before[ends - lengths]).tolist()
            rows32, tf16 = rows32[live], tf16[live]
        else:
            dfs = lengths
        n = self._n_live
        weights: list[float] = []
        counts: list[int] = []
        for (_, qtf), df in zip(terms, dfs, strict=True):
            if df:
                weights.append(qtf * math.log(1.0 + (n - df + 0.5) / (df + 0.5)))
                counts.append(df)
        if not counts:
            return QueryScores(None, None, None)
        # per posting: (qtf * idf) * tf / (tf + k1 * (1 - b + b * |d| / avgdl))
        tf = tf16.astype(np.float64)
        norm = self.k1 * (1.0 - self.b + self.b * self._doclen[rows32] / self._avgdl())
        weight = np.repeat(np.array(weights), counts) if len(counts) > 1 else weights[0]
        contrib = weight * tf / (tf + norm)
        lock: threading.Lock | None = self._scratch_lock
        if lock is not None and lock.acquire(blocking=False):
            dense = self._scratch
            if dense is None or dense.shape[0] < self._n_rows:
                size = self._n_rows if dense is None else max(self._n_rows, 2 * dense.shape[0])
                dense = self._scratch = np.zeros(size, dtype=np.float64)
        else:  # the shared buffer is in use (another thread's query): a private one
            lock = None
            dense = np.zeros(self._n_rows, dtype=np.float64)
        try:
            # per row, a running sum from 0 in posting order (term after term), as the
            # per-term bincount of earlier versions summed: the same float64 bits
            np.add.at(dense, rows32, contrib)
        except BaseException:
            dense[rows32] = 0.0
            if lock is not None:
                lock.release()
            raise
        return QueryScores(dense, rows32, lock, len(counts))

    def matches(self, query: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Every live row that shares a term with the query, with its BM25 score.

        Args:
            query: The query text (tokenized like the documents).

        Returns:
            ``(rows, scores)``: int64 rows in ascending order and their float32 scores (the
            scores :meth:`search` returns, in row order instead of score order).
        """
        with self.query_scores(query) as scores:
            return scores.matches()

    def search(
        self, query: str, k: int | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Score live rows that share at least one term with the query.

        Args:
            query: The query text (tokenized like the documents).
            k: Return at most this many rows; ``None`` returns every matching row.

        Returns:
            ``(rows, scores)``: int64 row positions and float32 BM25 scores, sorted by score
            descending (ties by row ascending). Both empty when nothing matches, e.g. for an
            empty or stopword-only query.
        """
        if k is not None and k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        rows, scores = self.matches(query)
        return top_matches(rows, scores, k)

    def score_rows(
        self, query: str, rows: Sequence[int] | npt.NDArray[np.integer]
    ) -> npt.NDArray[np.float32]:
        """BM25 scores of the given rows (0 for non-matching, removed or unknown rows).

        Useful to score candidates found by another index (e.g. dense ANN) lexically.

        Args:
            query: The query text.
            rows: Row positions, any order; duplicates allowed.

        Returns:
            float32 scores aligned with ``rows``.
        """
        wanted = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = np.zeros(wanted.shape[0], dtype=np.float32)
        if wanted.shape[0] == 0:
            return out
        sorted_rows, found_scores = self.matches(query)  # rows ascending
        if sorted_rows.shape[0] == 0:
            return out
        pos = np.searchsorted(sorted_rows, wanted)
        pos_clipped = np.minimum(pos, sorted_rows.shape[0] - 1)
        hit = sorted_rows[pos_clipped] == wanted
        out[hit] = found_scores[pos_clipped[hit]]
        return out
