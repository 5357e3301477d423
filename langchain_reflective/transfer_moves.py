"""How an import moves memories into another namespace: new ids, the evidence that
follows them, LangGraph store items keyed anew, and copies that earlier versions made.

:func:`langchain_reflective.transfer.import_jsonl` with ``namespace=`` builds a :class:`Mover`
from two first passes over the file (:func:`moved_items`, :func:`old_copies`), then moves each
record of its main pass with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.export_file import export_lines, open_export, read_header
from langchain_reflective.records import MemoryRecord
from langchain_reflective.store_codec import ITEM_METADATA_KEY, item_key, item_memory_id

if TYPE_CHECKING:
    from langchain_reflective.backends.base import BaseMemoryBackend

__all__ = ["Mover", "moved_items", "namespace_tag", "old_copies"]


def namespace_tag(namespace: str) -> str:
    """A short stable tag of a namespace for the ids of memories moved into or out of it."""
    return hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:12]


class Mover:
    """Moves the records of an import into ``namespace`` from the namespaces they were
    exported from, under new ids (the same on every run, so importing again finds them).

    A memory's new id names the target and the namespace it comes from,
    ``<id>@<tag(target)>@<tag(source)>``: a function of the memory alone, so two namespaces'
    memories of one id stay two (in one file or in files imported one after another, at once
    or not), whatever the batches, and the evidence they cite follows without a lookup. A
    LangGraph store item takes its key's id in the target namespace (``items``), so the store
    finds it by key. ``old_copies`` maps the memories that versions before this form copied
    under ``<id>@<tag(target)>`` to those copies (see :func:`old_copies`), so that importing
    such a file again finds them.
    """

    def __init__(
        self,
        namespace: str,
        items: Mapping[tuple[str, str], str],
        old_copies: Mapping[tuple[str, str], str],
    ) -> None:
        self.namespace = namespace
        self.target = namespace_tag(namespace)
        self.items = items
        self.old_copies = old_copies

    def moved_id(self, memory_id: str, source: str) -> str:
        key = (source, memory_id)
        found = self.items.get(key) or self.old_copies.get(key)
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


def old_copies(
    source: Path, namespace: str, backend: BaseMemoryBackend, items: Collection[tuple[str, str]]
) -> dict[tuple[str, str], str]:
    """(Namespace, id) -> the copy of that memory that an import by an earlier version made in
    ``namespace``, for the file's memories that have one.

    Earlier versions gave the first namespace of a file that held an id the target's tag only,
    ``<id>@<tag(target)>`` (the others as now): such a copy, stored in the target or in the
    file itself (an export of the target), belongs to the memory of the file whose
    :func:`_fingerprint` it has (the first in file order when several have it: they are the
    same memory). Decided for the whole file before anything is written, so neither the
    batches nor the order of imports changes the outcome; imports by this version never
    write that form, so what it finds cannot change under a concurrent import. Two passes
    over the file: one for the target's own records in it (only lines naming that form are
    parsed), one looking the moved memories up in batches."""
    suffix = f"@{namespace_tag(namespace)}"
    in_file: dict[str, tuple[str, str, float, int]] = {}
    with open_export(source) as fh:
        read_header(fh, source)
        for _, line in export_lines(fh, source):
            if f'{suffix}"' not in line:
                continue
            record = _parsed(line)
            if record is not None and record.namespace == namespace and record.id.endswith(suffix):
                in_file.setdefault(record.id, _fingerprint(record))
    copies: dict[tuple[str, str], str] = {}
    taken: set[str] = set()

    def settle(chunk: list[MemoryRecord]) -> None:
        ids = [r.id + suffix for r in chunk]
        stored = {r.id: _fingerprint(r) for r in backend.get(namespace, ids)}
        for r, old in zip(chunk, ids, strict=True):
            copy = stored.get(old) or in_file.get(old)
            if copy is not None and old not in taken and copy == _fingerprint(r):
                copies[(r.namespace, r.id)] = old
                taken.add(old)

    chunk: list[MemoryRecord] = []
    with open_export(source) as fh:
        read_header(fh, source)
        for _, line in export_lines(fh, source):
            record = _parsed(line)
            if record is None or record.namespace == namespace:
                continue
            if (record.namespace, record.id) not in items:
                chunk.append(record)
            if len(chunk) >= 512:
                settle(chunk)
                chunk = []
    if chunk:
        settle(chunk)
    return copies


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


def moved_items(source: Path, namespace: str) -> dict[tuple[str, str], str]:
    """(Namespace, old id) -> id in ``namespace`` of the LangGraph store items an import moves
    there: an item's id comes from its key and namespace (so the store finds it by key), and
    evidence citing it must follow. A cheap first pass: only lines naming the item metadata key
    are parsed; malformed lines are left to the import's own pass, which reports them."""
    items: dict[tuple[str, str], str] = {}
    marker = json.dumps(ITEM_METADATA_KEY)
    with open_export(source) as fh:
        read_header(fh, source)
        for _, line in export_lines(fh, source):
            if marker not in line:
                continue
            record = _parsed(line)
            if record is None:
                continue
            key = item_key(record)
            if key is not None and record.namespace != namespace:
                items[(record.namespace, record.id)] = item_memory_id(namespace, key)
    return items
