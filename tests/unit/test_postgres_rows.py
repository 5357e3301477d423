"""Decoding the Postgres candidate statement's one packed row into a ``CandidateSet`` (no server:
the row is packed here exactly as ``candidates_sql`` packs it)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("psycopg", reason="the 'postgres' extra is not installed")

from langchain_reflective.backends.postgres.rows import candidate_set
from langchain_reflective.scoring import ScoringConfig


def _pack(values: list[float] | list[int], dtype: str) -> bytes:
    return np.asarray(values, dtype=dtype).tobytes()


def _row(
    rows: list[tuple[int, bool, float, str, int, int]], lexical: dict[int, float]
) -> tuple[object, ...]:
    """``rows``: (seq, is_candidate, relevance, kind, prev seq, next seq) in server order."""
    seq = [r[0] for r in rows]
    return (
        _pack(seq, ">i8"),
        bytes(int(r[1]) for r in rows),
        _pack([r[2] for r in rows], ">f8"),
        _pack([1000.0 + s for s in seq], ">f8"),  # accessed
        _pack([500.0 + s for s in seq], ">f8"),  # created
        _pack([s / 100 for s in seq], ">f8"),  # importance
        [r[3] for r in rows],
        _pack([r[4] for r in rows], ">i8"),
        _pack([r[5] for r in rows], ">i8"),
        _pack(list(lexical), ">i8") if lexical else None,
        _pack(list(lexical.values()), ">f8") if lexical else None,
    )


def test_rows_come_back_in_set_order_with_their_values() -> None:
    # server order is arbitrary: neighbour rows (False) mixed with candidates
    row = _row(
        [
            (7, False, 0.1, "observation", -1, -1),
            (5, True, 0.5, "observation", 3, 7),
            (9, True, 0.9, "reflection", -1, -1),
            (3, True, 0.3, "observation", -1, 5),
        ],
        lexical={5: 2.0, 7: 1.0, 42: 4.0},  # 42 matches but is not returned
    )
    c = candidate_set(row, ScoringConfig.hybrid(), exact=False)
    assert c.keys.tolist() == [3, 5, 9, 7] and c.size == 3 and not c.exact
    assert c.relevance.tolist() == pytest.approx([0.3, 0.5, 0.9, 0.1])
    assert c.accessed.tolist() == [1003.0, 1005.0, 1009.0, 1007.0]
    assert c.created.tolist() == [503.0, 505.0, 509.0, 507.0]
    assert c.importance.tolist() == [0.03, 0.05, 0.09, 0.07]
    assert [c.kind_names[k] for k in c.kinds] == [
        "observation",
        "observation",
        "reflection",
        "observation",
    ]
    # lexical: looked up by key, 0 for none; the max over every matching memory
    assert c.lexical is not None and c.lexical.tolist() == [0.0, 2.0, 0.0, 1.0]
    assert c.lexical_max == 4.0
    # links as rows of the set; -1 for none and for every neighbour row
    assert c.previous is not None and c.next is not None
    assert c.previous.tolist() == [-1, 0, -1, -1]
    assert c.next.tolist() == [1, 3, -1, -1]


def test_scores_without_lexical_or_neighbours_and_the_empty_row() -> None:
    row = _row([(2, True, 0.2, "observation", 1, 3)], lexical={})
    c = candidate_set(row, ScoringConfig.dense(), exact=True)
    assert c.keys.tolist() == [2] and c.exact
    assert c.lexical is None and c.previous is None and c.next is None
    hybrid = candidate_set(row, ScoringConfig.hybrid(), exact=True)
    assert hybrid.lexical is not None and hybrid.lexical.tolist() == [0.0]
    assert hybrid.lexical_max == 0.0
    # a link to a memory that is not among the rows (deleted meanwhile) reads as none
    assert hybrid.previous is not None and hybrid.previous.tolist() == [-1]
    empty = (None,) * 11
    assert candidate_set(empty, ScoringConfig.hybrid(), exact=False).size == 0
    assert candidate_set(None, ScoringConfig.hybrid(), exact=False).size == 0


def test_bm25_scores_are_float32_values_as_the_sqlite_backend_hands_them_out() -> None:
    score = 1.2345678901234567
    row = _row([(1, True, 0.1, "observation", -1, -1)], lexical={1: score})
    c = candidate_set(row, ScoringConfig.hybrid(), exact=True)
    assert c.lexical is not None
    assert c.lexical[0] == float(np.float32(score)) != score
    assert c.lexical_max == float(np.float32(score))
