"""``reflective demo``: ingest a conversation, answer questions by retrieval, reflect, show it."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.panel import Panel
from rich.table import Table

from langchain_reflective.cli._common import (
    _DEMO_MAX_TOKENS,
    DEFAULT_DB,
    Prefer,
    _check_folder,
    _console,
    _fail,
    _load_embeddings,
    _one_line,
    _open_store,
    _safe,
    _seconds,
    _short,
    _stamp,
)
from langchain_reflective.cli.scores import _score_legend, _score_table
from langchain_reflective.errors import ReflectiveError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from langchain_reflective.records import MemoryRecord
    from langchain_reflective.stream import MemoryStream

# -- demo ------------------------------------------------------------------------------------------


_CACHE_SUFFIXES = {".faiss", ".f32", ".cols", ".bm25", ".tmp", ".json"}
"""What the SQLite backend writes into ``<file>.index`` (vectors, columns, lexical index and
their temporary files): a folder holding only these is ours to remove with the file."""


def _check_writable(db: Path) -> None:
    """Refuse a --db the demo cannot write, before any model loads (which takes seconds): a
    missing directory (never created behind the user's back) or a read-only one (SQLite
    writes ``<file>-wal`` and ``<file>-shm`` beside the file)."""
    _check_folder(db, "create")
    folder = db.parent
    try:  # (an unnamed file where the platform has them: nothing is left behind)
        with tempfile.TemporaryFile(dir=folder, prefix=".reflective-probe-"):
            pass
    except OSError as exc:
        _fail(
            f"cannot write {db}: the directory {folder} is not writable "
            f"({exc.strerror or type(exc).__name__}); a memory file needs write access to its "
            "directory: choose another --db"
        )


def _prepare_demo_file(db: Path, fresh: bool) -> None:
    """Delete the previous demo file when asked, never a file that is not a memory file; refuse
    a path the demo cannot write (before anything loads)."""
    if db.is_dir():
        _fail(f"{db} is a directory; choose a file path with --db")
    _check_writable(db)
    if not db.exists():
        return
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
    # (--fresh deletes it: the folder's write); checked with the ids and capabilities the
    # process writes with, not the real ones access() checks by default
    effective = os.access in os.supports_effective_ids
    if not fresh and not os.access(db, os.W_OK, effective_ids=effective):
        _fail(f"cannot write {db}: the file is read-only; choose another --db")
    if fresh:
        for extra in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            extra.unlink(missing_ok=True)
        cache = db.with_name(db.name + ".index")
        if cache.is_dir() and all(p.suffix in _CACHE_SUFFIXES for p in cache.iterdir()):
            shutil.rmtree(cache)


_STYLE_NOTES = {
    "completion": "completion-style prompts: few-shot documents, answers constrained by a "
    "JSON schema built per call",
    "chat": "chat prompts of seed 002 (Generative Agents)",
}
"""How the demo describes each prompt style (``prompt_style``, resolved)."""

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
            console.print(f"  • {_safe(_short(str(q), 200))}")
    reflections: list[MemoryRecord] = list(out.get("reflections") or [])
    if not reflections:
        reason = str(out.get("skipped") or "no_insights")
        console.print(
            Panel(
                f"No insight was stored ({_safe(reason)}): "
                f"{_safe(_SKIP_EXPLANATIONS.get(reason, reason))}.\n"
                "This is expected from the tiny local base model, which proves the pipeline "
                "(questions, evidence retrieval, cited insights, storage) but writes poor text. "
                "With a real model (OPENAI_API_KEY or OPENAI_BASE_URL) insights appear here.",
                title="Insights",
                title_align="left",
                border_style="yellow",
            )
        )
        return
    cited_ids = {e for r in reflections for e in r.evidence}
    console.print(
        f"[bold]Insights[/] ({len(reflections)} stored as 'reflection' memories, citing "
        f"{len(cited_ids)} stored turn{'' if len(cited_ids) == 1 else 's'}):"
    )
    for i, record in enumerate(reflections, 1):
        console.print(
            f"\n[bold]{i}. {_safe(record.text)}[/]  "
            f"[dim](importance {record.importance:.2f}, depth {record.depth})[/]"
        )
        cited = stream.get(list(record.evidence))
        if not cited:
            console.print("   [dim]cites no stored memory[/]")
        for ev in cited:
            dia_id = ev.metadata.get("dia_id") if ev.metadata else None
            label = f"{dia_id}" if dia_id else ev.kind
            console.print(f"   [dim]evidence {_safe(label)}:[/] {_safe(_short(ev.text))}")


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
    from langchain_reflective.completion import resolve_prompt_style
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
    style = resolve_prompt_style(model, config.prompt_style)
    console.print(f"[dim]Prompting: {_STYLE_NOTES[style]}.[/]")
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
                    f"  [dim]reflection.{_safe(step)} done after "
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
    body = _safe(choice.description)
    if choice.provider == "local":
        body += (
            "\n\n[bold yellow]Note:[/] the local chat model is a tiny 270M [bold]base[/] model. "
            "It is prompted completion-style: few-shot documents whose answers a JSON schema "
            "constrains (ratings are integers 1-10, questions are questions, insights can only "
            "cite turns that exist), through the real pipeline (HTTP, grammar, parsing). So its "
            "answers are well-formed, but what they say is a tiny base model's judgement: "
            "expect odd ratings and naive insights."
        )
    console.print(Panel(body, title="Models", title_align="left", border_style="cyan"))
    speakers = sorted({t.speaker for t in turns})
    console.print(
        f"Conversation: [bold]{_safe(source)}[/] - {len(turns)} turns in "
        f"{len({t.session for t in turns})} sessions between "
        f"{_safe(' and '.join(speakers))} "
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
            console.print(f"Memory file: [bold]{_safe(db)}[/]")
            mark = time.perf_counter()
            sources = _ingest(stream, turns, batch_size)
            timings.append(("ingest + rate importance", time.perf_counter() - mark))
            by_llm, by_rule = sources.get("llm", 0), sources.get("heuristic", 0)
            console.print(
                f"Stored {len(turns)} memories. Importance rated by the LLM: {by_llm}; by the "
                f"heuristic fallback (model answer unusable): {by_rule}. "
                f"[dim]({_STYLE_NOTES[scorer.prompt_style]})[/]"
            )

            mark = time.perf_counter()
            if asked:
                console.rule(f"Retrieval (as of {_stamp(as_of)}, k={k})")
                console.print(
                    Panel(
                        _score_legend(stream.scoring),
                        title="What the columns mean",
                        title_align="left",
                        border_style="dim",
                    )
                )
            for i, q in enumerate(asked, 1):
                hits = stream.retrieve(q.question, k=k, now=as_of)
                console.print()
                title = f"Q{i}. {_safe(q.question)}"
                console.print(_score_table(title, hits, q.evidence, stream.scoring))
                if q.answer:
                    found = {
                        str(h.record.metadata.get("dia_id")) for h in hits if h.record.metadata
                    }
                    got = len(set(q.evidence) & found)
                    console.print(
                        f"   [dim]reference answer: {_safe(q.answer)} - evidence "
                        f"turns {_safe(', '.join(q.evidence)) or 'none'} ({got} of "
                        f"{len(set(q.evidence))} "
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
                        f"{_safe(_one_line(exc))}"
                    )
                else:
                    _print_reflection(stream, out)
                timings.append(("reflection", time.perf_counter() - mark))
            total = stream.count()

    timings.append(("total", time.perf_counter() - started))
    console.rule("Summary")
    console.print(
        f"{_safe(db)} holds {total} memories ({len(turns)} observations, "
        f"{total - len(turns)} reflection{'' if total - len(turns) == 1 else 's'})."
    )
    table = Table("step", "time", title="Elapsed", title_justify="left")
    for step, seconds in timings:
        table.add_row(step, _seconds(seconds))
    console.print(table)
    console.print(
        f"Next: [bold]reflective inspect {_safe(db)} --plot memories.png[/], "
        f"[bold]reflective export {_safe(db)} memories.jsonl[/]"
    )
