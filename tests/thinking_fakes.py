"""Scripted model answers for reflective thinking: seed 004's three-turn memory flow."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from tests.fakes import WordEmbeddings
from tests.unit.test_middleware import FakeChat


def decide(go_on: bool, reason: str, call_id: str = "c", next_focus: str | None = None) -> Any:
    """A ``continue_thinking`` tool call."""
    args: dict[str, Any] = {"continue_thinking": go_on, "reason": reason}
    if next_focus:
        args["next_focus"] = next_focus
    return {"name": "continue_thinking", "args": args, "id": f"{call_id}-decide"}


def recall(call_id: str = "c", **args: Any) -> Any:
    """A ``recall_context`` tool call."""
    return {"name": "recall_context", "args": args, "id": f"{call_id}-recall"}


def round_(thought: str, *calls: Any) -> AIMessage:
    """One thinking round's answer: the thought and its tool calls."""
    return AIMessage(thought, tool_calls=list(calls))


def summary(text: str, insights: list[str]) -> AIMessage:
    """The summary call's answer (JSON text)."""
    return AIMessage(json.dumps({"summary": text, "insights": insights}))


SEED_SUMMARIES = [
    (
        "Analyzed codebase structure, identified 3 main modules: main, utils, config",
        ["3 modules found", "Main entry point in main.ts", "Config uses JSON"],
    ),
    (
        "Identified performance bottleneck in utils.ts, specifically in the parseData function",
        ["Bottleneck in parseData", "O(n²) complexity", "Can optimize to O(n)"],
    ),
    (
        "Implemented O(n) optimization in parseData, performance improved 10x",
        ["Optimization complete", "10x speedup", "Tests passing"],
    ),
]


def seed_script() -> list[AIMessage]:
    """Every model answer of the seed's memory flow, in call order (rounds, then summary)."""
    s = SEED_SUMMARIES
    return [
        # turn 1: two rounds
        round_("Analyzing codebase structure...", decide(True, "Need deeper analysis", "t1r1")),
        round_("Found 3 main modules...", decide(False, "Ready to act", "t1r2")),
        summary(*s[0]),
        # turn 2: recall turn 1 by number, then a second round
        round_(
            "Reviewing benchmark results...",
            recall("t2r1", turn_numbers=[1]),
            decide(True, "Need to identify bottleneck", "t2r1"),
        ),
        round_("Found bottleneck in utils.ts...", decide(False, "Ready to optimize", "t2r2")),
        summary(*s[1]),
        # turn 3: recall by keywords, ready at once
        round_(
            "Planning optimization strategy...",
            recall("t3r1", keywords=["bottleneck", "parseData"]),
            decide(False, "Clear plan, ready to implement", "t3r1"),
        ),
        summary(*s[2]),
    ]


SUMMARY_PROMPT = "Summarise one turn"


def is_summary_call(messages: list[Any]) -> bool:
    """Whether a model call is the thinking graph's summary call."""
    return any(SUMMARY_PROMPT in m.text for m in messages)


class Rounds(FakeChat):
    """Thinking calls play ``script``; summary calls play ``summaries`` (then a default)."""

    summaries: list[Any] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        if is_summary_call(messages):
            self.calls.append(list(messages))
            reply = self.summaries.pop(0) if self.summaries else summary("s", [])
            return ChatResult(generations=[ChatGeneration(message=reply)])
        return super()._generate(messages, *args, **kwargs)

    @property
    def thinking_calls(self) -> list[list[BaseMessage]]:
        """Calls that were thinking rounds."""
        return [c for c in self.calls if not is_summary_call(c)]


class FlakyEmbeddings(WordEmbeddings):
    """Word embeddings whose document calls fail while a text contains ``fail_on`` (an outage
    that hits one of a turn's two adds)."""

    def __init__(self, fail_on: str = "") -> None:
        super().__init__()
        self.fail_on = fail_on

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.fail_on and any(self.fail_on in t for t in texts):
            self.document_calls += 1
            raise RuntimeError("embedding service down")
        return super().embed_documents(texts)
