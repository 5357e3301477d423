"""The local index's rows (``local_index.py``): reading a namespace's memories from the server
into a partition and its BM25 index, finding the rows of keys, and the checks and copies of the
catch-up. Split out of ``local_index.py``, which imports these names (tests patch
``local_index._read_rows``: the index looks it up there)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.postgres.queries import local_rows_sql
from langchain_reflective.backends.sqlite.partition import Partition
from langchain_reflective.backends.types import trusted_record
from langchain_reflective.records import MemoryRecord

__all__ = ["LOAD_CHUNK", "applied", "never", "private", "read_rows", "rows_of"]

I64 = npt.NDArray[np.int64]

LOAD_CHUNK = 20_000
"""Memories read per statement while loading or catching up (~30 MB at 384 dimensions)."""


def never() -> bool:
    return False


def applied(part: Partition, keys: bytes, stamps: bytes) -> bool:
    """Whether every memory held among the touched ``keys`` (packed ``int8``) already has its
    access time among ``stamps`` (packed ``float8``): the touches are this process's own,
    applied as they were made (``LocalIndex.held``, ``own_touch``)."""
    seqs = np.frombuffer(keys, dtype=">i8").astype(np.int64)
    rows, known = rows_of(part, seqs)
    values = np.frombuffer(stamps, dtype=">f8").astype(np.float64)[known]
    return bool(np.array_equal(part.accessed.view[rows], values))


def private(record: MemoryRecord, accessed: datetime | None) -> MemoryRecord:
    """A copy of ``record`` with ``last_accessed_at = accessed`` and metadata of its own (the
    kept records are never handed out, so a caller changing one cannot change them)."""
    meta = record.metadata
    return trusted_record(
        id=record.id,
        text=record.text,
        kind=record.kind,
        created_at=record.created_at,
        last_accessed_at=accessed or record.created_at,
        importance=record.importance,
        importance_source=record.importance_source,
        evidence=record.evidence,
        depth=record.depth,
        namespace=record.namespace,
        metadata=json.loads(json.dumps(meta)) if meta else {},
    )


def rows_of(part: Partition, seqs: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
    """The partition rows of the live memories among ``seqs``, and which of ``seqs`` they
    are."""
    all_seqs = part.seqs.view
    if not all_seqs.shape[0] or not seqs.shape[0]:
        return np.zeros(0, dtype=np.int64), np.zeros(seqs.shape[0], dtype=np.bool_)
    pos = np.minimum(np.searchsorted(all_seqs, seqs), all_seqs.shape[0] - 1)
    known = all_seqs[pos] == seqs
    rows = pos[known].astype(np.int64)
    alive = part.index.alive[rows]
    known[np.flatnonzero(known)[~alive]] = False
    return rows[alive], known


def read_rows(
    conn: Any,
    part: Partition,
    namespace: str,
    after: int,
    terms: str,
    stop: Callable[[], bool],
) -> int:
    """Append the namespace's memories with keys above ``after`` to ``part`` (and its BM25
    index), a chunk per statement; return the newest key read (``after`` if none)."""
    sql = local_rows_sql(terms)
    dim = part.index.dimension
    lexical = part.lexical
    assert lexical is not None
    while not stop():
        params = {"ns": namespace, "after": after, "limit": LOAD_CHUNK}
        row = conn.execute(sql, params, binary=True).fetchone()
        n = int(row[0])
        if n == 0:
            break
        seqs = np.frombuffer(row[2], dtype=">i8").astype(np.int64)
        order: I64 | slice = slice(None)
        if n > 1 and bool((seqs[1:] <= seqs[:-1]).any()):  # (aggregated in key order, usually)
            order = np.argsort(seqs, kind="stable")
        created = np.frombuffer(row[3], dtype=">f8").astype(np.float64)[order]
        accessed = np.frombuffer(row[4], dtype=">f8").astype(np.float64)[order]
        importance = np.frombuffer(row[5], dtype=">f8").astype(np.float64)[order]
        kinds: list[str] = list(row[6])
        vectors = np.frombuffer(row[7], dtype=">f4").reshape(n, dim + 1)[:, 1:]
        term_lines: list[str] = row[8].split("\n")
        count_lines: list[str] = row[9].split("\n")
        if not isinstance(order, slice):
            index = order.tolist()
            kinds = [kinds[i] for i in index]
            term_lines = [term_lines[i] for i in index]
            count_lines = [count_lines[i] for i in index]
        part.append(
            seqs[order],
            np.ascontiguousarray(vectors[order], dtype=np.float32),
            created,
            accessed,
            importance,
            kinds,
            None,
        )
        stems = " ".join(term_lines).split()
        sizes = np.fromiter(
            (line.count(" ") + 1 if line else 0 for line in term_lines), np.int64, count=n
        )
        counts = " ".join(count_lines).split()
        lexical.add_flat_terms(stems, sizes, np.asarray(counts, dtype=np.int64))
        after = int(row[1])
        if n < LOAD_CHUNK:
            break
    return after
