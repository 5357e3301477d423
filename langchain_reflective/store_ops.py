"""The operations of a ``ReflectiveStore`` batch, validated and grouped before anything is
read or written: the stream calls the batch flow makes (:class:`Call`), puts, searches, and
:func:`prepare_ops`, which refuses a bad operation before the batch touches the stream."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, Op, PutOp, SearchOp

from langchain_reflective.errors import InvalidFilterError, InvalidMemoryError
from langchain_reflective.records import check_encodable, check_identifier, validate_metadata
from langchain_reflective.store_codec import (
    check_filter,
    check_namespace,
    check_value,
    encode_namespace,
    item_text,
)

__all__ = [
    "Call",
    "Prepared",
    "Put",
    "Search",
    "check_key",
    "check_list",
    "check_put",
    "count_arg",
    "prepare_ops",
]


@dataclass(frozen=True, slots=True)
class Call:
    """One call of the stream's public API (or, with ``embeddings``, of the stream's embedding
    model) that the batch flow needs made."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    embeddings: bool = False


@dataclass(frozen=True, slots=True)
class Put:
    """A checked put: the value as JSON keeps it and the text it is found by (``value``
    ``None``: a delete)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any] | None
    text: str
    indexed: bool


@dataclass(frozen=True, slots=True)
class Search:
    """A checked search (``query`` ``None``: newest first, no ranking)."""

    prefix: tuple[str, ...]
    query: str | None
    filter: dict[str, Any] | None
    limit: int
    offset: int


@dataclass(slots=True)
class Prepared:
    """A batch's operations grouped by kind, each with its position in the results."""

    size: int
    gets: dict[str, list[tuple[int, tuple[str, ...], str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    searches: list[tuple[int, Search]] = field(default_factory=list)
    lists: list[tuple[int, ListNamespacesOp]] = field(default_factory=list)
    puts: dict[tuple[tuple[str, ...], str], Put] = field(default_factory=dict)


def count_arg(value: object, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidFilterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidMemoryError(f"an item key must be a string, got {type(key).__name__}")
    return check_identifier(key, "an item key")  # a NUL too, before any put of the batch is written


def prepare_ops(ops: Iterable[Op], fields: Sequence[str] | None) -> Prepared:
    """Validate every operation and group them; nothing is read or written yet."""
    ops = list(ops)
    prepared = Prepared(size=len(ops))
    for i, op in enumerate(ops):
        if isinstance(op, GetOp):
            ns = check_namespace(op.namespace, allow_empty=False)
            prepared.gets[encode_namespace(ns)].append((i, ns, check_key(op.key)))
        elif isinstance(op, SearchOp):
            query = op.query
            if query is not None and not isinstance(query, str):
                raise InvalidFilterError(f"query must be a string, got {type(query).__name__}")
            if query and not query.isascii():  # before the (one) embedding call
                check_encodable(query, "query")
            search = Search(
                prefix=check_namespace(op.namespace_prefix, allow_empty=True),
                query=query if query and query.strip() else None,
                filter=check_filter(op.filter),
                limit=count_arg(op.limit, "limit", minimum=0),
                offset=count_arg(op.offset, "offset", minimum=0),
            )
            prepared.searches.append((i, search))
        elif isinstance(op, ListNamespacesOp):
            prepared.lists.append((i, check_list(op)))
        elif isinstance(op, PutOp):
            put = check_put(op, fields)
            prepared.puts.pop((put.namespace, put.key), None)  # the last put wins
            prepared.puts[(put.namespace, put.key)] = put
        else:
            raise InvalidMemoryError(f"unknown store operation {type(op).__name__}")
    return prepared


def check_list(op: ListNamespacesOp) -> ListNamespacesOp:
    conditions = []
    for cond in op.match_conditions or ():
        if not isinstance(cond, MatchCondition) or cond.match_type not in ("prefix", "suffix"):
            raise InvalidFilterError(f"bad namespace match condition {cond!r}")
        path = tuple(cond.path)
        if not all(isinstance(p, str) and p for p in path):
            raise InvalidFilterError(f"match condition path must be labels, got {path!r}")
        conditions.append(MatchCondition(cond.match_type, path))
    if op.max_depth is not None:
        count_arg(op.max_depth, "max_depth", minimum=0)  # (0: [()], as `InMemoryStore`)
    return ListNamespacesOp(
        match_conditions=tuple(conditions),
        max_depth=op.max_depth,
        limit=count_arg(op.limit, "limit", minimum=0),
        offset=count_arg(op.offset, "offset", minimum=0),
    )


def check_put(op: PutOp, fields: Sequence[str] | None) -> Put:
    ns = check_namespace(op.namespace, allow_empty=False)
    key = check_key(op.key)
    if op.ttl is not None:
        raise NotImplementedError(
            "ReflectiveStore does not support TTL (supports_ttl = False): memories are kept "
            "until deleted (their recency fades in ranking instead). Put without ttl, or "
            "delete items explicitly."
        )
    if op.value is None:
        return Put(ns, key, None, "", indexed=False)
    if not isinstance(op.value, Mapping):
        raise InvalidMemoryError(
            f"a store value must be a dict with string keys, got {type(op.value).__name__}"
        )
    check_value(op.value, f"the value of {key!r}")  # string keys, bounded depth
    value = validate_metadata(op.value, f"the value of {key!r}")  # a JSON copy, or an error
    index = op.index
    if (
        index is not None
        and index is not False
        and (isinstance(index, str) or not all(isinstance(p, str) for p in index))
    ):
        raise InvalidMemoryError("index must be None, False or a list of field paths")
    chosen = fields if index is None or index is False else list(index)
    text, indexed = item_text(value, chosen, indexed=index is not False)
    return Put(ns, key, value, text, indexed=indexed)
