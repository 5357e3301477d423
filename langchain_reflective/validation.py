"""Checking what callers hand a memory stream: add arguments (into an :class:`AddPlan`, and
from it the records), and embedding outputs (into float32 unit vectors)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings

from langchain_reflective.backends.base import (
    CounterUpdate,
    PendingMemory,
    ReflectionState,
    trusted_record,
)
from langchain_reflective.errors import EmbeddingError, InvalidMemoryError
from langchain_reflective.records import (
    MAX_IDENTIFIER_BYTES,
    REFLECTION,
    MemoryRecord,
    check_encodable,
    check_identifier,
    new_memory_ids,
    utc,
    validate_metadata,
    validate_text,
)

__all__ = [
    "AddPlan",
    "as_unit_vectors",
    "check_query",
    "embedding_identity",
    "evidence_depths",
    "model_identity",
    "pending_items",
    "plan_add",
    "plan_counter",
    "plan_pending",
    "plan_records",
    "valid_name",
]

F32 = npt.NDArray[np.float32]


def valid_name(value: object, what: str) -> str:
    """A namespace or kind: a non-empty string that encodes as UTF-8.

    Raises:
        InvalidMemoryError: anything else.
    """
    if not isinstance(value, str) or not value:
        raise InvalidMemoryError(f"{what} must be a non-empty string, got {value!r}")
    return check_identifier(value, what)


def embedding_identity(embeddings: Embeddings) -> str:
    """A stable description of an embeddings object: class plus model name when it has one."""
    cls = type(embeddings)
    for attr in ("model_name", "model", "model_id", "deployment"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, str) and value:
            return model_identity(cls, value)
    name = f"{cls.__module__}.{cls.__qualname__}"
    size = getattr(embeddings, "size", None)
    if isinstance(size, int):
        return f"{name}:size={size}"
    return name


def model_identity(cls: type, model: str) -> str:
    """:func:`embedding_identity` of an instance of ``cls`` whose model name is ``model``,
    without building one (so without loading the model)."""
    path = Path(model)
    if path.is_absolute():  # a model loaded from disk: the install path is not its name
        model = f"{path.parent.name}/{path.name}"
    return f"{cls.__module__}.{cls.__qualname__}:{model}"


def as_unit_vectors(raw: Any, expected_rows: int, source: str) -> F32:
    if (
        expected_rows == 1
        and type(raw) is np.ndarray
        and raw.dtype == np.float32
        and raw.ndim == 2
        and raw.shape[0] == 1
        and raw.shape[1]
    ):  # one float32 row (numpy embeddings): its squares cannot overflow float64
        row = raw.astype(np.float64)  # a copy, divided in place
        square = float(np.dot(row[0], row[0]))
        if math.isfinite(square) and square > 1e-24:
            row /= math.sqrt(square)
            unit: F32 = row.astype(np.float32)
            return unit
    try:
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"{source} returned something that is not numeric: {exc}") from exc
    if arr.ndim != 2 or arr.shape[0] != expected_rows or arr.shape[1] == 0:
        raise EmbeddingError(
            f"{source} returned an array of shape {arr.shape}; expected ({expected_rows}, dim)"
        )
    if expected_rows == 1:  # one memory per add, or a query: scalar checks are cheaper
        with np.errstate(over="ignore", invalid="ignore"):  # huge values: handled below
            square = float(np.dot(arr[0], arr[0]))
        if math.isfinite(square) and square > 1e-24:
            one: F32 = (arr / math.sqrt(square)).astype(np.float32)
            return one
    squares = np.einsum("ij,ij->i", arr, arr)  # NaN/inf anywhere makes its row's sum NaN/inf
    if not np.isfinite(squares).all():
        if not np.isfinite(arr).all():
            raise EmbeddingError(f"{source} returned NaN or infinite values")
        arr = arr / np.abs(arr).max(axis=1, keepdims=True)  # huge but finite: rescale first
        squares = np.einsum("ij,ij->i", arr, arr)
    norms = np.sqrt(squares)
    if (norms <= 1e-12).any():
        raise EmbeddingError(f"{source} returned an all-zero vector; it cannot be normalised")
    out: F32 = (arr / norms[:, None]).astype(np.float32)
    return out


@dataclass
class AddPlan:
    """Validated arguments of one add (or of the pending memories of one namespace)."""

    texts: list[str]
    kinds: list[str]
    importances: list[float | None]
    metadatas: list[dict[str, Any]]
    evidence: list[tuple[str, ...]]
    ids: list[str]
    namespace: str
    now: datetime
    reset_counter: bool | ReflectionState
    """Reset the counter with the write (a ``ReflectionState``: by that much only)."""
    to_rate: list[int] = field(default_factory=list)
    times: list[datetime] | None = None
    """Per-memory creation times (pending memories); ``None``: every memory was made ``now``."""
    pending: bool = False
    """The memories complete queued ones (same ids): the insert dequeues them."""
    replacing: tuple[str, ...] = ()
    """Ids of the namespace's memories deleted in the same write (``backend.replace``)."""


