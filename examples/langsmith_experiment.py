"""Evaluate a memory-backed QA chain: in LangSmith with a key, the same evaluation locally without.

The target answers a question from long-term memory (``ReflectiveRetriever | format | prompt |
model``). Two evaluators score it: ``memory_recall`` (was the memory that holds the answer
retrieved?) and ``answer_mentions`` (does the answer contain the expected fact?).

* With ``LANGSMITH_API_KEY`` set, the dataset is created in LangSmith (once) and
  ``langsmith.evaluate`` runs the experiment; the traces carry the chain's run name, tags and
  metadata (namespace, k, scoring weights) and the retriever's ``ls_retriever_name``.
* Without it, the same target and evaluators run locally and a summary is printed; nothing
  leaves the machine.

::

    python examples/langsmith_experiment.py
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda

from langchain_reflective import MemoryStream, ReflectiveRetriever
from langchain_reflective.importance import fence_block
from langchain_reflective.memory import MEMORY_PREAMBLE

DATASET_NAME = "langchain-reflective: personal memory QA"
NAMESPACE = "dana"

MEMORIES = [
    ("Dana's daughter is called Lea", 0.8),
    ("Dana works as a nurse at the Riverside hospital", 0.7),
    ("Dana had toast for breakfast", 0.1),
    ("Dana is allergic to penicillin", 0.9),
    ("Dana's car is a blue Volvo", 0.4),
    ("Dana went for a walk in the park", 0.2),
    ("Dana plays the trumpet in a brass band", 0.6),
    ("Dana's favourite city is Kyoto", 0.5),
]

EXAMPLES = [
    ("What is Dana's daughter called?", "Dana's daughter is called Lea", "Lea"),
    ("Which medicine must Dana avoid?", "Dana is allergic to penicillin", "penicillin"),
    ("Where does Dana work?", "Dana works as a nurse at the Riverside hospital", "Riverside"),
    ("What instrument does Dana play?", "Dana plays the trumpet in a brass band", "trumpet"),
    ("What car does Dana drive?", "Dana's car is a blue Volvo", "Volvo"),
]

PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            "Answer the question about Dana in a few words, using her memories.\n\n{memories}",
        ),
        ("human", "{question}"),
    ]
)


def _format(docs: list[Document]) -> str:
    return f"{MEMORY_PREAMBLE}\n{fence_block([d.page_content for d in docs], 'memory')}"


def build_target(retriever: ReflectiveRetriever, model: BaseChatModel) -> Runnable[Any, Any]:
    """``{"question"} -> {"answer", "memories"}``: retrieve, format, prompt, model."""
    scoring = retriever.scoring or retriever.memory_stream.scoring
    answer_chain = PROMPT | model | StrOutputParser()

    def answer(inputs: dict[str, Any]) -> dict[str, Any]:
        docs = retriever.invoke(inputs["question"])  # traced as a child run of memory_qa
        text = answer_chain.invoke({"question": inputs["question"], "memories": _format(docs)})
        return {"answer": text, "memories": [d.page_content for d in docs]}

    chain = RunnableLambda(answer)
    return chain.with_config(
        run_name="memory_qa",
        tags=["langchain-reflective", "example", "experiment"],
        metadata={
            "namespace": retriever.namespace or retriever.memory_stream.namespace,
            "k": retriever.k,
            "scoring": scoring.name,
            "weights": {
                "relevance": scoring.relevance_weight,
                "lexical": scoring.lexical_weight,
                "recency": scoring.recency_weight,
                "importance": scoring.importance_weight,
            },
        },
    )


# -- evaluators (LangSmith's (outputs, reference_outputs) signature) ---------------------------


def memory_recall(
    outputs: Mapping[str, Any], reference_outputs: Mapping[str, Any]
) -> dict[str, Any]:
    """1 when the memory holding the answer was among the retrieved memories."""
    return {
        "key": "memory_recall",
        "score": int(reference_outputs["memory"] in outputs["memories"]),
    }


def answer_mentions(
    outputs: Mapping[str, Any], reference_outputs: Mapping[str, Any]
) -> dict[str, Any]:
    """1 when the answer mentions the expected fact (case-insensitive)."""
    found = reference_outputs["keyword"].lower() in str(outputs["answer"]).lower()
    return {"key": "answer_mentions", "score": int(found)}


EVALUATORS: list[Callable[..., dict[str, Any]]] = [memory_recall, answer_mentions]


def dataset_examples() -> list[dict[str, Any]]:
    """The examples as LangSmith ``inputs`` / ``outputs`` pairs."""
    return [
        {"inputs": {"question": q}, "outputs": {"memory": m, "keyword": kw}}
        for q, m, kw in EXAMPLES
    ]


def run_langsmith(target: Runnable[Any, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Create the dataset if needed and run ``langsmith.evaluate`` (needs ``LANGSMITH_API_KEY``)."""
    import langsmith

    client = langsmith.Client()
    if not client.has_dataset(dataset_name=DATASET_NAME):
        dataset = client.create_dataset(
            DATASET_NAME, description="Questions answered from a reflective memory stream"
        )
        client.create_examples(dataset_id=dataset.id, examples=dataset_examples())
    results = langsmith.evaluate(
        target,
        data=DATASET_NAME,
        evaluators=EVALUATORS,
        experiment_prefix="reflective-memory-qa",
        metadata=dict(metadata),
        client=client,
    )
    print(f"LangSmith experiment: {results.experiment_name}")
    return {"mode": "langsmith", "experiment": results.experiment_name}


def run_locally(target: Runnable[Any, Any]) -> dict[str, Any]:
    """The same target and evaluators, without LangSmith."""
    rows = []
    examples = dataset_examples()
    outputs = target.batch([e["inputs"] for e in examples])
    for example, output in zip(examples, outputs, strict=True):
        scores = {}
        for evaluator in EVALUATORS:
            result = evaluator(outputs=output, reference_outputs=example["outputs"])
            scores[result["key"]] = result["score"]
        rows.append(
            {"question": example["inputs"]["question"], "answer": output["answer"], **scores}
        )
        print(f"{rows[-1]}")
    summary = {
        key: sum(r[key] for r in rows) / len(rows) for key in ("memory_recall", "answer_mentions")
    }
    print(f"summary: {summary}")
    return {"mode": "local", "results": rows, "summary": summary}


def main(
    model: BaseChatModel | None = None, embeddings: Embeddings | None = None
) -> dict[str, Any]:
    """Build the memory and the target, then evaluate in LangSmith or locally."""
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model

            model = stack.enter_context(default_chat_model(max_tokens=32))
        if embeddings is None:
            from langchain_reflective.local import default_embeddings

            embeddings = default_embeddings()
        stream = stack.enter_context(MemoryStream(embeddings, namespace=NAMESPACE))
        stream.add([t for t, _ in MEMORIES], importances=[i for _, i in MEMORIES])
        retriever = ReflectiveRetriever(memory_stream=stream, k=3, touch=False)
        target = build_target(retriever, model)
        if os.environ.get("LANGSMITH_API_KEY"):
            metadata = {"namespace": NAMESPACE, "k": retriever.k, "scoring": stream.scoring.name}
            return run_langsmith(target, metadata)
        print("LANGSMITH_API_KEY is not set: running the evaluation locally.")
        return run_locally(target)


if __name__ == "__main__":
    main()
