"""LCEL: answer questions from long-term memory with ``retriever | format | prompt | model``.

The memory stream is a standard LangChain retriever (:class:`ReflectiveRetriever`), so it
composes like any other: retrieved memories are formatted into a fenced block (marked as data,
not instructions), put into a prompt and sent to the model. The chain carries a run name, tags
and metadata (namespace, k, scoring weights) so its LangSmith traces read well.

Run it with the embedded local models (no network, no API key; the tiny local chat model's
answers are poor) or with ``OPENAI_API_KEY`` set for a real model::

    python examples/lcel_chain.py
"""

from __future__ import annotations

import contextlib
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from langchain_reflective import MemoryStream, ReflectiveRetriever
from langchain_reflective.importance import fence_block
from langchain_reflective.memory import MEMORY_PREAMBLE

MEMORIES = [
    ("Alice adopted a grey cat called Miso", 0.7),
    ("Alice is allergic to peanuts", 0.9),
    ("Alice had coffee with Bob on Monday", 0.2),
    ("Alice is training for the Lisbon half marathon in May", 0.8),
    ("Alice prefers green tea to coffee", 0.4),
]

PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            "You are Alice's assistant. Answer from her memories when they help.\n\n{memories}",
        ),
        ("human", "{question}"),
    ]
)


def format_memories(docs: list[Document]) -> str:
    """Retrieved memories as a fenced, numbered block marked as data."""
    items = [f"[{d.metadata['created_at'][:10]}] {d.page_content}" for d in docs]
    return f"{MEMORY_PREAMBLE}\n{fence_block(items, 'memory')}"


def build_chain(retriever: ReflectiveRetriever, model: BaseChatModel) -> Runnable[str, str]:
    """``{memories: retriever | format, question} | prompt | model | parser``, traced by name."""
    scoring = retriever.scoring or retriever.memory_stream.scoring
    chain: Runnable[str, str] = (
        {
            "memories": retriever | RunnableLambda(format_memories, name="format_memories"),
            "question": RunnablePassthrough(),
        }
        | PROMPT
        | model
        | StrOutputParser()
    )
    return chain.with_config(
        run_name="memory_qa",
        tags=["langchain-reflective", "example", "lcel"],
        metadata={
            "namespace": retriever.namespace or retriever.memory_stream.namespace,
            "k": retriever.k,
            "weights": {
                "relevance": scoring.relevance_weight,
                "lexical": scoring.lexical_weight,
                "recency": scoring.recency_weight,
                "importance": scoring.importance_weight,
            },
        },
    )


def main(
    model: BaseChatModel | None = None, embeddings: Embeddings | None = None
) -> dict[str, Any]:
    """Store Alice's memories, then ask two questions through the LCEL chain."""
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model

            model = stack.enter_context(default_chat_model(max_tokens=128))
        if embeddings is None:
            from langchain_reflective.local import default_embeddings

            embeddings = default_embeddings()
        stream = stack.enter_context(MemoryStream(embeddings, namespace="alice"))
        stream.add([t for t, _ in MEMORIES], importances=[i for _, i in MEMORIES])

        retriever = ReflectiveRetriever(memory_stream=stream, k=3)
        chain = build_chain(retriever, model)
        questions = ["Can Alice eat satay sauce?", "What is Alice training for?"]
        answers = chain.batch(questions)
        retrieved = {q: [d.page_content for d in retriever.invoke(q)] for q in questions}
        for question, answer in zip(questions, answers, strict=True):
            print(f"Q: {question}\n   memories: {retrieved[question]}\nA: {answer}\n")
        return {"questions": questions, "answers": answers, "retrieved": retrieved}


if __name__ == "__main__":
    main()
