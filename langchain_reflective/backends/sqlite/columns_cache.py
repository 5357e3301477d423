"""Snapshots of a large partition's per-row columns in one raw file, so a reopened memory file
does not read a million rows out of SQLite before its first query.

The file is a magic line, the row count (little-endian ``uint64``) and five raw little-endian
arrays of that length: keys (``seq``, int64), creation, last-access and importance (float64)
and kind codes (int32; the names are recorded with the digest in the memory file's ``meta``).
Nothing in it is executed or deserialised into objects. Reading a row's fields out of SQLite
costs a page visit per row (~2 GB of pages at 1M memories with their vectors); this file is
~33 MB at 1M.

The caller decides when a snapshot is current (see ``PartitionFiles``): the keys and values
of existing rows change only by a delete or reset (a new generation) or by a touch, and every
touch deletes the snapshot's ``meta`` entry in the same statement sequence that updates the
access times (``SQLiteRecordStore``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.sqlite._files import atomic_file

__all__ = ["Columns", "load_columns", "save_columns"]

_MAGIC = b"langchain-reflective/columns 1\n"
_LAYOUT: tuple[tuple[str, str], ...] = (
    ("seqs", "<i8"),
    ("created", "<f8"),
    ("accessed", "<f8"),
    ("importance", "<f8"),
    ("kind_codes", "<i4"),
)
_ROW_BYTES = sum(np.dtype(t).itemsize for _, t in _LAYOUT)


class Columns(NamedTuple):
    """The per-row columns of a partition's live rows, in row order."""

    seqs: npt.NDArray[np.int64]
    created: npt.NDArray[np.float64]
    accessed: npt.NDArray[np.float64]
    importance: npt.NDArray[np.float64]
    kind_codes: npt.NDArray[np.int32]


def save_columns(path: Path, columns: Columns) -> str:
    """Write ``columns`` to ``path`` atomically (temporary file, fsync, rename); return the
    file's SHA-256 hex digest."""
    rows = int(columns.seqs.shape[0])
    parts = [_MAGIC, np.uint64(rows).astype("<u8").tobytes()]
    arrays: list[npt.NDArray[np.generic]] = [
        columns.seqs,
        columns.created,
        columns.accessed,
        columns.importance,
        columns.kind_codes,
    ]
    for (name, dtype), array in zip(_LAYOUT, arrays, strict=True):
        if array.shape != (rows,):
            raise ValueError(f"column {name} has {array.shape} rows, expected ({rows},)")
        parts.append(np.ascontiguousarray(array, dtype=dtype).tobytes())
    digest = hashlib.sha256()
    with atomic_file(path) as fh:
        for part in parts:
            digest.update(part)
            fh.write(part)
    return digest.hexdigest()


def load_columns(path: Path, *, rows: int, expected_sha256: str) -> Columns | None:
    """The columns in ``path``, or ``None`` when the file is missing, of another size or
    layout, or does not match ``expected_sha256``."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + 8
    if (
        len(data) != head + rows * _ROW_BYTES
        or not data.startswith(_MAGIC)
        or int(np.frombuffer(data, "<u8", 1, len(_MAGIC))[0]) != rows
        or hashlib.sha256(data).hexdigest() != expected_sha256
    ):
        return None
    arrays: list[npt.NDArray[np.generic]] = []
    offset = head
    for _, dtype in _LAYOUT:
        array = np.frombuffer(data, dtype=dtype, count=rows, offset=offset)
        arrays.append(array.astype(np.dtype(dtype).newbyteorder("="), copy=False))
        offset += rows * np.dtype(dtype).itemsize
    seqs, created, accessed, importance, kind_codes = arrays
    return Columns(
        seqs.astype(np.int64, copy=False),
        created.astype(np.float64, copy=False),
        accessed.astype(np.float64, copy=False),
        importance.astype(np.float64, copy=False),
        kind_codes.astype(np.int32, copy=False),
    )
