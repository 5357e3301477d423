"""Chat with short-term history *and* long-term reflective memory, the LangChain 1.x way.

``RunnableWithMessageHistory`` is deprecated in langchain-core 1.x in favour of LangGraph's
built-in persistence, so this example uses its replacement:

* **short-term memory** (the conversation of one thread) is the graph state, persisted by a
  LangGraph checkpointer per ``thread_id``;
* **long-term memory** (what the assistant knows about a user across threads) is a
  :class:`ReflectiveMemory`, namespaced by the ``user_id`` in the run's context. Before each
  answer the working context (insights, recent and relevant memories, fenced as data) joins the
  system prompt; after it, the turn is stored as observations, and reflections happen in the
  background.

A new thread starts with an empty history but still remembers the user.

Run it with the embedded local models (no network) or with ``OPENAI_API_KEY`` set::

    python examples/chat_with_history.py
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from langchain_reflective import MemoryConfig, MemoryStream, ReflectiveMemory

SYSTEM = "You are a friendly assistant with a long-term memory of the user."


@dataclass
class UserContext:
    """The run context: whose long-term memory to use."""

    user_id: str


def build_chat(
    model: BaseChatModel, memory: ReflectiveMemory
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """A one-node chat graph: long-term context in, turn recorded out; history checkpointed."""

    def chat(state: MessagesState, runtime: Runtime[UserContext]) -> dict[str, Any]:
        user_id = runtime.context.user_id
        question = state["messages"][-1].text
        context = memory.build_context(question, namespace=user_id, system=SYSTEM)
        answer = model.invoke([SystemMessage(context), *state["messages"]])
        memory.add([f"User: {question}", f"Assistant: {answer.text}"], namespace=user_id)
        return {"messages": [answer]}

    builder = StateGraph(MessagesState, context_schema=UserContext)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    graph = builder.compile(checkpointer=InMemorySaver(), name="chat_with_memory")
    return graph.with_config(tags=["langchain-reflective", "example"])


def main(
    model: BaseChatModel | None = None, embeddings: Embeddings | None = None
) -> dict[str, Any]:
    """Two threads of one user: the second has no history but remembers the first."""
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model

            model = stack.enter_context(default_chat_model(max_tokens=256))
        if embeddings is None:
            from langchain_reflective.local import default_embeddings

            embeddings = default_embeddings()
        memory = stack.enter_context(
            ReflectiveMemory(model, MemoryStream(embeddings), config=MemoryConfig(reflect_every=6))
        )
        chat = build_chat(model, memory)
        alice = UserContext(user_id="alice")

        def say(thread: str, text: str) -> AIMessage:
            config: RunnableConfig = {"configurable": {"thread_id": thread}}
            out = chat.invoke({"messages": [HumanMessage(text)]}, config, context=alice)
            answer: AIMessage = out["messages"][-1]
            print(f"[{thread}] user: {text}\n[{thread}] assistant: {answer.text}\n")
            return answer

        say("monday", "Hi! I just adopted a grey cat called Miso.")
        say("monday", "She loves sleeping on my keyboard.")
        say("monday", "I'm also training for the Lisbon half marathon.")
        say("tuesday", "What's my cat's name?")
        memory.flush()

        history = {
            thread: len(chat.get_state({"configurable": {"thread_id": thread}}).values["messages"])
            for thread in ("monday", "tuesday")
        }
        insights = [
            r.text for r in memory.stream.recent(None, namespace="alice", kinds=["reflection"])
        ]
        print("messages per thread:", history)
        print("insights about alice:", insights)
        return {
            "history": history,
            "memories": memory.stream.count(namespace="alice"),
            "insights": insights,
            "context": memory.build_context("cat", namespace="alice"),
        }


if __name__ == "__main__":
    main()
