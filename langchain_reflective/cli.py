"""The ``reflective`` command: a demo, and tools to inspect, export and import memory files.

Commands (``reflective --help`` and ``reflective <command> --help`` say more):

* ``reflective demo``: ingest a conversation into a memory file, answer questions by retrieval
  (every score component shown), reflect, and print the insights with the evidence they cite;
* ``reflective inspect FILE``: counts, models, reflection state and the newest memories;
  ``--plot PNG`` draws the timeline and the score components;
* ``reflective export FILE OUT.jsonl`` and ``reflective import IN.jsonl FILE``.

User mistakes (a missing or foreign file, a bad option, a missing extra) end with one line on
stderr and a non-zero exit status; ``--debug`` shows the traceback instead. The exit status
follows one rule (:data:`EXIT_CODES`, also in ``reflective --help``): 2 when the command line
itself is wrong (unknown command or option, missing argument, an option value that can never
work), 1 when it is right but cannot be carried out (the files, the data, a model or a missing
extra), 130 when interrupted.

Needs the ``cli`` extra (typer, rich, matplotlib, pandas); importing the package never imports
this module.
"""

from __future__ import annotations

import enum
import functools
import json
import logging
import os
import shutil
import sqlite3
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

from langchain_core.embeddings import Embeddings

from langchain_reflective.errors import ReflectiveError

try:
    import typer
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    _MISSING: ImportError | None = None
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess test
    _MISSING = _exc

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
    from langchain_reflective.records import MemoryRecord
    from langchain_reflective.stream import MemoryStream, ScoredMemory

__all__ = ["app", "main", "run"]

INSTALL_HINT = 'pip install "langchain-reflective[cli]"'
DEFAULT_DB = Path("reflective-demo.db")
EXPORT_FORMAT = "langchain-reflective/jsonl"
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
    return Console(width=width, highlight=False)


def _one_line(message: object) -> str:
    text = " ".join(str(message).split())
    return text or "unknown error"


def _fail(message: str, code: int = 1) -> NoReturn:
    raise CLIError(message, code)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _stamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _seconds(value: float) -> str:
    return f"{value:.1f} s"


# -- opening memory files ------------------------------------------------------------------------


class _NoEmbeddings(Embeddings):
    """Stands in for the real model when a command only reads stored vectors."""

    def __init__(self, identity: str) -> None:
        self.model_name = identity

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise CLIError("this command needs the embedding model, but none was loaded")

    def embed_query(self, text: str) -> list[float]:
        raise CLIError("this command needs the embedding model, but none was loaded")


def _check_memory_path(path: Path) -> None:
    """Refuse paths that cannot be an existing memory file, before SQLite touches them."""
    if not path.exists():
        _fail(f"no such memory file: {path}")
    if path.is_dir():
        _fail(f"{path} is a directory, not a memory file")
    if path.stat().st_size == 0:
        _fail(f"{path} is empty: it is not a langchain-reflective memory file")


def _open_store(path: Path) -> SQLiteRecordStore:
    from langchain_reflective.backends.sqlite.store import SQLiteRecordStore

    return SQLiteRecordStore(path)


def _open_readonly_stream(path: Path) -> MemoryStream:
    """Open an existing memory file without loading any embedding model."""
    from langchain_reflective.stream import MemoryStream

    _check_memory_path(path)
    store = _open_store(path)
    identity = store.embedding_model or "unknown"
    return MemoryStream(_NoEmbeddings(identity), store=store, embedding_model=identity)


def _pick_namespace(stream: MemoryStream, namespace: str | None) -> str:
    names = stream.namespaces()
    if namespace is not None:
        if names and namespace not in names:
            _fail(f"namespace {namespace!r} not found; the file holds: {', '.join(names)}")
        return namespace
    if not names or stream.namespace in names:
        return stream.namespace
    if len(names) == 1:
        return names[0]
    _fail(f"the file holds several namespaces ({', '.join(names)}); choose one with --namespace")


# -- demo ------------------------------------------------------------------------------------------


def _load_embeddings(prefer: Prefer) -> Embeddings:
    from langchain_reflective.local import default_embeddings

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return default_embeddings(prefer=prefer.value)


