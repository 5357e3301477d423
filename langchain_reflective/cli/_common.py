"""Shared pieces of the ``reflective`` command: constants, errors, output helpers, opening files."""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeAlias

from langchain_core.embeddings import Embeddings

try:  # _MISSING covers every package of the cli extra the commands import
    import typer  # noqa: F401
    from rich.console import Console
    from rich.markup import escape

    _MISSING: ImportError | None = None
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess test
    _MISSING = _exc

if TYPE_CHECKING:
    from langchain_reflective.backends.base import BaseMemoryBackend
    from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
    from langchain_reflective.stream import MemoryStream


INSTALL_HINT = 'pip install "langchain-reflective[cli]"'
DEFAULT_DB = Path("reflective-demo.db")
_DEMO_MAX_TOKENS = {"local": 320, "openai": 1024}
"""Token limit per model answer in the demo: the tiny local model rambles until the limit."""

logger = logging.getLogger(__name__)

EXIT_CODES = (
    "Exit status: 0 success; 1 the command could not be carried out (a missing, foreign or "
    "empty file, a missing directory, the data, a model, a missing extra); 2 the command line "
    "itself is wrong (unknown command or option, missing argument, an option value or "
    "combination that can never work); 130 interrupted."
)
"""The exit-status rule, printed at the end of ``reflective --help``."""
PLOT_FORMATS = (".png", ".pdf", ".svg")
"""File types ``inspect --plot`` writes (chosen by the file name's suffix)."""


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Prefer(enum.StrEnum):
    """Which models to use (see :func:`langchain_reflective.local.model_choice`)."""

    auto = "auto"
    local = "local"
    openai = "openai"


_STATE: dict[str, bool] = {"debug": False}


# -- output helpers ------------------------------------------------------------------------------


@functools.cache
def _console() -> Console:
    # In a pipe rich would wrap tables at 80 columns; 120 keeps the score tables readable.
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "120"))
    return Console(width=width, highlight=False, emoji=False)  # ":warning:" in a text is text


_BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_SHOWN_ESCAPED = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in (
        *(c for c in range(0x20) if chr(c) not in "\t\n"),
        *range(0x7F, 0xA0),
        *map(ord, _BIDI_CONTROLS),
    )
}


def _visible(text: object) -> str:
    """``text`` safe for a terminal: control characters (C0 but tab and newline, DEL, C1) and
    the bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) are shown as
    escapes (``\\x1b``, ``\\u202e``) instead of being sent to the terminal, where they could
    clear the screen, set the title, recolour or reorder what follows. For every text that comes
    from memories, exports or the files read (texts, namespaces, kinds, ids, Reflexion fields)
    printed as plain text (an error line); for rich output use :func:`_safe`, which also
    escapes rich markup."""
    return str(text).translate(_SHOWN_ESCAPED)


def _safe(text: object) -> str:
    """``text`` safe to put into rich output (``console.print``, a table cell or title, a
    panel) as plain text: what :func:`_visible` guarantees (no control or bidi character
    reaches the terminal, each is shown as an escape) and its rich markup escaped, so
    ``[bold red]x[/]`` in a memory is shown as written, never as a style (nor a broken tag,
    which would fail the command). For every text in rich output that comes from memories,
    exports, files, paths or the command line; the markup around it is the caller's. Apply it
    once (twice shows the first one's markup escapes) and last: to text :func:`_visible` or
    :func:`_short` made already, not inside it (their escapes are text, rich's are not)."""
    return escape(_visible(text))


def _one_line(message: object) -> str:
    text = " ".join(str(message).split())
    return text or "unknown error"


def _fail(message: str, code: int = 1) -> NoReturn:
    raise CLIError(message, code)


