"""Export of Reflexion loops as one JSON document, and the JSON Schema shipped with the package.

The export (:func:`export_loops`) is valid against ``reflexion_export.schema.json``
(:data:`EXPORT_SCHEMA_FILE`, inside ``langchain_reflective.reflexion``); the shipped file is the
output of :func:`export_json_schema`, which builds it from the pydantic models.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.reflexion.episodic import (
    REFLEXION_KIND,
    SCHEMA_VERSION,
    TRIAL_KIND,
    Episode,
    entries_of,
    loop_status,
)
from langchain_reflective.reflexion.schema import EvaluatorOutput, SelfReflection

if TYPE_CHECKING:
    from langchain_reflective.stream import MemoryStream

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_SCHEMA_FILE",
    "export_json_schema",
    "export_loops",
    "load_export",
    "shipped_json_schema",
]

EXPORT_FORMAT = "langchain-reflective/reflexion"
"""The ``format`` field of an export."""
EXPORT_SCHEMA_FILE = "reflexion_export.schema.json"
"""The JSON Schema of an export, shipped inside ``langchain_reflective.reflexion``."""

# -- export ----------------------------------------------------------------------------------

_TRIAL_KEYS = (
    "iteration",
    "reward",
    "passed",
    "outcome",
    "strategy",
    "evaluator_output",
    "lessons_reused",
)
_REFLECTION_KEYS = (
    "iteration",
    "reward",
    "outcome",
    "self_reflection",
    "low_quality",
    "quality_issues",
    "reflection_source",
    "memory_metadata",
    "lessons_reused",
)


def _loop_document(loop_id: str, entries: Sequence[Episode]) -> dict[str, Any]:
    first = entries[0]
    return {
        "loop_id": loop_id,
        "task": first.get("task", ""),
        "status": loop_status(entries),
        "strategy": first.get("strategy", "reflexion"),
        "omega": int(first.get("omega", 0)),
        "trials": [
            {
                "record_id": e["id"],
                "created_at": e["created_at"],
                **{k: e[k] for k in _TRIAL_KEYS if k in e},
            }
            for e in entries
        ],
        "reflections": [
            {
                "id": e["id"],
                "created_at": e["created_at"],
                **{k: e[k] for k in _REFLECTION_KEYS if k in e},
            }
            for e in entries
            if e["kind"] == REFLEXION_KIND
        ],
    }


def export_loops(
    stream: MemoryStream,
    *,
    loop_ids: Iterable[str] | None = None,
    namespace: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The loops of a namespace as one JSON document (valid against :func:`shipped_json_schema`).

    Args:
        stream: the memory stream holding the loops.
        loop_ids: which loops (default: every loop of the namespace), in first-trial order.
        namespace: whose loops (default: the stream's).
        now: the export time written in the document (default: now).
    """
    ns = stream.resolve_namespace(namespace)
    entries = entries_of(stream.recent(None, namespace=ns, kinds=[REFLEXION_KIND, TRIAL_KIND]))
    by_loop: dict[str, list[Episode]] = {}
    for e in sorted(entries, key=lambda e: e["created_at"]):
        by_loop.setdefault(e["loop_id"], []).append(e)
    wanted = list(by_loop) if loop_ids is None else [i for i in loop_ids if i in by_loop]
    loops = [
        _loop_document(i, sorted(by_loop[i], key=lambda e: (int(e["iteration"]), e["created_at"])))
        for i in wanted
    ]
    return {
        "format": EXPORT_FORMAT,
        "version": SCHEMA_VERSION,
        "namespace": ns,
        "exported_at": (now or datetime.now(UTC)).isoformat(),
        "loops": loops,
    }


