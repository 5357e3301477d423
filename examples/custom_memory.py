"""A custom memory strategy written as a user would: seed 001's priority memory, in an agent.

``PriorityMemory`` keeps the ``max_size`` most important turns of each user (importance: the
length of the agent's answer, as in the seed) and shows them oldest first. It subclasses
:class:`~langchain_reflective.BaseMemoryStrategy`, so :class:`MemoryMiddleware` runs it in a
``create_agent`` agent, and it passes ``StrategyConformanceTests`` (see
``tests/unit/test_strategies_conformance.py``). The guide is ``docs/MEMORY.md``.

Run it with the embedded local models (no network) or with ``OPENAI_API_KEY`` set::

    python examples/custom_memory.py
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from langchain.agents import create_agent
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage

from langchain_reflective import BaseMemoryStrategy, MemoryMiddleware, Observation
from langchain_reflective.strategies import fit_observations, observation_messages


class PriorityMemory(BaseMemoryStrategy):
    """Keeps the ``max_size`` most important turns per user; shows them oldest first."""

    def __init__(self, max_size: int = 20) -> None:
        self.max_size = max_size
        self._lock = threading.Lock()  # one instance serves every thread of the agent
        self._kept: dict[str, list[Observation]] = {}  # per namespace (user)

    def score_importance(self, observation: Observation) -> float:
        """Longer answers are more important (seed 001's example scoring)."""
        return min(1.0, len(observation.reply) / 1000)

    def commit(self, observation: Observation) -> None:
        observation = self.check_observation(observation)
        namespace = self.resolve_namespace(observation.namespace)
        scored = replace(observation, importance=self.score_importance(observation))
        with self._lock:
            kept = self._kept.setdefault(namespace, [])
            kept.append(scored)
            kept.sort(key=lambda o: (o.importance or 0.0, o.created_at), reverse=True)
            del kept[self.max_size :]  # evict the least important (the oldest of equals)

    def context(
        self,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        namespace: str | None = None,
    ) -> list[BaseMessage]:
        namespace = self.resolve_namespace(namespace)
        with self._lock:
            kept = list(self._kept.get(namespace, []))  # most important first
        chosen = fit_observations(kept, budget)  # the most important that fit the budget
        chosen.sort(key=lambda o: o.created_at)  # shown in chronological order
        return observation_messages(chosen)

    def purge(self, *, namespace: str | None = None) -> None:
        with self._lock:
            self._kept.pop(self.resolve_namespace(namespace), None)


CONVERSATION = [
    "I'm allergic to peanuts.",
    "Nice weather today.",
    "My daughter Lina starts school in September.",
    "What should I cook for Lina's first school lunch?",
]


def main(
    model: BaseChatModel | None = None, embeddings: Embeddings | None = None
) -> dict[str, Any]:
    """One user talks to an agent whose memory keeps only the two most important turns.

    ``embeddings`` is not used: this memory needs none (the example convention passes it).
    """
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model

            model = stack.enter_context(default_chat_model(max_tokens=256))
        memory = PriorityMemory(max_size=2)
        agent = create_agent(
            model,
            system_prompt="You are a helpful family assistant. Be brief.",
            middleware=[MemoryMiddleware(memory, budget=1000)],
            name="assistant_with_priority_memory",
        )
        answers = []
        for text in CONVERSATION:
            out = agent.invoke({"messages": [HumanMessage(text)]}, context={"user_id": "ana"})
            answers.append(out["messages"][-1].text)
            print(f"ana: {text}\nassistant: {answers[-1]}\n")

        kept = memory.context([], namespace="ana")
        report = {
            "answers": answers,
            "kept": [m.text for m in kept if isinstance(m, HumanMessage)],
        }
        print(f"ana's memory keeps: {report['kept']}")
        return report


if __name__ == "__main__":
    main()
