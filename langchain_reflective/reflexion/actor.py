"""What the actor returned, as an attempt: text and actions, whatever the actor is."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from pydantic import BaseModel

from langchain_reflective.reflexion.schema import EvaluatorOutput, StructuredError

__all__ = ["attempt_of", "error_evaluation"]


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
