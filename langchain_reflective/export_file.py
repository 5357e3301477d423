"""The export file: its header line, and its records' lines read back.

An export (:func:`langchain_reflective.transfer.export_jsonl`) is UTF-8 JSON Lines: a header
naming :data:`JSONL_FORMAT`, its version, the embedding model and dimension, then one memory
per line. These read it for every importer (``MemoryStream``, ``ContextMemory``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.records import MemoryRecord

__all__ = [
    "JSONL_FORMAT",
    "JSONL_VERSION",
    "export_lines",
    "export_records",
    "open_export",
    "read_header",
]

JSONL_FORMAT = "langchain-reflective/jsonl"
"""The ``format`` of an export's header line."""
JSONL_VERSION = 1
"""The export format's version: an import refuses a file of a newer one."""


def open_export(source: Path) -> TextIO:
    try:
        return source.open(encoding="utf-8")
    except OSError as exc:
        raise InvalidMemoryError(f"cannot read {source}: {exc}") from exc


def read_header(fh: TextIO, source: Path) -> dict[str, Any]:
    """The export's header line, read from ``fh``; refuses anything else."""
    try:
        header = json.loads(fh.readline() or "null")
    except (ValueError, RecursionError) as exc:  # (not JSON or UTF-8, too deep, huge numbers)
        raise InvalidMemoryError(f"{source} is not a langchain-reflective export") from exc
    if not isinstance(header, dict) or header.get("format") != JSONL_FORMAT:
        raise InvalidMemoryError(f"{source} is not a langchain-reflective export")
    version = header.get("version", JSONL_VERSION)
    if type(version) is not int or version > JSONL_VERSION:
        raise InvalidMemoryError(
            f"{source} is an export of format version {version!r}, newer than this "
            f"langchain-reflective reads ({JSONL_VERSION}); upgrade the package"
        )
    return header


def export_lines(fh: TextIO, source: Path) -> Iterator[tuple[int, str]]:
    """The non-empty lines after the header, numbered; bytes that are not UTF-8 are an
    :class:`InvalidMemoryError` (a raw ``UnicodeDecodeError`` before)."""
    try:
        for lineno, line in enumerate(fh, start=2):
            if line.strip():
                yield lineno, line
    except UnicodeDecodeError as exc:
        raise InvalidMemoryError(
            f"{source} is not a langchain-reflective export: it holds bytes that are not "
            f"UTF-8 ({exc.reason})"
        ) from exc


def export_records(
    fh: TextIO, source: Path, header: Mapping[str, Any]
) -> Iterator[tuple[int, MemoryRecord, list[float] | None]]:
    """The records after the header (read by :func:`read_header`), numbered, each with its
    vector (``None`` without one): every line checked as an import checks it, so what refuses
    a line is defined once (the import, and the ``reflective import`` check before it).

    A line must be JSON, a memory record (:meth:`MemoryRecord.from_dict`), and its vector, if
    any, a non-empty list of finite numbers, not all zero, of the export's dimension (the
    header's, else the first vector's).

    Raises:
        InvalidMemoryError: a line is not; the message starts with ``<source>:<line>:``.
    """
    dim = header.get("dimension")
    dimension = dim if type(dim) is int and dim > 0 else None
    for lineno, line in export_lines(fh, source):
        try:
            data = json.loads(line)
            record = MemoryRecord.from_dict(data)
            vector = _vector(data, dimension)
        except (ValueError, InvalidMemoryError, TypeError, RecursionError) as exc:
            # (ValueError: JSON errors, and integers past Python's digit limit)
            raise InvalidMemoryError(f"{source}:{lineno}: {exc}") from exc
        if vector is not None and dimension is None:
            dimension = len(vector)
        yield lineno, record, vector


def _vector(data: Mapping[str, Any], dimension: int | None) -> list[float] | None:
    """The line's vector (``None`` without one), checked: finite numbers, not all zero, and
    ``dimension`` of them when the export's dimension is known.

    Raises:
        InvalidMemoryError: anything else.
    """
    vec = data.get("vector")
    if vec is None:
        return None
    if not isinstance(vec, list) or not vec:
        raise InvalidMemoryError(f"vector must be a non-empty list of numbers, got {vec!r:.80}")
    if dimension is not None and len(vec) != dimension:
        raise InvalidMemoryError(
            f"the vector has {len(vec)} values; the export's vectors have {dimension}"
        )
    if not all(type(x) is float or type(x) is int for x in vec):
        raise InvalidMemoryError("vector must be a list of numbers")
    with np.errstate(over="ignore", invalid="ignore"):
        arr = np.asarray(vec, dtype=np.float64)
        if not np.isfinite(arr).all() or not arr.any():
            raise InvalidMemoryError("vector holds NaN or infinite values, or only zeros")
    return vec