def _broadcast(value: Any, n: int, name: str, *, scalar_types: tuple[type, ...]) -> list[Any]:
    if value is None or isinstance(value, scalar_types):
        return [value] * n
    if isinstance(value, Mapping):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise InvalidMemoryError(f"{name} has {len(values)} items for {n} texts")
    return values


def plan_add(
    texts: str | Sequence[str],
    *,
    importances: float | Sequence[float | None] | None,
    kinds: str | Sequence[str],
    metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None,
    evidence: Sequence[Sequence[str]] | None,
    ids: Sequence[str] | None,
    namespace: str,
    now: datetime | None,
    reset_reflection_counter: bool | ReflectionState,
    replacing: Sequence[str] | None = None,
) -> AddPlan:
    """Validate the arguments of ``MemoryStream.add`` (``namespace`` already resolved).

    Raises:
        InvalidMemoryError: bad text, kind, importance, metadata, evidence, ids or replacing.
    """
    one = texts if type(texts) is str else None
    if one is None and type(texts) is list and len(texts) == 1:
        one = texts[0]
    if (
        one is not None
        and type(kinds) is str
        and metadatas is None
        and evidence is None
        and ids is None
        and not replacing
    ):  # one memory with defaults: the common per-turn add, planned without the loops
        imp = importances
        if type(imp) is list and len(imp) == 1:
            imp = imp[0]
        if (
            kinds
            and (
                (kinds.isascii() and "\x00" not in kinds and len(kinds) <= MAX_IDENTIFIER_BYTES)
                or valid_name(kinds, "kind")
            )
            and (imp is None or (type(imp) is float and 0.0 <= imp <= 1.0))
        ):
            return AddPlan(
                texts=[validate_text(one)],
                kinds=[kinds],
                importances=[imp],
                metadatas=[{}],
                evidence=[()],
                ids=new_memory_ids(1),
                namespace=namespace,
                now=utc(now) if now is not None else datetime.now(UTC),
                reset_counter=reset_reflection_counter,
                to_rate=[0] if imp is None else [],
            )
    if isinstance(texts, str):
        texts = [texts]
    if type(texts) is not list and not isinstance(texts, Sequence):
        raise InvalidMemoryError(
            f"texts must be a string or a sequence of strings, got {type(texts).__name__}"
        )
    text_list = [validate_text(t) for t in texts]
    n = len(text_list)
    kind_list = _broadcast(kinds, n, "kinds", scalar_types=(str,))
    for kind in kind_list:
        valid_name(kind, "kind")
    imp_list = _broadcast(importances, n, "importances", scalar_types=(int, float))
    for imp in imp_list:
        if imp is not None and (
            isinstance(imp, bool)
            or not isinstance(imp, int | float)
            or not math.isfinite(imp)
            or not 0.0 <= imp <= 1.0
        ):
            raise InvalidMemoryError(f"importance must be a number in [0, 1], got {imp!r}")
    if metadatas is None:
        meta_list: list[dict[str, Any]] = [{} for _ in range(n)]
    else:
        meta_list = [
            validate_metadata(m) for m in _broadcast(metadatas, n, "metadatas", scalar_types=())
        ]
    if evidence is None:
        ev_list: list[tuple[str, ...]] = [()] * n
    else:
        ev_raw = list(evidence)
        if len(ev_raw) != n:
            raise InvalidMemoryError(f"evidence has {len(ev_raw)} items for {n} texts")
        ev_list = [tuple(str(e) for e in (ev or ())) for ev in ev_raw]
        for ev in ev_list:
            for e in ev:
                check_identifier(e, "evidence id")
    if ids is None:
        id_list = new_memory_ids(n)
    else:
        id_list = _id_list(ids, "id")
        if len(id_list) != n or len(set(id_list)) != n:
            raise InvalidMemoryError("ids must be unique non-empty strings, one per text")
    when = utc(now) if now is not None else datetime.now(UTC)
    return AddPlan(
        texts=text_list,
        kinds=kind_list,
        importances=imp_list,
        metadatas=meta_list,
        evidence=ev_list,
        ids=id_list,
        namespace=namespace,
        now=when,
        reset_counter=reset_reflection_counter,
        to_rate=[i for i, v in enumerate(imp_list) if v is None],
        replacing=tuple(dict.fromkeys(_id_list(replacing, "replacing id"))) if replacing else (),
    )


def _id_list(values: Sequence[str], what: str) -> list[str]:
    """``values`` as memory ids: non-empty strings that UTF-8 can encode."""
    if isinstance(values, str):
        raise InvalidMemoryError(f"{what}s must be a sequence of strings, not one string")
    out = [str(i) for i in values]
    if not all(out):
        raise InvalidMemoryError(f"{what}s must be non-empty strings")
    for i in out:
        check_identifier(i, what)
    return out


