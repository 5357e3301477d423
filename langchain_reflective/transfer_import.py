"""Importing a JSONL export into a stream: the file's checks (also before anything is written,
:func:`check_export`), batches of one transaction each, memories moved into another namespace,
and other workers importing the same file at once (split out of ``transfer.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from langchain_reflective.errors import InvalidMemoryError, StorageError
from langchain_reflective.export_file import (
    export_records,
    open_export,
    read_header,
)
from langchain_reflective.records import MemoryRecord, _short
from langchain_reflective.store_codec import item_key
from langchain_reflective.stream_base import StreamBase
from langchain_reflective.transfer_moves import Mover, _fingerprint, plan_moves
from langchain_reflective.validation import as_unit_vectors

if TYPE_CHECKING:
    import numpy.typing as npt

    from langchain_reflective.backends.base import BaseMemoryBackend

__all__ = [
    "IMPORT_BATCH",
    "ExportCheck",
    "ImportTally",
    "check_export",
    "import_jsonl",
    "twice",
]

IMPORT_BATCH = 256
"""Records an import stores per transaction (the default of ``import_jsonl``, and the CLI's)."""


def import_jsonl(
    stream: StreamBase,
    path: str | os.PathLike[str],
    *,
    namespace: str | None,
    batch_size: int,
    keyed: Callable[[MemoryRecord], MemoryRecord] | None = None,
    tally: ImportTally | None = None,
) -> int:
    """:meth:`MemoryStream.import_jsonl`; ``keyed``, when given, maps each record before it
    is stored (a caller's own ids, e.g. ``ContextMemory``'s per turn number); ``tally``, when
    given, counts what was not imported and why (also when the import fails).

    Vectors in the file are used when they come from the same embedding model (the header's
    ``embedding_model`` equals the stream's) and have the dimension of the stream's vectors;
    otherwise every text is embedded again, as for another model. The stream's dimension is
    the one its memories are bound to; for a store without vectors yet, the embeddings'
    ``dimensions`` attribute when it is an int (e.g. ``OpenAIEmbeddings(dimensions=256)``),
    else the length of one embedding (one call). Every vector of the file must have the
    file's dimension (its header's, else its first vector's).

    Each line is checked as ``add`` checks its arguments: a non-empty id, strings that UTF-8
    can encode and without NUL (id, namespace, kind, evidence, metadata), a known
    ``importance_source``, a depth in ``[0, 2**31 - 1]``. Evidence is not looked up: a
    record citing ids the file does not hold (deleted before the export, or in another file)
    is imported as it is, citing them still (moved, the ids it cites are moved alike, so a
    later import of those memories from that namespace resolves them), as the stream held it;
    reads skip evidence that is not there.

    A record whose id the namespace holds already is skipped when it is that memory (the same
    text, kind, creation time and depth: the same file imported again, or a batch that was
    written before a failure). Another memory under that id (one deleted and added again
    under its id since the last import, a store item put again, or the file holding two
    memories of one id) is refused with an ``InvalidMemoryError`` naming both, never skipped
    in silence; the batches before it stay written.

    Memories that ``namespace`` moves out of their own namespace get new ids naming the
    target and the namespace they come from (the same on every run, so importing again skips
    them; two namespaces' memories of one id stay two, in one file or in several: see
    :mod:`~langchain_reflective.transfer_moves`, also for copies made by earlier versions),
    and the evidence they cite follows; LangGraph store items get their key's id in the new
    namespace, so ``ReflectiveStore`` finds them by key (when several namespaces holding one
    key are merged, the first item in the file is kept). Such an import reads the file three
    times: at the first record to move, two first passes decide the ids.
    """
    source = Path(path)
    mover: Mover | None = None  # built at the first record to move (none: no first passes)
    imported = 0
    tally = ImportTally() if tally is None else tally
    try:
        with open_export(source) as fh:
            header = read_header(fh, source)
            same_model = header.get("embedding_model") == stream.embedding_model
            export_dim: int | None = None  # known at the first vector (checked against it)
            reuse: bool | None = None  # decided at the first vector, before anything is written
            batch: list[_Line] = []
            items: set[str] = set()  # the ids of the store items moved so far (first one kept)
            seen: dict[tuple[str, str], str] = {}  # (namespace, id): where the file first has it
            for lineno, record, vec in export_records(fh, source, header):
                if keyed is not None:
                    record = keyed(record)
                if vec is not None:
                    if export_dim is None:  # (every vector has it: export_records checks)
                        export_dim = len(vec)
                    if reuse is None:  # one probe at most; a model of another dimension re-embeds
                        reuse = same_model and export_dim == _target_dimension(stream, record.text)
                if namespace and record.namespace != namespace:
                    if mover is None:
                        mover = plan_moves(source, namespace, stream.backend)
                    record = mover.move(record)
                if namespace and item_key(record) is not None:
                    if record.id in items:  # several namespaces' items of one key: the first
                        tally.merged += 1
                        continue
                    items.add(record.id)
                batch.append(_Line(record, vec if reuse else None, f"{source}:{lineno}"))
                if len(batch) >= batch_size:
                    imported += _import_batch(stream, batch, seen, tally)
                    batch = []
            if batch:
                imported += _import_batch(stream, batch, seen, tally)
    except BaseException as exc:  # (Ctrl-C too: what was written stays written)
        if imported:  # (the batches before the failing one are stored: say so)
            tally.note = _imported_note(exc, imported, source)
            exc.add_note(tally.note)
        raise
    return imported


@dataclass(frozen=True, slots=True)
class ExportCheck:
    """What :func:`check_export` found in an export an import accepts."""

    records: int
    """The records after the header."""
    vectors: bool
    """Whether every record has a vector and the header names their model and dimension (an
    import into a store of that model can reuse them instead of embedding the texts again)."""


def check_export(
    fh: TextIO, source: Path, header: Mapping[str, Any], *, namespace: str | None
) -> ExportCheck:
    """Read the records of the export ``source`` (``fh`` after :func:`read_header`) as
    :func:`import_jsonl` checks them, writing nothing, so that what the import would refuse
    halfway (after the batches before it were written) is found before it starts: every line
    (:func:`export_records`), and two lines holding different memories under one id in one
    namespace (the import refuses the second, in whatever batch), but for LangGraph store
    items that ``namespace`` merges (the import keeps the first). With ``namespace``, a
    record is checked under the id the import moves it to (:func:`plan_moves`, but for the
    old copies the target stores, which only the import looks up).

    Raises:
        InvalidMemoryError: a line the import refuses; the message starts with
            ``<source>:<line>:``.
    """
    dim = header.get("dimension")
    vectors = bool(header.get("embedding_model")) and type(dim) is int and dim > 0
    records = 0
    first: dict[tuple[str, str], tuple[int, int]] = {}  # (ns, id): line, fingerprint's hash
    mover: Mover | None = None  # built at the first record to move, as the import does
    for lineno, record, vector in export_records(fh, source, header):
        records += 1
        vectors = vectors and vector is not None
        if namespace and record.namespace != namespace:
            mover = mover or plan_moves(source, namespace, None)
            record = mover.move(record)
        if namespace and item_key(record) is not None:
            continue
        mark = hash(_fingerprint(record))  # (a hash: the file's texts are not kept in memory)
        held, was = first.setdefault((record.namespace, record.id), (lineno, mark))
        if was != mark:
            raise InvalidMemoryError(
                f"{source}:{lineno}: memory {record.id!r} ({_short(record.text, 60)}) "
                f"cannot be imported: {twice(f'{source}:{held}')}"
            )
    return ExportCheck(records, vectors)


def _imported_note(exc: BaseException, imported: int, source: Path) -> str:
    """The note :func:`import_jsonl` adds to ``exc`` when it had imported ``imported``
    records of ``source`` before it (whole batches, which stay written)."""
    what = "the interruption" if isinstance(exc, KeyboardInterrupt) else "this error"
    return (
        f"{imported} record(s) of {source} were imported before {what} (whole batches); "
        "importing the file again, fixed, skips them"
    )


def _target_dimension(stream: StreamBase, text: str) -> int:
    """The dimension of the vectors the stream stores: the one its memories are bound to,
    else its embeddings' ``dimensions`` when they declare it, else the length of one
    embedding of ``text`` (a probe, made once per import into a store without vectors)."""
    bound = stream.backend.dimension
    if bound is not None:
        return bound
    declared = getattr(stream.embeddings, "dimensions", None)
    if type(declared) is int and declared > 0:
        return declared
    raw = stream.embeddings.embed_documents([text])
    return int(as_unit_vectors(raw, 1, type(stream.embeddings).__name__).shape[1])


@dataclass(slots=True)
class ImportTally:
    """What an import did not store, and why (see :func:`import_jsonl`); the rest of the
    records it did not import were stored already (by an earlier import, or another process
    importing at the same time), and the note a failed import added to its exception."""

    note: str | None = None
    """The note a failed import added to its exception, saying how many records it imported
    before (whole batches, which stay written); ``None`` when it had imported none."""
    repeated: int = 0
    """Lines repeating the memory of an earlier line (the same id, namespace and memory)."""
    merged: int = 0
    """LangGraph store items of one key that a ``namespace`` merged (the first is kept)."""


@dataclass(frozen=True, slots=True)
class _Line:
    """A record of the file to import, with its vector and where it is (``<path>:<line>``)."""

    record: MemoryRecord
    vector: list[float] | None
    where: str


def _import_batch(
    stream: StreamBase, batch: list[_Line], seen: dict[tuple[str, str], str], tally: ImportTally
) -> int:
    """Store the records of ``batch`` not stored yet, in one ``put`` (one transaction, whatever
    namespaces they belong to: a failing batch writes nothing).

    A record whose id is stored already (or came earlier in the file) is skipped when it is
    that memory (the same text, kind, creation time and depth: an import run again); another
    memory under that id is refused, never dropped in silence. ``seen``: where the file first
    holds each (namespace, id) of the lines so far, this batch's added (an earlier line of the
    file is named as such, even when its batch wrote it).

    Raises:
        InvalidMemoryError: a record's id holds another memory; nothing of the batch is
            written.
    """
    backend = stream.backend
    by_ns: dict[str, list[_Line]] = {}
    for line in batch:
        by_ns.setdefault(line.record.namespace, []).append(line)
    fresh: list[_Line] = []
    for ns, lines in by_ns.items():
        stored = {r.id: r for r in backend.get(ns, [line.record.id for line in lines])}
        earlier: dict[str, MemoryRecord] = {}  # this batch's, by id
        for line in lines:
            r = line.record
            first = seen.setdefault((ns, r.id), line.where)
            other = stored.get(r.id) or earlier.get(r.id)
            if other is None:
                earlier[r.id] = r
                fresh.append(line)
            elif _fingerprint(other) != _fingerprint(r):
                raise _taken(line, other, first=None if first == line.where else first)
            elif first != line.where:  # the same memory on an earlier line of the file
                tally.repeated += 1
    if not fresh:
        return 0
    need = [i for i, line in enumerate(fresh) if line.vector is None]
    vectors: list[Any] = [line.vector for line in fresh]
    if need:
        embedded = stream.embeddings.embed_documents([fresh[i].record.text for i in need])
        for i, vec in zip(need, embedded, strict=True):
            vectors[i] = vec
    unit = as_unit_vectors(vectors, len(fresh), type(stream.embeddings).__name__)
    given = [i for i, line in enumerate(fresh) if line.vector is not None]
    if given:  # exported unit vectors come back bit for bit (renormalising may move a bit)
        with np.errstate(over="ignore", invalid="ignore"):  # huge values: not unit anyway
            raw = np.asarray([vectors[i] for i in given], dtype=np.float32)
            norms = np.linalg.norm(raw.astype(np.float64), axis=1)
        same = np.abs(norms - 1.0) < 1e-5
        unit[np.asarray(given)[same]] = raw[same]
    backend.bind_embeddings(stream.embedding_model, unit.shape[1])
    return _put_fresh(backend, fresh, unit)


def _taken(line: _Line, other: MemoryRecord, *, first: str | None) -> InvalidMemoryError:
    """The error of a record whose id holds another memory: the namespace's, or (``first``:
    where) an earlier line's of the file."""
    r = line.record
    this = f"memory {r.id!r} ({_short(r.text, 60)!r}, created {r.created_at.isoformat()})"
    that = f"({_short(other.text, 60)!r}, created {other.created_at.isoformat()})"
    if first is not None:
        return InvalidMemoryError(
            f"{line.where}: {this} is not imported: {twice(first, that)}; nothing of this "
            "batch was written"
        )
    return InvalidMemoryError(
        f"{line.where}: {this} is not imported: namespace {r.namespace!r} holds another memory "
        f"under its id {that}, e.g. one deleted and added again under that id. An import "
        "skips only the memories it holds already. Delete the other memory to import this one "
        "(delete() in Python), or import into another namespace (the namespace= argument in "
        "Python, --namespace with 'reflective import'); nothing of this batch was written"
    )


def twice(first: str, other: str = "") -> str:
    """Why a line is refused whose memory's id an earlier line (at ``first``; its memory:
    ``other``) of the export holds for another memory in one namespace; the import and
    :func:`check_export` say it alike."""
    held = f"another memory {other}" if other else "another memory"
    return (
        f"the export itself is inconsistent: {first} holds {held} under that id in that "
        "namespace (one id, one memory); remove or edit one of the two lines, then import the "
        "file again"
    )


def _put_fresh(
    backend: BaseMemoryBackend, lines: list[_Line], unit: npt.NDArray[np.float32]
) -> int:
    """Store the records of ``lines`` (none was stored when they were looked up): no counter,
    imports do not trigger reflection. When another process imported some of them since the
    lookup (the same file imported by several workers at once), the put fails on their ids:
    those are skipped as stored, and the rest put again; an id stored meanwhile for another
    memory is refused, as it is when the lookup finds it."""
    records = [line.record for line in lines]
    try:
        backend.put(records, unit)
        return len(records)
    except StorageError:
        by_ns: dict[str, list[str]] = {}
        for r in records:
            by_ns.setdefault(r.namespace, []).append(r.id)
        stored = {(ns, r.id): r for ns, ids in by_ns.items() for r in backend.get(ns, ids)}
        if not stored:  # (not a concurrent import: its own error)
            raise
    for line in lines:
        other = stored.get((line.record.namespace, line.record.id))
        if other is not None and _fingerprint(other) != _fingerprint(line.record):
            raise _taken(line, other, first=None)
    keep = [i for i, r in enumerate(records) if (r.namespace, r.id) not in stored]
    if keep:
        backend.put([records[i] for i in keep], unit[keep])
    return len(keep)
