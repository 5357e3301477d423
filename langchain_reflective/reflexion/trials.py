"""What one trial of a Reflexion loop stores: the record's text, metadata, kind and importance.

The graph (:mod:`langchain_reflective.reflexion.graph`) runs the trial; this module turns it,
with the loop's stored episodes, into the memory record that :mod:`.episodic` reads back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_reflective.records import clip_text
from langchain_reflective.reflexion.config import ReflexionConfig, Strategy
from langchain_reflective.reflexion.episodic import (
    REFLEXION_KIND,
    SCHEMA_VERSION,
    TRIAL_KIND,
    Episode,
    fit_to_budget,
    reflection_window,
)

__all__ = ["bounded_reflection", "trial_record", "trial_record_id"]


def trial_record_id(namespace: str, loop_id: str, iteration: int) -> str:
    """The id of the record of trial ``iteration`` of a loop in a namespace (stable, 34 chars).

    Two runs of one loop at once derive the same id for the same trial, so the second write
    fails (duplicate id) instead of storing the trial twice. Records stored before these ids
    (random UUIDs) stay valid: loops are read by their metadata, never by id.
    """
    key = f"{len(namespace)}:{namespace}/{len(loop_id)}:{loop_id}/{int(iteration)}"
    return "rx" + hashlib.sha256(key.encode()).hexdigest()[:32]


def _cut_items(items: Sequence[Any], max_chars: int) -> list[str]:
    """The items, in order, cut to ``max_chars`` characters in all."""
    kept: list[str] = []
    left = max_chars
    for item in items:
        if left <= 0:
            break
        kept.append(str(item)[:left])
        left -= len(kept[-1])
    return kept


def bounded_reflection(reflection: Mapping[str, Any], max_chars: int) -> dict[str, Any]:
    """A self-reflection (as JSON) with its texts cut to ``max_chars`` characters each.

    The reflection text, the causal reasoning and the root cause are cut to ``max_chars``;
    the actionable insights and the lessons learned to ``max_chars`` in all (each list). A
    model's over-long reflection is thus kept, cut, like an over-long attempt, instead of
    exceeding the memory text limit and losing the trial.
    """
    out = dict(reflection)
    out["reflection_text"] = str(reflection.get("reflection_text", ""))[:max_chars]
    out["causal_reasoning"] = str(reflection.get("causal_reasoning", ""))[:max_chars]
    for key in ("actionable_insights", "lessons_learned"):
        out[key] = _cut_items(list(reflection.get(key) or []), max_chars)
    credit = reflection.get("credit_assignment")
    if isinstance(credit, Mapping):
        out["credit_assignment"] = {
            **credit,
            "root_cause": str(credit.get("root_cause", ""))[:max_chars],
        }
    return out


def trial_record(
    trial: Mapping[str, Any],
    episodes: Sequence[Episode],
    *,
    loop_id: str,
    task: str,
    lessons_reused: Sequence[str],
    strategy: Strategy,
    omega: int,
    config: ReflexionConfig,
) -> tuple[str, dict[str, Any], str, float]:
    """``(text, metadata, kind, importance)`` of one trial's memory record.

    The attempt is cut to ``config.max_stored_attempt_chars`` and the reflection's texts to
    ``config.max_chars`` (:func:`bounded_reflection`). The record's text (the reflection text
    and its lessons) is cut to the memory text limit with a marker; the metadata keeps the
    whole bounded reflection.
    """
    evaluation = trial.get("evaluation") or {}
    iteration, outcome = int(trial["iteration"]), str(trial["outcome"])
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "loop_id": loop_id,
        "task": task,
        "iteration": iteration,
        "reward": float(evaluation.get("reward", 0.0)),
        "passed": bool(evaluation.get("passed")) and outcome == "passed",
        "outcome": outcome,
        "strategy": strategy,
        "omega": omega,
        "evaluator_output": evaluation,
        "attempt": str(trial.get("attempt", ""))[: config.max_stored_attempt_chars],
        "actions": list(trial.get("actions") or [])[:50],
        "error": trial.get("error"),
    }
    if iteration == 0 and lessons_reused:
        meta["lessons_reused"] = list(lessons_reused)
    reflection = trial.get("reflection")
    if reflection is None:
        verdict = "passed" if meta["passed"] else "failed"
        text = (
            f"Trial {iteration} {verdict} with reward {meta['reward']:.2f} on task: "
            f"{' '.join(task.split())[:300]}"
        )
        return text, meta, TRIAL_KIND, config.trial_importance
    sr = bounded_reflection(reflection["self_reflection"], config.max_chars)
    in_context = trial.get("in_context")  # an inline reflection: what that call showed
    if in_context is None:  # the window the next attempt sees, pruned to the token budget
        new = {"kind": REFLEXION_KIND, "iteration": iteration, "reward": meta["reward"]}
        window = reflection_window([*episodes, {**new, "self_reflection": sr}], omega)
        in_context = [e["iteration"] for e in fit_to_budget(window, config.max_reflection_tokens)]
    in_context = list(in_context) if omega else []
    meta.update(reflection, self_reflection=sr)
    meta["memory_metadata"] = {
        "omega_capacity": omega,
        "current_memory_size": len(in_context),
        "reflections_in_context": in_context,
        "total_reflections_generated": 1 + sum(e["kind"] == REFLEXION_KIND for e in episodes),
    }
    meta.setdefault("lessons_reused", [])
    text = sr["reflection_text"]
    if sr.get("lessons_learned"):
        text += "\nLessons learned: " + "; ".join(sr["lessons_learned"])
    return clip_text(text), meta, REFLEXION_KIND, config.reflection_importance
