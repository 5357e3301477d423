"""``reflective reflexion ...``: the Reflexion sub-commands of the ``reflective`` CLI.

* ``reflective reflexion report FILE``: tables of an export (per loop: reward curve, trials to
  success, failure categories; across loops and per strategy: success rate, success@k, mean
  trials, lesson reuse); ``--plot PNG`` draws the reward curves and success@k. Loops the export
  schema would reject are left out of every table and number and listed after them ("N
  malformed loops skipped"); trials stored twice by an old version count once.

Registered by :mod:`langchain_reflective.cli`; same exit-status rule (1: the file cannot be
used, 2: the command line is wrong). Needs the ``cli`` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from langchain_reflective.cli._common import (
    _console,
    _fail,
    _plot_target,
    _plotting,
    _safe,
    _short,
)
from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.reflexion.analytics import (
    LoopAnalysis,
    LoopsSummary,
    analyze_loops,
)

__all__ = ["build_reflexion_app"]


def _curve(rewards: list[float]) -> str:
    return " → ".join(f"{r:.2f}" for r in rewards)


def _loops_table(analyses: list[LoopAnalysis]) -> Table:
    table = Table(title=f"Reflexion loops ({len(analyses)})", show_lines=False)
    for column, justify in (
        ("loop", "left"),
        ("task", "left"),
        ("strategy", "left"),
        ("status", "left"),
        ("trials", "right"),
        ("to success", "right"),
        ("reward curve", "left"),
        ("failure categories", "left"),
        ("conf.", "right"),
        ("low q.", "right"),
        ("lessons reused", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for a in analyses:
        table.add_row(
            _safe(a.loop_id[:12]),
            _safe(_short(a.task, 40)),
            _safe(a.strategy),
            _safe(a.status),
            str(a.trials),
            str(a.trials_to_success) if a.trials_to_success is not None else "-",
            _curve(a.rewards),
            _safe(", ".join(a.failure_categories) or "-"),
            f"{a.avg_confidence:.2f}" if a.avg_confidence is not None else "-",
            str(a.low_quality),
            str(len(a.lessons_reused)),
        )
    return table


def _summary_table(overall: LoopsSummary, by_strategy: dict[str, LoopsSummary]) -> Table:
    rows = [("all", overall)] + (list(by_strategy.items()) if len(by_strategy) > 1 else [])
    ks = sorted({k for _, s in rows for k in s.success_at})
    table = Table(title="Across loops (per strategy: the ablation)")
    table.add_column("strategy")
    table.add_column("loops", justify="right")
    table.add_column("success rate", justify="right")
    for k in ks:
        table.add_column(f"success@{k}", justify="right")
    table.add_column("mean trials", justify="right")
    table.add_column("mean trials to success", justify="right")
    table.add_column("lesson reuse", justify="right")
    table.add_column("mean learning rate", justify="right")
    for name, s in rows:
        table.add_row(
            _safe(name),
            str(s.loops),
            f"{s.success_rate:.2f}",
            *[f"{s.success_at.get(k, s.success_rate):.2f}" for k in ks],
            f"{s.mean_trials:.2f}",
            f"{s.mean_trials_to_success:.2f}" if s.mean_trials_to_success is not None else "-",
            f"{s.lesson_reuse_rate:.2f}",
            f"{s.mean_learning_rate:+.3f}",
        )
    return table


def _categories_table(overall: LoopsSummary) -> Table:
    table = Table(title="Failure categories reflected on")
    table.add_column("category")
    table.add_column("reflections", justify="right")
    for category, n in overall.failure_categories.items():
        table.add_row(_safe(category), str(n))
    return table


def _skipped(malformed: tuple[str, ...], shown: int = 5) -> str:
    more = f"; and {len(malformed) - shown} more" if len(malformed) > shown else ""
    return "; ".join(malformed[:shown]) + more


def _notes(overall: LoopsSummary) -> list[str]:
    """What the tables leave out or count once."""
    notes = []
    if overall.malformed:
        n = len(overall.malformed)
        notes.append(
            f"{n} malformed loop{'s' if n != 1 else ''} skipped (not in these numbers): "
            + _skipped(overall.malformed)
        )
    if overall.duplicates:
        n = overall.duplicates
        notes.append(
            f"{n} duplicate {'copy' if n == 1 else 'copies'} of trials or reflections (stored "
            "twice by an older version) ignored: each iteration counts its first stored copy"
        )
    return notes


def _plot(analyses: list[LoopAnalysis], by_strategy: dict[str, LoopsSummary], out: Path) -> None:
    with _plotting():
        _draw(analyses, by_strategy, out)


def _draw(analyses: list[LoopAnalysis], by_strategy: dict[str, LoopsSummary], out: Path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (curves, success) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors: dict[str, Any] = {}
    for a in analyses:
        color = colors.setdefault(a.strategy, f"C{len(colors)}")
        xs = list(range(1, a.trials + 1))
        curves.plot(xs, a.rewards, marker="o", color=color, alpha=0.7)
        if a.trials_to_success is not None:
            curves.scatter([a.trials_to_success], [1.0], marker="*", s=140, color=color, zorder=3)
    for strategy, color in colors.items():
        curves.plot([], [], color=color, label=strategy)
    curves.set_xlabel("trial")
    curves.set_ylabel("reward")
    curves.set_ylim(-0.05, 1.05)
    curves.set_title(f"Reward curves ({len(analyses)} loops; ★ first pass)")
    curves.legend(fontsize="small")
    curves.grid(alpha=0.3)
    for strategy, summary in by_strategy.items():
        ks = sorted(summary.success_at)
        success.plot(
            ks,
            [summary.success_at[k] for k in ks],
            marker="o",
            label=strategy,
            color=colors.get(strategy),
        )
    success.set_xlabel("k (trials)")
    success.set_ylabel("loops passed within k trials")
    success.set_ylim(-0.05, 1.05)
    success.set_title("success@k per strategy")
    success.legend(fontsize="small")
    success.grid(alpha=0.3)
    for axis in (curves, success):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=110, format=out.suffix.lower().lstrip("."))
    except OSError as exc:
        _fail(f"cannot write --plot {out}: {exc.strerror or exc}")
    finally:
        plt.close(fig)


def report(
    file: Annotated[
        Path,
        typer.Argument(help="A Reflexion export (JSON, from export_loops).", show_default=False),
    ],
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Write the reward curves and success@k (.png, .pdf or .svg; no suffix: .png).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Tables of Reflexion loops: reward curves, trials to success, failure categories,
    success rates (overall, at trial k, per strategy) and lesson reuse."""
    if not file.exists():
        _fail(f"no such file: {file}")
    if file.is_dir():
        _fail(f"{file} is a directory, not a Reflexion export")
    if plot is not None:
        plot = _plot_target(plot)
    try:
        analyses, overall, by_strategy = analyze_loops(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        _fail(f"{file} is not a text file: not a Reflexion export")
    except InvalidMemoryError as exc:
        _fail(f"{file}: {exc}")
    except (KeyError, TypeError, ValueError) as exc:
        _fail(f"{file} is a Reflexion export with malformed loops ({type(exc).__name__}: {exc})")
    console = _console()
    if not analyses and overall.malformed:
        _fail(f"{file}: every loop is malformed ({_skipped(overall.malformed)})")
    if not analyses:
        console.print(f"{_safe(file)} holds no Reflexion loops.")
        if plot is not None:
            _fail(f"{file} holds no loops; there is nothing to plot")
        return
    console.print(_loops_table(analyses))
    console.print(_summary_table(overall, by_strategy))
    if overall.failure_categories:
        console.print(_categories_table(overall))
    for note in _notes(overall):
        console.print(f"[yellow]{_safe(note)}[/yellow]")
    if plot is not None:
        _plot(analyses, by_strategy, plot)
        console.print(f"Wrote {_safe(plot)} ({plot.stat().st_size:,} bytes).")


def build_reflexion_app() -> typer.Typer:
    """The ``reflexion`` sub-app."""
    app = typer.Typer(
        name="reflexion",
        help="Reflexion loops: reports of exported episodic memory.",
        no_args_is_help=True,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.command("report")(report)
    return app
