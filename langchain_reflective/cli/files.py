"""``reflective inspect``, ``export`` and ``import``: look into and move memory files."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from langchain_core.embeddings import Embeddings
from rich.panel import Panel
from rich.table import Table

from langchain_reflective.cli._common import (
    MemoryPlace,
    Prefer,
    _check_folder,
    _check_memory_path,
    _console,
    _fail,
    _load_embeddings,
    _memory_place,
    _NoEmbeddings,
    _open_store,
    _open_stream,
    _pick_namespace,
    _plot_target,
    _plotting,
    _postgres_backend,
    _safe,
    _short,
    _shown,
    _stamp,
)
from langchain_reflective.cli.scores import _score_table
from langchain_reflective.errors import ExportError, InvalidMemoryError

if TYPE_CHECKING:
    from langchain_reflective.backends.postgres.vector_index import IndexState
    from langchain_reflective.records import MemoryRecord
    from langchain_reflective.stream import MemoryStream

MEMORY_HELP = "The memory file (SQLite), or a Postgres URL (postgresql://...)."


def _check_namespace_option(namespace: str | None) -> None:
    """``--namespace ''`` names no namespace (a namespace is never empty): a usage error, not
    the default namespace in silence."""
    if namespace == "":
        _fail("--namespace must not be empty", code=2)


# -- inspect ---------------------------------------------------------------------------------------


def _parse_as_of(value: str | None) -> datetime | None:
    """``--as-of`` as a time; ``None`` for 'latest' (see :func:`_latest`)."""
    if value is None or value == "latest":
        return None
    if value == "now":
        return datetime.now(UTC)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        _fail(f"--as-of must be 'now', 'latest' or an ISO date/time, got {value!r}", code=2)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _latest(records: Sequence[MemoryRecord]) -> datetime:
    """``--as-of latest``: the newest creation or access among ``records`` (now if none)."""
    if not records:
        return datetime.now(UTC)
    return max(max(r.created_at, r.accessed_at) for r in records)


def _index_text(state: IndexState) -> str:
    """A Postgres backend's vector index in words."""
    if state.name is None:
        return f"{state.kind}, none built yet (exact scans)"
    if state.kind == "hnsw":
        return "hnsw"
    return f"ivfflat, {state.lists:,} lists trained on {state.rows:,} rows"


def _overview(stream: MemoryStream, place: MemoryPlace) -> None:
    console = _console()
    backend = stream.backend
    names = stream.namespaces()
    info = Table.grid(padding=(0, 2))
    info.add_column(style="bold")
    info.add_column()
    if isinstance(place, Path):
        info.add_row("file", _safe(place))
        info.add_row("size", f"{place.stat().st_size:,} bytes")
    else:
        from langchain_reflective.backends.postgres import PostgresBackend

        info.add_row("database", _safe(_shown(place)))
        if isinstance(backend, PostgresBackend):
            info.add_row("schema version", str(backend.schema_version()))
            info.add_row("vector index", _index_text(backend.index_state()))
    info.add_row("embedding model", _safe(backend.embedding_model or "(none yet)"))
    info.add_row("dimension", str(backend.dimension or "-"))
    info.add_row("namespaces", _safe(", ".join(names)) if names else "(none)")
    title = "Memory file" if isinstance(place, Path) else "Memory database (Postgres)"
    console.print(Panel(info, title=title, title_align="left", border_style="cyan"))

    if not names:
        console.print("It holds no memories yet.")
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
            _safe(ns),
            str(len(records)),
            _safe(", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))),
            _safe(", ".join(f"{k} {n}" for k, n in sorted(sources.items()))),
            f"{state.adds_since} adds, importance {state.importance_sum:.2f}",
            last,
        )
    console.print(per_ns)


