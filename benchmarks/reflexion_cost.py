"""Cost of a Reflexion loop: langchain-reflective vs LangGraph's Reflexion tutorial loop.

Both loops get the same fake chat model (:class:`CostModel`: it counts calls, input tokens
(``count_tokens_approximately`` of the messages sent) and output tokens, and answers wrongly
for the first ``F`` attempts of a run and correctly afterwards) on the same task, with the same
verdicts (:func:`check`).

* **ours**: ``create_reflexion_graph(model, callable_evaluator(check), stream=...)`` with the
  defaults (Ω = 3, a separate self-reflection call after each failed trial, episodic memory in
  a ``MemoryStream``);
* **tutorial**: the graph of LangGraph's Reflexion tutorial (``draft`` -> ``execute_tools`` ->
  ``revise`` -> ...; ``AnswerQuestion``/``ReviseAnswer`` tool calls carrying the answer and its
  self-critique, ``ResponderWithRetries``, the message list as its only memory), re-typed here
  with its prompts. Its search tool is replaced by the same verdict (:func:`check`), so both
  loops see the same external feedback; ``MAX_ITERATIONS`` is set so it reaches the passing
  answer.

A trial is one attempt at the answer. Reported per failed trial: model calls, input tokens and
output tokens (mean over the failed trials, and for the last failed trial, which shows how the
prompt grows), and the totals to the first passing answer.

Run: ``python benchmarks/reflexion_cost.py`` (a few seconds; writes
``benchmarks/results/reflexion_cost.json``). ``--quick`` runs one size and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.output_parsers.openai_tools import PydanticToolsParser
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.tools import StructuredTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel, Field, PrivateAttr, ValidationError

from langchain_reflective import MemoryStream, create_reflexion_graph
from langchain_reflective.reflexion import (
    REFLEXION_KIND,
    Attempt,
    ReflexionConfig,
    callable_evaluator,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "reflexion_cost.json"
QUESTION = (
    "Write a Python function largest(nums) that returns the largest number of a list, or None "
    "for an empty list. Answer with the code."
)
WRONG = "def largest(nums):\n    return sorted(nums)[-1]"
RIGHT = "def largest(nums):\n    return max(nums) if nums else None"


def check(answer: str) -> tuple[bool, str]:
    """The verdict both loops get: passes when the empty list is handled."""
    if "if nums else None" in answer:
        return True, "2 passed: test_largest, test_empty_list_gives_none"
    return False, (
        "1 failed, 1 passed. FAILED test_solution.py::test_empty_list_gives_none - "
        "IndexError: list index out of range (solution.py:2)"
    )


# -- the fake model ------------------------------------------------------------------------------


class CostModel(BaseChatModel):
    """Counts calls and tokens; answers wrongly for the first ``failures`` attempts."""

    failures: int = 3
    calls: list[dict[str, Any]] = Field(default_factory=list)
    _attempts: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "cost-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        names = [t.__name__ if isinstance(t, type) else getattr(t, "name", str(t)) for t in tools]
        return self.bind(tool_names=names)

    def _reflection(self) -> dict[str, Any]:
        n = sum(c["kind"] in ("ours_reflection", "ours_inline") for c in self.calls) + 1
        return {
            "reflection_text": (
                f"In my attempt {n} I returned sorted(nums)[-1] without checking for an empty "
                "list, so the test with [] raised IndexError. In my next attempt I will return "
                "None for an empty list."
            ),
            "credit_assignment": {
                "failing_action_indices": [0],
                "root_cause": "no empty-list check before indexing",
                "failure_category": "edge_case_miss",
            },
            "causal_reasoning": "Indexing an empty list raises IndexError.",
            "actionable_insights": [f"Return None for an empty list (attempt {n})."],
            "lessons_learned": ["Handle empty inputs first."],
            "confidence": 0.9,
        }

    def _answer(self) -> str:
        self._attempts += 1
        return RIGHT if self._attempts > self.failures else WRONG

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        system = "\n".join(m.text for m in messages if isinstance(m, SystemMessage))
        tool_names = kwargs.get("tool_names") or []
        if "InlineAttempt" in tool_names or "in a Reflexion loop" in system:
            # ours with inline_reflection: the reflection and the next answer in one call
            payload = {"reflection": self._reflection(), "answer": self._answer()}
            if "InlineAttempt" in tool_names:
                call = {"name": "InlineAttempt", "args": payload, "id": f"i{len(self.calls)}"}
                reply = AIMessage("", tool_calls=[call])
            else:
                reply = AIMessage(json.dumps(payload))
            kind = "ours_inline"
        elif "SelfReflection" in tool_names or "Self-Reflection component" in system:
            # ours: the self-reflection (as structured output when asked for it)
            reflection = self._reflection()
            if "SelfReflection" in tool_names:
                call = {"name": "SelfReflection", "args": reflection, "id": f"r{len(self.calls)}"}
                reply = AIMessage("", tool_calls=[call])
            else:
                reply = AIMessage(json.dumps(reflection))
            kind = "ours_reflection"
        elif tool_names:  # the tutorial: answer + self-critique in one tool call
            name = tool_names[0]
            args: dict[str, Any] = {
                "answer": self._answer(),
                "reflection": {
                    "missing": "Handling of the empty list, which the failing test exercises.",
                    "superfluous": "Nothing superfluous.",
                },
                "search_queries": ["python max of empty list"],
            }
            if name == "ReviseAnswer":
                args["references"] = ["https://docs.python.org/3/library/functions.html#max"]
            call = {"name": name, "args": args, "id": f"call-{len(self.calls)}"}
            reply = AIMessage("", tool_calls=[call])
            kind = "tutorial_" + ("revise" if name == "ReviseAnswer" else "draft")
        else:
            reply = AIMessage(self._answer())
            kind = "ours_actor"
        self.calls.append(
            {
                "kind": kind,
                "attempt": self._attempts,
                "input_tokens": count_tokens_approximately(messages),
                "output_tokens": count_tokens_approximately([reply]),
            }
        )
        return ChatResult(generations=[ChatGeneration(message=reply)])


# -- LangGraph's Reflexion tutorial, re-typed (search replaced by the verdict) -----------------


class Reflection(BaseModel):
    missing: str = Field(description="Critique of what is missing.")
    superfluous: str = Field(description="Critique of what is superfluous")


class AnswerQuestion(BaseModel):
    """Answer the question. Provide an answer, reflection, and then follow up with search
    queries to improve the answer."""

    answer: str = Field(description="~250 word detailed answer to the question.")
    reflection: Reflection = Field(description="Your reflection on the initial answer.")
    search_queries: list[str] = Field(
        description="1-3 search queries for researching improvements to address the critique "
        "of your current answer."
    )


class ReviseAnswer(AnswerQuestion):
    """Revise your original answer to your question. Provide an answer, reflection, cite your
    reflection with references, and finally add search queries to improve the answer."""

    references: list[str] = Field(description="Citations motivating your updated answer.")


class ResponderWithRetries:
    def __init__(self, runnable: Any, validator: Any) -> None:
        self.runnable = runnable
        self.validator = validator

    def respond(self, state: dict[str, Any]) -> dict[str, Any]:
        response: Any = []
        for attempt in range(3):
            response = self.runnable.invoke(
                {"messages": state["messages"]}, {"tags": [f"attempt:{attempt}"]}
            )
            try:
                self.validator.invoke(response)
                return {"messages": response}
            except ValidationError as e:
                state = {
                    **state,
                    "messages": [
                        *state["messages"],
                        response,
                        ToolMessage(
                            content=f"{e!r}\n\nPay close attention to the function schema.\n\n"
                            + json.dumps(self.validator.tools[0].model_json_schema())
                            + " Respond by fixing all validation errors.",
                            tool_call_id=response.tool_calls[0]["id"],
                        ),
                    ],
                }
        return {"messages": response}


ACTOR_PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            """You are expert researcher.
Current time: {time}