def _short(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut at ``limit`` characters, control characters shown
    (:func:`_visible`); rich markup is kept: wrap it in :func:`_safe` for rich output."""
    text = " ".join(text.split())
    return _visible(text if len(text) <= limit else text[: limit - 1] + "…")


def _stamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _seconds(value: float) -> str:
    return f"{value:.1f} s"


# -- opening memory files ------------------------------------------------------------------------


class _NoEmbeddings(Embeddings):
    """Stands in for the real model when a command only reads stored vectors.

    ``dimensions``: the model's dimension when the command knows it (an import reusing an
    export's vectors: the import reads it instead of embedding a probe text).
    """

    def __init__(self, identity: str, dimensions: int | None = None) -> None:
        self.model_name = identity
        self.dimensions = dimensions

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise CLIError("this command needs the embedding model, but none was loaded")

    def embed_query(self, text: str) -> list[float]:
        raise CLIError("this command needs the embedding model, but none was loaded")


POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""Where a memory argument names a Postgres database instead of a file."""
MemoryPlace: TypeAlias = Path | str
"""A memory file (``Path``) or a Postgres connection URL (``str``)."""


def _memory_place(value: str) -> MemoryPlace:
    """The command-line argument as a memory file or a Postgres URL. URL schemes are
    case-insensitive (RFC 3986): ``POSTGRESQL://`` is a URL too, passed on in lower case
    (libpq reads only a lower-case scheme)."""
    scheme, sep, rest = value.partition("://")
    if sep and f"{scheme.lower()}://" in POSTGRES_SCHEMES:
        return f"{scheme.lower()}://{rest}"
    return Path(value)


def _shown(place: MemoryPlace) -> str:
    """``place`` for messages: a URL without its password."""
    if isinstance(place, Path):
        return str(place)
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(place)
    netloc = parts.netloc
    if parts.password:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}"
    query = "&".join(
        "password=***" if item.startswith("password=") else item
        for item in parts.query.split("&")
        if item
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _postgres_backend(url: str, *, setup: bool) -> BaseMemoryBackend:
    """The Postgres backend at ``url``: with ``setup``, its tables created or upgraded (an
    import); otherwise they must exist already (inspect, export read and change nothing)."""
    try:
        from langchain_reflective.backends.postgres import PostgresBackend
    except ImportError:
        _fail('a Postgres URL needs the extra: pip install "langchain-reflective[postgres]"')
    backend = PostgresBackend.from_conn_string(url)
    try:
        if setup:
            backend.setup()
        else:
            from langchain_reflective.backends.postgres.schema import SCHEMA_VERSION

            version = backend.schema_version()
            if version == 0:
                _fail(f"{_shown(url)} holds no langchain-reflective memories (no tables yet)")
            if version > SCHEMA_VERSION:
                _fail(
                    f"{_shown(url)} was set up by a newer langchain-reflective (schema version "
                    f"{version}; this one knows up to {SCHEMA_VERSION}): upgrade the package"
                )
    except BaseException:
        backend.close()
        raise
    return backend


def _check_memory_path(path: Path) -> None:
    """Refuse paths that cannot be an existing memory file, before SQLite touches them."""
    if not path.exists():
        _fail(f"no such memory file: {path}")
    if path.is_dir():
        _fail(f"{path} is a directory, not a memory file")
    if path.stat().st_size == 0:
        _fail(f"{path} is empty: it is not a langchain-reflective memory file")


def _open_store(path: Path, *, reading: bool = False) -> SQLiteRecordStore:
    """The memory file's store, opened as any program opens it (an older file is upgraded).
    With ``reading`` (a command that only reads), a file this process may not write is opened
    read-only (``read_only=True``: never written nor upgraded; what SQLite may still create
    beside it: ``backends/sqlite/read_only.py``); so is one that cannot be opened for writing,
    on read-only storage (SQLite cannot create ``<file>-wal`` or ``-shm`` beside it)."""
    from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
    from langchain_reflective.errors import ForeignFileError, SchemaVersionError, StorageError

    # (A normal open would take a file it may not write for reading without a word, and
    # upgrade nothing it could not write either: read_only says so plainly.) Checked with the
    # ids and capabilities the process opens files with, not the real ones.
    effective = os.access in os.supports_effective_ids
    if reading and not os.access(path, os.W_OK, effective_ids=effective):
        return SQLiteRecordStore(path, read_only=True)
    try:
        return SQLiteRecordStore(path)
    except (ForeignFileError, SchemaVersionError):
        raise
    except StorageError:
        if not reading:
            raise
    # (its own error, if any, says why the file cannot be read: that is what the user asked)
    return SQLiteRecordStore(path, read_only=True)


def _open_stream(
    place: MemoryPlace,
    embeddings: Embeddings | None = None,
    identity: str | None = None,
    *,
    reading: bool = False,
) -> MemoryStream:
    """A stream over a memory file or a Postgres database whose tables exist (created for a
    new file). Without ``embeddings``, none is loaded: the stored vectors' identity stands in
    (for commands that only read). With ``reading`` or without ``embeddings`` (the command
    only reads), a file that cannot be written is read read-only (see :func:`_open_store`)."""
    from langchain_reflective.stream import MemoryStream

    if isinstance(place, Path):
        if embeddings is not None:
            if identity is None and place.exists() and place.stat().st_size:
                _check_memory_path(place)
                store = _open_store(place, reading=reading)
                stored = store.embedding_model
                read_only = store.read_only
                store.close()
                _check_same_model(place, stored, embeddings)
                if read_only:  # by a backend for the path: its index caches are read, not kept
                    from langchain_reflective.backends.sqlite import SQLiteBackend

                    reader = SQLiteBackend(place, read_only=True)
                    try:
                        return MemoryStream(embeddings, backend=reader, embedding_model=identity)
                    except BaseException:
                        reader.close()
                        raise
            # by path, so the file's index caches are read and kept (not with ``store=``)
            return MemoryStream(embeddings, path=place, embedding_model=identity)
        _check_memory_path(place)
        store = _open_store(place, reading=True)
        identity = store.embedding_model or "unknown"
        return MemoryStream(_NoEmbeddings(identity), store=store, embedding_model=identity)
    backend = _postgres_backend(place, setup=False)
    try:
        if embeddings is None:
            identity = backend.embedding_model or "unknown"
            embeddings = _NoEmbeddings(identity)
        elif identity is None:
            _check_same_model(place, backend.embedding_model, embeddings)
        return MemoryStream(embeddings, backend=backend, embedding_model=identity)
    except BaseException:
        backend.close()
        raise


def _check_same_model(place: MemoryPlace, stored: str | None, embeddings: Embeddings) -> None:
    """Refuse, in the command's own terms, memories written with another embedding model than
    the one the command loaded (``--prefer`` chooses it)."""
    from langchain_reflective.validation import embedding_identity

    _refuse_other_model(place, stored, embedding_identity(embeddings))


def _refuse_other_model(place: MemoryPlace, stored: str | None, loaded: str | None) -> None:
    if stored and loaded and stored != loaded:
        _fail(
            f"{_shown(place)} was written with embedding model {stored!r}, but this command "
            f"embeds with {loaded!r}; vectors of different models are not comparable. Run it "
            "with the model the memories were written with: --prefer local for the embedded "
            "model, --prefer openai (OPENAI_API_KEY, and OPENAI_BASE_URL for another server) "
            "for an OpenAI-compatible one"
        )


def _pick_namespace(stream: MemoryStream, namespace: str | None) -> str:
    names = stream.namespaces()
    if namespace is not None:
        if names and namespace not in names:
            _fail(f"namespace {namespace!r} not found; the namespaces are: {', '.join(names)}")
        return namespace
    if not names or stream.namespace in names:
        return stream.namespace
    if len(names) == 1:
        return names[0]
    _fail(
        f"the memories are in several namespaces ({', '.join(names)}); choose one with --namespace"
    )


def _plot_target(path: Path) -> Path:
    """The file ``--plot`` writes: checked before any work, never a surprise.

    No suffix means PNG (``.png`` is appended, and the message names the real file); another
    suffix must be one of :data:`PLOT_FORMATS` (usage error, 2); the parent directory must
    exist and the path must not be a directory (1).
    """
    if path.is_dir():
        _fail(f"--plot {path} is a directory; give a file name such as {path / 'memory.png'}")
    if not path.suffix:
        path = path.with_name(path.name + ".png")
    elif path.suffix.lower() not in PLOT_FORMATS:
        _fail(
            f"--plot writes {', '.join(PLOT_FORMATS)} files, not {path.suffix!r}; "
            f"use e.g. {path.with_suffix('.png')}",
            code=2,
        )
    if path.is_dir():
        _fail(f"--plot {path} is a directory; give a file name such as {path / 'memory.png'}")
    _check_folder(path, "write --plot")
    return path


def _check_folder(path: Path, doing: str) -> None:
    """Refuse ``path`` (to ``doing``: "create", "write") when its folder is missing, or is a
    file (saying so: "the directory X does not exist" was wrong for a file)."""
    folder = path.parent
    if folder.is_dir():
        return
    if folder.exists():
        _fail(f"cannot {doing} {path}: {folder} is a file, not a directory")
    _fail(f"cannot {doing} {path}: the directory {folder} does not exist")


@contextlib.contextmanager
def _plotting() -> Iterator[None]:
    """matplotlib set up for a ``--plot``: the file backend (Agg), and ``$`` in titles and
    labels taken as text (namespaces, kinds, queries, strategy names: as math, ``"$\\x$"``
    failed the plot). A missing matplotlib is an error naming the extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        _fail(f"--plot needs matplotlib: {INSTALL_HINT}")
    with matplotlib.rc_context({"text.parse_math": False}):
        yield


def _load_embeddings(
    prefer: Prefer, place: MemoryPlace | None = None, stored: str | None = None
) -> Embeddings:
    """The embedding model ``--prefer`` chooses. With the model ``stored`` that the memories at
    ``place`` were written with, another model is refused before it loads (which takes
    seconds), in the words of the check after loading."""
    from langchain_reflective.local import _default_embedding_identity, default_embeddings

    if place is not None and stored:
        _refuse_other_model(place, stored, _default_embedding_identity(prefer.value))
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return default_embeddings(prefer=prefer.value)
