"""Memory records: what the stream stores, and what a retrieval returns with its scores."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from langchain_core.documents import Document

from langchain_reflective.errors import InvalidMemoryError

__all__ = [
    "ImportanceSource",
    "MemoryKind",
    "MemoryRecord",
    "ScoredMemory",
    "new_memory_id",
    "utc",
]

MemoryKind = str
"""A record's kind: ``"observation"``, ``"reflection"``, ``"plan"`` or any free-form kind."""

ImportanceSource = Literal["given", "llm", "heuristic"]
"""Where a record's importance came from."""

logger = logging.getLogger(__name__)

OBSERVATION = "observation"
REFLECTION = "reflection"
PLAN = "plan"

MAX_TEXT_CHARS = 200_000
"""Largest accepted memory text (characters). Larger texts should be chunked by the caller."""

MAX_DEPTH = 2**31 - 1
"""Largest reflection depth a record may carry (what every backend's depth column holds)."""

IMPORTANCE_SOURCES = ("given", "llm", "heuristic")
"""The values of :data:`ImportanceSource`."""


CUT_MARKER = " [… cut: longer than a memory holds]"


def clip_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text``, or its first characters and :data:`CUT_MARKER` when it is longer than
    ``limit`` (for texts an integration composes, e.g. a turn's query and reply, which may
    each be valid and still too long together)."""
    if len(text) <= limit:
        return text
    return text[: limit - len(CUT_MARKER)] + CUT_MARKER


def storable_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` as a memory can always hold it: a NUL character becomes U+FFFD, an unpaired
    surrogate ``?``, and a text longer than ``limit`` is cut (:func:`clip_text`). For what an
    integration records on its own (an agent's turn), where refusing would fail a run whose
    answer was already given."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return clip_text(text, limit)


def new_memory_id() -> str:
    """Return a new stable, unique memory id: a UUIDv7 (RFC 9562) as 32 hex digits.

    Version 7 starts with the creation time in milliseconds, followed by 74 random bits, so ids
    created together sort together: a new memory's id lands at the end of the file's id index
    instead of on a random page of it, which keeps one-at-a-time adds cheap at scale.
    """
    return new_memory_ids(1)[0]


def new_memory_ids(n: int) -> list[str]:
    """``n`` new ids (see :func:`new_memory_id`), with one clock read."""
    stamp = (time.time_ns() // 1_000_000) << 80 | _VERSION_AND_VARIANT
    raw = _RANDOM.take(10 * n)
    if n == 1:  # one memory per add
        rand = int.from_bytes(raw, "big")
        return [f"{stamp | (rand >> 68) << 64 | rand & _RAND_B:032x}"]
    out = []
    for i in range(0, 10 * n, 10):
        rand = int.from_bytes(raw[i : i + 10], "big")
        out.append(f"{stamp | (rand >> 68) << 64 | rand & _RAND_B:032x}")
    return out


class _RandomPool:
    """Bytes from ``os.urandom``, read 4 KiB at a time (one system call per ~400 ids instead of
    one per add). Thread-safe; a forked child starts with an empty pool, so parent and child
    never hand out the same bytes."""

    _SIZE = 4096

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._buf = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            if self._pos + n > len(self._buf):
                self._buf = os.urandom(max(n, self._SIZE))
                self._pos = 0
            out = self._buf[self._pos : self._pos + n]
            self._pos += n
            return out


_RANDOM = _RandomPool()
_RAND_B = (1 << 62) - 1
_VERSION_AND_VARIANT = 0x7 << 76 | 0b10 << 62


def utc(value: datetime) -> datetime:
    """Return ``value`` as a timezone-aware UTC datetime.

    Raises:
        InvalidMemoryError: if ``value`` is naive (no timezone): a naive datetime is ambiguous.
    """
    if value.__class__ is datetime and value.tzinfo is UTC:
        return value  # already UTC (datetimes are immutable)
    if not isinstance(value, datetime):
        raise InvalidMemoryError(f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidMemoryError(
            "naive datetime: pass a timezone-aware datetime, e.g. datetime.now(UTC)"
        )
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:  # e.g. 9999-12-31 23:00 at UTC-5: past datetime.max in UTC
        raise InvalidMemoryError(
            f"{value.isoformat()} is outside the datetimes Python can hold in UTC (years 1-9999)"
        ) from exc


def validate_text(text: object) -> str:
    """Check that ``text`` is a usable memory text and return it.

    Raises:
        InvalidMemoryError: if it is not a string, is empty/whitespace or is too large.
    """
    if not isinstance(text, str):
        raise InvalidMemoryError(f"memory text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise InvalidMemoryError("memory text is empty or whitespace")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidMemoryError(
            f"memory text has {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}. "
            "Split long documents into smaller memories."
        )
    if "\x00" in text:
        raise InvalidMemoryError("memory text contains a NUL character")
    if not text.isascii():
        check_encodable(text, "memory text")
    return text


NUL_REFUSED = (
    "{what} contains a NUL character, which Postgres cannot store (and SQLite stored): refused "
    "by every backend, so memories move between them"
)


MAX_IDENTIFIER_BYTES = 1024
"""Longest id, namespace or kind (and evidence id, store key, embedding model name), in UTF-8
bytes. Every backend indexes them, and Postgres refuses an index entry over ~2.7 KB (a btree's
2,704 bytes): the unique key ``(namespace, id)`` of two values of 1,024 bytes fits, with room
for the entry's overhead. Refused on every backend, so memories move between them."""


