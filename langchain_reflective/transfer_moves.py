"""How an import moves memories into another namespace: new ids, the evidence that
follows them, LangGraph store items keyed anew, and copies that earlier versions made.

:func:`langchain_reflective.transfer_import.import_jsonl` with ``namespace=`` builds a
:class:`Mover` with :func:`plan_moves` (two first passes over the file), then moves each record
of its main pass with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.export_file import export_lines, open_export, read_header
from langchain_reflective.records import MemoryRecord
from langchain_reflective.store_codec import item_key, item_memory_id

if TYPE_CHECKING:
    from langchain_reflective.backends.base import BaseMemoryBackend

__all__ = ["Mover", "namespace_tag", "plan_moves"]


def namespace_tag(namespace: str) -> str:
    """A short stable tag of a namespace for the ids of memories moved into or out of it."""
    return hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:12]


class Mover:
    """Moves the records of an import into ``namespace`` from the namespaces they were
    exported from, under new ids (the same on every run, so importing again finds them).

    A memory's new id names the target and the namespace it comes from,
    ``<id>@<tag(target)>@<tag(source)>``: a function of the memory alone, so two namespaces'
    memories of one id stay two (in one file or in files imported one after another, at once
    or not), whatever the batches, and the evidence they cite follows without a lookup.
    ``fixed`` holds the exceptions :func:`plan_moves` found: LangGraph store items take their
    key's id in the target namespace (so the store finds them by key), and memories that
    versions before this form copied under ``<id>@<tag(target)>`` keep those copies (so that
    importing such a file again finds them).
    """

    def __init__(self, namespace: str, fixed: Mapping[tuple[str, str], str]) -> None:
        self.namespace = namespace
        self.target = namespace_tag(namespace)
        self.fixed = fixed
        """(Namespace, id) -> its id in the target, where that is not the new form."""

    def moved_id(self, memory_id: str, source: str) -> str:
        found = self.fixed.get((source, memory_id))
        return found or f"{memory_id}@{self.target}@{namespace_tag(source)}"

    def move(self, record: MemoryRecord) -> MemoryRecord:
        """``record`` in the target namespace: new id, and its evidence cites the moved ids."""
        source = record.namespace
        return dataclasses.replace(
            record,
            id=self.moved_id(record.id, source),
            namespace=self.namespace,
            evidence=tuple(self.moved_id(e, source) for e in record.evidence),
        )


def _fingerprint(record: MemoryRecord) -> tuple[str, str, float, int]:
    """What a faithful copy of a memory keeps: text, kind, creation time (to the
    millisecond: backends store it at their own precision) and depth."""
    return (record.text, record.kind, round(record.created_at.timestamp(), 3), record.depth)


def plan_moves(source: Path, namespace: str, backend: BaseMemoryBackend | None) -> Mover:
    """The :class:`Mover` of an import of ``source`` into ``namespace``, from two passes over
    the file before anything is written, so neither the batches nor the order of imports
    changes the outcome.

    * LangGraph store items: an item's id comes from its key and namespace (so the store finds
      it by key), and evidence citing it must follow.
    * Copies made by earlier versions, which gave the first namespace of a file that held an id
      the target's tag only, ``<id>@<tag(target)>`` (the others as now): such a copy, stored in
      the target or in the file itself (an export of the target), belongs to the memory of the
      file whose :func:`_fingerprint` it has (the first in file order when several have it:
      they are the same memory). Imports by this version never write that form, so what is
      found cannot change under a concurrent import.

    The first pass parses only the lines naming that form (the target's own old copies in the
    file); the second parses every moved record (without its vector) and looks the old form
    up in batches. Malformed lines are left to the import's own pass, which reports them.
    Without a backend (the check before an import), only the file's old copies are found."""
    suffix = f"@{namespace_tag(namespace)}"
    in_file: dict[str, tuple[str, str, float, int]] = {}
    for line in _lines(source):
        if f'{suffix}"' not in line:
            continue
        record = _parsed(line)
        if record is not None and record.namespace == namespace and record.id.endswith(suffix):
            in_file.setdefault(record.id, _fingerprint(record))
    fixed: dict[tuple[str, str], str] = {}
    taken: set[str] = set()

    def settle(chunk: list[MemoryRecord]) -> None:
        ids = [r.id + suffix for r in chunk]
        found = backend.get(namespace, ids) if backend is not None else []
        stored = {r.id: _fingerprint(r) for r in found}
        for r, old in zip(chunk, ids, strict=True):
            copy = stored.get(old) or in_file.get(old)
            if copy is not None and old not in taken and copy == _fingerprint(r):
                fixed[(r.namespace, r.id)] = old
                taken.add(old)

    chunk: list[MemoryRecord] = []
    for line in _lines(source):
        record = _parsed(line)
        if record is None or record.namespace == namespace:
            continue
        key = item_key(record)
        if key is not None:
            fixed[(record.namespace, record.id)] = item_memory_id(namespace, key)
            continue
        chunk.append(record)
        if len(chunk) >= 512:
            settle(chunk)
            chunk = []
    if chunk:
        settle(chunk)
    return Mover(namespace, fixed)


def _lines(source: Path) -> Iterator[str]:
    with open_export(source) as fh:
        read_header(fh, source)
        for _, line in export_lines(fh, source):
            yield line


_VECTOR_TAIL = re.compile(r', "vector": \[[-+0-9.eE, ]*\]\}\s*')
"""An export line's end when its vector is the last key, as ``export_jsonl`` writes it."""


def _parsed(line: str) -> MemoryRecord | None:
    """The record on ``line``, ``None`` when it is malformed (the import's own pass reports
    it). The vector is cut off before parsing when the line ends with it, as exports write
    it (parsing it took a quarter of an import's time); any other line is parsed whole."""
    cut = line.rfind(', "vector": [')
    whole = cut == -1 or _VECTOR_TAIL.fullmatch(line, cut) is None
    try:
        return MemoryRecord.from_dict(json.loads(line if whole else line[:cut] + "}"))
    except (ValueError, InvalidMemoryError, TypeError, RecursionError, AttributeError):
        return None  # (ValueError: JSON errors, and integers past Python's digit limit)
