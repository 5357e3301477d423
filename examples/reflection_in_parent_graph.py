"""A parent LangGraph agent that remembers every turn and reflects as a subgraph node.

The parent graph runs ``remember -> reflect -> respond`` on every user message:

* ``remember`` stores the message in a :class:`MemoryStream` (importance rated by the model);
* ``reflect`` is the compiled graph of :func:`create_reflection_graph`, added directly as a node:
  it shares the keys ``namespace``/``force`` (its input) and ``reflections``/``skipped`` (its
  output) with the parent state, and does nothing until enough important things happened;
* ``respond`` answers with the most relevant memories, insights included.

Run it: ``python examples/reflection_in_parent_graph.py``. With ``OPENAI_API_KEY`` set it uses
``ChatOpenAI``/``OpenAIEmbeddings``; otherwise an offline scripted chat model and bag-of-words
embeddings, so it runs anywhere (the answers are canned, the plumbing is real).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypedDict

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from langchain_reflective import MemoryStream
from langchain_reflective.importance import LLMImportanceScorer
from langchain_reflective.records import MemoryRecord
from langchain_reflective.reflection import ReflectionConfig, create_reflection_graph

# -- offline stand-ins (used when no OPENAI_API_KEY is set) --------------------------------------


class HashingEmbeddings(Embeddings):
    """Bag-of-words embeddings: texts that share words are similar."""

    def __init__(self, size: int = 256) -> None:
        self.size = size

    def _embed(self, text: str) -> list[float]:
        vec = [0.0] * self.size
        for word in re.findall(r"[a-z]+", text.lower()):
            vec[int(hashlib.sha1(word.encode()).hexdigest(), 16) % self.size] += 1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


def _items(text: str, tag: str) -> list[str]:
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    return [re.sub(r"^\d+\. ", "", line) for line in m.group(1).splitlines()] if m else []


class OfflineChatModel(BaseChatModel):
    """Answers the reflection prompts from their own data, like a (very literal) model."""

    @property
    def _llm_type(self) -> str:
        return "offline-example"

    def _answer(self, messages: Sequence[BaseMessage]) -> str:
        text = "\n".join(str(m.content) for m in messages)
        if "<memories>" in text:  # importance: a life event matters more
            return "\n".join(
                f"{i}: {8 if re.search(r'job|moved|love|exam', t) else 3}"
                for i, t in enumerate(_items(text, "memories"), 1)
            )
        if "salient high-level questions" in text:
            return "\n".join(f"{i}. {t}?" for i, t in enumerate(_items(text, "statements")[-3:], 1))
        if "condense" in text.lower():
            return "\n".join(f"{i}. {t}" for i, t in enumerate(_items(text, "insights")[:5], 1))
        if "high-level insights" in text:
            items = _items(text, "statements")
            cites = ", ".join(str(i) for i in range(1, min(3, len(items)) + 1))
            return f"1. Alice's life is changing around: {items[0]} [{cites}]"
        return "Noted. " + (str(messages[-1].content).splitlines() or [""])[0]

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self._answer(messages)))])


def default_components(*, offline: bool) -> tuple[BaseChatModel, Embeddings]:
    """ChatOpenAI + OpenAIEmbeddings with a key, else the offline stand-ins."""
    if not offline and os.environ.get("OPENAI_API_KEY"):
        from langchain_openai import ChatOpenAI, OpenAIEmbeddings

        return ChatOpenAI(model="gpt-4o-mini", temperature=0), OpenAIEmbeddings()
    return OfflineChatModel(), HashingEmbeddings()


# -- the parent agent ----------------------------------------------------------------------------


class AgentState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    namespace: str | None  # shared with the reflection graph's input
    force: bool  # shared with the reflection graph's input
    reflections: list[MemoryRecord]  # written by the reflection graph
    skipped: str | None  # written by the reflection graph
    now: datetime | None  # the clock (shared too)


def build_agent(model: BaseChatModel, stream: MemoryStream) -> Any:
    """The parent graph: remember -> reflect (subgraph) -> respond."""
    reflection = create_reflection_graph(
        model, stream, config=ReflectionConfig(threshold=2.0, min_relevance=0.3)
    )

    def remember(state: AgentState) -> dict[str, Any]:
        text = str(state["messages"][-1].content)
        stream.add(text, namespace=state.get("namespace"), now=state.get("now"))
        return {}

    def respond(state: AgentState) -> dict[str, Any]:
        question = str(state["messages"][-1].content)
        hits = stream.retrieve(
            question, k=3, namespace=state.get("namespace"), now=state.get("now")
        )
        context = "\n".join(f"- ({h.record.kind}) {h.record.text}" for h in hits)
        reply = model.invoke(f"{question}\n\nWhat you remember:\n{context}")
        return {"messages": [reply]}

    builder = StateGraph(AgentState)
    builder.add_node("remember", remember)
    builder.add_node("reflect", reflection)  # the compiled reflection graph as a node
    builder.add_node("respond", respond)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "reflect")
    builder.add_edge("reflect", "respond")
    builder.add_edge("respond", END)
    return builder.compile(name="agent")


TURNS = [
    "I had coffee this morning.",
    "I got a new job offer from a startup in Berlin!",
    "I think I will accept the job and move to Berlin.",
    "Walked the dog, the weather was nice.",
    "I told my family I am moving to Berlin for the job.",
]


def main(*, offline: bool = False) -> list[MemoryRecord]:
    """Run a short conversation; return every reflection stored."""
    model, embeddings = default_components(offline=offline)
    stream = MemoryStream(embeddings, importance_scorer=LLMImportanceScorer(model))
    agent = build_agent(model, stream)
    start = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)
    stored: list[MemoryRecord] = []
    for i, turn in enumerate(TURNS):
        state = agent.invoke(
            {
                "messages": [HumanMessage(turn)],
                "namespace": "alice",
                "now": start + timedelta(hours=i),
            }
        )
        print(f"user: {turn}")
        print(f"  agent: {state['messages'][-1].content}")
        if state.get("reflections"):
            for record in state["reflections"]:
                print(f"  reflection (depth {record.depth}): {record.text}")
            stored += state["reflections"]
        else:
            print(f"  (no reflection: {state.get('skipped')})")
    return stored


if __name__ == "__main__":
    main()
