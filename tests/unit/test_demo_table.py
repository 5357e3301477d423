"""The demo's retrieval table says what its columns mean: a legend built from the stream's
scoring settings, and a ``context`` column with what the neighbouring turns added to each
score (so a turn ranked high for its neighbour's words does not read as a wrong score)."""

from __future__ import annotations

from datetime import datetime, timedelta
from io import StringIO

import pytest

from langchain_reflective import MemoryStream, ScoringConfig
from tests.fakes import WordEmbeddings

cli = pytest.importorskip("langchain_reflective.cli.scores", reason='needs the cli extra ("[cli]")')

TURNS = [
    "Priya: What did you have for dinner tonight?",
    "Tomás: Leftover soup. Very glamorous.",
    "Priya: My greyhound Biscuit chewed my running shoe.",
    "Tomás: I ran 25 km on Sunday for the marathon.",
    "Priya: The forecast says sun all week.",
    "Tomás: My dad came home from the hospital.",
]


def render(table: object) -> str:
    from rich.console import Console

    out = StringIO()
    Console(file=out, width=200).print(table)
    return out.getvalue()


def retrieve_all(stream: MemoryStream, query: str, now: datetime) -> list:
    return stream.retrieve(query, k=len(TURNS), now=now, touch=False)


def test_context_column_is_what_the_neighbours_added(now: datetime) -> None:
    scoring = ScoringConfig.hybrid()
    with MemoryStream(WordEmbeddings(), scoring=scoring) as stream:
        records = stream.add(TURNS, importances=0.5, now=now)
        hits = retrieve_all(stream, "what did Tomás have for dinner", now + timedelta(hours=1))
        by_id = {h.record.id: h for h in hits}
        assert set(by_id) == {r.id for r in records}

        def own(i: int) -> float:  # a turn's relevance + lexical, as the formula weighs them
            h = by_id[records[i].id]
            return scoring.relevance_weight * h.relevance + scoring.lexical_weight * h.lexical

        for i, record in enumerate(records):
            sides = [own(j) for j in (i - 1, i + 1) if 0 <= j < len(records)]
            expected = scoring.neighbor_weight * max(0.0, *sides)
            assert cli._context_share(by_id[record.id], scoring) == pytest.approx(
                expected, abs=1e-6
            )
        # the answer right after the matching question owes part of its score to it
        assert cli._context_share(by_id[records[1].id], scoring) > 0.1

        text = render(cli._score_table("Q1", hits, [], scoring))
        assert "context" in text.splitlines()[2]  # a header column
        legend = cli._score_legend(scoring)
        assert "turn before it" in legend and "context:" in legend
        assert "0.6·relevance + 0.4·lexical + context" in legend


def test_without_neighbours_there_is_no_context_column(now: datetime) -> None:
    paper = ScoringConfig.paper()
    with MemoryStream(WordEmbeddings(), scoring=paper) as stream:
        stream.add(TURNS, importances=0.5, now=now)
        hits = retrieve_all(stream, "dinner", now + timedelta(hours=1))
        assert "context" not in render(cli._score_table("Q1", hits, [], paper))
        legend = cli._score_legend(paper)
        assert "context" not in legend and "lexical" not in legend
        assert "min-max normalised" in legend
        facts = ScoringConfig.hybrid(context=False)
        assert "turn before it" not in cli._score_legend(facts)
        assert "lexical: BM25 of the turn, relative" in cli._score_legend(facts)


@pytest.mark.parametrize("suffix", [".faiss", ".f32", ".cols", ".bm25"])
def test_fresh_removes_the_files_caches_and_keeps_a_folder_holding_anything_else(
    tmp_path, suffix: str
) -> None:
    """``demo --fresh`` starts over: the memory file and its cache folder go, whichever caches
    the backend wrote there; a folder holding a file the backend does not write stays."""
    from langchain_reflective.cli.demo import _prepare_demo_file

    db = tmp_path / "demo.db"
    with MemoryStream(WordEmbeddings(), path=db) as stream:
        stream.add(TURNS[:2], importances=0.5)
    cache = db.with_name(db.name + ".index")
    (cache / f"0123abcd{suffix}").write_bytes(b"cache")
    (cache / f"0123abcd{suffix}.x1y2.tmp").write_bytes(b"left by a killed writer")
    _prepare_demo_file(db, fresh=True)
    assert not db.exists() and not cache.exists()

    with MemoryStream(WordEmbeddings(), path=db) as stream:
        stream.add(TURNS[:2], importances=0.5)
    (cache / "notes.txt").write_text("mine")
    _prepare_demo_file(db, fresh=True)
    assert not db.exists() and (cache / "notes.txt").read_text() == "mine"
