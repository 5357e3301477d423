"""``benchmarks/shared_namespaces.py`` measures what it says: in its shared layout the measured
namespace's keys have gaps (so retrieval finds rows through the key table), alone they do not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.benchmark_scripts import benchmark_script


@pytest.fixture
def bench() -> Iterator[ModuleType]:
    with benchmark_script("shared_namespaces") as module:
        yield module


def test_the_shared_layout_interleaves_keys_and_the_run_writes_both_layouts(
    bench: ModuleType, tmp_path: Path
) -> None:
    from scale import _fake_embeddings  # (on the path once the script is loaded)

    from langchain_reflective import MemoryStream

    emb = _fake_embeddings()
    for others, gapped in ((0, False), (1, True)):
        with MemoryStream(emb, path=tmp_path / f"m{others}.db") as stream:
            bench._fill(stream, emb, 1000, others, 100)
            assert stream.count(namespace="a") == 1000
            part = stream.backend._partitions["a"]
            seqs = part.seqs.view
            assert bool(np.any(np.diff(seqs) > 1)) == gapped
            rows = part.rows_of(seqs[::7])
            np.testing.assert_array_equal(rows, np.arange(0, 1000, 7))
            assert (part._keys is not None) == gapped

    out = tmp_path / "result.json"
    bench.main(["--n", "1000", "--queries", "3", "--rounds", "1", "--output", str(out)])
    rows = json.loads(out.read_text())["results"]
    assert [(r["layout"], r["others"]) for r in rows] == [("alone", 0), ("shared", 1)]
    assert all(r["retrieve"]["p50_ms"] > 0 for r in rows)