def _memory_table(records: Sequence[MemoryRecord], ns: str, limit: int, now: datetime) -> Table:
    from langchain_reflective.scoring import ScoringConfig

    decay = ScoringConfig().decay
    shown = list(records)[-limit:][::-1]
    table = Table(
        title=f"Newest {len(shown)} of {len(records)} memories (namespace {_safe(ns)})",
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
            _safe(r.kind),
            f"{r.importance:.2f} {r.importance_source[:1]}",
            f"{decay**hours:.3f}",
            str(r.depth),
            str(len(r.evidence)) if r.evidence else "",
            _safe(_short(r.text, 240)),
        )
    table.caption = "importance source: l = LLM, h = heuristic, g = given"
    return table


def _draw(stream: MemoryStream, ns: str, out: Path, *, query: str | None, now: datetime) -> None:
    import matplotlib.pyplot as plt

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
    file: Annotated[str, typer.Argument(help=MEMORY_HELP, show_default=False)],
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
    _check_namespace_option(namespace)
    place = _memory_place(file)
    if isinstance(place, Path):
        _check_memory_path(place)
    if plot is not None:
        plot = _plot_target(plot)
    clock = _parse_as_of(as_of)
    stream = _open_stream(place)
    with stream:  # every check before the first line of output: an error prints only itself
        stored = stream.backend.embedding_model
        if not stream.namespaces():
            if plot is not None:
                _fail(f"{_shown(place)} holds no memories; there is nothing to plot")
            _overview(stream, place)
            return
        ns = _pick_namespace(stream, namespace)
        _overview(stream, place)
        records = stream.recent(None, namespace=ns)
        now = clock or _latest(records)
        if limit:
            console.print(_memory_table(records, ns, limit, now))
    if query is not None:
        stream = _open_stream(place, _load_embeddings(prefer, place, stored), reading=True)
    else:
        stream = _open_stream(place)
    with stream:
        if query is not None:
            hits = stream.retrieve(query, k=top, namespace=ns, now=now, touch=False)
            console.print(_score_table(f"Ranked for: {_safe(query)}", hits, ()))
        if plot is not None:
            with _plotting():
                _draw(stream, ns, plot, query=query, now=now)
            console.print(f"Wrote {_safe(plot)} ({plot.stat().st_size:,} bytes).")


# -- export / import -------------------------------------------------------------------------------


