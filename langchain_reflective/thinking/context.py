"""Context memory: per-turn snapshot and summary records on a memory stream, and their lookups.

Every thinking turn stores two records in the stream's namespace of the run:

* a **snapshot** (kind :data:`SNAPSHOT_KIND`): the turn's full context as its text; metadata
  ``turn``, ``token_count`` and ``tool_calls``; id ``ctx_<turn>_<namespace hash>``, so a turn is
  found by number with one indexed read;
* a **summary** (kind :data:`SUMMARY_KIND`) citing the snapshot as evidence: the summary and its
  insights as text (so hybrid retrieval matches either), with ``turn``, ``context_id``,
  ``summary``, ``insights``, ``token_count`` and ``fallback`` in metadata.

A turn is recorded whole or not at all when an add fails: both texts are checked before the
first write, and when the summary's add fails (e.g. the embedding service is down) the snapshot
just written is deleted before the error is raised, so the turn can be recorded again under the
same number. The two adds are two writes, not one transaction: a process that dies between them
(killed, power lost), or a snapshot whose deletion fails too, leaves the snapshot without its
summary. That turn is then missing from the accumulated summaries (a recall by number or id
still finds its snapshot); recording the same turn number with the same context stores only the
missing summary, and the next turn recorded after it logs a warning naming it.

Both live in the stream, so they are durable (the stream's file), searchable with its hybrid
retrieval (dense + BM25, ranked) and namespaced: a namespace never reads another's contexts, even
by id. Export writes only these two kinds; import, or simply reopening the file, resumes with the
same accumulated summaries. The lookups (by turn, by id, search, recall) are in ``lookups.py``.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import math
import numbers
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_reflective._llm import Flow, Op, run_async, run_sync, threaded
from langchain_reflective.errors import DuplicateIdError, InvalidMemoryError, StorageError
from langchain_reflective.export_file import export_lines, open_export, read_header
from langchain_reflective.records import MemoryRecord, validate_text
from langchain_reflective.stream import MemoryStream
from langchain_reflective.thinking.lookups import (
    ContextLookups,
    _is_turn,
    _positive_turn,
    _strings,
)
from langchain_reflective.thinking.turns import (
    _KINDS,
    SNAPSHOT_KIND,
    SUMMARY_KIND,
    ContextSnapshot,
    ContextSummary,
    TurnTakenError,
    count_text_tokens,
    summary_text,
)
from langchain_reflective.transfer import export_jsonl
from langchain_reflective.transfer_import import import_jsonl

__all__ = ["ContextMemory"]  # (the values it stores: thinking/turns.py)

logger = logging.getLogger(__name__)


class ContextMemory(ContextLookups):
    """Snapshots and summaries of thinking turns on a :class:`MemoryStream` (see module docs).

    Args:
        stream: the memory stream holding the records (its file makes them durable).
        summary_importance: importance stored with summaries (given, so no rating call).
        snapshot_importance: importance stored with snapshots.
        search_min_relevance: a keyword search keeps a match only if it shares a word with the
            query (BM25 score above 0) or its meaning is at least this close (cosine).

    Raises:
        TypeError: ``stream`` is not a :class:`MemoryStream`.
        ValueError: an importance outside [0, 1], or a ``search_min_relevance`` that is not a
            finite number.

    Every read has an async twin (``alast_turn``, ``asearch``, ``arecall``, ...) that awaits
    the stream's async twins, and so do :meth:`record_turn` and the files.

    Example:
        .. code-block:: python

            memory = ContextMemory(stream)
            memory.record_turn(1, "Files: main.ts", "Read the code.", ["3 modules"])
            memory.context_by_turn(1).context  # 'Files: main.ts'
            memory.search(["modules"])  # ranked by the stream's hybrid retrieval
    """

    def __init__(
        self,
        stream: MemoryStream,
        *,
        summary_importance: float = 0.6,
        snapshot_importance: float = 0.4,
        search_min_relevance: float = 0.35,
    ) -> None:
        if not isinstance(stream, MemoryStream):
            raise TypeError(f"stream must be a MemoryStream, got {type(stream).__name__}")
        for name, value in (
            ("summary_importance", summary_importance),
            ("snapshot_importance", snapshot_importance),
        ):
            if not _real(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
        if not _real(search_min_relevance) or not math.isfinite(search_min_relevance):
            raise ValueError(
                f"search_min_relevance must be a finite number (a cosine, e.g. 0.35), "
                f"got {search_min_relevance!r}"
            )
        self.stream = stream
        self.search_min_relevance = search_min_relevance
        self.summary_importance = summary_importance
        self.snapshot_importance = snapshot_importance

    # -- writes ----------------------------------------------------------------------------

    def _snapshot_args(
        self,
        turn: int,
        context: str,
        tool_calls: Sequence[str],
        namespace: str,
        now: datetime | None,
    ) -> dict[str, Any]:
        return {
            "texts": [context],
            "kinds": SNAPSHOT_KIND,
            "importances": self.snapshot_importance,
            "metadatas": [
                {
                    "turn": turn,
                    "token_count": count_text_tokens(context),
                    "tool_calls": [str(t) for t in _strings(tool_calls)],
                }
            ],
            "ids": [self.context_id(turn, namespace=namespace)],
            "namespace": namespace,
            "now": now,
        }

    def _summary_args(
        self,
        turn: int,
        summary: str,
        insights: Sequence[str],
        fallback: bool,
        namespace: str,
        now: datetime | None,
    ) -> dict[str, Any]:
        ctx_id = self.context_id(turn, namespace=namespace)
        text = summary_text(summary, insights)
        return {
            "texts": [text],
            "kinds": SUMMARY_KIND,
            "importances": self.summary_importance,
            "metadatas": [
                {
                    "turn": turn,
                    "context_id": ctx_id,
                    "summary": summary,
                    "insights": list(insights),
                    "token_count": count_text_tokens(text),
                    "fallback": fallback,
                }
            ],
            "evidence": [[ctx_id]],
            "ids": [self.summary_id(turn, namespace=namespace)],
            "namespace": namespace,
            "now": now,
        }

    def _checked(
        self, turn: int, context: str, summary: str, insights: Sequence[str]
    ) -> tuple[int, list[str]]:
        """The turn and its clean insights, once both texts are known to be storable (so a
        turn is refused before anything is written, not between its two adds)."""
        _positive_turn(turn)
        for name, value in (("context", context), ("summary", summary)):
            if not isinstance(value, str) or not value.strip():
                raise InvalidMemoryError(f"a turn's {name} must be a non-empty string")
        clean = [str(i).strip() for i in _strings(insights) if str(i).strip()]
        for name, text in (("context", context), ("summary", summary_text(summary, clean))):
            try:
                validate_text(text)
            except InvalidMemoryError as exc:
                raise InvalidMemoryError(f"a turn's {name} cannot be stored: {exc}") from exc
        return turn, clean

    def record_turn(
        self,
        turn: int,
        context: str,
        summary: str,
        insights: str | Sequence[str] = (),
        *,
        tool_calls: str | Sequence[str] = (),
        fallback: bool = False,
        namespace: str | None = None,
        now: datetime | None = None,
    ) -> tuple[ContextSnapshot, ContextSummary]:
        """Store a turn's snapshot, then its summary citing it (two adds, no model call), whole
        or not at all: if the summary's add fails, the snapshot is deleted and the error raised.

        ``insights`` and ``tool_calls`` are lists, or one string each (one item).

        A turn whose snapshot alone is stored, with this same ``context`` (a process stopped
        between the two adds: see the module docs), is completed: only its summary is added.
        When the turn before this one is found in that state, a warning is logged.

        Raises:
            TurnTakenError: the turn is already stored in the namespace (its ids exist, e.g.
                another writer stored it meanwhile; or only its snapshot, with another
                context); nothing was written.
            InvalidMemoryError: bad turn number, or an empty or unstorable context/summary
                (checked before anything is written).
            StorageError, EmbeddingError, ...: the stream's error when an add fails; the
                turn's snapshot is not left behind.
        """
        return run_sync(
            self._record_flow(
                turn, context, summary, insights, tool_calls, fallback, namespace, now
            )
        )

    async def arecord_turn(
        self,
        turn: int,
        context: str,
        summary: str,
        insights: str | Sequence[str] = (),
        *,
        tool_calls: str | Sequence[str] = (),
        fallback: bool = False,
        namespace: str | None = None,
        now: datetime | None = None,
    ) -> tuple[ContextSnapshot, ContextSummary]:
        """Async twin of :meth:`record_turn`. A cancelled call is not undone: the stream's
        write under way may still complete (see ``MemoryStream.aadd``)."""
        return await run_async(
            self._record_flow(
                turn, context, summary, insights, tool_calls, fallback, namespace, now
            )
        )

    def _record_flow(
        self,
        turn: int,
        context: str,
        summary: str,
        insights: Sequence[str],
        tool_calls: Sequence[str],
        fallback: bool,
        namespace: str | None,
        now: datetime | None,
    ) -> Flow[tuple[ContextSnapshot, ContextSummary]]:
        """:meth:`record_turn`, written once for sync and async."""
        ns = self.namespace(namespace)
        turn, insights = self._checked(turn, context, summary, insights)
        st = self.stream
        left, previous_orphan = yield Op(
            self._check_new, threaded(self._check_new), (turn, ns, context)
        )
        if left is None:
            snapshot = self._snapshot_args(turn, context, tool_calls, ns, now)
            try:
                snap = (yield Op(st.add, st.aadd, (), snapshot))[0]
            except StorageError as exc:
                yield Op(self._taken_meanwhile, threaded(self._taken_meanwhile), (turn, ns, exc))
                raise
        else:
            snap = left  # a crash left this turn's snapshot alone: store only its summary
        try:
            summ = yield Op(
                st.add, st.aadd, (), self._summary_args(turn, summary, insights, fallback, ns, now)
            )
        except Exception as exc:
            if left is None:
                yield Op(self._undo_snapshot, threaded(self._undo_snapshot), (turn, ns, exc))
            else:  # (a snapshot left by a crash is not this call's to delete)
                yield Op(self._taken_summary, threaded(self._taken_summary), (turn, ns, exc))
            raise
        if previous_orphan:
            yield Op(self._report_orphan, threaded(self._report_orphan), (turn - 1, ns))
        return ContextSnapshot.from_record(snap), ContextSummary.from_record(summ[0])

    def _parts(self, turns: Sequence[int], namespace: str) -> list[_Parts]:
        """The ``(snapshot, summary)`` records stored under the ids of each of ``turns`` (in
        their order; ``None`` where an id holds nothing), read at once."""
        ids = [
            (self.context_id(t, namespace=namespace), self.summary_id(t, namespace=namespace))
            for t in turns
        ]
        wanted = [i for pair in ids for i in pair]
        found = {r.id: r for r in self.stream.get(wanted, namespace=namespace)}
        return [(found.get(cid), found.get(sid)) for cid, sid in ids]

    def _check_new(
        self, turn: int, namespace: str, context: str
    ) -> tuple[MemoryRecord | None, bool]:
        """Before a turn is written: ``(None, ...)`` when its number is free, ``(snapshot,
        ...)`` when only its snapshot is stored, with this very context (a crash between the
        two writes left it: the summary completes the turn); otherwise :class:`TurnTakenError`.
        The second value says whether the turn before looks left by a crash (a snapshot
        without its summary), to be read again once this turn is stored."""
        (snap, summ), *previous = self._parts([turn, turn - 1] if turn > 1 else [turn], namespace)
        before = any(s is not None and m is None for s, m in previous)
        if snap is None and summ is None:
            return None, before
        if (
            summ is None
            and snap is not None
            and snap.kind == SNAPSHOT_KIND
            and snap.text == context
        ):
            return snap, before
        raise TurnTakenError(self._taken_message(turn, namespace, snap, summ))

    def _taken_message(
        self,
        turn: int,
        namespace: str,
        snap: MemoryRecord | None,
        summ: MemoryRecord | None,
    ) -> str:
        if snap is not None and summ is None:
            what = (
                "its snapshot, with other contents, and no summary (a crash between the turn's "
                "two writes?): record it again with its snapshot's context, or delete "
                f"{snap.id} (MemoryStream.delete)"
            )
        elif snap is None:
            what = "its summary, without its snapshot"
        else:
            what = "its snapshot and its summary"
        return (
            f"turn {turn} is already stored in namespace {namespace!r} ({what}); "
            f"the next turn is {self.next_turn(namespace=namespace)}"
        )

    def _taken_meanwhile(self, turn: int, namespace: str, error: StorageError) -> None:
        """After a failed snapshot add (which stored nothing): raise :class:`TurnTakenError`
        when the turn's ids exist now, i.e. another writer stored it since the check (the add
        failed on a duplicate id); otherwise return, so the add's own error is raised."""
        try:
            [(snap, summ)] = self._parts([turn], namespace)
            taken = None
            if snap is not None or summ is not None:
                taken = TurnTakenError(self._taken_message(turn, namespace, snap, summ))
        except Exception:  # the store cannot be read either: report the add's error
            return
        if taken is not None:
            raise taken from error

    def _report_orphan(self, turn: int, namespace: str) -> None:
        """Warn when ``turn`` still has a snapshot and no summary, read after the next turn
        was stored (so a writer that was storing it at the time has had the time to finish)."""
        try:
            [(snap, summ)] = self._parts([turn], namespace)
        except Exception:  # (the turn just stored is stored: a failed read only skips this)
            return
        if snap is None or summ is not None:
            return
        logger.warning(
            "turn %s of namespace %r has a snapshot (%s) and no summary (the process stopped "
            "between the turn's two writes?): it is missing from the summaries. Complete it "
            "with record_turn(%s, <the snapshot's context>, <a summary>), which stores only "
            "the summary.",
            turn,
            namespace,
            snap.id,
            turn,
        )

    def _taken_summary(self, turn: int, namespace: str, error: Exception) -> None:
        """After a failed summary add: raise :class:`TurnTakenError` when it failed because
        another writer stored the turn's summary meanwhile (recording the same turn and
        context, which completes the snapshot: the turn is whole, taken by that writer);
        otherwise return, so the add's own error is raised. Deletes nothing."""
        if not isinstance(error, DuplicateIdError):
            return
        try:
            [(snap, summ)] = self._parts([turn], namespace)
        except Exception:  # the store cannot be read either: report the add's error
            return
        if summ is not None:
            raise TurnTakenError(self._taken_message(turn, namespace, snap, summ)) from error

    def _undo_snapshot(self, turn: int, namespace: str, error: Exception) -> None:
        """Delete the snapshot of a turn whose summary could not be stored; unless the summary
        failed because another writer stored one meanwhile (:meth:`_taken_summary`)."""
        self._taken_summary(turn, namespace, error)
        cid = self.context_id(turn, namespace=namespace)
        try:
            self.stream.delete(cid, namespace=namespace)
        except Exception as exc:
            logger.error(
                "turn %s of namespace %r: its summary failed (%s) and its snapshot %s could not "
                "be deleted: %r",
                turn,
                namespace,
                error,
                cid,
                exc,
            )
            error.add_note(
                f"the turn's snapshot {cid} could not be deleted ({exc!r}); delete it "
                "(MemoryStream.delete) before recording this turn number again"
            )

    # -- files -----------------------------------------------------------------------------

    def export_jsonl(self, path: str | os.PathLike[str], *, namespace: str | None = None) -> int:
        """Write this namespace's snapshots and summaries (with their vectors) as JSON lines in
        the stream's export format; other memories of the namespace are left out. Written
        whole or not at all, as ``MemoryStream.export_jsonl`` writes.

        Returns:
            The number of records written.

        Raises:
            ExportError: the file could not be written (e.g. the disk is full); also an
                ``OSError``.
        """
        ns = self.namespace(namespace)
        self.stream._check_open()
        return export_jsonl(self.stream, path, namespaces=[ns], include_vectors=True, kinds=_KINDS)

    def import_jsonl(self, path: str | os.PathLike[str], *, namespace: str | None = None) -> int:
        """Import a file written by :meth:`export_jsonl` into a namespace (default: the
        stream's); records already stored are skipped.

        Each turn gets the ids the namespace gives that number (:meth:`context_id`,
        :meth:`summary_id`), wherever the file came from, so a turn is found by number with
        one read and :meth:`record_turn` refuses a number an import brought in.

        Returns:
            The number of records imported.

        Raises:
            InvalidMemoryError: not an export file, a malformed line, records of other kinds,
                a record without a turn number, a turn the file holds twice, or a turn the
                namespace already holds with other contents (nothing is imported then).
        """
        ns = self.namespace(namespace)
        source = Path(path)
        self.stream._check_open()
        with open_export(source) as fh:
            read_header(fh, source)
            turns = [self._turn_of(source, n, line) for n, line in export_lines(fh, source)]
        self._check_importable(source, turns, ns)

        def keyed(record: MemoryRecord) -> MemoryRecord:
            turn = record.metadata["turn"]  # (checked by the first pass)
            ctx_id = self.context_id(turn, namespace=ns)
            if record.kind == SNAPSHOT_KIND:
                return dataclasses.replace(record, id=ctx_id, namespace=ns)
            return dataclasses.replace(
                record,
                id=self._id_of(turn, record.kind, ns),
                namespace=ns,
                evidence=(ctx_id,),
                metadata={**record.metadata, "context_id": ctx_id},
            )

        return import_jsonl(self.stream, source, namespace=ns, batch_size=256, keyed=keyed)

    @staticmethod
    def _turn_of(source: Path, lineno: int, line: str) -> tuple[int, str, str]:
        """One line of a thinking export: its turn number, kind and text."""
        where = f"{source}:{lineno}"
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InvalidMemoryError(f"{where}: not a JSON record") from exc
        if not isinstance(record, dict):
            raise InvalidMemoryError(f"{where}: not a JSON record")
        kind = record.get("kind")
        if kind not in _KINDS:
            raise InvalidMemoryError(f"{where}: a {kind!r} record is not a thinking context")
        metadata = record.get("metadata")
        turn = metadata.get("turn") if isinstance(metadata, dict) else None
        if not _is_turn(turn):
            raise InvalidMemoryError(f"{where}: a {kind} record without a turn number")
        return turn, kind, str(record.get("text"))

    def _id_of(self, turn: int, kind: str, namespace: str) -> str:
        if kind == SNAPSHOT_KIND:
            return self.context_id(turn, namespace=namespace)
        return self.summary_id(turn, namespace=namespace)

    def _check_importable(self, source: Path, turns: list[tuple[int, str, str]], ns: str) -> None:
        """Refuse, before anything is written, a turn the file holds twice or one the
        namespace holds with other contents (two records of one number would be stored)."""
        counts = collections.Counter((turn, kind) for turn, kind, _ in turns)
        twice = sorted({turn for turn, kind, _ in turns if counts[turn, kind] > 1})
        if twice:
            raise InvalidMemoryError(f"{source} holds turn(s) {_numbers(twice)} twice")
        ids = {
            (
                self.context_id(t, namespace=ns)
                if k == SNAPSHOT_KIND
                else self.summary_id(t, namespace=ns)
            ): (t, text)
            for t, k, text in turns
        }
        stored = self.stream.get(list(ids), namespace=ns)
        taken = sorted({ids[r.id][0] for r in stored if r.text != ids[r.id][1]})
        if taken:
            raise InvalidMemoryError(
                f"namespace {ns!r} already holds turn(s) {_numbers(taken)} with other contents; "
                "nothing was imported: import into another namespace (namespace=...)"
            )

    async def aexport_jsonl(
        self, path: str | os.PathLike[str], *, namespace: str | None = None
    ) -> int:
        """Async twin of :meth:`export_jsonl`: the export (file writes, and the backend's
        ``iter_records``, which has no async form) runs in a worker thread."""
        return await asyncio.to_thread(self.export_jsonl, path, namespace=namespace)

    async def aimport_jsonl(
        self, path: str | os.PathLike[str], *, namespace: str | None = None
    ) -> int:
        """Async twin of :meth:`import_jsonl`: the file's check and the stream's import run in
        a worker thread (see ``MemoryStream.aimport_jsonl``)."""
        return await asyncio.to_thread(self.import_jsonl, path, namespace=namespace)


_Parts = tuple[MemoryRecord | None, MemoryRecord | None]
"""A turn's snapshot and summary records (``None``: not stored)."""


def _numbers(turns: Sequence[int]) -> str:
    return ", ".join(map(str, turns[:10])) + (", ..." if len(turns) > 10 else "")


def _real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
