"""The export file: its header line, and its records' lines read back.

An export (:func:`langchain_reflective.transfer.export_jsonl`) is UTF-8 JSON Lines: a header
naming :data:`JSONL_FORMAT`, its version, the embedding model and dimension, then one memory
per line. These read it for every importer (``MemoryStream``, ``ContextMemory``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from langchain_reflective.errors import InvalidMemoryError

__all__ = ["JSONL_FORMAT", "JSONL_VERSION", "export_lines", "open_export", "read_header"]

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
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
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
