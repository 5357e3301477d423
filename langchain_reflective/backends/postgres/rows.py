"""Conversions between Postgres rows and the package's values (records, vectors, candidates)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from langchain_reflective.backends.types import F32, CandidateSet, trusted_record
from langchain_reflective.records import MemoryRecord
from langchain_reflective.scoring import ScoringConfig

__all__ = [
    "INT4_ARRAY_OID",
    "TEXT_ARRAY_OID",
    "candidate_set",
    "int_array_binary",
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
_TEXT_OID = 25
_INT4_OID = 23
_ARRAY_HEAD = struct.Struct(">iiiii")  # ndim, has-nulls, element oid, length, lower bound
_EMPTY_HEAD = struct.Struct(">iii")  # ndim 0, has-nulls, element oid
_LENGTH = struct.Struct(">i")
_VECTOR_HEAD = struct.Struct(">HH")  # dimension, unused


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
        return _EMPTY_HEAD.pack(0, 0, _TEXT_OID)
    parts = [_ARRAY_HEAD.pack(1, 0, _TEXT_OID, len(encoded), 1)]
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


def vectors_from_binary(blobs: Sequence[bytes], dimension: int) -> F32:
    """Decode ``vector_send`` output (int16 dim, int16 unused, big-endian float32s)."""
    out = np.empty((len(blobs), dimension), dtype=np.float32)
    for i, blob in enumerate(blobs):
        out[i] = np.frombuffer(blob, dtype=">f4", offset=4, count=dimension)
    return out


def record_of(row: Sequence[Any]) -> tuple[int, MemoryRecord]:
    """``(seq, record)`` from a row of :data:`RECORD_COLUMNS`."""
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
        metadata=meta,
    )


def candidate_set(rows: Sequence[Any], config: ScoringConfig, exact: bool) -> CandidateSet:
    """A :class:`CandidateSet` from the rows of ``candidates_sql`` (candidates first)."""
    if not rows:
        return CandidateSet.empty()
    n = len(rows)
    keys = np.fromiter((r[0] for r in rows), dtype=np.int64, count=n)
    size = sum(1 for r in rows if r[1])
    kind_names: dict[str, int] = {}
    kinds = np.fromiter(
        (kind_names.setdefault(r[7], len(kind_names)) for r in rows), dtype=np.int32, count=n
    )
    lexical = None
    lexical_max = 0.0
    if config.uses_lexical:
        # float32 values, as the SQLite backend's BM25 index hands them out
        lexical = (
            np.fromiter((r[3] for r in rows), dtype=np.float64, count=n)
            .astype(np.float32)
            .astype(np.float64)
        )
        lexical_max = float(np.float32(rows[0][10] or 0.0))
    previous = nxt = None
    if config.neighbor_weight > 0:
        position = {int(k): i for i, k in enumerate(keys.tolist())}
        previous = np.fromiter(
            (position.get(r[8], -1) if r[1] and r[8] is not None else -1 for r in rows),
            dtype=np.int64,
            count=n,
        )
        nxt = np.fromiter(
            (position.get(r[9], -1) if r[1] and r[9] is not None else -1 for r in rows),
            dtype=np.int64,
            count=n,
        )
    return CandidateSet(
        keys=keys,
        size=size,
        relevance=np.fromiter((r[2] for r in rows), dtype=np.float32, count=n).astype(np.float64),
        accessed=np.fromiter((r[4] for r in rows), dtype=np.float64, count=n),
        created=np.fromiter((r[5] for r in rows), dtype=np.float64, count=n),
        importance=np.fromiter((r[6] for r in rows), dtype=np.float64, count=n),
        kinds=kinds,
        kind_names=tuple(kind_names),
        lexical=lexical,
        lexical_max=lexical_max,
        previous=previous,
        next=nxt,
        exact=exact,
    )