def check_identifier(value: str, what: str, *, writing: bool = True) -> str:
    """``value`` (an id, namespace, kind or evidence id) if every backend can store it: UTF-8
    (no lone surrogate), no NUL character, at most :data:`MAX_IDENTIFIER_BYTES` bytes (only
    when ``writing``: a file written before the limit may hold longer ones, which reads,
    deletes and purges must still reach).

    Raises:
        InvalidMemoryError: it cannot be stored.
    """
    if "\x00" in value:
        raise InvalidMemoryError(NUL_REFUSED.format(what=what))
    if writing and len(value) * 4 > MAX_IDENTIFIER_BYTES:  # (1 to 4 bytes of UTF-8 each)
        _check_size(value, what)
    return value if value.isascii() else check_encodable(value, what)


def storable_id(value: str) -> bool:
    """Whether a memory can be stored under the id ``value``: not empty, and accepted by
    :func:`check_identifier` (an id given by a caller or a model may not be)."""
    try:
        check_identifier(value, "id")
    except InvalidMemoryError:
        return False
    return bool(value)


def _check_size(value: str, what: str) -> None:
    """Refuse ``value`` if it is over :data:`MAX_IDENTIFIER_BYTES` bytes of UTF-8."""
    size = len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_IDENTIFIER_BYTES:
        raise InvalidMemoryError(
            f"{what} is {size:,} bytes long in UTF-8 (it starts {value[:40]!r}); the limit is "
            f"{MAX_IDENTIFIER_BYTES:,}, because every backend indexes it (Postgres refuses "
            "index entries over ~2.7 KB): refused by every backend, so memories move between "
            "them. Use a shorter one, e.g. a digest of this one: "
            "hashlib.sha256(value.encode()).hexdigest()"
        )


def check_encodable(value: str, what: str) -> str:
    """Return ``value`` if it encodes as UTF-8 (no lone surrogates such as ``"\\ud800"``).

    Every backend stores UTF-8; a lone surrogate (from a bad decode upstream) would otherwise
    escape from the database driver as a raw ``UnicodeEncodeError`` after the embedding calls.

    Raises:
        InvalidMemoryError: it contains a lone surrogate.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMemoryError(
            f"{what} cannot be encoded as UTF-8 (lone surrogate {value[exc.start]!r} at "
            f"position {exc.start}); decode the input correctly first"
        ) from None
    return value


MAX_NESTING = 100
"""How deep the dicts and lists of a memory's metadata (or a store item's value) may nest, the
mapping itself being level 1.

