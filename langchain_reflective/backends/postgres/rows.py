"""Conversions between Postgres rows and the package's values (records, vectors, candidates,
metadata as JSON)."""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.types import (
    F32,
    I64,
    CandidateSet,
    PendingMemory,
    trusted_record,
)
from langchain_reflective.records import MemoryRecord
from langchain_reflective.scoring import ScoringConfig
from langchain_reflective.stored_json import load_stored_metadata

__all__ = [
    "INT4_ARRAY_OID",
    "INT8_ARRAY_OID",
    "INT8_OID",
    "TEXT_ARRAY_OID",
    "TEXT_OID",
    "TIMESTAMPTZ_ARRAY_OID",
    "TIMESTAMPTZ_OID",
    "candidate_set",
    "dump_json",
    "int_array_binary",
    "int_from_binary",
    "pending_of",
    "record_of",
    "text_array_binary",
    "vector_text",
    "vectors_binary",
    "vectors_from_binary",
]

TEXT_ARRAY_OID = 1009
"""``text[]``, the type :func:`text_array_binary` encodes."""
INT4_ARRAY_OID = 1007
"""``integer[]``, the type :func:`int_array_binary` encodes."""
TEXT_OID = 25
"""``text``."""
INT8_OID = 20
"""``bigint``."""
INT8_ARRAY_OID = 1016
"""``bigint[]``."""
TIMESTAMPTZ_OID = 1184
"""``timestamp with time zone``."""
TIMESTAMPTZ_ARRAY_OID = 1185
"""``timestamp with time zone[]``."""
_INT4_OID = 23
_ARRAY_HEAD = struct.Struct(">iiiii")  # ndim, has-nulls, element oid, length, lower bound
_EMPTY_HEAD = struct.Struct(">iii")  # ndim 0, has-nulls, element oid
_LENGTH = struct.Struct(">i")
_VECTOR_HEAD = struct.Struct(">HH")  # dimension, unused


_STRING_OR_BIG_FLOAT = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?[eE]\+?\d+')
"""In ``json.dumps`` output: a string (left as it is), or a number written with a non-negative
exponent (only floats are: ``repr`` writes ``1e+23``, ``1.5e+16``)."""


def _positional(match: re.Match[str]) -> str:
    token = match[0]
    if token.startswith('"'):
        return token
    written = f"{Decimal(token):f}"  # (the same decimal value, without an exponent)
    return written if "." in written else f"{written}.0"


def dump_json(value: Any) -> str:
    """``json.dumps(value)``, with every float that ``repr`` writes with a positive exponent
    (``1e+23``, ``1.7976931348623157e+308``: from 1e16 up) written out in full with a fraction
    (``100000000000000000000000.0``): the same decimal value, so it reads back as the same
    float. The JSON dumper of the backend's connections (:func:`.connection.configure_connection`
    registers it), so metadata reads back from ``jsonb`` as it was written.

    ``jsonb`` keeps a number as ``numeric``, which keeps its value and its digits after the
    point but not how it was written: ``1e+23`` becomes ``100000000000000000000000``, read back
    as the int ``10**23`` (not equal to the float ``1e23``, the double nearest it), and an int
    ``10**23`` is stored the same way, so no reader could tell them apart again. Written
    ``100000000000000000000000.0`` it stays a decimal fraction, printed as written. Floats with
    a negative exponent need nothing: ``numeric`` prints ``1e-07`` as ``0.0000001``, a fraction.
    """
    text = json.dumps(value)
    if "e+" not in text:  # (repr writes a float's positive exponent as "e+NN", ints have none)
        return text
    return _STRING_OR_BIG_FLOAT.sub(_positional, text)


def vector_text(row: Any) -> str:
    """A float32 row as pgvector text (``repr`` of each value round-trips float32 exactly)."""
    return str(row.tolist())


def vectors_binary(vectors: Any) -> list[bytes]:
    """Each row of a float32 matrix in pgvector's binary format (what ``vector_recv`` reads:
    uint16 dimension, uint16 unused, big-endian float32s): the exact values, no text round."""
    be = np.ascontiguousarray(vectors, dtype=">f4")
    if be.ndim != 2:
        raise ValueError(f"expected a 2-d matrix of vectors, got shape {be.shape}")
    head = _VECTOR_HEAD.pack(be.shape[1], 0)
    return [head + row.tobytes() for row in be]


def text_array_binary(items: Iterable[str]) -> bytes:
    """A one-dimensional ``text[]`` without nulls in Postgres' binary array format.

    Raises:
        UnicodeEncodeError: an item is not encodable as UTF-8 (a lone surrogate).
    """
    encoded = [s.encode("utf-8") for s in items]
    if not encoded:
        return _EMPTY_HEAD.pack(0, 0, TEXT_OID)
    parts = [_ARRAY_HEAD.pack(1, 0, TEXT_OID, len(encoded), 1)]
    for b in encoded:
        parts.append(_LENGTH.pack(len(b)))
        parts.append(b)
    return b"".join(parts)


def int_array_binary(values: Sequence[int]) -> bytes:
    """A one-dimensional ``integer[]`` without nulls in Postgres' binary array format."""
    n = len(values)
    if not n:
        return _EMPTY_HEAD.pack(0, 0, _INT4_OID)
    body = [x for v in values for x in (4, v)]
    return _ARRAY_HEAD.pack(1, 0, _INT4_OID, n, 1) + struct.pack(f">{2 * n}i", *body)