def export(
    file: Annotated[str, typer.Argument(help=MEMORY_HELP, show_default=False)],
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
    _check_namespace_option(namespace)
    place = _memory_place(file)
    if isinstance(place, Path):
        _check_memory_path(place)
        if out.exists() and out.resolve() == place.resolve():
            _fail("the output file is the memory file itself; choose another output path", code=2)
    if out.is_dir():
        _fail(f"{out} is a directory; give a file path for the export")
    _check_folder(out, "write")
    if out.is_file() and out.stat().st_size:
        with out.open("rb") as fh:
            if fh.read(16).startswith(b"SQLite format 3"):
                _fail(f"{out} is an SQLite database; refusing to overwrite it with an export")
    with _open_stream(place) as stream:
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
        except ExportError as exc:  # names the file the user gave and says what to do
            _fail(str(exc))
        except OSError as exc:  # the message names the file the user gave, not our temp file
            _fail(f"cannot write {out}: {exc.strerror or type(exc).__name__}")
    _console().print(f"Exported {written} memories ({_safe(label)}) to {_safe(out)}.")


def _read_export(path: Path, namespace: str | None) -> tuple[dict[str, Any], bool, int]:
    """The export's header, whether every record carries a vector of the header's model and
    dimension, and how many records it holds, with every line checked as the import checks
    it (:func:`~langchain_reflective.transfer_import.check_export`).

    This reads the whole file once before the import reads it again, on purpose: the import
    writes in batches as it reads, so a line it refuses halfway (malformed, or another memory
    under an earlier line's id) left the batches before it written; checked first, the command
    fails before anything is written (or the model loaded: the vectors decide which one).
    """
    from langchain_reflective.export_file import open_export, read_header
    from langchain_reflective.transfer_import import check_export

    if not path.exists():
        _fail(f"no such export file: {path}")
    if path.is_dir():
        _fail(f"{path} is a directory, not an export file")
    try:
        with open_export(path) as fh:
            try:
                header = read_header(fh, path)
            except InvalidMemoryError as exc:  # not an export, or one of a newer format
                _fail(str(exc))
            check = check_export(fh, path, header, namespace=namespace)
    except InvalidMemoryError as exc:
        _fail(f"{exc} (nothing was imported)")
    return header, check.vectors, check.records


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
        str,
        typer.Argument(
            help="The memory file to create or append to, or a Postgres URL "
            "(postgresql://...; its tables are created if missing).",
            show_default=False,
        ),
    ],
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            help="Put every memory into this namespace (memories from another namespace get "
            "new ids, so the copy lives beside the original).",
        ),
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
    """Import an export into a memory file (created if missing) or a Postgres database.

    A memory stored already (the same id, text, kind and creation time) is skipped, so a file
    imported again adds only what is new. A different memory stored under one of the export's
    ids is refused, never skipped: import into another namespace (--namespace), or delete the
    stored one first (from Python). Every line of the export is checked before anything is
    written. The export's vectors are reused when present and from the file's embedding model;
    otherwise the texts are embedded again with the default embedding model. The memories are
    written in batches: an import into an existing file or a Postgres database that fails
    halfway keeps the batches before the failure, and the error says how many; run it again,
    fixed, to finish (what is stored already is skipped). A new file is removed.
    """
    _check_namespace_option(namespace)
    place = _memory_place(file)
    header, usable, records = _read_export(source, namespace)
    created = False
    if isinstance(place, str):
        with _postgres_backend(place, setup=True) as backend:  # creates or upgrades the tables
            target_model = backend.embedding_model
    elif place.exists():
        # the same rule as inspect and export: an existing memory file is a non-empty one
        _check_memory_path(place)
        store = _open_store(place)  # refuses foreign files before anything is loaded
        target_model = store.embedding_model
        store.close()
    else:
        _check_folder(place, "create")
        created = True
        target_model = None
    if not records:  # nothing to embed or write: no model loaded, no new file created
        made = f"; {_shown(place)} was not created" if created else ""
        _console().print(f"Imported 0 memories: {_safe(source)} holds none{_safe(made)}.")
        return
    exported_model = header.get("embedding_model")
    reuse = usable and (target_model is None or target_model == exported_model)
    embeddings: Embeddings
    if reuse:
        identity = str(exported_model)
        embeddings = _NoEmbeddings(identity, header["dimension"])
        how = "reusing the exported vectors"
    else:
        with _console().status("Loading the embedding model…"):
            embeddings = _load_embeddings(prefer, place, target_model)
        identity = None
        how = "embedding the texts again"
    from langchain_reflective.transfer_import import IMPORT_BATCH, ImportTally, import_jsonl

    tally = ImportTally()
    try:
        with _open_stream(place, embeddings, identity) as stream:
            imported = import_jsonl(
                stream, source, namespace=namespace, batch_size=IMPORT_BATCH, tally=tally
            )
    except BaseException as exc:
        if created:  # a failed import into a new file leaves nothing behind
            _remove_memory_file(Path(place))
            exc.__notes__ = [  # but the import's note of the batches it wrote: they went too
                *(n for n in getattr(exc, "__notes__", None) or () if n is not tally.note),
                f"nothing was imported: the new file {place} was removed",
            ]
        raise
    there = records - imported - tally.repeated - tally.merged
    skipped = "".join(
        f"; {count} of its {records} {what}"
        for count, what in (
            (there, "were stored already"),
            (tally.repeated, "repeated an earlier line"),
            (tally.merged, "were store items merged into the first of their key"),
        )
        if count
    )
    where = _safe(_shown(place))
    _console().print(f"Imported {imported} memories into {where} ({how}{_safe(skipped)}).")
