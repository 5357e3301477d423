"""The whole real path offline: ChatOpenAI over HTTP to the local llama.cpp server, JSON-schema
structured output, batched importance, a full reflection graph, real embeddings, FAISS, SQLite.

The local model is a tiny base model: these tests assert structure, never wording.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler

from langchain_reflective import (
    LLMImportanceScorer,
    MemoryStream,
    ReflectionConfig,
    create_reflection_graph,
)

pytestmark = [pytest.mark.integration, pytest.mark.local_llm]

EVENTS = [
    "Klaus is writing a research paper about gentrification in low-income neighborhoods",
    "Klaus spent the whole night in the library working on his paper",
    "Klaus told Maria that his paper is due next Friday",
    "Maria offered to read a draft of Klaus's gentrification paper",
    "Klaus ate a sandwich for lunch",
    "Klaus felt anxious about the deadline of his research paper",
    "Maria and Klaus talked about urban housing prices",
    "Klaus finished the first draft of the paper and sent it to Maria",
    "Klaus brushed his teeth",
    "Klaus's professor praised the paper's analysis of rent increases",
    "Klaus booked a table to celebrate finishing the paper",
    "Maria said the paper changed her view of the neighborhood",
]


class CountingHandler(BaseCallbackHandler):
    def __init__(self) -> None:
        self.calls = 0

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1


def test_batched_importance_over_http(local_chat_server: Any) -> None:
    counter = CountingHandler()
    model = local_chat_server.chat_model(temperature=0.0, max_tokens=256, callbacks=[counter])
    scorer = LLMImportanceScorer(model)
    assert scorer.uses_structured_output  # json_schema through the server's grammar
    results = scorer.score(EVENTS)
    assert len(results) == len(EVENTS)
    assert counter.calls == 2  # 12 memories, 10 per call
    for result in results:
        assert 0.1 <= result.value <= 1.0
        assert result.source in ("llm", "heuristic")
        assert (result.error is None) == (result.source == "llm")
    assert any(r.source == "llm" for r in results), [r.error for r in results]


# -- the completion-style path (what the embedded model gets by default) ------------------------


def test_the_local_model_is_prompted_completion_style(local_chat: Any) -> None:
    from langchain_reflective.completion import is_completion_model

    assert is_completion_model(local_chat)
    scorer = LLMImportanceScorer(local_chat)
    assert scorer.prompt_style == "completion" and scorer.uses_structured_output


def test_completion_path_over_http(
    local_chat_server: Any, local_embeddings: Any, tmp_path: Path
) -> None:
    """The whole path once: the stream rates what it adds through the server (batched), then
    a reflection graph stores insights. The server's grammar holds every answer to its
    schema: ratings are integers 1-10 for every memory, questions are What/How/Why questions
    naming someone, and insights cite only statements that were shown; the stored insights
    are reflections one level deeper than what they cite, and reflecting resets the counter
    (structure only, never wording)."""
    import re

    from langchain_reflective.completion import question_pattern, subjects

    model = local_chat_server.chat_model(temperature=0.0, max_tokens=320)
    turns = [f"{'Klaus' if i % 2 else 'Maria'}: {text}" for i, text in enumerate(EVENTS)]
    scorer = LLMImportanceScorer(model)
    with MemoryStream(local_embeddings, path=tmp_path / "m.db", importance_scorer=scorer) as stream:
        added = stream.add(turns)
        assert [r.importance_source for r in added] == ["llm"] * len(turns)
        assert all(round(r.importance * 10) in range(1, 11) for r in added)
        assert all(abs(r.importance * 10 - round(r.importance * 10)) < 1e-6 for r in added)
        assert stream.reflection_state().importance_sum > 0

        config = ReflectionConfig(min_relevance=0.2, evidence_k=6, max_insights=3, n_questions=2)
        result = create_reflection_graph(model, stream, config=config).invoke({"force": True})
        pattern = question_pattern(subjects(turns))
        assert len(result["questions"]) == config.n_questions
        assert all(re.fullmatch(pattern, q) for q in result["questions"]), result["questions"]
        stored = {r.id: r for r in stream.recent()}
        observations = {i for i, r in stored.items() if r.kind == "observation"}
        assert len(result["reflections"]) <= config.max_insights
        for reflection in result["reflections"]:
            assert reflection.kind == "reflection" and reflection.id in stored
            assert reflection.evidence and set(reflection.evidence) <= observations
            assert reflection.depth == 1 + max(stored[e].depth for e in reflection.evidence)
            assert 0.0 <= reflection.importance <= 1.0
            assert reflection.text.split()[0] in ("Klaus", "Maria")
        if not result["reflections"]:
            assert result["skipped"] == "no_insights"
            assert stream.recent(kinds=["reflection"]) == []
        assert stream.reflection_state().importance_sum == 0
