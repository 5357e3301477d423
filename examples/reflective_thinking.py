"""Seed 004's memory flow: three turns of reflective thinking over one memory file.

Turn 1 analyses the codebase; turn 2 reviews a benchmark and may recall turn 1 by number;
turn 3 plans the optimisation and may recall earlier contexts by the keywords "bottleneck" and
"parseData". Each turn stores its full context and a summary; the summaries of earlier turns
are injected into the next turn's thinking prompt. Then the file is reopened (the summaries
are still there) and exported to, and imported from, a JSON-lines file.

Whether the model thinks in several rounds and recalls is its own decision: a tool-calling
model (e.g. with ``OPENAI_API_KEY`` set) does what the seed shows; the embedded local base
model usually answers in one round without tools, and its summaries often take the
extractive fallback (printed as such). The test suite plays the seed's exact script.

    python examples/reflective_thinking.py
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

from langchain_reflective import MemoryStream, create_thinking_graph
from langchain_reflective.thinking import ContextMemory, format_summaries

TURNS = [
    (
        "Analyse the codebase structure.",
        "Files: [main.ts, utils.ts, config.ts]\nState: { initialized: true }",
    ),
    (
        "The benchmark is slow. Why?",
        "Files: [main.ts, utils.ts, config.ts, benchmark.ts]\n"
        "State: { initialized: true, benchmarkRun: true }",
    ),
    (
        "Optimise the slow part.",
        "Files: [main.ts, utils.ts, config.ts, benchmark.ts]\n"
        "State: { initialized: true, benchmarkRun: true, optimized: true }",
    ),
]
NAMESPACE = "project-x"


def main(
    model: BaseChatModel | None = None, embeddings: Embeddings | None = None
) -> dict[str, Any]:
    """Run the three turns, then resume from the file and round-trip an export."""
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model

            model = stack.enter_context(default_chat_model(max_tokens=256))
        if embeddings is None:
            from langchain_reflective.local import default_embeddings

            embeddings = default_embeddings()
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        db = folder / "thinking.db"

        outputs = []
        with MemoryStream(embeddings, path=db, namespace=NAMESPACE) as stream:
            graph = create_thinking_graph(model, stream, max_rounds=3)
            history: list[Any] = []
            for request, context in TURNS:
                history.append(HumanMessage(request))
                out = graph.invoke({"context": context, "messages": history})
                outputs.append(out)
                print(f"--- turn {out['turn']} ({out['stop_reason']})")
                for thought in out["thoughts"]:
                    print(f"  round {thought['round']}: {thought['thought'][:70]!r}")
                    if thought["recalled_ids"]:
                        print(f"    recalled {thought['recalled_ids']}")
                summary = out["summary"]
                tag = " (extractive fallback)" if summary["fallback"] else ""
                print(f"  summary{tag}: {summary['summary'][:100]}")
            accumulated = outputs[-1]["accumulated_summaries"]

        # a new stream on the same file resumes with the same summaries and the next turn number
        with MemoryStream(embeddings, path=db, namespace=NAMESPACE) as reopened:
            memory = ContextMemory(reopened)
            summaries = [s.to_dict() for s in memory.accumulated_summaries()]
            resumed = "\n".join(format_summaries(summaries))
            next_turn = memory.next_turn()
            exported = memory.export_jsonl(folder / "thinking.jsonl")
        with MemoryStream(embeddings, path=folder / "copy.db", namespace=NAMESPACE) as copy:
            imported = ContextMemory(copy).import_jsonl(folder / "thinking.jsonl")
            from_copy = [s.summary for s in ContextMemory(copy).accumulated_summaries()]
        print(f"resumed at turn {next_turn}; exported {exported}, imported {imported} records")
        return {
            "outputs": outputs,
            "accumulated": accumulated,
            "resumed": resumed,
            "next_turn": next_turn,
            "exported": exported,
            "imported": imported,
            "summaries_from_copy": from_copy,
        }


if __name__ == "__main__":
    main()