def int_from_binary(value: bytes | None) -> int | None:
    """An integer column's value as the server sends it in binary (``None`` for ``NULL``)."""
    return None if value is None else int.from_bytes(value, "big", signed=True)


def vectors_from_binary(blobs: Sequence[bytes], dimension: int) -> F32:
    """Decode ``vector_send`` output (int16 dim, int16 unused, big-endian float32s)."""
    out = np.empty((len(blobs), dimension), dtype=np.float32)
    for i, blob in enumerate(blobs):
        out[i] = np.frombuffer(blob, dtype=">f4", offset=4, count=dimension)
    return out


def record_of(row: Sequence[Any]) -> tuple[int, MemoryRecord]:
    """``(seq, record)`` from a row of :data:`RECORD_COLUMNS` (metadata as ``jsonb`` text: a
    row that cannot be read is read with a marker instead, see
    :func:`~langchain_reflective.stored_json.load_stored_metadata`)."""
    seq, id_, text, kind, created, accessed, imp, source, evidence, depth, ns, meta = row
    return int(seq), trusted_record(
        id=id_,
        text=text,
        kind=kind,
        created_at=created,
        last_accessed_at=accessed,
        importance=float(imp),
        importance_source=source,
        evidence=tuple(evidence),
        depth=int(depth),
        namespace=ns,
        metadata=load_stored_metadata(meta, ns, id_) if meta != "{}" else {},
    )


def pending_of(row: Sequence[Any]) -> PendingMemory:
    """A queued memory from a row of ``queries.pending_sql`` (metadata as text, read as
    :func:`record_of` reads it)."""
    id_, namespace, text, kind, created, importance, metadata = row
    return PendingMemory(
        id=id_,
        namespace=namespace,
        text=text,
        kind=kind,
        created_at=created,
        importance=None if importance is None else float(importance),
        metadata=load_stored_metadata(metadata, namespace, id_) if metadata != "{}" else {},
    )


def _column(packed: bytes | None, dtype: str, order: I64) -> npt.NDArray[Any]:
    """One packed column of ``candidates_sql`` (concatenated binary values) in ``order``."""
    return np.frombuffer(packed or b"", dtype=dtype)[order]


def candidate_set(row: Sequence[Any] | None, config: ScoringConfig, exact: bool) -> CandidateSet:
    """A :class:`CandidateSet` from the one (binary) row of ``candidates_sql``.

    The rows are put in the set's order: the candidates by key, then the neighbour rows by key;
    each row's BM25 score is looked up among the matching memories' (0 if it matches none).
    """
    if row is None or not row[0]:
        return CandidateSet.empty()
    seq = np.frombuffer(row[0], dtype=">i8")
    ok = np.frombuffer(row[1], dtype=np.bool_)
    order: I64 = np.lexsort((seq, ~ok))
    keys = seq[order].astype(np.int64)
    size = int(np.count_nonzero(ok))
    names: list[str] = row[6]
    kind_names = sorted(set(names))
    code = {name: i for i, name in enumerate(kind_names)}
    kinds = np.fromiter(map(code.__getitem__, names), dtype=np.int32, count=len(names))[order]
    lexical = None
    lexical_max = 0.0
    if config.uses_lexical:
        # float32 values, as the SQLite backend's BM25 index hands them out
        matched = np.frombuffer(row[9] or b"", dtype=">i8").astype(np.int64)
        scores = np.frombuffer(row[10] or b"", dtype=">f8").astype(np.float32)
        lexical = np.zeros(keys.shape[0], dtype=np.float64)
        if matched.shape[0]:
            sorter = np.argsort(matched)
            ordered = matched[sorter]
            at = np.minimum(np.searchsorted(ordered, keys), ordered.shape[0] - 1)
            hit = ordered[at] == keys
            lexical[hit] = scores[sorter[at[hit]]]
            lexical_max = float(scores.max())
    previous = nxt = None
    if config.neighbor_weight > 0:
        previous = _positions(keys, size, _column(row[7], ">i8", order))
        nxt = _positions(keys, size, _column(row[8], ">i8", order))
    return CandidateSet(
        keys=keys,
        size=size,
        relevance=_column(row[2], ">f8", order).astype(np.float32).astype(np.float64),
        accessed=_column(row[3], ">f8", order).astype(np.float64),
        created=_column(row[4], ">f8", order).astype(np.float64),
        importance=_column(row[5], ">f8", order).astype(np.float64),
        kinds=kinds,
        kind_names=tuple(kind_names),
        lexical=lexical,
        lexical_max=lexical_max,
        previous=previous,
        next=nxt,
        exact=exact,
    )


def _positions(keys: I64, size: int, linked: I64) -> I64:
    """Each candidate's linked key (``-1``: none) as a row of ``keys``, ``-1`` when absent;
    ``-1`` for every neighbour row (rows ``size ..``)."""
    sorter = np.argsort(keys, kind="stable")
    ordered = keys[sorter]
    at = np.minimum(np.searchsorted(ordered, linked), max(len(keys) - 1, 0))
    found = (ordered[at] == linked) & (linked >= 0)
    found[size:] = False
    out: I64 = np.where(found, sorter[at], -1).astype(np.int64)
    return out
