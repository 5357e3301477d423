"""The actor's side of a trial: what it receives (the task with the fenced notes: reflections,
last attempt, lessons) and what it returned, as an attempt (text and actions), whatever the
actor is."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import BaseModel

from langchain_reflective.reflexion.episodic import (
    Episode,
    fit_to_budget,
    reflection_window,
    render_window,
)
from langchain_reflective.reflexion.schema import EvaluatorOutput, StructuredError

__all__ = ["actor_input", "attempt_of", "error_evaluation"]


def _context(
    state: Mapping[str, Any],
    *,
    strategy: str,
    omega: int,
    max_reflection_tokens: int | None,
    max_chars: int,
    context_prompt: str,
) -> str:
    episodes = state.get("episodes") or []
    window: list[Episode] = []
    if omega:
        window = fit_to_budget(reflection_window(episodes, omega), max_reflection_tokens)
    last = episodes[-1] if episodes and strategy.startswith("last_attempt") else None
    sections = render_window(
        window,
        last_attempt=last,
        lessons=state.get("lessons") or [],
        max_chars=max_chars,
    )
    if not sections:
        return ""
    return context_prompt.format(
        task_intro=f"This is attempt {state.get('iteration', 0) + 1} at the task.",
        sections="\n\n".join(sections),
    )


def actor_input(
    state: Mapping[str, Any],
    *,
    kind: str,
    strategy: str,
    omega: int,
    max_reflection_tokens: int | None,
    max_chars: int,
    context_prompt: str,
) -> tuple[Any, int]:
    """What the actor gets for the current attempt, and how many messages that is.

    ``kind``: ``chat`` (messages), ``graph`` (``{"messages": [...]}``) or ``runnable`` (an
    ``ActorInput`` dict); ``omega``: the window of reflections shown (0 when the strategy does
    not reflect), pruned to ``max_reflection_tokens`` in the notes and in the dict's
    ``reflections`` alike.
    """
    task = state["task"]
    context = _context(
        state,
        strategy=strategy,
        omega=omega,
        max_reflection_tokens=max_reflection_tokens,
        max_chars=max_chars,
        context_prompt=context_prompt,
    )
    messages: list[BaseMessage] = [SystemMessage(context)] if context else []
    messages.append(HumanMessage(task))
    if kind == "chat":
        return messages, len(messages)
    if kind == "graph":
        text = f"{context}\n\nTask:\n{task}" if context else task
        return {"messages": [HumanMessage(text)]}, 1
    episodes = state.get("episodes") or []
    window = fit_to_budget(reflection_window(episodes, omega), max_reflection_tokens)
    return {
        "task": task,
        "iteration": state.get("iteration", 0),
        "context": context,
        "reflections": [e["self_reflection"] for e in window],
        "last_attempt": episodes[-1] if episodes and strategy.startswith("last_attempt") else None,
        "lessons": list(state.get("lessons") or []),
        "messages": messages,
    }, len(messages)


def _describe_call(call: Mapping[str, Any]) -> str:
    args = json.dumps(call.get("args", {}), ensure_ascii=False, default=str)
    return f"call {call.get('name')}({args[:300]})"


def attempt_of(result: Any, sent: int) -> tuple[str, list[str]]:
    """The attempt's text and actions from what the actor returned."""
    if isinstance(result, BaseMessage):
        calls = getattr(result, "tool_calls", None) or []
        return result.text, [_describe_call(c) for c in calls]
    if isinstance(result, dict) and isinstance(result.get("messages"), list):
        new = [m for m in result["messages"][sent:] if isinstance(m, BaseMessage)]
        actions: list[str] = []
        for m in new:
            if isinstance(m, AIMessage):
                actions += [_describe_call(c) for c in m.tool_calls]
            elif isinstance(m, ToolMessage):
                actions.append(f"result of {m.name or 'tool'}: {' '.join(m.text.split())[:300]}")
        structured = result.get("structured_response")
        if structured is not None:
            text = (
                structured.model_dump_json()
                if isinstance(structured, BaseModel)
                else json.dumps(structured, default=str)
            )
            return text, actions
        last = next((m for m in reversed(new) if isinstance(m, AIMessage)), None)
        return (last.text if last is not None else ""), actions
    if isinstance(result, str):
        return result, []
    if isinstance(result, BaseModel):
        return result.model_dump_json(), []
    if isinstance(result, dict) and isinstance(result.get("output"), str):
        return result["output"], [str(a) for a in result.get("actions", []) or []]
    if isinstance(result, dict | list):
        return json.dumps(result, ensure_ascii=False, default=str), []
    return ("" if result is None else str(result)), []


def error_evaluation(message: str) -> dict[str, Any]:
    """The evaluator output recorded for a trial stopped by a critical error."""
    return EvaluatorOutput(
        passed=False,
        reward=0.0,
        verification_type="error",
        errors=[StructuredError(tool="loop", type="critical_error", message=message[:1000])],
    ).model_dump(mode="json")
