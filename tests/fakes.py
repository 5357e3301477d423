"""Deterministic test doubles shared by the test suites."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings


class WordEmbeddings(Embeddings):
    """Bag-of-words hashing embeddings: texts sharing words are similar. Counts its calls."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.document_calls = 0
        self.query_calls = 0

    def _embed(self, text: str) -> list[float]:
        vec = np.zeros(self.size)
        for word in re.findall(r"\w+", text.lower()):
            h = int(hashlib.md5(word.encode()).hexdigest(), 16)
            vec[h % self.size] += 1.0 if (h >> 64) % 2 else -1.0
        vec[0] += 0.01  # never all-zero
        return (vec / np.linalg.norm(vec)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return self._embed(text)


class BrokenEmbeddings(Embeddings):
    """Returns whatever ``result`` says, to test validation."""

    def __init__(self, result: Any) -> None:
        self.result = result

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.result  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.result[0]  # type: ignore[no-any-return]
