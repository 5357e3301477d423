"""The LoCoMo recall benchmark's core on one small synthetic LoCoMo-format conversation.

Checks the protocol pieces (loading, evidence normalisation, skipped questions, recall@k, every
method producing a row over real SQLite/FAISS/bm25s components), not the numbers on real data.
"""

from __future__ import annotations

import importlib
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.fakes import WordEmbeddings

pytestmark = pytest.mark.integration

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

CONVERSATION = {
    "sample_id": "synthetic-1",
    "speaker_a": "Caroline",
    "speaker_b": "Melanie",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hi Mel, how was your week?"},
        {"speaker": "Melanie", "dia_id": "D1:2", "text": "Busy! I painted a sunset with my kids."},
        {"speaker": "Caroline", "dia_id": "D1:3", "text": "I went hiking in the mountains."},
        {"speaker": "Melanie", "dia_id": "D1:4", "text": "That sounds lovely, which trail?"},
    ],
    "session_2_date_time": "10:37 am on 27 June, 2023",
    "session_2": [
        {
            "speaker": "Caroline",
            "dia_id": "D2:1",
            "text": "Look, the hiking trail by the lake!",
            "blip_caption": "a photo of a lake with mountains",
        },
        {"speaker": "Melanie", "dia_id": "D2:2", "text": "I adopted a puppy named Oscar."},
        {"speaker": "Caroline", "dia_id": "D2:3", "text": "Oscar is adorable."},
        {"speaker": "Melanie", "dia_id": "D2:4", "text": "Thanks, see you soon."},
    ],
    "qa": [
        {"question": "Where did Caroline go hiking?", "evidence": ["D1:3; D2:1"], "category": 4},
        {"question": "What did Melanie paint?", "evidence": ["D:1:2"], "category": 1},
        {"question": "When did Melanie adopt a puppy?", "evidence": ["D2:02"], "category": 2},
        {"question": "What is Caroline's favourite colour?", "evidence": [], "category": 5},
        {"question": "Who won the game?", "evidence": ["D9:1"], "category": 3},
    ],
}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module("locomo_recall")
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "locomo"
    folder.mkdir()
    (folder / "synthetic-1.json").write_text(json.dumps(CONVERSATION))
    return folder


def test_protocol_loading_and_evidence(bench: ModuleType, data_dir: Path) -> None:
    locomo = bench.locomo
    assert locomo.normalise_evidence(["D8:6; D9:17", "D:11:26", "D30:05", "D8:6"]) == [
        "D8:6",
        "D9:17",
        "D11:26",
        "D30:5",
    ]
    [conv] = locomo.load_all(data_dir)
    assert len(conv.texts) == 8
    assert conv.texts[0] == "Caroline: Hi Mel, how was your week?"
    assert conv.texts[4] == (
        "Caroline: Look, the hiking trail by the lake! [image: a photo of a lake with mountains]"
    )
    assert conv.timestamps[3] == datetime(2023, 5, 8, 13, 56)
    assert conv.timestamps[4] == datetime(2023, 6, 27, 10, 37)
    assert conv.now == datetime(2023, 6, 27, 10, 37) + timedelta(days=1)
    # the question without evidence and the one whose only evidence names no turn are skipped
    assert [q.text for q in conv.questions] == [
        "Where did Caroline go hiking?",
        "What did Melanie paint?",
        "When did Melanie adopt a puppy?",
    ]
    assert [q.evidence.tolist() for q in conv.questions] == [[2, 4], [1], [5]]
    assert [q.category for q in conv.questions] == [4, 1, 2]


def test_recall_is_share_of_evidence_in_top_k(bench: ModuleType) -> None:
    recall = bench.locomo.recall_at(np.array([7, 2, 0, 4, 1]), np.array([2, 4]), ks=(1, 2, 4, 25))
    assert recall.tolist() == [0.0, 0.5, 1.0, 1.0]
    fused = bench.rrf([np.array([2, 0, 1]), np.array([2, 1, 0])], 3, k=60)
    assert np.allclose(fused, [1 / 62 + 1 / 63, 1 / 63 + 1 / 62, 2 / 61])


def test_every_method_produces_a_row(bench: ModuleType, data_dir: Path, tmp_path: Path) -> None:
    conversations = bench.locomo.load_all(data_dir)
    vectors = bench.model_vectors(conversations, WordEmbeddings(size=64))
    timings: dict[str, float] = {}
    result = bench.run(conversations, vectors, workdir=tmp_path, timings=timings)

    assert list(result.results) == list(bench.METHODS)
    for name, r in result.results.items():
        assert r.recall.shape == (3, len(bench.KS_ALL)), name
        assert r.category.tolist() == [4, 1, 2]
        assert np.all(np.diff(r.recall, axis=1) >= 0), name  # recall never drops with k
        # 8 memories < 25: every method ranks every memory, so all evidence is in the top 25
        assert r.at(25) == 1.0, name
    # stemmed BM25 finds the single lexical match first ("paint" ~ "painted")
    assert result.results[bench.BM25].recall[1, 0] == 1.0
    assert set(timings) >= {bench.DEFAULT, bench.PAPER, bench.FAISS_NAME, bench.TIMEWEIGHTED}

    report = bench.to_json(result, conversations, {"command": "test"})
    assert set(report["methods"]) == set(bench.METHODS)
    assert report["questions"] == 3
    assert report["conversations"]["synthetic-1"]["memories"] == 8
    assert len(report["baseline_check"]) == 21  # k = 5..25
    same, total = result.agreement(bench.FAISS_NAME, bench.FAISS_NAME)
    assert same == total == 3
    table = bench.locomo.format_table([bench.subset(r) for r in result.results.values()])
    assert table.count("\n") == 1 + len(bench.METHODS)
    png = tmp_path / "recall.png"
    bench.plot(result.results, png, "synthetic")
    assert png.stat().st_size > 0


def test_cached_embeddings_never_embed(bench: ModuleType, data_dir: Path) -> None:
    [conv] = bench.locomo.load_all(data_dir)
    docs = np.eye(8, dtype=np.float32)
    queries = np.eye(8, dtype=np.float32)[:3]
    emb = bench.CachedEmbeddings.for_conversation(conv, docs, queries)
    assert emb.embed_documents([conv.texts[3]]) == [docs[3].tolist()]
    assert emb.embed_query(conv.questions[2].text) == queries[2].tolist()
    with pytest.raises(KeyError):
        emb.embed_query("a question nobody cached")


def test_run_label_names_every_option_that_changes_the_figures(bench: ModuleType) -> None:
    # --pg-ivf-min-rows used to be missing from both: such a run overwrote
    # locomo_recall_postgres.json and recorded itself as the plain Postgres run.
    assert bench.run_label("sqlite", "heuristic", None) == (
        "python benchmarks/locomo_recall.py",
        "",
    )
    assert bench.run_label("postgres", "heuristic", None) == (
        "python benchmarks/locomo_recall.py --backend postgres",
        "_postgres",
    )
    assert bench.run_label("postgres", "heuristic", 200) == (
        "python benchmarks/locomo_recall.py --backend postgres --pg-ivf-min-rows 200",
        "_postgres_ivf200",
    )
    assert bench.run_label("sqlite", "constant", None) == (
        "python benchmarks/locomo_recall.py --importance constant",
        "_constant",
    )
    assert bench.run_label("postgres", "heuristic", None, True) == (
        "python benchmarks/locomo_recall.py --backend postgres --pg-local-index",
        "_postgres_local",
    )
