"""How the command shows retrieval scores: the ranked table, the neighbours' share, the legend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from langchain_reflective.cli._common import _safe, _short

if TYPE_CHECKING:
    from langchain_reflective.scoring import ScoringConfig
    from langchain_reflective.stream import ScoredMemory

# -- demo ------------------------------------------------------------------------------------------


def _shows_context(scoring: ScoringConfig) -> bool:
    """Whether the neighbours' share of a score can be shown: raw (unnormalised) components."""
    return scoring.neighbor_weight > 0 and scoring.normalization == "none"


def _context_share(hit: ScoredMemory, scoring: ScoringConfig) -> float:
    """What the neighbouring turns added to ``hit.score``: the score less the hit's own terms."""
    own = (
        scoring.relevance_weight * hit.relevance
        + scoring.lexical_weight * hit.lexical
        + scoring.recency_weight * hit.recency
        + scoring.importance_weight * hit.importance
    )
    return max(0.0, hit.score - own)


def _score_legend(scoring: ScoringConfig) -> str:
    """What the columns of the retrieval tables mean, for the stream's scoring settings."""

    def w(value: float) -> str:
        return f"{value:g}"

    terms = [f"{w(scoring.relevance_weight)}·relevance"]
    if scoring.lexical_weight > 0:
        terms.append(f"{w(scoring.lexical_weight)}·lexical")
    if _shows_context(scoring):
        terms.append("context")
    terms += [
        f"{w(scoring.recency_weight)}·recency",
        f"{w(scoring.importance_weight)}·importance",
    ]
    norm = " (relevance and recency min-max normalised)" if scoring.normalization != "none" else ""
    lines = [
        f"score = {' + '.join(terms)}{norm}.",
        "relevance: cosine similarity of the turn's embedding to the question.",
    ]
    if scoring.lexical_weight > 0:
        if scoring.lexical_context:
            lines.append(
                "lexical: BM25 of the turn [bold]together with the turn before it[/], relative "
                "to the best match (1.000); a turn that answers a matching turn scores high "
                "here even when its own words do not match."
            )
        else:
            lines.append("lexical: BM25 of the turn, relative to the best match (1.000).")
    if _shows_context(scoring):
        lines.append(
            f"context: what the neighbouring turns added ({w(scoring.neighbor_weight)} × the "
            "better of the previous and next turn's relevance + lexical)."
        )
    lines.append(
        f"recency: {w(scoring.decay)} ** hours since last access; importance: rating / 10."
    )
    return "\n".join(lines)


def _score_table(
    title: str,
    hits: Sequence[ScoredMemory],
    evidence: Sequence[str],
    scoring: ScoringConfig | None = None,
) -> Table:
    """One question's ranking with every score component (and the neighbours' share)."""
    context = scoring is not None and _shows_context(scoring)
    table = Table(title=title, title_justify="left", expand=True, show_lines=False)
    table.add_column("#", justify="right", no_wrap=True)
    names = ["score", "relevance", "lexical"] + (["context"] if context else [])
    for name in [*names, "recency", "importance"]:
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("turn", no_wrap=True)
    table.add_column("text", ratio=1, overflow="fold")
    wanted = set(evidence)
    for rank, hit in enumerate(hits, 1):
        dia_id = str(hit.record.metadata.get("dia_id", "")) if hit.record.metadata else ""
        mark = " [green]✓[/]" if dia_id and dia_id in wanted else ""
        shares = [f"{_context_share(hit, scoring):.3f}"] if context and scoring else []
        table.add_row(
            str(rank),
            f"{hit.score:.3f}",
            f"{hit.relevance:.3f}",
            f"{hit.lexical:.3f}",
            *shares,
            f"{hit.recency:.3f}",
            f"{hit.importance:.2f}",
            _safe(dia_id or hit.record.kind) + mark,
            _safe(_short(hit.record.text, 200)),
        )
    return table
