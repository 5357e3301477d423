"""``min_relevance`` on the approximate candidate path (a namespace above ``exact_limit``).

A retrieval asks for ``k`` memories at least as relevant as the threshold. When fewer than
``k`` of the approximate candidates pass it, more may pass among the memories the IVF index
did not propose: the retrieval scores every memory then -- as it does when a kind or time
filter leaves fewer than ``k`` candidates -- so it returns ``k`` whenever ``k`` exist, the
same memories exact scoring returns.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import numpy as np
from langchain_core.embeddings import DeterministicFakeEmbedding

from langchain_reflective import MemoryStream
from langchain_reflective.backends.sqlite.ann import maintain_ann

WORDS = (
    "alpha", "beta", "gamma", "delta", "tea", "paris", "bob", "alice", "sea", "coffee",
    "train", "music", "park", "dog", "cat",
)  # fmt: skip


def test_a_relevance_threshold_never_returns_fewer_than_exist(now: datetime) -> None:
    rng = random.Random(1)
    texts = [" ".join(rng.choice(WORDS) for _ in range(4)) + f" n{i}" for i in range(1500)]
    embeddings = DeterministicFakeEmbedding(size=32)  # random vectors: a weak IVF index
    exact = MemoryStream(embeddings, exact_limit=None)
    approximate = MemoryStream(embeddings, exact_limit=50, ann_candidates=16)
    for stream in (exact, approximate):
        stream.add(texts, importances=0.5, now=now - timedelta(days=1))
    approximate.retrieve("warm up", k=1, now=now, touch=False)
    part = approximate.backend._partitions["default"]
    maintain_ann(part, 50, wait=True)
    assert part.ann is not None  # the approximate path is taken
    docs = np.asarray(embeddings.embed_documents(texts))
    for query in ("coffee dog rain", "n17 music", "alpha gamma", "bob paris tea"):
        q = np.asarray(embeddings.embed_query(query))
        cosine = docs @ q / (np.linalg.norm(docs, axis=1) * np.linalg.norm(q))
        threshold = float(np.sort(cosine)[-15])  # 15 memories pass it
        flt = {"min_relevance": threshold - 1e-6}
        hits = exact.retrieve(query, k=20, now=now, filter=flt, touch=False)
        want = [h.record.text for h in hits]
        got = approximate.retrieve(query, k=20, now=now, filter=flt, touch=False)
        assert len(want) == 15
        assert [h.record.text for h in got] == want  # (it returned fewer)