def _prepare_demo_file(db: Path, fresh: bool) -> None:
    """Delete the previous demo file when asked, never a file that is not a memory file."""
    if not db.exists():
        return
    if db.is_dir():
        _fail(f"{db} is a directory; choose a file path with --db")
    if db.stat().st_size > 0:
        store = _open_store(db)  # raises ForeignFileError for anything but a memory file
        try:
            held = sum(store.count(ns) for ns in store.namespaces())
        finally:
            store.close()
        if held and not fresh:
            _fail(
                f"{db} already holds {held} memories; pass --fresh to start over "
                "or --db to use another file"
            )
    if fresh:
        for extra in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            extra.unlink(missing_ok=True)
        cache = db.with_name(db.name + ".index")
        if cache.is_dir() and all(p.suffix in {".faiss", ".tmp", ".json"} for p in cache.iterdir()):
            shutil.rmtree(cache)


def _score_table(title: str, hits: Sequence[ScoredMemory], evidence: Sequence[str]) -> Table:
    table = Table(title=title, title_justify="left", expand=True, show_lines=False)
    table.add_column("#", justify="right", no_wrap=True)
    for name in ("score", "relevance", "lexical", "recency", "importance"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("turn", no_wrap=True)
    table.add_column("text", ratio=1, overflow="fold")
    wanted = set(evidence)
    for rank, hit in enumerate(hits, 1):
        dia_id = str(hit.record.metadata.get("dia_id", "")) if hit.record.metadata else ""
        mark = " [green]✓[/]" if dia_id and dia_id in wanted else ""
        table.add_row(
            str(rank),
            f"{hit.score:.3f}",
            f"{hit.relevance:.3f}",
            f"{hit.lexical:.3f}",
            f"{hit.recency:.3f}",
            f"{hit.importance:.2f}",
            escape(dia_id or hit.record.kind) + mark,
            escape(_short(hit.record.text, 200)),
        )
    return table


_SKIP_EXPLANATIONS = {
    "no_questions": "the model's answer to the question step held no usable question",
    "no_insights": (
        "the model wrote no insight that cites valid evidence (or no memory was relevant "
        "enough to the questions to serve as evidence)"
    ),
    "no_memories": "there are no memories to reflect on",
    "below_threshold": "the importance since the last reflection is below the threshold",
}


def _print_reflection(stream: MemoryStream, out: dict[str, Any]) -> None:
    console = _console()
    questions = list(out.get("questions") or [])
    if questions:
        console.print("Questions the model asked itself:")
        for q in questions:
            console.print(f"  • {escape(_short(str(q), 200))}")
    reflections: list[MemoryRecord] = list(out.get("reflections") or [])
    if not reflections:
        reason = str(out.get("skipped") or "no_insights")
        console.print(
            Panel(
                f"No insight was stored ({reason}): {_SKIP_EXPLANATIONS.get(reason, reason)}.\n"
                "This is expected from the tiny local base model, which proves the pipeline "
                "(questions, evidence retrieval, cited insights, storage) but writes poor text. "
                "With a real model (OPENAI_API_KEY or OPENAI_BASE_URL) insights appear here.",
                title="Insights",
                title_align="left",
                border_style="yellow",
            )
        )
        return
    console.print(f"[bold]Insights[/] ({len(reflections)} stored as 'reflection' memories):")
    for i, record in enumerate(reflections, 1):
        console.print(
            f"\n[bold]{i}. {escape(record.text)}[/]  "
            f"[dim](importance {record.importance:.2f}, depth {record.depth})[/]"
        )
        cited = stream.get(list(record.evidence))
        if not cited:
            console.print("   [dim]cites no stored memory[/]")
        for ev in cited:
            dia_id = ev.metadata.get("dia_id") if ev.metadata else None
            label = f"{dia_id}" if dia_id else ev.kind
            console.print(f"   [dim]evidence {escape(str(label))}:[/] {escape(_short(ev.text))}")


def _ingest(
    stream: MemoryStream,
    turns: Sequence[Any],
    batch_size: int,
) -> dict[str, int]:
    """Add the turns session by session, ``batch_size`` per call, with a progress bar."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    sources: dict[str, int] = {}
    batches: list[list[Any]] = []
    for session in sorted({t.session for t in turns}):
        in_session = [t for t in turns if t.session == session]
        batches += [in_session[i : i + batch_size] for i in range(0, len(in_session), batch_size)]
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=_console(), transient=False) as progress:
        task = progress.add_task("Ingesting turns", total=len(turns))
        for batch in batches:
            progress.update(task, description=f"Ingesting session {batch[0].session}")
            records = stream.add(
                [t.text for t in batch],
                metadatas=[t.metadata for t in batch],
                now=batch[0].created_at,
            )
            for record in records:
                sources[record.importance_source] = sources.get(record.importance_source, 0) + 1
            progress.advance(task, len(batch))
        progress.update(task, description="Ingested")
    return sources


def _reflect(
    model: BaseChatModel, stream: MemoryStream, now: datetime, evidence_k: int
) -> dict[str, Any]:
    from langchain_reflective.importance import RetryConfig
    from langchain_reflective.reflection import ReflectionConfig, create_reflection_graph

    config = ReflectionConfig(
        evidence_k=evidence_k,
        min_relevance=0.3,
        max_insights=3,
        recent_window=30,
        max_chars=400,
        retry=RetryConfig(attempts=2, initial_wait=0.5, jitter=0.0),
    )
    graph = create_reflection_graph(model, stream, config=config)
    console = _console()
    out: dict[str, Any] = {}
    started = time.perf_counter()
    done = {"insights": 0}
    with console.status("Reflecting: asking high-level questions…") as status:
        for update in graph.stream({"force": True, "now": now}, stream_mode="updates"):
            for node, values in update.items():
                if isinstance(values, dict):
                    out.update({k: v for k, v in values.items() if k != "branches"})
                if node == "insights":
                    done["insights"] += 1
                    step = f"insights {done['insights']}/{len(out.get('questions') or [])}"
                else:
                    step = node
                console.print(
                    f"  [dim]reflection.{escape(step)} done after "
                    f"{_seconds(time.perf_counter() - started)}[/]"
                )
                if node == "questions":
                    status.update("Reflecting: retrieving evidence and writing insights…")
                elif node == "condense":
                    status.update("Reflecting: storing the insights…")
    return out


def demo(
    conversation: Annotated[
        Path | None,
        typer.Option(
            "--conversation",
            "-c",
            help="Conversation to ingest (LoCoMo JSON). Default: the sample shipped with "
            "the package.",
            show_default=False,
        ),
    ] = None,
    db: Annotated[Path, typer.Option("--db", help="Memory file to create (SQLite).")] = DEFAULT_DB,
    fresh: Annotated[
        bool,
        typer.Option("--fresh", help="Delete an existing memory file at --db first."),
    ] = False,
    k: Annotated[
        int, typer.Option("--k", min=1, max=50, help="Memories retrieved per question.")
    ] = 5,
    reflect: Annotated[
        bool,
        typer.Option("--reflect/--no-reflect", help="Run one reflection at the end."),
    ] = True,
    prefer: Annotated[
        Prefer,
        typer.Option(
            "--prefer",
            help="auto: an OpenAI-compatible API when OPENAI_API_KEY or OPENAI_BASE_URL is "
            "set, the embedded local models otherwise.",
            case_sensitive=False,
        ),
    ] = Prefer.auto,
    questions: Annotated[
        int, typer.Option("--questions", min=0, max=20, help="How many questions to ask.")
    ] = 5,
    batch_size: Annotated[
        int,
        typer.Option("--batch-size", min=1, max=100, help="Turns per importance-rating call."),
    ] = 16,
) -> None:
    """Ingest a conversation, answer questions by retrieval, reflect, and show the insights.

    Runs offline with the embedded local models (a tiny base chat model: it proves the wiring,
    not quality) unless OPENAI_API_KEY or OPENAI_BASE_URL is set.
    """
    from langchain_reflective.conversation import (
        load_conversation,
        load_questions,
        sample_conversation_path,
    )
    from langchain_reflective.importance import ImportanceConfig, LLMImportanceScorer
    from langchain_reflective.local import default_chat_model, model_choice
    from langchain_reflective.stream import MemoryStream

    console = _console()
    started = time.perf_counter()
    timings: list[tuple[str, float]] = []
    source = conversation or sample_conversation_path()
    turns = load_conversation(source)
    asked = load_questions(source, limit=questions) if questions else []
    as_of = max(t.created_at for t in turns) + timedelta(days=1)
    _prepare_demo_file(db, fresh)

    choice = model_choice(prefer=prefer.value)
    body = escape(choice.description)
    if choice.provider == "local":
        body += (
            "\n\n[bold yellow]Note:[/] the local chat model is a tiny 270M [bold]base[/] model. "
            "It rates importance and writes reflections through the real pipeline (HTTP, JSON "
            "schema, parsing), but its judgement is poor: expect odd ratings and weak insights."
        )
    console.print(Panel(body, title="Models", title_align="left", border_style="cyan"))
    speakers = sorted({t.speaker for t in turns})
    console.print(
        f"Conversation: [bold]{escape(str(source))}[/] - {len(turns)} turns in "
        f"{len({t.session for t in turns})} sessions between {escape(' and '.join(speakers))} "
        f"({_stamp(turns[0].created_at)} to {_stamp(turns[-1].created_at)})."
    )

    mark = time.perf_counter()
    with console.status("Loading the embedding model…"):
        embeddings = _load_embeddings(prefer)
    timings.append(("load embeddings", time.perf_counter() - mark))
    mark = time.perf_counter()
    with ExitStack() as resources:
        with console.status("Starting the chat model…"):
            model = resources.enter_context(
                default_chat_model(
                    prefer=prefer.value, max_tokens=_DEMO_MAX_TOKENS[choice.provider]
                )
            )
        timings.append(("start chat model", time.perf_counter() - mark))
        scorer = LLMImportanceScorer(model, config=ImportanceConfig(batch_size=batch_size))
        with MemoryStream(embeddings, path=db, importance_scorer=scorer) as stream:
            console.print(f"Memory file: [bold]{escape(str(db))}[/]")
            mark = time.perf_counter()
            sources = _ingest(stream, turns, batch_size)
            timings.append(("ingest + rate importance", time.perf_counter() - mark))
            by_llm, by_rule = sources.get("llm", 0), sources.get("heuristic", 0)
            console.print(
                f"Stored {len(turns)} memories. Importance rated by the LLM: {by_llm}; by the "
                f"heuristic fallback (model answer unusable): {by_rule}."
            )

            mark = time.perf_counter()
            if asked:
                console.rule(f"Retrieval (as of {_stamp(as_of)}, k={k})")
            for i, q in enumerate(asked, 1):
                hits = stream.retrieve(q.question, k=k, now=as_of)
                console.print()
                console.print(_score_table(f"Q{i}. {escape(q.question)}", hits, q.evidence))
                if q.answer:
                    found = {
                        str(h.record.metadata.get("dia_id")) for h in hits if h.record.metadata
                    }
                    got = len(set(q.evidence) & found)
                    console.print(
                        f"   [dim]reference answer: {escape(q.answer)} - evidence turns "
                        f"{', '.join(q.evidence) or 'none'} ({got} of {len(set(q.evidence))} "
                        f"in the top {k}, marked ✓)[/]"
                    )
            if asked:
                timings.append(("retrieval", time.perf_counter() - mark))

            if reflect:
                console.rule("Reflection")
                mark = time.perf_counter()
                try:
                    out = _reflect(model, stream, as_of, evidence_k=min(max(k, 3), 8))
                except ReflectiveError as exc:
                    console.print(
                        f"[yellow]The reflection failed and wrote nothing:[/] "
                        f"{escape(_one_line(exc))}"
                    )
                else:
                    _print_reflection(stream, out)
                timings.append(("reflection", time.perf_counter() - mark))
            total = stream.count()

    timings.append(("total", time.perf_counter() - started))
    console.rule("Summary")
    console.print(
        f"{escape(str(db))} holds {total} memories ({len(turns)} observations, "
        f"{total - len(turns)} reflection{'' if total - len(turns) == 1 else 's'})."
    )
    table = Table("step", "time", title="Elapsed", title_justify="left")
    for step, seconds in timings:
        table.add_row(step, _seconds(seconds))
    console.print(table)
    console.print(
        f"Next: [bold]reflective inspect {escape(str(db))} --plot memories.png[/], "
        f"[bold]reflective export {escape(str(db))} memories.jsonl[/]"
    )


# -- inspect ---------------------------------------------------------------------------------------


def _parse_as_of(value: str | None, records: Sequence[MemoryRecord]) -> datetime:
    if value == "now":
        return datetime.now(UTC)
    if value is None or value == "latest":
        if not records:
            return datetime.now(UTC)
        return max(max(r.created_at, r.accessed_at) for r in records)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        _fail(f"--as-of must be 'now', 'latest' or an ISO date/time, got {value!r}", code=2)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _overview(stream: MemoryStream, path: Path) -> None:
    console = _console()
    store = stream.store
    names = stream.namespaces()
    info = Table.grid(padding=(0, 2))
    info.add_column(style="bold")
    info.add_column()
    info.add_row("file", escape(str(path)))
    info.add_row("size", f"{path.stat().st_size:,} bytes")
    info.add_row("embedding model", escape(str(store.embedding_model or "(none yet)")))
    info.add_row("dimension", str(store.dimension or "-"))
    info.add_row("namespaces", escape(", ".join(names)) if names else "(none)")
    console.print(Panel(info, title="Memory file", title_align="left", border_style="cyan"))

    if not names:
        console.print("The file holds no memories yet.")
        return
    per_ns = Table(title="Memories per namespace", title_justify="left")
    for column in ("namespace", "total", "by kind", "importance by", "since last reflection"):
        per_ns.add_column(column)
    per_ns.add_column("last reflection")
    for ns in names:
        records = stream.recent(None, namespace=ns)
        kinds: dict[str, int] = {}
        sources: dict[str, int] = {}
        for r in records:
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
            sources[r.importance_source] = sources.get(r.importance_source, 0) + 1
        state = stream.reflection_state(ns)
        reflections = [r.created_at for r in records if r.kind == "reflection"]
        if reflections:
            last = _stamp(max(reflections))
        elif state.last_reflection_at is not None:
            # the counter was reset by a reflection that stored no insight
            last = f"none stored (last run {_stamp(state.last_reflection_at)})"
        else:
            last = "never"
        per_ns.add_row(
            escape(ns),
            str(len(records)),
            ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
            ", ".join(f"{k} {n}" for k, n in sorted(sources.items())),
            f"{state.adds_since} adds, importance {state.importance_sum:.2f}",
            last,
        )
    console.print(per_ns)


def _memory_table(records: Sequence[MemoryRecord], ns: str, limit: int, now: datetime) -> Table:
    from langchain_reflective.scoring import ScoringConfig

    decay = ScoringConfig().decay
    shown = list(records)[-limit:][::-1]
    table = Table(
        title=f"Newest {len(shown)} of {len(records)} memories (namespace {escape(ns)!s})",
        title_justify="left",
        expand=True,
    )
    for column in ("created", "kind", "importance", "recency", "depth", "cites"):
        table.add_column(column, no_wrap=True, justify="right" if column != "kind" else "left")
    table.add_column("text", ratio=1, overflow="fold")
    for r in shown:
        hours = max((now - r.accessed_at).total_seconds() / 3600.0, 0.0)
        table.add_row(
            _stamp(r.created_at),
            escape(r.kind),
            f"{r.importance:.2f} {r.importance_source[:1]}",
            f"{decay**hours:.3f}",
            str(r.depth),
            str(len(r.evidence)) if r.evidence else "",
            escape(_short(r.text, 240)),
        )
    table.caption = "importance source: l = LLM, h = heuristic, g = given"
    return table


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
    if not path.parent.is_dir():
        _fail(f"cannot write --plot {path}: the directory {path.parent} does not exist")
    return path


def _plot(stream: MemoryStream, ns: str, out: Path, *, query: str | None, now: datetime) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _fail(f"--plot needs matplotlib: {INSTALL_HINT}")
    frame = stream.to_dataframe(query, namespace=ns, now=now)
    fig, (timeline, components) = plt.subplots(
        2, 1, figsize=(11, 8.5), gridspec_kw={"height_ratios": [3, 2]}
    )
    # (1) timeline: memories and reflections, reflections linked to their evidence
    records = stream.recent(None, namespace=ns)
    # Memories of one session share a timestamp: spread them a little so each point shows.
    span = (max(r.created_at for r in records) - min(r.created_at for r in records)) or timedelta(
        hours=1
    )
    same: dict[datetime, int] = {}
    for r in records:
        same[r.created_at] = same.get(r.created_at, 0) + 1
    seen: dict[datetime, int] = {}
    where: dict[str, tuple[datetime, float]] = {}
    for r in records:
        i, n = seen.get(r.created_at, 0), same[r.created_at]
        seen[r.created_at] = i + 1
        where[r.id] = (r.created_at + span * (0.012 * (i - (n - 1) / 2) / max(n, 1)), r.importance)
    for r in records:
        for ev in r.evidence:
            if ev in where:
                (x0, y0), (x1, y1) = where[ev], where[r.id]
                timeline.plot([x0, x1], [y0, y1], color="0.6", lw=0.6, zorder=1)
    markers = {"observation": "o", "reflection": "*", "plan": "s"}
    for kind in sorted({r.kind for r in records}):
        group = [r for r in records if r.kind == kind]
        timeline.scatter(
            [where[r.id][0] for r in group],
            [r.importance for r in group],
            label=f"{kind} ({len(group)})",
            marker=markers.get(kind, "D"),
            s=110 if kind == "reflection" else 28,
            alpha=0.75,
            zorder=2,
        )
    timeline.set_ylim(0, 1.05)
    timeline.set_ylabel("importance")
    timeline.set_title(f"Memories over time (namespace {ns}; lines: reflection → evidence)")
    timeline.legend(loc="upper left", fontsize="small")
    timeline.grid(alpha=0.3)
    timeline.tick_params(axis="x", labelrotation=20)
    # (2) score components
    if query is not None:
        top = frame.head(15)
        labels = [f"{i + 1}" for i in range(len(top))]
        width = 0.2
        for j, column in enumerate(("relevance", "lexical", "recency", "importance")):
            components.bar(
                [i + (j - 1.5) * width for i in range(len(top))],
                top[column].fillna(0.0),
                width,
                label=column,
            )
        components.plot(range(len(top)), top["score"] / 3.0, "k.-", label="score / 3")
        components.set_xticks(range(len(top)), labels)
        components.set_xlabel("rank")
        components.set_title(f"Score components of the top {len(top)} for: {query[:80]}")
        components.legend(fontsize="small", ncols=5)
    else:
        bins = [i / 20 for i in range(21)]
        components.hist(frame["importance"], bins=bins, alpha=0.6, label="importance")
        components.hist(frame["recency"], bins=bins, alpha=0.6, label="recency")
        components.set_xlabel("value")
        components.set_ylabel("memories")
        components.set_title(f"Importance and recency (as of {_stamp(now)}); add --query for all")
        components.legend(fontsize="small")
    components.grid(alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110, format=out.suffix.lower().lstrip("."))
    except OSError as exc:
        _fail(f"cannot write --plot {out}: {exc.strerror or exc}")
    finally:
        plt.close(fig)


def inspect(
    file: Annotated[Path, typer.Argument(help="The memory file (SQLite).", show_default=False)],
    limit: Annotated[
        int,
        typer.Option("--limit", "-n", min=0, help="Newest memories to list (0: none)."),
    ] = 15,
    top: Annotated[
        int,
        typer.Option("--top", "-k", min=1, help="Memories ranked for --query."),
    ] = 10,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="Namespace to list (default: 'default' or the only one)."),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Write a plot (.png, .pdf or .svg; no suffix: .png) of the timeline of "
            "memories and reflections and of the score components. The directory must exist.",
            show_default=False,
        ),
    ] = None,
    query: Annotated[
        str | None,
        typer.Option(
            "--query",
            "-q",
            help="Rank memories for this query and show every score component (loads the "
            "embedding model the file was written with).",
        ),
    ] = None,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            help="Clock for recency: 'latest' (default: the newest creation or access in the "
            "file), 'now', or an ISO date/time.",
        ),
    ] = None,
    prefer: Annotated[
        Prefer,
        typer.Option("--prefer", help="Embedding provider for --query.", case_sensitive=False),
    ] = Prefer.auto,
) -> None:
    """Show what a memory file holds: models, counts, reflection state, newest memories."""
    console = _console()
    if query is not None and not query.strip():
        _fail("--query must not be empty", code=2)
    _check_memory_path(file)
    if plot is not None:
        plot = _plot_target(plot)
    stream = _open_readonly_stream(file)
    with stream:
        _overview(stream, file)
        if not stream.namespaces():
            if plot is not None:
                _fail(f"{file} holds no memories; there is nothing to plot")
            return
        ns = _pick_namespace(stream, namespace)
        records = stream.recent(None, namespace=ns)
        now = _parse_as_of(as_of, records)
        if limit:
            console.print(_memory_table(records, ns, limit, now))
    if query is not None:
        from langchain_reflective.stream import MemoryStream

        embeddings = _load_embeddings(prefer)
        stream = MemoryStream(embeddings, path=file)
    else:
        stream = _open_readonly_stream(file)
    with stream:
        if query is not None:
            hits = stream.retrieve(query, k=top, namespace=ns, now=now, touch=False)
            console.print(_score_table(f"Ranked for: {escape(query)}", hits, ()))
        if plot is not None:
            _plot(stream, ns, plot, query=query, now=now)
            console.print(f"Wrote {escape(str(plot))} ({plot.stat().st_size:,} bytes).")


# -- export / import -------------------------------------------------------------------------------


def export(
    file: Annotated[Path, typer.Argument(help="The memory file (SQLite).", show_default=False)],
    out: Annotated[Path, typer.Argument(help="The JSON-lines file to write.", show_default=False)],
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace", help="Namespace to export (default: 'default' or the only one)."
        ),
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", help="Export every namespace.")
    ] = False,
    vectors: Annotated[
        bool,
        typer.Option(
            "--vectors/--no-vectors",
            help="Include the embeddings (import then needs no embedding model).",
        ),
    ] = True,
) -> None:
    """Write a memory file's memories as JSON lines (a header line, then one memory per line)."""
    _check_memory_path(file)
    if out.exists() and out.resolve() == file.resolve():
        _fail("the output file is the memory file itself; choose another output path", code=2)
    if out.is_dir():
        _fail(f"{out} is a directory; give a file path for the export")
    if not out.parent.is_dir():
        _fail(f"cannot write {out}: the directory {out.parent} does not exist")
    if out.is_file() and out.stat().st_size:
        with out.open("rb") as fh:
            if fh.read(16).startswith(b"SQLite format 3"):
                _fail(f"{out} is an SQLite database; refusing to overwrite it with an export")
    with _open_readonly_stream(file) as stream:
        selected: Literal["all"] | list[str]
        if all_namespaces:
            if namespace is not None:
                _fail("use either --namespace or --all-namespaces, not both", code=2)
            selected = "all"
            label = "all namespaces"
        else:
            ns = _pick_namespace(stream, namespace)
            selected = [ns]
            label = f"namespace {ns!r}"
        try:
            written = stream.export_jsonl(out, namespaces=selected, include_vectors=vectors)
        except OSError as exc:  # the message names the file the user gave, not our temp file
            _fail(f"cannot write {out}: {exc.strerror or type(exc).__name__}")
    _console().print(f"Exported {written} memories ({escape(label)}) to {escape(str(out))}.")


def _read_export_header(path: Path) -> tuple[dict[str, Any], bool]:
    """The export's header, and whether every record carries a vector of the right size."""
    if not path.exists():
        _fail(f"no such export file: {path}")
    if path.is_dir():
        _fail(f"{path} is a directory, not an export file")
    not_export = (
        f"{path} is not a langchain-reflective export (JSON lines from 'reflective export')"
    )
    try:
        with path.open(encoding="utf-8") as fh:
            try:
                header = json.loads(fh.readline() or "null")
            except json.JSONDecodeError:
                _fail(not_export)
            if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
                _fail(not_export)
            dim = header.get("dimension")
            usable = bool(header.get("embedding_model")) and isinstance(dim, int)
            for line in fh:
                if not usable:
                    break
                if line.strip():
                    try:
                        vector = json.loads(line).get("vector")
                    except (json.JSONDecodeError, AttributeError):
                        break  # the import reports the bad line with its number
                    usable = isinstance(vector, list) and len(vector) == dim
    except UnicodeDecodeError:
        _fail(not_export)
    return header, usable


def _remove_memory_file(path: Path) -> None:
    """Delete a memory file this command created, with its WAL, shared memory and caches."""
    for extra in ("", "-wal", "-shm", "-journal"):
        path.with_name(path.name + extra).unlink(missing_ok=True)
    shutil.rmtree(path.with_name(path.name + ".index"), ignore_errors=True)


def import_(
    source: Annotated[
        Path, typer.Argument(help="JSON lines written by 'reflective export'.", show_default=False)
    ],
    file: Annotated[
        Path,
        typer.Argument(help="The memory file to create or append to.", show_default=False),
    ],
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="Put every memory into this namespace."),
    ] = None,
    prefer: Annotated[
        Prefer,
        typer.Option(
            "--prefer",
            help="Embedding provider, only used when the export's vectors cannot be reused.",
            case_sensitive=False,
        ),
    ] = Prefer.auto,
) -> None:
    """Import an export into a memory file (created if missing; existing ids are skipped).

    The export's vectors are reused when present and from the file's embedding model;
    otherwise the texts are embedded again with the default embedding model.
    """
    from langchain_reflective.stream import MemoryStream

    header, usable = _read_export_header(source)
    created = not file.exists()
    if not created:
        # the same rule as inspect and export: an existing memory file is a non-empty one
        _check_memory_path(file)
        store = _open_store(file)  # refuses foreign files before anything is loaded
        target_model = store.embedding_model
        store.close()
    else:
        if not file.parent.is_dir():
            _fail(f"cannot create {file}: the directory {file.parent} does not exist")
        target_model = None
    exported_model = header.get("embedding_model")
    reuse = usable and (target_model is None or target_model == exported_model)
    embeddings: Embeddings
    if reuse:
        identity = str(exported_model)
        embeddings = _NoEmbeddings(identity)
        how = "reusing the exported vectors"
    else:
        with _console().status("Loading the embedding model…"):
            embeddings = _load_embeddings(prefer)
        identity = None
        how = "embedding the texts again"
    try:
        with MemoryStream(embeddings, path=file, embedding_model=identity) as stream:
            before = sum(stream.count(namespace=ns) for ns in stream.namespaces())
            imported = stream.import_jsonl(source, namespace=namespace)
    except BaseException:
        if created:  # a failed import into a new file leaves nothing behind
            _remove_memory_file(file)
        raise
    skipped = f"; {before} were already there" if before else ""
    _console().print(
        f"Imported {imported} memories into {escape(str(file))} ({how}{escape(skipped)})."
    )