1. {first_instruction}
2. Reflect and critique your answer. Be severe to maximize improvement.
3. Recommend search queries to research information and improve your answer.""",
        ),
        MessagesPlaceholder(variable_name="messages"),
        (
            "user",
            "\n\n<system>Reflect on the user's original question and the actions taken thus far."
            " Respond using the {function_name} function.</reminder>",
        ),
    ]
).partial(time="2024-03-01T18:00:00")

REVISE_INSTRUCTIONS = """Revise your previous answer using the new information.
    - You should use the previous critique to add important information to your answer.
        - You MUST include numerical citations in your revised answer to ensure it can be verified.
        - Add a "References" section to the bottom of your answer (which does not count towards the word limit). In form of:
            - [1] https://example.com
            - [2] https://example.com
    - You should use the previous critique to remove superfluous information from your answer and make SURE it is not more than 250 words.
"""  # noqa: E501


class TutorialState(TypedDict):
    messages: Annotated[list[Any], add_messages]


def tutorial_graph(model: CostModel, max_iterations: int) -> Any:
    """The tutorial's graph with its tools running :func:`check` instead of a web search."""
    first = ResponderWithRetries(
        runnable=ACTOR_PROMPT.partial(
            first_instruction="Provide a detailed ~250 word answer.",
            function_name=AnswerQuestion.__name__,
        )
        | model.bind_tools(tools=[AnswerQuestion]),
        validator=PydanticToolsParser(tools=[AnswerQuestion]),
    )
    revisor = ResponderWithRetries(
        runnable=ACTOR_PROMPT.partial(
            first_instruction=REVISE_INSTRUCTIONS, function_name=ReviseAnswer.__name__
        )
        | model.bind_tools(tools=[ReviseAnswer]),
        validator=PydanticToolsParser(tools=[ReviseAnswer]),
    )

    def run_checks(answer: str, **kwargs: Any) -> str:
        return check(answer)[1]

    tool_node = ToolNode(
        [
            StructuredTool.from_function(
                run_checks, name=AnswerQuestion.__name__, description="checks"
            ),
            StructuredTool.from_function(
                run_checks, name=ReviseAnswer.__name__, description="checks"
            ),
        ]
    )

    def _get_num_iterations(state: list[Any]) -> int:
        i = 0
        for m in state[::-1]:
            if m.type not in {"tool", "ai"}:
                break
            i += 1
        return i

    def event_loop(state: TutorialState) -> str:
        if _get_num_iterations(state["messages"]) > max_iterations:
            return END
        return "execute_tools"

    builder = StateGraph(TutorialState)
    builder.add_node("draft", first.respond)
    builder.add_node("execute_tools", tool_node)
    builder.add_node("revise", revisor.respond)
    builder.add_edge("draft", "execute_tools")
    builder.add_edge("execute_tools", "revise")
    builder.add_conditional_edges("revise", event_loop, ["execute_tools", END])
    builder.add_edge(START, "draft")
    return builder.compile()


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class Measure:
    system: str
    failures: int
    calls_per_failed_trial: float
    input_tokens_per_failed_trial: float
    output_tokens_per_failed_trial: float
    last_failed_trial_input_tokens: int
    calls_to_success: int
    input_tokens_to_success: int
    calls_by_kind: dict[str, int] = field(default_factory=dict)


