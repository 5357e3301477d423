"""A ``create_agent`` agent that thinks before it acts: :class:`ThinkingMiddleware`.

Before the first model call of every user message the middleware runs the thinking rounds
(with ``continue_thinking`` and ``recall_context``), then adds the accumulated summaries of the
user's earlier turns, this turn's thoughts and any recalled contexts to the system message,
fenced as data. After the turn it stores the turn's snapshot (messages, tool calls, answer) and
a summary, in the user's own namespace (``context={"user_id": ...}``).

Run it with the embedded local models (no network) or with ``OPENAI_API_KEY`` set::

    python examples/agent_with_thinking.py
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import tool

from langchain_reflective import ContextMemory, MemoryStream, ThinkingMiddleware

FILES = {
    "utils.ts": "export function parseData(rows) { for (a of rows) for (b of rows) match(a, b) }",
    "main.ts": "import { parseData } from './utils'; run(parseData(load()))",
}


@tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return FILES.get(path, f"{path}: no such file")


@dataclass
class User:
    user_id: str


QUESTIONS = [
    ("alice", "Why is the import slow? Look at utils.ts."),
    ("alice", "Remind me: which function was the bottleneck?"),
    ("bob", "What files does the project have?"),
]


def main(
    model: BaseChatModel | None = None, embeddings: Embeddings | None = None
) -> dict[str, Any]:
    """Two users ask an agent with reflective thinking; print each turn's summary."""
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model

            model = stack.enter_context(default_chat_model(max_tokens=256))
        if embeddings is None:
            from langchain_reflective.local import default_embeddings

            embeddings = default_embeddings()
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        stream = stack.enter_context(MemoryStream(embeddings, path=folder / "agent.db"))
        agent = create_agent(
            model,
            tools=[read_file],
            system_prompt="You are a coding assistant. Answer briefly.",
            middleware=[ThinkingMiddleware(model, stream, max_rounds=2)],
            context_schema=User,
        )
        answers = []
        for user, question in QUESTIONS:
            result = agent.invoke(
                {"messages": [{"role": "user", "content": question}]}, context=User(user)
            )
            answers.append(result["messages"][-1].text)
            print(f"{user}: {question}\n  -> {answers[-1][:100]!r}")
        memory = ContextMemory(stream)
        summaries = {
            user: [s.summary for s in memory.accumulated_summaries(namespace=user)]
            for user in ("alice", "bob")
        }
        for user, items in summaries.items():
            print(f"{user}'s turn summaries: {items}")
        snapshots = {
            user: [s.context for s in memory.contexts_by_turn([1, 2], namespace=user)]
            for user in ("alice", "bob")
        }
        return {"answers": answers, "summaries": summaries, "snapshots": snapshots}


if __name__ == "__main__":
    main()