def load_export(data: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    """Read an export (JSON text or an already-parsed document) and check its format.

    Raises:
        InvalidMemoryError: not JSON, not a langchain-reflective Reflexion export, or a loop
            that is not a JSON object.
    """
    if isinstance(data, str | bytes):
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise InvalidMemoryError(f"not a JSON document: {exc}") from exc
    else:
        doc = dict(data)
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise InvalidMemoryError(f"not a Reflexion export (expected format {EXPORT_FORMAT!r})")
    if doc.get("version") != SCHEMA_VERSION:
        raise InvalidMemoryError(f"unsupported Reflexion export version {doc.get('version')!r}")
    if not isinstance(doc.get("loops"), list):
        raise InvalidMemoryError("a Reflexion export needs a 'loops' list")
    for i, loop in enumerate(doc["loops"]):
        if not isinstance(loop, dict):
            raise InvalidMemoryError(
                f"malformed loops: loop {i} is a {type(loop).__name__}, not a JSON object"
            )
    return doc


def shipped_json_schema() -> dict[str, Any]:
    """The JSON Schema of an export, as shipped in the package (:data:`EXPORT_SCHEMA_FILE`)."""
    text = files("langchain_reflective.reflexion").joinpath(EXPORT_SCHEMA_FILE).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def export_json_schema() -> dict[str, Any]:
    """The export's JSON Schema built from the pydantic models (the shipped file is its output;
    a test keeps the two equal)."""
    evaluator = EvaluatorOutput.model_json_schema(ref_template="#/$defs/{model}")
    reflection = SelfReflection.model_json_schema(ref_template="#/$defs/{model}")
    defs: dict[str, Any] = {**evaluator.pop("$defs", {}), **reflection.pop("$defs", {})}
    defs["EvaluatorOutput"] = evaluator
    defs["SelfReflection"] = reflection
    number01 = {"type": "number", "minimum": 0, "maximum": 1}
    outcome = {"enum": ["passed", "failed", "max_trials", "error"]}
    trial = {
        "type": "object",
        "required": ["record_id", "created_at", "iteration", "reward", "passed", "outcome"],
        "properties": {
            "record_id": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
            "iteration": {"type": "integer", "minimum": 0},
            "reward": number01,
            "passed": {"type": "boolean"},
            "outcome": outcome,
            "strategy": {"$ref": "#/$defs/Strategy"},
            "evaluator_output": {"$ref": "#/$defs/EvaluatorOutput"},
            "lessons_reused": {"type": "array", "items": {"type": "string"}},
        },
        "additionalProperties": False,
    }
    reflection_entry = {
        "type": "object",
        "required": [
            "id",
            "created_at",
            "iteration",
            "reward",
            "outcome",
            "self_reflection",
            "low_quality",
            "quality_issues",
            "memory_metadata",
        ],
        "properties": {
            "id": {"type": "string"},
            "created_at": {"type": "string", "format": "date-time"},
            "iteration": {"type": "integer", "minimum": 0},
            "reward": number01,
            "outcome": {"enum": ["failed", "max_trials", "error"]},
            "self_reflection": {"$ref": "#/$defs/SelfReflection"},
            "low_quality": {"type": "boolean"},
            "quality_issues": {
                "type": "array",
                "items": {
                    "enum": [
                        "unparseable",
                        "too_short",
                        "no_actionable_insight",
                        "no_root_cause",
                        "verbatim_repeat",
                    ]
                },
            },
            "reflection_source": {"enum": ["model", "fallback"]},
            "lessons_reused": {"type": "array", "items": {"type": "string"}},
            "memory_metadata": {
                "type": "object",
                "required": [
                    "omega_capacity",
                    "current_memory_size",
                    "reflections_in_context",
                    "total_reflections_generated",
                ],
                "properties": {
                    "omega_capacity": {"type": "integer", "minimum": 0},
                    "current_memory_size": {"type": "integer", "minimum": 0},
                    "reflections_in_context": {"type": "array", "items": {"type": "integer"}},
                    "total_reflections_generated": {"type": "integer", "minimum": 0},
                },
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    }
    defs["Strategy"] = {"enum": ["none", "last_attempt", "reflexion", "last_attempt_reflexion"]}
    defs["Trial"] = trial
    defs["Reflection"] = reflection_entry
    defs["Loop"] = {
        "type": "object",
        "required": ["loop_id", "task", "status", "strategy", "omega", "trials", "reflections"],
        "properties": {
            "loop_id": {"type": "string", "minLength": 1},
            "task": {"type": "string"},
            "status": {"enum": ["passed", "failed", "error", "running"]},
            "strategy": {"$ref": "#/$defs/Strategy"},
            "omega": {"type": "integer", "minimum": 0},
            "trials": {"type": "array", "items": {"$ref": "#/$defs/Trial"}, "minItems": 1},
            "reflections": {"type": "array", "items": {"$ref": "#/$defs/Reflection"}},
        },
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/langchain-reflective/schemas/reflexion-export-v1.json",
        "title": "langchain-reflective Reflexion export",
        "description": "Reflexion loops (trials, self-reflections, evaluator output) exported "
        "from a MemoryStream by langchain_reflective.reflexion.export_loops.",
        "type": "object",
        "required": ["format", "version", "namespace", "exported_at", "loops"],
        "properties": {
            "format": {"const": EXPORT_FORMAT},
            "version": {"const": SCHEMA_VERSION},
            "namespace": {"type": "string", "minLength": 1},
            "exported_at": {"type": "string", "format": "date-time"},
            "loops": {"type": "array", "items": {"$ref": "#/$defs/Loop"}},
        },
        "additionalProperties": False,
        "$defs": dict(sorted(defs.items())),
    }
