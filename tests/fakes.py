"""Deterministic test doubles shared by the test suites."""

from __future__ import annotations

import errno
import hashlib
import os
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


class FullDiskOs:
    """The ``os`` module as a module writing files sees it on a disk that fills up: the step
    named by ``fail`` raises ``ENOSPC`` -- ``"write"`` (a file opened with ``fdopen`` takes
    its first write and refuses the next), ``"fsync"`` or ``"replace"`` -- and everything else
    is the real ``os``. Install it with ``monkeypatch.setattr(module, "os", FullDiskOs(...))``.
    """

    def __init__(self, fail: str) -> None:
        self.fail = fail

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def _full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(self, fd: int, *args: Any, **kwargs: Any) -> Any:
        real = os.fdopen(fd, *args, **kwargs)
        return _FillingFile(real) if self.fail == "write" else real

    def fsync(self, fd: int) -> None:
        if self.fail == "fsync":
            self._full()
        os.fsync(fd)

    def replace(self, src: Any, dst: Any) -> None:
        if self.fail == "replace":
            self._full()
        os.replace(src, dst)


class _FillingFile:
    """A text file whose first write fits and whose later writes do not."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self._writes = 0

    def write(self, text: str) -> int:
        self._writes += 1
        if self._writes > 1:
            FullDiskOs._full()
        return int(self._real.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)