Deeper values are refused: encoding one raises ``RecursionError`` from about 985 levels, and one
a little less deep would be stored but break every read of its namespace (decoding it needs a
deeper stack than a read deep inside a graph has). The backends read a row stored deeper (by an
earlier version, or by hand) with its metadata withheld: see
:data:`langchain_reflective.stored_json.UNREADABLE_METADATA_KEY`."""


MAX_JSON_CHARS = 10_000_000
"""Longest JSON a memory's metadata (or a store item's value) that holds one dict or list
several times may be written out as, in characters (counted as a lower bound). JSON writes a
shared container once per place it appears: a list of two references to one list, nested 40
times, is a few hundred bytes in memory and a terabyte of JSON, which encoding would build for
hours. A value without shared containers is as long as it looks and is not measured."""


def check_json_shape(value: Mapping[str, Any], what: str, max_depth: int = MAX_NESTING) -> None:
    """Refuse a mapping that JSON cannot keep as given: a key that is not a string at any depth
    (JSON writes ``1``, ``True`` and ``None`` as ``"1"``, ``"true"`` and ``"null"``, merging
    each with the string key equal to it), or dicts and lists nested more than ``max_depth``
    levels (default :data:`MAX_NESTING`), or one that holds a dict or list in several places
    and written out as JSON would be longer than :data:`MAX_JSON_CHARS`. Each container is
    walked once per depth it sits at (one shared many times over is not walked per path),
    without recursion.

    Raises:
        InvalidMemoryError: the message starts with ``what`` and names where.
    """
    seen: dict[int, int] = {}  # id of a container -> the least depth it was walked at
    shared = False  # some container was reached twice: JSON writes it once per place
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, path = stack.pop()
        walked = seen.get(id(node))
        if walked is not None:
            shared = True
            if walked <= depth:
                continue  # walked already with at least as much depth left
        seen[id(node)] = depth
        if depth > max_depth:
            raise InvalidMemoryError(
                f"{what} nests dicts and lists more than {max_depth} levels deep (at "
                f"{_short(path)}): store a flatter value"
            )
        if isinstance(node, Mapping):
            children = []
            for key, child in node.items():
                if not isinstance(key, str):
                    raise InvalidMemoryError(
                        f"{what} has a key that is not a string, {_short(repr(key))} "
                        f"({type(key).__name__}), in {_short(path) or 'the value'}: JSON would "
                        f"store it as a string, so it is refused"
                    )
                children.append((child, f"{path}.{key}" if path else key))
        else:
            children = [(child, f"{path}[{i}]") for i, child in enumerate(node)]
        for child, where in reversed(children):
            if isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1, where))
    if shared and _json_chars(value) > MAX_JSON_CHARS:
        raise InvalidMemoryError(
            f"{what} holds the same dict or list in many places: written out as JSON, which "
            f"repeats it in each, it would be longer than {MAX_JSON_CHARS:,} characters. Store "
            "the shared part once and refer to it instead"
        )


def _json_chars(value: Mapping[str, Any]) -> int:
    """A lower bound on the length of ``value`` written out as JSON, each shared container
    counted once per place it appears but measured once (linear in the distinct containers).
    A container inside itself counts nothing there (``json.dumps`` refuses it anyway)."""
    chars: dict[int, int] = {}  # id of a container -> its length; -1 while being measured
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        node, measured = stack.pop()
        if not measured:
            if id(node) in chars:
                continue
            chars[id(node)] = -1
            stack.append((node, True))
            items = node.values() if isinstance(node, Mapping) else node
            stack.extend(
                (child, False)
                for child in items
                if isinstance(child, Mapping | list | tuple) and id(child) not in chars
            )
            continue
        total = 1 + max(len(node), 1)  # brackets and commas
        if isinstance(node, Mapping):
            items = node.values()
            total += sum(len(key) + 3 for key in node)  # quotes and colon
        else:
            items = node
        for child in items:
            if isinstance(child, Mapping | list | tuple):
                total += max(chars[id(child)], 0)
            elif isinstance(child, str):
                total += len(child) + 2
            else:
                total += 1
        chars[id(node)] = total
    return chars[id(value)]


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validate_metadata(metadata: Mapping[str, Any] | None, what: str = "metadata") -> dict[str, Any]:
    """Return a JSON-serialisable copy of ``metadata`` (``what`` names it in errors).

    Raises:
        InvalidMemoryError: if it is not a mapping with string keys (at every depth: see
            :func:`check_json_shape`), nests deeper than :data:`MAX_NESTING`, or is not
            JSON-serialisable.
    """
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidMemoryError(f"{what} must be a mapping, got {type(metadata).__name__}")
    check_json_shape(metadata, what)
    try:
        dumped = json.dumps(dict(metadata), allow_nan=False)
        out: dict[str, Any] = json.loads(dumped)
    except (TypeError, ValueError) as exc:
        raise InvalidMemoryError(f"{what} is not JSON-serialisable: {exc}") from exc
    if "\\ud" in dumped or "\\uD" in dumped:  # escaped surrogates: lone ones cannot be stored
        check_encodable(json.dumps(out, ensure_ascii=False), what)
    if "\\u0000" in dumped:
        raise InvalidMemoryError(NUL_REFUSED.format(what=what))
    return out


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One memory in the stream.

    Records are immutable values; the stream returns fresh copies.
    """

    id: str
    """Stable id (string), unique within the memory's namespace."""
    text: str
    """The memory's description."""
    kind: MemoryKind = OBSERVATION
    """``observation``, ``reflection``, ``plan`` or a free-form kind."""
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    """When the memory was created (timezone-aware UTC)."""
    last_accessed_at: datetime | None = None
    """When the memory was last retrieved (defaults to ``created_at``)."""
    importance: float = 0.5
    """Importance in [0, 1] (a 1-10 rating divided by 10)."""
    importance_source: ImportanceSource = "given"
    """Where the importance came from: given by the caller, rated by an LLM, or heuristic."""
    evidence: tuple[str, ...] = ()
    """Ids of the records this one cites (reflections cite their evidence)."""
    depth: int = 0
    """0 for observations; ``1 + max(depth of evidence)`` for reflections."""
    namespace: str = "default"
    """The owner (user/agent) of the memory; namespaces never see each other's records."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """JSON-serialisable metadata."""

    def __post_init__(self) -> None:
        validate_text(self.text)
        object.__setattr__(self, "created_at", utc(self.created_at))
        if self.last_accessed_at is None:
            object.__setattr__(self, "last_accessed_at", self.created_at)
        else:
            object.__setattr__(self, "last_accessed_at", utc(self.last_accessed_at))
        imp = float(self.importance)
        if not math.isfinite(imp) or not 0.0 <= imp <= 1.0:
            raise InvalidMemoryError(f"importance must be in [0, 1], got {self.importance!r}")
        object.__setattr__(self, "importance", imp)
        for what, value in (("id", self.id), ("namespace", self.namespace), ("kind", self.kind)):
            if not isinstance(value, str) or not value:
                raise InvalidMemoryError(f"{what} must be a non-empty string, got {value!r:.80}")
            check_identifier(value, what)
        if self.importance_source not in IMPORTANCE_SOURCES:
            raise InvalidMemoryError(
                f"importance_source must be one of {IMPORTANCE_SOURCES}, "
                f"got {self.importance_source!r:.80}"
            )
        evidence = tuple(str(e) for e in self.evidence)
        for e in evidence:
            if not e:
                raise InvalidMemoryError("evidence ids must be non-empty strings")
            check_identifier(e, "evidence id")
        object.__setattr__(self, "evidence", evidence)
        depth = self.depth
        if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
            raise InvalidMemoryError(
                f"depth must be an integer in [0, {MAX_DEPTH}], got {depth!r:.80}"
            )
        object.__setattr__(self, "metadata", validate_metadata(self.metadata))

    @property
    def accessed_at(self) -> datetime:
        """``last_accessed_at`` (never ``None`` after construction)."""
        assert self.last_accessed_at is not None
        return self.last_accessed_at

    def with_access(self, when: datetime) -> MemoryRecord:
        """Return a copy with ``last_accessed_at`` set to ``when``."""
        return replace(self, last_accessed_at=when)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (timestamps as ISO-8601 strings)."""
        return {
            "id": self.id,
            "text": self.text,
            "kind": self.kind,
            "created_at": self.created_at.isoformat(),
            "last_accessed_at": self.accessed_at.isoformat(),
            "importance": self.importance,
            "importance_source": self.importance_source,
            "evidence": list(self.evidence),
            "depth": self.depth,
            "namespace": self.namespace,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryRecord:
        """Inverse of :meth:`to_dict`, for data from outside (an export line): every field is
        checked as :meth:`MemoryStream.add` checks it (strings that UTF-8 can encode, a
        non-empty id, a depth the backends can store), and no field is coerced from another
        type (an id ``null`` is refused, not stored as ``"None"``).

        Raises:
            InvalidMemoryError: on missing or malformed fields.
        """
        if not isinstance(data, Mapping):
            raise InvalidMemoryError(f"a memory record is a JSON object, not {type(data).__name__}")
        try:
            evidence = data.get("evidence", ())
            if not isinstance(evidence, list | tuple) or not all(
                isinstance(e, str) for e in evidence
            ):
                raise InvalidMemoryError(f"evidence must be a list of ids, got {evidence!r:.80}")
            importance = data.get("importance", 0.5)
            if isinstance(importance, bool) or not isinstance(importance, int | float):
                raise InvalidMemoryError(f"importance must be a number, got {importance!r:.80}")
            return cls(
                id=data["id"],
                text=data["text"],
                kind=data.get("kind", OBSERVATION),
                created_at=datetime.fromisoformat(data["created_at"]),
                last_accessed_at=datetime.fromisoformat(
                    data.get("last_accessed_at") or data["created_at"]
                ),
                importance=importance,
                importance_source=data.get("importance_source", "given"),
                evidence=tuple(evidence),
                depth=data.get("depth", 0),
                namespace=data.get("namespace", "default"),
                metadata=data.get("metadata") or {},
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            if isinstance(exc, InvalidMemoryError):
                raise
            raise InvalidMemoryError(f"malformed memory record: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    """A retrieved memory with every score component."""

    record: MemoryRecord
    """The memory (with ``last_accessed_at`` as stored after this retrieval)."""
    score: float
    """The weighted sum used for ranking."""
    relevance: float
    """Cosine similarity to the query (raw, before any normalisation)."""
    lexical: float
    """Lexical (BM25) score relative to the best lexical match in the namespace (of all the
    namespaces one retrieval ranked together), in [0, 1]."""
    recency: float
    """``decay ** hours since last access`` at retrieval time (before this access)."""
    importance: float
    """Importance in [0, 1]."""

    def to_document(self) -> Document:
        """A LangChain ``Document`` whose metadata carries the record fields and the scores."""
        r = self.record
        return Document(
            id=r.id,
            page_content=r.text,
            metadata={
                "id": r.id,
                "kind": r.kind,
                "namespace": r.namespace,
                "created_at": r.created_at.isoformat(),
                "last_accessed_at": r.accessed_at.isoformat(),
                "importance": r.importance,
                "importance_source": r.importance_source,
                "evidence": list(r.evidence),
                "depth": r.depth,
                "score": self.score,
                "relevance": self.relevance,
                "lexical": self.lexical,
                "recency": self.recency,
                **({"metadata": dict(r.metadata)} if r.metadata else {}),
            },
        )
