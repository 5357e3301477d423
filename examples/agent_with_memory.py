"""A ``create_agent`` agent with a long-term memory that reflects, for several users.

:class:`ReflectiveMemoryMiddleware` adds the user's working context (insights, recent and
relevant memories, fenced as data) to the system prompt before every model call and records
each turn as observations afterwards; with ``include_tools=True`` the agent also gets the
``recall_memories``, ``save_memory`` and ``reflect_now`` tools. The user comes from the run's
context (``context=UserContext(user_id=...)``), so one agent serves many users and none sees
another's memories. Reflections run in a background thread; ``memory.flush()`` waits for them.

Run it with the embedded local models (no network; the tiny local model rarely calls tools)
or with ``OPENAI_API_KEY`` set for a real tool-calling model::

    python examples/agent_with_memory.py
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from langchain_reflective import (
    MemoryConfig,
    MemoryStream,
    ReflectiveMemory,
    ReflectiveMemoryMiddleware,
)


@dataclass
class UserContext:
    """Whose memory the run uses."""

    user_id: str


CONVERSATIONS = {
    "alice": [
        "I'm vegetarian and I love spicy food.",
        "Remember that my sister Jo visits every December.",
        "Suggest a dinner for when Jo visits.",
    ],
    "bob": [
        "I'm learning to play the cello.",
        "What should I practise this week?",
    ],
}


def main(
    model: BaseChatModel | None = None, embeddings: Embeddings | None = None
) -> dict[str, Any]:
    """Two users talk to one agent; print what each one's memory holds afterwards."""
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model

            # reflection answers (questions, insights with citations) need room: at 256 tokens
            # the local model's structured answers were cut off (LengthFinishReasonError)
            model = stack.enter_context(default_chat_model(max_tokens=1024))
        if embeddings is None:
            from langchain_reflective.local import default_embeddings

            embeddings = default_embeddings()
        memory = stack.enter_context(
            ReflectiveMemory(model, MemoryStream(embeddings), config=MemoryConfig(reflect_every=4))
        )
        agent = create_agent(
            model,
            system_prompt="You are a helpful personal assistant. Be brief.",
            middleware=[ReflectiveMemoryMiddleware(memory, include_tools=True)],
            context_schema=UserContext,
            checkpointer=InMemorySaver(),
            name="assistant_with_memory",
        )

        for user_id, messages in CONVERSATIONS.items():
            config: RunnableConfig = {"configurable": {"thread_id": f"{user_id}-1"}}
            for text in messages:
                out = agent.invoke(
                    {"messages": [HumanMessage(text)]}, config, context=UserContext(user_id)
                )
                print(f"{user_id}: {text}\nassistant: {out['messages'][-1].text}\n")

        memory.flush()  # wait for the background work (pending turns, reflections)
        report: dict[str, Any] = {"errors": [repr(e.error) for e in memory.errors]}
        for failure in memory.errors:  # each was logged as one line; the details are here
            print(f"background {failure.stage} failed for {failure.namespace}: {failure.error}")
        for user_id in CONVERSATIONS:
            records = memory.stream.recent(None, namespace=user_id)
            report[user_id] = {
                "observations": [r.text for r in records if r.kind == "observation"],
                "insights": [r.text for r in records if r.kind == "reflection"],
            }
            print(f"{user_id}'s insights: {report[user_id]['insights']}")
        return report


if __name__ == "__main__":
    main()