def _measure(system: str, model: CostModel, failures: int) -> Measure:
    # a call belongs to the trial of the answer it produced; a reflection call belongs to the
    # failed trial it reflects on (the answer count when it was made)
    per_trial: dict[int, list[dict[str, Any]]] = {}
    for c in model.calls:
        per_trial.setdefault(c["attempt"], []).append(c)
    failed = [per_trial.get(t, []) for t in range(1, failures + 1)]
    solved = [c for t in range(1, failures + 2) for c in per_trial.get(t, [])]
    kinds: dict[str, int] = {}
    for c in model.calls:
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
    return Measure(
        system=system,
        failures=failures,
        calls_per_failed_trial=sum(len(t) for t in failed) / failures,
        input_tokens_per_failed_trial=sum(c["input_tokens"] for t in failed for c in t) / failures,
        output_tokens_per_failed_trial=sum(c["output_tokens"] for t in failed for c in t)
        / failures,
        last_failed_trial_input_tokens=sum(c["input_tokens"] for c in failed[-1]),
        calls_to_success=len(solved),
        input_tokens_to_success=sum(c["input_tokens"] for c in solved),
        calls_by_kind=kinds,
    )


def run_ours(failures: int, *, inline: bool = False) -> Measure:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    model = CostModel(failures=failures)
    evaluator = callable_evaluator(lambda a: check(a["output"])[0] or _failed(a), name="tests")
    config = ReflexionConfig(inline_reflection=inline)
    with MemoryStream(DeterministicFakeEmbedding(size=64)) as stream:
        out = create_reflexion_graph(
            model, evaluator, stream=stream, max_trials=failures + 1, config=config
        ).invoke({"task": QUESTION})
        stored = stream.recent(None, kinds=[REFLEXION_KIND])
    assert out["status"] == "passed", out["status"]
    assert len(stored) == failures  # one stored reflection per failed trial, either way
    assert not any(r.metadata["low_quality"] for r in stored)
    return _measure("ours+inline" if inline else "ours", model, failures)


