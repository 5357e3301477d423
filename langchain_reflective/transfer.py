"""Moving memories in and out of a stream: JSONL export and the DataFrame view, and the stream's
import methods.

:class:`StreamTransfer` holds the :class:`~langchain_reflective.stream.MemoryStream` methods
(``export_jsonl``, ``import_jsonl``, ``to_dataframe``); the functions below do the work (the
import's: ``transfer_import.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Collection, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

import numpy as np

from langchain_reflective.errors import ExportError, InvalidMemoryError
from langchain_reflective.export_file import (
    JSONL_FORMAT,
    JSONL_VERSION,
)
from langchain_reflective.records import MemoryRecord, utc
from langchain_reflective.scoring import recency
from langchain_reflective.stream_base import StreamBase, _arun, _Flow, _run
from langchain_reflective.transfer_import import IMPORT_BATCH, import_jsonl

if TYPE_CHECKING:
    import pandas as pd

    from langchain_reflective.records import ScoredMemory

__all__ = [
    "JSONL_FORMAT",
    "StreamTransfer",
    "dataframe_flow",
    "export_jsonl",
    "load_pandas",
]

_COLUMNS = [
    "id",
    "description",
    "kind",
    "importance",
    "recency",
    "relevance",
    "lexical",
    "score",
    "created_at",
    "last_accessed_at",
    "evidence",
    "depth",
]


class StreamTransfer(StreamBase):
    """What :class:`~langchain_reflective.stream.MemoryStream` does to move memories in and
    out: JSONL export and import, and the DataFrame view (it uses the stream's ``recent`` and
    ``retrieve``)."""

    def to_dataframe(
        self,
        query: str | None = None,
        *,
        namespace: str | None = None,
        now: datetime | None = None,
    ) -> pd.DataFrame:
        """The memory table of Generative Agents as a pandas DataFrame (extra ``pandas``).

        Columns: ``id, description, kind, importance, recency, relevance, lexical, score,
        created_at, last_accessed_at, evidence, depth``. Without a query, ``relevance``,
        ``lexical`` and ``score`` are NaN. Nothing is touched.
        """
        self._check_open()
        frame: pd.DataFrame = _run(dataframe_flow(self, query, namespace=namespace, now=now))
        return frame

    async def ato_dataframe(
        self,
        query: str | None = None,
        *,
        namespace: str | None = None,
        now: datetime | None = None,
    ) -> pd.DataFrame:
        """Async twin of :meth:`to_dataframe`: it awaits ``arecent`` and ``aretrieve`` (the
        first use imports pandas in a worker thread)."""
        self._check_open()
        await asyncio.to_thread(load_pandas)
        frame: pd.DataFrame = await _arun(dataframe_flow(self, query, namespace=namespace, now=now))
        return frame

    def export_jsonl(
        self,
        path: str | os.PathLike[str],
        *,
        namespaces: Iterable[str] | Literal["all"] | None = None,
        include_vectors: bool = True,
    ) -> int:
        """Write memories as JSON lines (a header line, then one record per line).

        Args:
            path: the output file.
            namespaces: a list of the namespaces to export (default: the stream's; ``"all"``
                for every one; a namespace named ``all`` alone: ``["all"]``). Any other
                string is refused: a user id passed as it is would be read letter by letter.
            include_vectors: include embeddings so import needs no embedding calls (but one,
                to learn the dimension, into a store without vectors: see
                :meth:`import_jsonl`).

        Returns:
            The number of records written.

        Raises:
            InvalidMemoryError: ``namespaces`` is a string other than ``"all"``, or not a list.
            ExportError: the file could not be written (e.g. the disk is full): the message
                names ``path`` and says what to do. It is also an ``OSError`` (with the
                failed call's ``errno``), so ``except OSError`` still catches it.

        The file is written as ``<path>.<random>.tmp``, flushed to disk and renamed when
        complete; a failed export removes it and leaves any earlier ``path`` untouched.
        """
        self._check_open()
        return export_jsonl(self, path, namespaces=namespaces, include_vectors=include_vectors)

    async def aexport_jsonl(
        self,
        path: str | os.PathLike[str],
        *,
        namespaces: Iterable[str] | Literal["all"] | None = None,
        include_vectors: bool = True,
    ) -> int:
        """Async twin of :meth:`export_jsonl`: the export (file writes, and the backend's
        ``iter_records``, which has no async form) runs in a worker thread. Cancelled, it
        still completes or fails there as the sync call would."""
        self._check_open()
        return await asyncio.to_thread(
            self.export_jsonl, path, namespaces=namespaces, include_vectors=include_vectors
        )

    def import_jsonl(
        self,
        path: str | os.PathLike[str],
        *,
        namespace: str | None = None,
        batch_size: int = IMPORT_BATCH,
    ) -> int:
        """Import a file written by :meth:`export_jsonl`; memories already stored are skipped
        (another memory stored under a record's id is an error, not skipped).

        The file's vectors are reused when they come from this embedding model at the
        stream's dimension (else the texts are embedded again); each line is checked as
        :meth:`add` checks its arguments; a namespace given moves the memories under new,
        stable ids. The rules in full: :func:`langchain_reflective.transfer_import.import_jsonl`.
        Imported memories do not count towards the reflection counter.

        Args:
            path: the JSONL file.
            namespace: put every record into this namespace (default: keep each record's).
            batch_size: records per transaction.

        Returns:
            The number of records imported.

        Raises:
            InvalidMemoryError: the file is not a langchain-reflective export or a line is
                malformed, or a vector has not the file's dimension, or holds NaN, infinite
                values or only zeros, or a record's id holds another memory in its namespace
                (e.g. one deleted and added again under that id since an earlier import;
                the message names the line; nothing from the failing batch is written, and
                the batches before it are).
        """
        self._check_open()
        return import_jsonl(self, path, namespace=namespace, batch_size=batch_size)

    async def aimport_jsonl(
        self,
        path: str | os.PathLike[str],
        *,
        namespace: str | None = None,
        batch_size: int = IMPORT_BATCH,
    ) -> int:
        """Async twin of :meth:`import_jsonl`: the import (the file read line by line between
        embedding calls and writes) runs in a worker thread. Cancelled, it goes on there; the
        batches it wrote stay, and importing again skips them."""
        self._check_open()
        return await asyncio.to_thread(
            self.import_jsonl, path, namespace=namespace, batch_size=batch_size
        )


def load_pandas() -> Any:
    """The pandas module (the ``pandas`` extra).

    Raises:
        ImportError: pandas is not installed; the message names the extra.
    """
    try:
        import pandas as pd
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            'to_dataframe needs pandas: pip install "langchain-reflective[pandas]"'
        ) from exc
    return pd


def dataframe_flow(
    stream: StreamBase, query: str | None, *, namespace: str | None, now: datetime | None
) -> _Flow:
    """:meth:`MemoryStream.to_dataframe`, written once as a flow: it yields the stream's own
    calls (``recent``, then ``retrieve`` for a query); returns the DataFrame."""
    pd = load_pandas()
    ns = stream.resolve_namespace(namespace)
    records: list[MemoryRecord] = yield (stream, "recent", (None,), {"namespace": ns})
    when = utc(now) if now is not None else datetime.now(UTC)
    scored: dict[str, ScoredMemory] = {}
    if query is not None and records:
        retrieve = {"k": len(records), "now": when, "touch": False, "namespace": ns}
        hits: list[ScoredMemory] = yield (stream, "retrieve", (query,), retrieve)
        scored = {h.record.id: h for h in hits}
    rec = recency(
        np.array([r.accessed_at.timestamp() for r in records], dtype=np.float64),
        when.timestamp(),
        stream.scoring.decay,
    )
    rows = []
    for i, r in enumerate(records):
        hit = scored.get(r.id)
        rows.append(
            {
                "id": r.id,
                "description": r.text,
                "kind": r.kind,
                "importance": r.importance,
                "recency": float(rec[i]),
                "relevance": hit.relevance if hit else float("nan"),
                "lexical": hit.lexical if hit else float("nan"),
                "score": hit.score if hit else float("nan"),
                "created_at": r.created_at,
                "last_accessed_at": r.accessed_at,
                "evidence": list(r.evidence),
                "depth": r.depth,
            }
        )
    frame = pd.DataFrame(rows, columns=_COLUMNS)
    if query is not None:
        frame = frame.sort_values("score", ascending=False, kind="stable")
    return frame


def export_jsonl(
    stream: StreamBase,
    path: str | os.PathLike[str],
    *,
    namespaces: Iterable[str] | Literal["all"] | None,
    include_vectors: bool,
    kinds: Collection[str] | None = None,
) -> int:
    """See :meth:`MemoryStream.export_jsonl`; ``kinds``: only memories of these kinds (the
    header is the same).

    Raises:
        ExportError: the file could not be written (see :func:`_write_export`).
    """
    backend = stream.backend
    if namespaces is None:
        ns_list = [stream.namespace]
    elif namespaces == "all":
        ns_list = backend.namespaces()
    elif isinstance(namespaces, (str, bytes)) or not isinstance(namespaces, Iterable):
        # (a name given alone was read letter by letter: other users' one-letter namespaces)
        raise InvalidMemoryError(
            f"namespaces must be a list of namespace names, or 'all' for every one; got "
            f"{namespaces!r:.60}: for one namespace pass namespaces=[name] (also for one named "
            "'all')"
        )
    else:
        ns_list = [stream.resolve_namespace(n) for n in namespaces]
    header = {
        "format": JSONL_FORMAT,
        "version": JSONL_VERSION,
        "embedding_model": backend.embedding_model,
        "dimension": backend.dimension,
    }
    count = 0

    def chunks() -> Iterator[str]:  # one per batch the backend reads
        nonlocal count
        yield json.dumps(header) + "\n"
        for ns in ns_list:
            for batch in backend.iter_records(ns, with_vectors=include_vectors):
                lines = []
                for i, r in enumerate(batch.records):
                    if kinds is not None and r.kind not in kinds:
                        continue
                    line = r.to_dict()
                    if batch.vectors is not None:
                        line["vector"] = [float(x) for x in batch.vectors[i]]
                    lines.append(_json_line(line) + "\n")
                count += len(lines)
                yield "".join(lines)

    _write_export(Path(path), chunks())
    return count


def _write_export(target: Path, chunks: Iterable[str]) -> None:
    """Write ``chunks`` to ``target`` whole or not at all: into ``<target>.<random>.tmp``,
    flushed to disk, then renamed over ``target``. A failure removes the temporary file and
    leaves an earlier ``target`` untouched.

    Raises:
        ExportError: a file operation failed (creating, writing, syncing, renaming); the
            message names ``target`` and says what to do. What ``chunks`` raises (the
            backend's reads) passes as it is.
    """
    # a name of its own (mode 0600): two exports to one path at once must not write into the
    # same temporary file (the later one truncated the earlier one's, which then renamed it)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _export_error(target, exc) from exc
    tmp = Path(tmp_name)
    fh: TextIO | None = None
    try:
        fh = os.fdopen(fd, "w", encoding="utf-8")
        for chunk in chunks:
            try:
                fh.write(chunk)
            except OSError as exc:
                raise _export_error(target, exc) from exc
        try:  # a full disk may only tell at the flush, the sync or the close
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
            os.replace(tmp, target)
        except OSError as exc:
            raise _export_error(target, exc) from exc
    except BaseException:  # a failed export leaves no partial file behind
        if fh is not None:
            with contextlib.suppress(OSError):  # the buffer cannot be written either
                fh.close()
        else:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise


def _export_error(target: Path, exc: OSError) -> ExportError:
    """``exc`` (a failed file operation of an export to ``target``) as an :class:`ExportError`
    naming ``target``, with what to do when the cause is known."""
    folder = target.absolute().parent
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        hint = f"the disk holding {folder} is full: free space or export to another disk"
    elif code in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = f"this process cannot write in {folder}: export to a folder it can write"
    elif code == errno.ENOENT:
        hint = f"the folder {folder} does not exist: create it or export elsewhere"
    elif code == errno.EISDIR:
        hint = f"{target} is a directory: give a file path"
    else:
        hint = "check the disk and the path, then retry"
    return ExportError(
        f"cannot write the export {target}: {exc.strerror or exc} ({hint}; no partial file "
        "was left, and an earlier file at that path is unchanged)",
        errno=code,
        strerror=exc.strerror,
        filename=str(target),
    )


def _json_line(line: dict[str, Any]) -> str:
    """``line`` as JSON, UTF-8 text kept as is. A lone surrogate (stored by an import before
    imports checked for them) is written escaped, so the file stays UTF-8 and the export of
    everything else succeeds; importing that line is refused with its line number."""
    text = json.dumps(line, ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(line)
    return text
