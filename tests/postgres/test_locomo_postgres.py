"""The LoCoMo benchmark's Postgres rows on one small synthetic conversation (real server).

Checks that ``locomo_recall.run(..., postgres_url=...)`` adds the stream over
``PostgresBackend`` and LangGraph's ``PostgresStore`` as rows, and that the Postgres stream
ranks every question exactly like the SQLite stream (same scores, candidates and formula).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.fakes import WordEmbeddings
from tests.integration.test_locomo_benchmark import CONVERSATION, bench  # noqa: F401

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def test_postgres_rows_rank_like_sqlite(
    bench: ModuleType,  # noqa: F811
    postgres_url: str,
    tmp_path: Path,
) -> None:
    folder = tmp_path / "locomo"
    folder.mkdir()
    (folder / "synthetic-1.json").write_text(json.dumps(CONVERSATION))
    conversations = bench.locomo.load_all(folder)
    vectors = bench.model_vectors(conversations, WordEmbeddings(size=64))
    result = bench.run(conversations, vectors, workdir=tmp_path, postgres_url=postgres_url)

    assert list(result.results) == [*bench.METHODS, *bench.POSTGRES_METHODS]
    sqlite = result.rankings[bench.DEFAULT]["synthetic-1"]
    postgres = result.rankings[bench.PG_DEFAULT]["synthetic-1"]
    assert len(postgres) == 3
    for a, b in zip(sqlite, postgres, strict=True):
        assert b.tolist() == a.tolist()
    # the peer ranks every memory (8 < 25) by cosine, each once
    for ranking in result.rankings[bench.PG_PEER]["synthetic-1"]:
        assert sorted(ranking.tolist()) == list(range(8))
    report = bench.to_json(result, conversations, {"command": "test"})
    assert report["sqlite_vs_postgres_same_top25"] == {"questions_same": 3, "questions": 3}
    assert np.all(result.results[bench.PG_PEER].recall[:, -1] == 1.0)
