"""How ReflectiveStore maps LangGraph store items onto memories: item ids, namespace encoding,
value rendering and value filters (pure functions, no I/O)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.store.base import InvalidNamespaceError, MatchCondition, get_text_at_path

from langchain_reflective.errors import InvalidFilterError, InvalidMemoryError
from langchain_reflective.records import (
    MAX_IDENTIFIER_BYTES,
    MAX_NESTING,
    MemoryRecord,
    check_json_shape,
    clip_text,
    validate_text,
)
from langchain_reflective.stored_json import UNREADABLE_METADATA_KEY

__all__ = [
    "ITEM_METADATA_KEY",
    "MAX_VALUE_DEPTH",
    "StoreNamespaceError",
    "check_filter",
    "check_namespace",
    "check_value",
    "decode_namespace",
    "encode_namespace",
    "item_key",
    "item_memory_id",
    "item_text",
    "matches_condition",
    "matches_filter",
    "render_value",
]

_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
_ESCAPE = re.compile(r"%(25|2F)")


class StoreNamespaceError(InvalidMemoryError, InvalidNamespaceError):
    """A namespace tuple cannot be used (empty where items live, or a bad label).

    It is both langgraph's ``InvalidNamespaceError`` and this package's
    :class:`~langchain_reflective.errors.InvalidMemoryError`.
    """


# -- items ----------------------------------------------------------------------------------------

ITEM_METADATA_KEY = "langgraph_item"
"""The metadata key under which a memory carries its store item (key, value, created_at)."""


def item_memory_id(stream_namespace: str, key: str) -> str:
    """The id of the memory holding ``key`` in a stream namespace (stable, 34 chars)."""
    digest = hashlib.sha256(f"{len(stream_namespace)}:{stream_namespace}/{key}".encode())
    return "kv" + digest.hexdigest()[:32]


def item_key(record: MemoryRecord) -> str | None:
    """The store key ``record`` holds as a store item, or ``None`` for a plain memory.

    An item carries its key and value in its metadata and has the key's id in its namespace
    (or the key itself as id: a put over a stream memory whose id was the key keeps that id).
    """
    meta = record.metadata.get(ITEM_METADATA_KEY)
    if not isinstance(meta, Mapping):
        return _unreadable_item_key(record)
    key = meta.get("key")
    if not isinstance(key, str) or not isinstance(meta.get("value"), dict):
        return None
    return key if record.id in (item_memory_id(record.namespace, key), key) else None


_STORED_ITEM_KEY = re.compile(r'\{"' + ITEM_METADATA_KEY + r'": \{"key": ("(?:[^"\\]|\\.)*")')
"""The start of an item's stored metadata, up to its key: as ``json.dumps`` writes it, and as
Postgres prints ``jsonb`` (which puts the shortest keys first)."""


def _unreadable_item_key(record: MemoryRecord) -> str | None:
    """The key of an item whose stored metadata the backend could not read (its value was
    stored nested too deep by an earlier version: see
    :data:`~langchain_reflective.stored_json.UNREADABLE_METADATA_KEY`), taken from the start of
    the stored text, so the item keeps its key (a put to it replaces it, a delete deletes it)
    though its value cannot be given. ``None`` for any other memory."""
    marker = record.metadata.get(UNREADABLE_METADATA_KEY)
    stored = marker.get("json") if isinstance(marker, Mapping) else None
    found = _STORED_ITEM_KEY.match(stored) if isinstance(stored, str) else None
    if found is None:
        return None
    try:
        key = json.loads(found[1])
    except ValueError:  # (an escape JSON has not, in a text edited by hand: no key to keep)
        return None
    return key if record.id in (item_memory_id(record.namespace, key), key) else None


# -- namespaces ---------------------------------------------------------------------------------


def check_namespace(namespace: object, *, allow_empty: bool) -> tuple[str, ...]:
    """The namespace as a tuple of labels (a list is accepted too).

    Raises:
        StoreNamespaceError: not a tuple of non-empty strings without NUL characters (or
            empty when ``allow_empty`` is false); where items live (``allow_empty`` false),
            longer than :data:`~langchain_reflective.records.MAX_IDENTIFIER_BYTES` as a stream
            namespace.
    """
    if not isinstance(namespace, tuple | list):
        raise StoreNamespaceError(
            f"namespace must be a tuple of strings, got {type(namespace).__name__}"
        )
    labels = tuple(namespace)
    if not labels and not allow_empty:
        raise StoreNamespaceError("namespace cannot be empty: items live in a non-empty namespace")
    for label in labels:
        if not isinstance(label, str):
            raise StoreNamespaceError(
                f"namespace labels must be strings, got {type(label).__name__} in {labels!r}"
            )
        if not label:
            raise StoreNamespaceError(f"namespace labels cannot be empty strings: {labels!r}")
        if "\x00" in label:
            raise StoreNamespaceError(f"namespace labels cannot contain NUL: {labels!r}")
        try:
            label.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise StoreNamespaceError(
                f"namespace label {label!r} is not valid Unicode text (a lone surrogate?)"
            ) from exc
    if not allow_empty:  # (where items live: a prefix can be any length and match nothing)
        size = len(_joined(labels).encode("utf-8"))
        if size > MAX_IDENTIFIER_BYTES:
            raise StoreNamespaceError(
                f"namespace is {size:,} bytes long as a stream namespace (labels joined with "
                f"'/'); the limit is {MAX_IDENTIFIER_BYTES:,}: use shorter labels"
            )
    return labels


def encode_namespace(namespace: tuple[str, ...]) -> str:
    """The stream namespace of a store namespace tuple.

    Each label has ``%`` replaced by ``%25`` and ``/`` by ``%2F``; labels are joined with
    ``/``. ``("users", "alice")`` -> ``"users/alice"``; ``("a/b",)`` -> ``"a%2Fb"``.

    Raises:
        StoreNamespaceError: an empty tuple, or a label that is not a non-empty string
            without NUL characters.
    """
    return _joined(check_namespace(namespace, allow_empty=False))


def _joined(labels: tuple[str, ...]) -> str:
    return "/".join(label.replace("%", "%25").replace("/", "%2F") for label in labels)


def decode_namespace(name: str) -> tuple[str, ...] | None:
    """The store namespace tuple of a stream namespace, or ``None`` if it encodes none.

    The inverse of :func:`encode_namespace`: ``decode_namespace(encode_namespace(ns)) == ns``
    for every valid ``ns``, and a name that is not exactly the encoding of some tuple (an empty
    label, a ``%`` not followed by ``25`` or ``2F``) gives ``None``.
    """
    if not name:
        return None
    labels = tuple(
        _ESCAPE.sub(lambda m: "%" if m.group(1) == "25" else "/", part) for part in name.split("/")
    )
    try:
        return labels if encode_namespace(labels) == name else None
    except StoreNamespaceError:
        return None


def matches_condition(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    return all(p == "*" or n == p for n, p in pairs)


# -- values -------------------------------------------------------------------------------------


MAX_VALUE_DEPTH = MAX_NESTING - 2
"""How deep the dicts and lists of a store value may nest (the value itself is level 1): a
memory's metadata may nest :data:`~langchain_reflective.records.MAX_NESTING` levels, and the
value sits two levels inside it (``{"langgraph_item": {"value": ...}}``)."""


def check_value(value: Mapping[str, Any], what: str) -> None:
    """Refuse a store value that JSON cannot keep as given, before it is encoded
    (:func:`~langchain_reflective.records.check_json_shape`): keys must be strings at every
    depth (JSON would store a key ``1``, ``True`` or ``None`` as ``"1"``, ``"true"`` or
    ``"null"``, merging it with a string key equal to that, where LangGraph's ``InMemoryStore``
    keeps it as given), and dicts and lists nest at most :data:`MAX_VALUE_DEPTH` levels.

    Raises:
        InvalidMemoryError: a key that is not a string, or a value nested too deep; the
            message starts with ``what`` and names where.
    """
    check_json_shape(value, what, MAX_VALUE_DEPTH)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_value(value: Mapping[str, Any], fields: Sequence[str] | None = None) -> str:
    """The memory text of a store value.

    Args:
        value: the item's value.
        fields: LangGraph field paths (``"text"``, ``"a.b"``, ``"items[*].name"``, ``"$"`` for
            the whole value as JSON); the texts they select are joined with newlines. ``None``:
            a value whose only field is a string is that string, any other value is one
            ``field: value`` line per top-level field (non-strings as JSON).

    Returns:
        The text, or ``""`` when ``fields`` select nothing (the caller falls back to the
        default rendering).
    """
    if fields is not None:
        texts = [t for path in fields for t in get_text_at_path(value, path)]
        return "\n".join(t for t in texts if t.strip())
    if len(value) == 1:
        (only,) = value.values()
        if isinstance(only, str) and only.strip():
            return only
    if not value:
        return "{}"
    return "\n".join(f"{k}: {_as_text(v)}" for k, v in value.items())


def item_text(
    value: Mapping[str, Any], fields: Sequence[str] | None, *, indexed: bool
) -> tuple[str, bool]:
    """The memory text of a validated store value and whether a query search
    reads it: only if ``indexed`` (no ``index=False``) and ``fields`` select some text (see
    :func:`render_value`). Text no query reads (then the whole value's rendering) is cut at
    the memory text limit; text a query reads is held to it.

    Raises:
        InvalidMemoryError: read by queries, the text is too long. (A NUL or a lone surrogate
        cannot reach here: ``validate_metadata`` refuses them in the value.)
    """
    text = render_value(value, fields)
    indexed = indexed and bool(text.strip())  # selected fields had text
    if not text.strip():
        text = render_value(value)
    if not indexed:  # (never searched by a query: its text only shows what it holds)
        text = clip_text(text)
    return validate_text(text), indexed


def check_filter(flt: object) -> dict[str, Any] | None:
    if flt is None:
        return None
    if not isinstance(flt, Mapping) or not all(isinstance(k, str) for k in flt):
        raise InvalidFilterError("a store filter must be a dict with string keys")

    def walk(cond: Any) -> None:
        """A field's condition: a value, a dict of operators (their operands are values), or
        a dict of nested fields' conditions; never operators and fields mixed."""
        if not isinstance(cond, Mapping):
            return
        operators = [k for k in cond if isinstance(k, str) and k.startswith("$")]
        if not operators:
            for sub in cond.values():
                walk(sub)
            return
        for key in cond:
            if key not in _OPERATORS:
                raise InvalidFilterError(
                    f"unsupported filter operator {key!r} in {dict(cond)!r}: a condition is "
                    f"either operators ({', '.join(sorted(_OPERATORS))}) or field values, "
                    "not both"
                )

    for sub in flt.values():
        walk(sub)
    return dict(flt)


def _lookup(value: Mapping[str, Any], key: str) -> Any:
    if key in value:
        return value[key]
    node: Any = value
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _compare(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    a, b = _number(value), _number(operand)
    if a is None or b is None:
        if not (isinstance(value, str) and isinstance(operand, str)):
            return False  # only numbers with numbers and strings with strings are ordered
        a, b = value, operand  # type: ignore[assignment]
    elif math.isnan(a) or math.isnan(b):
        return False
    if operator == "$gt":
        return a > b  # type: ignore[operator]
    if operator == "$gte":
        return a >= b  # type: ignore[operator]
    if operator == "$lt":
        return a < b  # type: ignore[operator]
    return a <= b  # type: ignore[operator]


def _match_value(value: Any, cond: Any) -> bool:
    if isinstance(cond, Mapping):
        if any(k.startswith("$") for k in cond):
            return all(_compare(value, op, operand) for op, operand in cond.items())
        if not isinstance(value, Mapping):
            return False
        return all(_match_value(value.get(k), v) for k, v in cond.items())
    if isinstance(cond, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(cond)
            and all(_match_value(v, c) for v, c in zip(value, cond, strict=True))
        )
    return bool(value == cond)


def matches_filter(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    return not flt or all(_match_value(_lookup(value, k), c) for k, c in flt.items())
