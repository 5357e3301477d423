"""A parent LangGraph agent that remembers every turn and reflects as a subgraph node.

The parent graph runs ``remember -> reflect -> respond`` on every user message:

* ``remember`` stores the message in a :class:`MemoryStream` (importance rated by the model);
* ``reflect`` is the compiled graph of :func:`create_reflection_graph`, added directly as a node:
  it reads ``namespace``/``force``/``now`` from the parent state and writes back the keys of its
  output the parent state declares (here ``reflections``, ``skipped`` and ``force``), and does
  nothing until enough important things happened;
* ``respond`` answers with the most relevant memories, insights included.

Run it with the embedded local models (no network, no API key; the tiny local chat model's
answers are poor, and unparseable ratings fall back to the heuristic) or with ``OPENAI_API_KEY``
set for a real model::

    python examples/reflection_in_parent_graph.py

The test suite calls ``main(model=<fake chat model>, embeddings=<bag-of-words embeddings>)``.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypedDict

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from langchain_reflective import MemoryStream
from langchain_reflective.importance import LLMImportanceScorer
from langchain_reflective.records import MemoryRecord
from langchain_reflective.reflection import ReflectionConfig, create_reflection_graph

# -- the parent agent ----------------------------------------------------------------------------


class AgentState(TypedDict, total=False):
    """The parent's state. The reflection graph, as a node, reads ``namespace``, ``force`` and
    ``now``, and writes back each of ``reflections``, ``reflection_ids``, ``questions``,
    ``skipped``, ``importance_sum`` and ``force`` that this state declares (no other key).

    A parent key of one of those names with another meaning (its own ``questions``) would be
    overwritten: rename it, or call the graph from a node function and return what to keep.
    Several reflections in one step (a ``Send`` per user) each write those keys: each one
    declared here then needs a reducer (``Annotated[list[MemoryRecord], operator.add]``), or
    LangGraph raises ``InvalidUpdateError`` (at ``force`` first: leave it out and put it in the
    ``Send`` payload).
    """

    messages: Annotated[list[AnyMessage], add_messages]
    namespace: str | None  # read by the reflection graph
    force: bool  # read by the reflection graph, written back (False after a forced run)
    reflections: list[MemoryRecord]  # written by the reflection graph
    skipped: str | None  # written by the reflection graph
    now: datetime | None  # the clock (read by the reflection graph)


def build_agent(model: BaseChatModel, stream: MemoryStream) -> Any:
    """The parent graph: remember -> reflect (subgraph) -> respond."""
    reflection = create_reflection_graph(
        model, stream, config=ReflectionConfig(threshold=1.5, min_relevance=0.3)
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


def main(
    model: BaseChatModel | None = None, embeddings: Embeddings | None = None
) -> dict[str, Any]:
    """Run a short conversation through the parent graph; return answers and reflections."""
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model

            model = stack.enter_context(default_chat_model(max_tokens=256))
        if embeddings is None:
            from langchain_reflective.local import default_embeddings

            embeddings = default_embeddings()
        stream = stack.enter_context(
            MemoryStream(embeddings, importance_scorer=LLMImportanceScorer(model))
        )
        agent = build_agent(model, stream)
        start = datetime(2025, 6, 1, 9, 0, tzinfo=UTC)
        answers: list[str] = []
        stored: list[MemoryRecord] = []
        for i, turn in enumerate(TURNS):
            state = agent.invoke(
                {
                    "messages": [HumanMessage(turn)],
                    "namespace": "alice",
                    "now": start + timedelta(hours=i),
                }
            )
            answers.append(str(state["messages"][-1].content))
            print(f"user: {turn}\n  agent: {answers[-1]}")
            for record in state.get("reflections") or []:
                print(f"  reflection (depth {record.depth}): {record.text}")
            if not state.get("reflections"):
                print(f"  (no reflection: {state.get('skipped')})")
            stored += state.get("reflections") or []
        return {"answers": answers, "reflections": stored}


if __name__ == "__main__":
    main()
