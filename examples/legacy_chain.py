"""A classic ``ConversationChain`` with a reflective long-term memory (deprecated path).

``BaseMemory`` and ``ConversationChain`` live in ``langchain-classic`` and are deprecated; so is
the adapter :class:`ReflectiveChatMemory` (it warns when created). It exists so an old chain can
switch to a memory that persists, retrieves by relevance/recency/importance and reflects, before
the chain itself is migrated to ``create_agent`` + ``ReflectiveMemoryMiddleware`` (see
``agent_with_memory.py``). Needs the ``legacy`` extra::

    pip install "langchain-reflective[legacy]"
    python examples/legacy_chain.py
"""

from __future__ import annotations

import contextlib
from typing import Any

from langchain_classic.chains import ConversationChain
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.prompts import PromptTemplate

from langchain_reflective import (
    MemoryConfig,
    MemoryStream,
    ReflectiveChatMemory,
    ReflectiveMemory,
)

PROMPT = PromptTemplate.from_template(
    "The following is a friendly conversation between a human and an AI.\n\n"
    "{history}\n\nHuman: {input}\nAI:"
)


def main(
    model: BaseChatModel | None = None, embeddings: Embeddings | None = None
) -> dict[str, Any]:
    """Three turns through a ConversationChain whose memory is reflective."""
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model

            model = stack.enter_context(default_chat_model(max_tokens=256))
        if embeddings is None:
            from langchain_reflective.local import default_embeddings

            embeddings = default_embeddings()
        memory = stack.enter_context(
            ReflectiveMemory(model, MemoryStream(embeddings), config=MemoryConfig(reflect_every=4))
        )
        chain = ConversationChain(
            llm=model,
            prompt=PROMPT,
            memory=ReflectiveChatMemory(memory=memory, namespace="sam"),
        )
        answers = []
        for text in (
            "Hi, I'm Sam and I grow tomatoes on my balcony.",
            "My tomatoes got blight last summer.",
            "What do I grow, and what went wrong last year?",
        ):
            answer = chain.invoke({"input": text})["response"]
            answers.append(answer)
            print(f"Human: {text}\nAI: {answer}\n")
        memory.flush()
        insights = [
            r.text for r in memory.stream.recent(None, namespace="sam", kinds=["reflection"])
        ]
        print("insights:", insights)
        return {
            "answers": answers,
            "memories": memory.stream.count(namespace="sam"),
            "insights": insights,
        }


if __name__ == "__main__":
    main()
