"""A Reflexion loop around a ``create_agent`` agent with a tool.

The agent answers an arithmetic question and may call a ``calculate`` tool. The evaluator
checks the answer (:func:`match_evaluator`, ``contains``); after a wrong answer the reflection
model writes a structured self-reflection and the next attempt gets it in its prompt. The
agent's tool calls are the attempt's actions, so the reflection can say which one went wrong.

With ``OPENAI_API_KEY`` (or ``OPENAI_BASE_URL``) set, a real model drives the agent. Otherwise
a scripted stand-in does (the embedded 270M base model cannot call tools): it guesses, then,
once a reflection tells it to, uses the tool. ::

    python examples/reflexion_agent.py
"""

from __future__ import annotations

import ast
import contextlib
import json
import operator
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from langchain_reflective import MemoryStream, create_reflexion_graph
from langchain_reflective.reflexion import match_evaluator

QUESTION = "What is 17 * 23 + 4? Answer with the number."
ANSWER = "395"
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


@tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * on integers, e.g. '2 * 3 + 1'."""

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return int(_OPS[type(node.op)](value(node.left), value(node.right)))
        raise ValueError(f"unsupported expression: {expression!r}")

    return str(value(ast.parse(expression, mode="eval").body))


class ScriptedAgentModel(BaseChatModel):
    """Stand-in model when no API key is set (see the module docstring)."""

    @property
    def _llm_type(self) -> str:
        return "scripted-agent"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedAgentModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        system = "\n".join(m.text for m in messages if isinstance(m, SystemMessage))
        task = next((m.text for m in messages if isinstance(m, HumanMessage)), "")
        if "Self-Reflection component" in system:
            reply = AIMessage(
                json.dumps(
                    {
                        "reflection_text": (
                            "In my previous attempt I computed 17 * 23 + 4 in my head and "
                            "answered 400, which the check rejected. I did arithmetic without "
                            "the calculate tool. In my next attempt I will call calculate with "
                            "the whole expression and answer with its result."
                        ),
                        "credit_assignment": {
                            "failing_action_indices": [],
                            "root_cause": "mental arithmetic instead of the calculate tool",
                            "failure_category": "tool_misuse",
                        },
                        "causal_reasoning": "17 * 23 is 391, not 396; guessing made it wrong.",
                        "actionable_insights": ["Call the calculate tool for any arithmetic."],
                        "lessons_learned": ["Use tools for exact computation."],
                        "confidence": 0.8,
                    }
                )
            )
        elif isinstance(messages[-1], ToolMessage):
            reply = AIMessage(f"The answer is {messages[-1].text}.")
        elif "calculate tool" in task:  # a reflection in the prompt says to use the tool
            reply = AIMessage(
                "",
                tool_calls=[
                    {"name": "calculate", "args": {"expression": "17 * 23 + 4"}, "id": "c1"}
                ],
            )
        else:
            reply = AIMessage("The answer is 400.")
        return ChatResult(generations=[ChatGeneration(message=reply)])


def main(
    model: BaseChatModel | None = None, embeddings: Embeddings | None = None
) -> dict[str, Any]:
    """Run the loop around the agent; return its outcome."""
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model, model_choice

            if model_choice().provider == "openai":
                model = stack.enter_context(default_chat_model())
            else:
                model = ScriptedAgentModel()
        if embeddings is None:
            from langchain_reflective.local import default_embeddings

            embeddings = default_embeddings()
        agent = create_agent(
            model,
            tools=[calculate],
            system_prompt="You answer arithmetic questions. Be brief.",
            name="calculator_agent",
        )
        stream = stack.enter_context(MemoryStream(embeddings))
        graph = create_reflexion_graph(
            agent,
            match_evaluator(ANSWER, mode="contains"),
            stream=stream,
            reflection_model=model,
            omega=2,
            max_trials=3,
        )
        out = graph.invoke({"task": QUESTION})
        actions = [r.metadata.get("actions", []) for r in stream.recent(None)]

    print(f"status: {out['status']} after {out['trials']} trial(s); final answer: {out['output']}")
    for r in out["reflections"]:
        print(
            f"- reflection on attempt {r['iteration']}: {r['self_reflection']['reflection_text']}"
        )
    return {
        "status": out["status"],
        "trials": out["trials"],
        "output": out["output"],
        "actions": actions,
        "reflections": [r["self_reflection"]["reflection_text"] for r in out["reflections"]],
    }


if __name__ == "__main__":
    main()
