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


def test_full_reflection_over_http(local_chat: Any, local_embeddings: Any, tmp_path: Path) -> None:
    stream = MemoryStream(
        local_embeddings,
        path=tmp_path / "memory.db",
        importance_scorer=LLMImportanceScorer(local_chat),
    )
    with stream:
        observations = stream.add(EVENTS)
        assert {r.importance_source for r in observations} <= {"llm", "heuristic"}
        config = ReflectionConfig(structured_output=True, min_relevance=0.2, evidence_k=6)
        graph = create_reflection_graph(local_chat, stream, config=config)
        result = graph.invoke({"force": True})

        if result.get("skipped"):
            # the tiny model may produce nothing usable: the fallback must say why
            assert result["skipped"] in ("no_questions", "no_insights")
            assert stream.recent(kinds=["reflection"]) == []
            return
        reflections = result["reflections"]
        assert 1 <= len(reflections) <= config.max_insights
        assert result["questions"] and all(isinstance(q, str) for q in result["questions"])
        stored = {r.id: r for r in stream.recent()}
        for reflection in reflections:
            assert reflection.kind == "reflection"
            assert reflection.evidence, "insights without evidence are dropped by default"
            assert all(e in stored for e in reflection.evidence)
            assert reflection.depth == 1 + max(stored[e].depth for e in reflection.evidence)
            assert 0.0 <= reflection.importance <= 1.0
        assert stream.reflection_state().importance_sum == 0
