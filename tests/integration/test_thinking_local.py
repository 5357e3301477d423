"""The thinking graph on the real path: the embedded llama.cpp server over HTTP (tools bound,
JSON-schema summaries), real MiniLM embeddings and a SQLite file. Assertions are about
structure only, never about the tiny base model's wording."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from langchain_reflective import ContextMemory, MemoryStream, RetryConfig, create_thinking_graph

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_openai import ChatOpenAI

# ~110 s on 2 shared cores (six calls of the local model): outside the default run
pytestmark = [pytest.mark.integration, pytest.mark.local_llm, pytest.mark.slow]


async def test_two_turns_with_the_local_model(
    local_chat: ChatOpenAI, local_embeddings: Embeddings, tmp_path: Path
) -> None:
    with MemoryStream(local_embeddings, path=tmp_path / "thinking.db") as stream:
        graph = create_thinking_graph(
            local_chat, stream, max_rounds=2, retry=RetryConfig(attempts=1)
        )
        outs = [
            graph.invoke({"context": "Files: main.ts, utils.ts. The import is slow."}),
            await graph.ainvoke({"context": "parseData in utils.ts loops over rows twice."}),
        ]
        memory = ContextMemory(stream)
        for turn, out in enumerate(outs, 1):
            assert out["turn"] == turn and 1 <= len(out["thoughts"]) <= 2
            assert out["stop_reason"] in {"model", "max_rounds", "budget", "model_error"}
            assert sum(out["fallback_counts"].values()) == len(out["fallbacks"])
            summary = memory.summary_by_turn(turn)
            assert summary is not None and summary.summary.strip()
            assert summary.fallback == any(
                f["kind"].startswith("summary_") for f in out["fallbacks"]
            )
            assert memory.context_by_turn(turn) is not None
        assert [s["turn"] for s in outs[1]["summaries"]] == [1, 2]
        assert stream.count() == 4