# -- the app -------------------------------------------------------------------------------------


def _print_version(value: bool) -> None:
    if value:
        from langchain_reflective import __version__

        _console().print(f"langchain-reflective {__version__}")
        raise typer.Exit(0)


def _root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks and debug logs on errors.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and exit.",
            is_eager=True,
            callback=lambda value: _print_version(value),
        ),
    ] = False,
) -> None:
    """Long-term memory that reflects, for LangChain and LangGraph agents.

    Try 'reflective demo' (offline, a few minutes on a laptop CPU).
    """
    _STATE["debug"] = debug
    if debug:
        logging.getLogger("langchain_reflective").setLevel(logging.DEBUG)


def _build_app() -> typer.Typer:
    application = typer.Typer(
        name="reflective",
        help=_root.__doc__,
        epilog=EXIT_CODES,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="rich",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    application.callback()(_root)
    application.command("demo")(demo)
    application.command("inspect")(inspect)
    application.command("export")(export)
    application.command("import")(import_)
    return application


if _MISSING is None:
    app = _build_app()


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """Route warnings of libraries to nothing: the CLI prints what matters itself."""
    root, ours = logging.getLogger(), logging.getLogger("langchain_reflective")
    handler, previous = logging.NullHandler(), ours.level
    root.addHandler(handler)  # no "last resort" printing of library warnings to stderr
    if not _STATE["debug"]:
        ours.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeHandler(handler)
        ours.setLevel(previous)


def _parser_errors() -> tuple[type[Exception], ...]:
    """Command-line parsing errors: typer's own (typer >= 0.23 vendors click) and click's."""
    errors: list[type[Exception]] = [typer.exceptions.TyperException]
    try:
        import click

        errors.append(click.ClickException)
    except ImportError:  # pragma: no cover - typer without click
        pass
    return tuple(errors)


def _abort_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [typer.Abort, KeyboardInterrupt]
    try:
        import click

        errors.append(click.Abort)
    except ImportError:  # pragma: no cover - typer without click
        pass
    return tuple(errors)


def _parser_error(exc: Exception) -> int:
    """Print a parsing error as one line (or the help when no command was given)."""
    ctx = getattr(exc, "ctx", None)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "NoArgsIsHelpError" in names and ctx is not None:
        print(ctx.get_help())
        return 2
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    if "UsageError" in names:
        where = getattr(ctx, "command_path", None) or "reflective"
        message = f"{message} (see '{where} --help')"
    _error(message)
    code = getattr(exc, "exit_code", 2)
    return code if isinstance(code, int) and code else 2


def _error(message: str) -> None:
    print(f"error: {_one_line(message)}", file=sys.stderr, flush=True)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Errors a user can fix are printed as one line on stderr; ``--debug`` adds the traceback.
    """
    if _MISSING is not None:
        _error(f"the reflective command needs the cli extra ({_MISSING.name}): {INSTALL_HINT}")
        return 1
    args = list(sys.argv[1:] if argv is None else argv) or ["--help"]
    _STATE["debug"] = "--debug" in args
    command = typer.main.get_command(app)
    try:
        with _quiet_logs():
            result = command.main(args=args, prog_name="reflective", standalone_mode=False)
    except _parser_errors() as exc:
        return _parser_error(exc)
    except _abort_errors():
        _error("interrupted")
        return 130
    except CLIError as exc:
        if _STATE["debug"]:
            traceback.print_exc()
        _error(str(exc))
        return exc.code
    except sqlite3.Error as exc:
        if _STATE["debug"]:
            traceback.print_exc()
        _error(f"the memory file could not be read or written (corrupt or truncated?): {exc}")
        return 1
    except (ReflectiveError, ImportError, OSError) as exc:
        if _STATE["debug"]:
            traceback.print_exc()
        _error(str(exc) or type(exc).__name__)
        return 1
    except Exception as exc:
        if _STATE["debug"]:
            traceback.print_exc()
        if type(exc).__module__.split(".")[0] in {"openai", "httpx", "httpcore"}:
            _error(f"the model API call failed ({type(exc).__name__}): {exc}")
        else:
            _error(
                f"unexpected {type(exc).__name__}: {exc} (run with --debug for the traceback, "
                "and please report it)"
            )
        return 1
    return result if isinstance(result, int) else 0


def main() -> NoReturn:
    """Entry point of the ``reflective`` console script."""
    sys.exit(run())
