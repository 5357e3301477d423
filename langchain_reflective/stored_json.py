"""How the backends read the JSON columns of stored rows: a row they cannot read (nested deeper
than :data:`~langchain_reflective.records.MAX_NESTING`, not JSON, not the expected type) is
read with its value withheld and a warning naming it, instead of failing every read of its
namespace (split out of ``records.py``)."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
from typing import Any, cast

from langchain_reflective.records import MAX_NESTING

__all__ = [
    "UNREADABLE_METADATA_KEY",
    "load_stored_json",
    "load_stored_metadata",
    "warn_unreadable",
]

logger = logging.getLogger(__name__)

UNREADABLE_METADATA_KEY = "reflective_unreadable_metadata"
"""The one key of the metadata a backend reads for a stored row whose metadata it cannot read:
nested deeper than :data:`MAX_NESTING` (written by a version before that limit, or by hand),
or not a JSON object (a hand edit). Its value is ``{"problem": <what is wrong>, "json": <the
stored text, unchanged>}``.

Such a row used to make every read of its namespace raise (``RecursionError`` from decoding it,
which reads decode every row they return); now only that row's metadata is withheld, with a
warning naming the memory, and the row itself is never changed. The marker is flat, so the
memory can be exported, imported and replaced like any other, its stored text kept."""

_STORED_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
"""A JSON string (whose brackets are not nesting)."""
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")

_SHALLOW_CHARS = 2 * MAX_NESTING + 1
"""JSON text this short cannot nest deeper than :data:`MAX_NESTING` (a level takes two
characters)."""

_warned: set[tuple[str, str, str]] = set()  # (what, namespace, id) warned of in this process
_WARNED_MAX = 10_000
_warned_lock = threading.Lock()


def _nesting(raw: str) -> int:
    """How deep the dicts and lists of the JSON text ``raw`` nest (its outer object being
    level 1; 0 for a text too short or with too few brackets to nest past
    :data:`MAX_NESTING`), counted without decoding it: decoding recurses once per level, and
    how many levels a thread can afford depends on how deep in the stack the read is."""
    if len(raw) <= _SHALLOW_CHARS or raw.count("[") + raw.count("{") <= MAX_NESTING:
        return 0  # (each level takes at least two characters and one opening bracket)
    import numpy as np  # (loaded already by every backend; only wide or deep rows get here)

    structure = _STORED_STRING.sub("", raw).encode("utf-8", "surrogatepass")
    codes = np.frombuffer(structure.translate(None, _NOT_BRACKETS), dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(steps.cumsum().max()) if steps.shape[0] else 0


def load_stored_json(
    raw: object,
    what: str,
    namespace: str,
    memory_id: str,
    expected: type[dict[str, Any]] | type[list[Any]],
) -> tuple[Any, str]:
    """``(json.loads(raw), "")`` for a JSON column of a stored row (``what`` of ``memory_id``
    in ``namespace``), or ``(None, problem)`` when the row cannot be read: ``raw`` nests
    deeper than :data:`MAX_NESTING` (which no write of this version lets through), is not
    JSON text, or decodes to something other than an ``expected`` (a JSON object or list).
    The first time a row is found so in this process a warning names it and says what to do.

    The depth is measured before decoding, so whether a row reads does not depend on how deep
    in the stack the read runs (a ``RecursionError`` caught half way would), and nothing
    deeper than the package writes is handed on to code that walks it recursively.
    """
    if isinstance(raw, bytes):  # (SQLite: a BLOB written by hand; json.loads took UTF-8 ones)
        with contextlib.suppress(UnicodeDecodeError):
            raw = raw.decode("utf-8")
    if not isinstance(raw, str):
        problem = f"is a stored {type(raw).__name__}, not JSON text"
    elif (depth := _nesting(raw)) > MAX_NESTING:
        problem = (
            f"nests dicts and lists {depth} levels deep, more than {MAX_NESTING}, "
            "deeper than this version writes or reads"
        )
    else:
        try:
            value = json.loads(raw)
        except ValueError as exc:  # (integers past Python's digit limit too)
            problem = f"is not JSON ({exc})"
        else:
            if isinstance(value, expected):
                return value, ""
            name = "object" if expected is dict else "list"
            problem = f"is not a JSON {name} but a JSON {type(value).__name__}"
    warn_unreadable(what, namespace, memory_id, problem)
    return None, problem


def load_stored_metadata(raw: object, namespace: str, memory_id: str) -> dict[str, Any]:
    """The metadata of a stored row from its stored JSON ``raw``: the decoded object, or, when
    the row cannot be read (see :func:`load_stored_json`), the marker
    ``{UNREADABLE_METADATA_KEY: {"problem": ..., "json": <raw as text>}}`` (see
    :data:`UNREADABLE_METADATA_KEY`), so one bad row does not make its namespace unreadable."""
    if type(raw) is str and (
        len(raw) <= _SHALLOW_CHARS or raw.count("[") + raw.count("{") <= MAX_NESTING
    ):  # (the usual row, read without the checks' calls: reads run this per record)
        try:
            value = json.loads(raw)
        except ValueError:
            value = None  # (load_stored_json says what is wrong)
        if type(value) is dict:
            return value
    value, problem = load_stored_json(raw, "metadata", namespace, memory_id, dict)
    if not problem:
        return cast(dict[str, Any], value)
    text = raw if isinstance(raw, str) else repr(raw)
    return {UNREADABLE_METADATA_KEY: {"problem": f"the stored metadata {problem}", "json": text}}


def warn_unreadable(what: str, namespace: str, memory_id: str, problem: str) -> None:
    """Log that the stored ``what`` of a row cannot be read, once per row and process (reads
    repeat; the first warning says it all)."""
    key = (what, namespace, memory_id)
    with _warned_lock:
        if key in _warned:
            return
        if len(_warned) < _WARNED_MAX:
            _warned.add(key)
    instead = (
        f"metadata {{{UNREADABLE_METADATA_KEY!r}: {{'problem': ..., 'json': <the stored text>}}}}"
        if what == "metadata"
        else f"no {what}"
    )
    logger.warning(
        "the stored %s of memory %r in namespace %r %s: the memory is read with %s; the row is "
        "left as it is. To clear this, write the memory again (MemoryStream.add(..., "
        "ids=[%r], replacing=[%r])) or delete it",
        what,
        memory_id,
        namespace,
        problem,
        instead,
        memory_id,
        memory_id,
    )