def _failed(attempt: Attempt) -> dict[str, Any]:
    message = check(attempt["output"])[1]
    return {
        "passed": False,
        "reward": 0.5,
        "verification_type": "tests",
        "errors": [{"tool": "pytest", "type": "test_failure", "message": message}],
    }


def run_tutorial(failures: int) -> Measure:
    model = CostModel(failures=failures)
    # iterations count trailing ai + tool messages: 2 per revision
    graph = tutorial_graph(model, max_iterations=2 * failures)
    graph.invoke({"messages": [("user", QUESTION)]}, {"recursion_limit": 10 * failures + 10})
    return _measure("tutorial", model, failures)


def run(sizes: Sequence[int]) -> list[Measure]:
    return [m for f in sizes for m in (run_ours(f), run_ours(f, inline=True), run_tutorial(f))]


def _table(measures: list[Measure]) -> str:
    head = (
        f"{'system':<11} {'F':>3} {'calls/failed':>12} {'in tok/failed':>13} "
        f"{'out tok/failed':>14} {'in tok last failed':>18} {'calls to pass':>13} "
        f"{'in tok to pass':>14}"
    )
    rows = [head, "-" * len(head)]
    for m in measures:
        rows.append(
            f"{m.system:<11} {m.failures:>3} {m.calls_per_failed_trial:>12.2f} "
            f"{m.input_tokens_per_failed_trial:>13.0f} {m.output_tokens_per_failed_trial:>14.0f} "
            f"{m.last_failed_trial_input_tokens:>18} {m.calls_to_success:>13} "
            f"{m.input_tokens_to_success:>14}"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1,3,6", help="failed trials before the pass (F)")
    parser.add_argument("--quick", action="store_true", help="F=3 only; write nothing")
    parser.add_argument("--out", type=Path, default=None, help=f"JSON report (default {RESULTS})")
    args = parser.parse_args(argv)
    sizes = [3] if args.quick else [int(s) for s in args.sizes.split(",")]
    measures = run(sizes)
    print(_table(measures))
    report = {
        "benchmark": "reflexion_cost",
        "command": "python benchmarks/reflexion_cost.py"
        + ("" if args.sizes == "1,3,6" else f" --sizes {args.sizes}"),
        "python": platform.python_version(),
        "measures": [asdict(m) for m in measures],
    }
    out = None if args.quick else (args.out or RESULTS)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {out}")
    return report


if __name__ == "__main__":
    main()