def plan_pending(items: Sequence[PendingMemory]) -> list[AddPlan]:
    """One plan per namespace for completing queued memories (in queue order)."""
    groups: dict[str, list[PendingMemory]] = {}
    for item in items:
        groups.setdefault(item.namespace, []).append(item)
    return [
        AddPlan(
            texts=[p.text for p in group],
            kinds=[p.kind for p in group],
            importances=[p.importance for p in group],
            metadatas=[dict(p.metadata) for p in group],
            evidence=[()] * len(group),
            ids=[p.id for p in group],
            namespace=ns,
            now=group[-1].created_at,
            reset_counter=False,
            to_rate=[i for i, p in enumerate(group) if p.importance is None],
            times=[p.created_at for p in group],
            pending=True,
        )
        for ns, group in groups.items()
    ]


def pending_items(plan: AddPlan) -> list[PendingMemory]:
    """The queued memories of an enqueue's plan (the inverse of :func:`plan_pending`)."""
    return [
        PendingMemory(
            id=plan.ids[i],
            namespace=plan.namespace,
            text=plan.texts[i],
            kind=plan.kinds[i],
            created_at=plan.now,
            importance=None if (imp := plan.importances[i]) is None else float(imp),
            metadata=plan.metadatas[i],
        )
        for i in range(len(plan.texts))
    ]


def check_query(query: object, k: object) -> str:
    """A retrieval's query and ``k``, checked; returns the query.

    Raises:
        InvalidMemoryError: a query that is not a non-empty string UTF-8 can encode, or a
            ``k`` that is not a positive integer.
    """
    if not isinstance(query, str):
        raise InvalidMemoryError(f"query must be a str, got {type(query).__name__}")
    if not query.strip():
        raise InvalidMemoryError("query is empty or whitespace")
    if not query.isascii():
        check_encodable(query, "query")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidMemoryError(f"k must be a positive integer, got {k!r}")
    return query


def evidence_depths(plan: AddPlan, found: Mapping[str, int]) -> list[int]:
    """Each memory's depth: one more than its deepest evidence (0 without); ``found`` maps
    the namespace's evidence ids to their depths.

    Raises:
        InvalidMemoryError: an evidence id is not in the namespace.
    """
    missing = sorted({e for ev in plan.evidence for e in ev if e not in found})
    if missing:
        raise InvalidMemoryError(
            f"evidence ids not found in namespace {plan.namespace!r}: {missing[:5]}"
        )
    return [1 + max(found[e] for e in ev) if ev else 0 for ev in plan.evidence]


def plan_records(plan: AddPlan, rated: Sequence[Any], depths: list[int]) -> list[MemoryRecord]:
    """The records of a checked plan once its missing importances are ``rated`` (the
    scorer's results for ``plan.to_rate``, in order) and its ``depths`` known."""
    n = len(plan.texts)
    if n == 1 and not rated:  # one memory with a given importance: no per-item lists
        given = plan.importances[0]
        if given is not None:
            when = plan.times[0] if plan.times else plan.now
            return [
                trusted_record(
                    plan.ids[0],
                    plan.texts[0],
                    plan.kinds[0],
                    when,
                    when,
                    float(given),
                    "given",
                    plan.evidence[0],
                    depths[0],
                    plan.namespace,
                    plan.metadatas[0],
                )
            ]
    importance: list[float] = [0.0] * n
    sources: list[str] = ["given"] * n
    for i, v in enumerate(plan.importances):
        if v is not None:
            importance[i] = float(v)
    for i, result in zip(plan.to_rate, rated, strict=True):
        importance[i] = float(min(1.0, max(0.0, result.value)))
        sources[i] = result.source
    times = plan.times or [plan.now] * n
    # every value was validated by plan_add: build the records without re-validating
    return [
        trusted_record(
            id=plan.ids[i],
            text=plan.texts[i],
            kind=plan.kinds[i],
            created_at=times[i],
            last_accessed_at=times[i],
            importance=importance[i],
            importance_source=sources[i],
            evidence=plan.evidence[i],
            depth=depths[i],
            namespace=plan.namespace,
            metadata=plan.metadatas[i],
        )
        for i in range(n)
    ]


def plan_counter(plan: AddPlan, records: Sequence[MemoryRecord]) -> CounterUpdate:
    """The counter change that goes with storing ``records`` (the memories of ``plan``):
    their importance (reflections' excluded) and number, or the reset ``plan`` asks for."""
    reset = plan.reset_counter
    return CounterUpdate(
        namespace=plan.namespace,
        importance=(
            (0.0 if records[0].kind == REFLECTION else records[0].importance)
            if len(records) == 1
            else sum(r.importance for r in records if r.kind != REFLECTION)
        ),
        adds=len(records),
        reset_at=plan.now if reset is not False else None,
        consumed=reset if isinstance(reset, ReflectionState) else None,
    )
