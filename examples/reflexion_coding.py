"""A Reflexion coding loop: the actor writes a Python function, real pytest checks it.

The actor writes ``solution.py`` into a temporary directory; :func:`command_evaluator` runs
the real ``pytest`` on it (with a timeout). After a failure the model writes a structured
self-reflection, which is stored in the memory stream and shown to the next attempt through the
Ω window. The loop's episodic memory is then exported as JSON (valid against the schema shipped
in the package) for ``reflective reflexion report``.

With ``OPENAI_API_KEY`` (or ``OPENAI_BASE_URL``) set, a real model is the actor. Otherwise a
scripted stand-in plays it (the embedded 270M base model cannot write code): it writes a buggy
function until a reflection in its context mentions the empty list, then the fixed one. ::

    python examples/reflexion_coding.py
    reflective reflexion report reflexion_coding.json --plot reflexion_coding.png
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from langchain_reflective import MemoryStream, create_reflexion_graph
from langchain_reflective.reflexion import Attempt, command_evaluator, export_loops

TASK = (
    "Write a Python module solution.py with a function largest(nums: list[int]) -> int | None "
    "that returns the largest number, or None for an empty list. Answer with the code only."
)
TESTS = (
    "from solution import largest\n\n\n"
    "def test_largest():\n    assert largest([3, 9, 2]) == 9\n\n\n"
    "def test_negative():\n    assert largest([-5, -2]) == -2\n\n\n"
    "def test_empty_list_gives_none():\n    assert largest([]) is None\n"
)
_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str:
    """The code of a model's answer (the first fenced block, or the whole answer)."""
    match = _FENCE.search(text)
    return (match.group(1) if match else text).strip() + "\n"


def write_solution(attempt: Attempt, workdir: Path) -> None:
    """The evaluator's ``prepare`` step: the attempt becomes solution.py."""
    (workdir / "solution.py").write_text(extract_code(attempt["output"]), encoding="utf-8")


class ScriptedCoder(BaseChatModel):
    """Stand-in actor and reflection model when no API key is set (see the module docstring)."""

    @property
    def _llm_type(self) -> str:
        return "scripted-coder"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        system = "\n".join(m.text for m in messages if isinstance(m, SystemMessage))
        if "Self-Reflection component" in system:
            reply = json.dumps(
                {
                    "reflection_text": (
                        "In my previous attempt I returned sorted(nums)[-1] without checking for "
                        "an empty list, so largest([]) raised IndexError in the test. In my next "
                        "attempt I will return None when the list is empty, before indexing."
                    ),
                    "credit_assignment": {
                        "failing_action_indices": [0],
                        "root_cause": "no check for an empty list before indexing",
                        "failure_category": "edge_case_miss",
                    },
                    "causal_reasoning": "sorted([])[-1] indexes an empty list.",
                    "actionable_insights": ["Return None for an empty list before indexing."],
                    "lessons_learned": ["Handle empty inputs before indexing."],
                    "confidence": 0.9,
                }
            )
        elif "<reflections>" in system and "empty list" in system:
            reply = "```python\ndef largest(nums):\n    return max(nums) if nums else None\n```"
        else:
            reply = "```python\ndef largest(nums):\n    return sorted(nums)[-1]\n```"
        return ChatResult(generations=[ChatGeneration(message=AIMessage(reply))])


def main(
    model: BaseChatModel | None = None,
    embeddings: Embeddings | None = None,
    *,
    export_path: str | Path | None = None,
) -> dict[str, Any]:
    """Run the loop; return its outcome and export (written to ``export_path`` if given)."""
    with contextlib.ExitStack() as stack:
        if model is None:
            from langchain_reflective.local import default_chat_model, model_choice

            if model_choice().provider == "openai":
                model = stack.enter_context(default_chat_model())
            else:
                model = ScriptedCoder()
        if embeddings is None:
            from langchain_reflective.local import default_embeddings

            embeddings = default_embeddings()
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="reflexion-")))
        (workdir / "test_solution.py").write_text(TESTS, encoding="utf-8")
        evaluator = command_evaluator(
            [[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]],
            cwd=workdir,
            prepare=write_solution,
            timeout=120,
        )
        stream = stack.enter_context(MemoryStream(embeddings))
        graph = create_reflexion_graph(model, evaluator, stream=stream, omega=3, max_trials=4)
        out = graph.invoke({"task": TASK})

        exported = export_loops(stream)
        if export_path is not None:
            Path(export_path).write_text(json.dumps(exported, indent=2), encoding="utf-8")

    print(f"status: {out['status']} after {out['trials']} trial(s); rewards {out['rewards']}")
    for r in out["reflections"]:
        sr = r["self_reflection"]
        print(f"- reflection on attempt {r['iteration']}: {sr['reflection_text']}")
        print(f"  next: {'; '.join(sr['actionable_insights'])}")
    if export_path is not None:
        print(f"export: {export_path} (try: reflective reflexion report {export_path})")
    return {
        "status": out["status"],
        "rewards": out["rewards"],
        "trials": out["trials"],
        "reflections": [r["self_reflection"]["reflection_text"] for r in out["reflections"]],
        "output": out["output"],
        "export": exported,
    }


if __name__ == "__main__":
    main(export_path=Path("reflexion_coding.json"))
