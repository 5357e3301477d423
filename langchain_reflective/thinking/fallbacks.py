"""Fallbacks of a thinking turn: the extractive summary and the template-placeholder check
(model and recall calls are :func:`~langchain_reflective._llm.guarded`, so their failure is
returned to the step, which then takes its fallback)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["PLACEHOLDER", "extractive_summary"]


PLACEHOLDER = re.compile(r"^\s*<[^<>]*>\s*$")  # a copied "<one sentence ...>" template slot
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[A-Za-z0-9_]{3,}")


def extractive_summary(
    context: str, thoughts: Sequence[Mapping[str, Any]] = (), *, max_chars: int = 300
) -> tuple[str, list[str]]:
    """The fallback summary: the context's and thoughts' most representative sentences.

    Sentences are scored by the mean corpus frequency of their words (a classic extractive
    summary); the best ones, in their original order, up to ``max_chars``, form the summary, and
    the thoughts' last reasons become the insights (each cut to ``max_chars``).
    """
    texts = [context, *(str(t.get("thought") or "") for t in thoughts)]
    sentences = [s.strip() for text in texts for s in _SENTENCE.split(text) if s.strip()]
    if not sentences:
        return "(empty context)", []
    freq = Counter(w.lower() for s in sentences for w in _WORD.findall(s))

    def score(sentence: str) -> float:
        words = [w.lower() for w in _WORD.findall(sentence)]
        return sum(freq[w] for w in words) / (len(words) or 1)

    ranked = sorted(range(len(sentences)), key=lambda i: (-score(sentences[i]), i))
    chosen: list[int] = []
    length = 0
    for i in ranked:
        if length + len(sentences[i]) > max_chars and chosen:
            continue
        chosen.append(i)
        length += len(sentences[i]) + 1
        if length >= max_chars:
            break
    summary = " ".join(sentences[i] for i in sorted(chosen))[:max_chars].strip()
    reasons = (str(t.get("reason") or "")[:max_chars].strip() for t in thoughts)
    insights = [r for r in reasons if r][-3:]
    return summary, insights
