"""``benchmarks/pg_candidates.py`` compares what it says: each config's agreement with exact
scoring and its p50 over rounds taken in turns, a ``dense_depth_from`` config gathering as
deep as it says, and ``--reuse`` running on the database an earlier run filled (real server,
small)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.backends.postgres.queries import CandidateQuery
from tests.benchmark_scripts import benchmark_script

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

N = 600


@pytest.fixture
def bench() -> Iterator[ModuleType]:
    with benchmark_script("pg_candidates") as module:
        yield module


def _database_oid(admin: str) -> int:
    with psycopg.connect(admin) as conn:
        row = conn.execute(
            "SELECT oid FROM pg_database WHERE datname = %s", (f"candidates_{N}",)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _run(bench: ModuleType, admin: str, out: Path, *configs: str) -> list[dict[str, Any]]:
    args = ["--url", admin, "--reuse", "--n", str(N), "--queries", "4", "--rounds", "2"]
    bench.main([*args, "--configs", *configs, "--output", str(out)])
    payload = json.loads(out.read_text())
    assert (payload["n"], payload["queries"], payload["rounds"]) == (N, 4, 2)
    results: list[dict[str, Any]] = payload["results"]
    return results


def test_configs_take_turns_and_reuse_keeps_the_filled_database(
    bench: ModuleType, postgres_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_reflective.backends.postgres import candidates, queries

    depths: list[int] = []
    candidates_sql = queries.candidates_sql

    def recording(spec: CandidateQuery, flt: RetrievalFilter, params: dict[str, Any]) -> str:
        sql = candidates_sql(spec, flt, params)
        if not spec.exact:  # (the reference's exact statements have no dense step)
            depths.append(int(params["depth_from"]))
        return sql

    monkeypatch.setattr(candidates, "candidates_sql", recording)
    default = queries.DENSE_DEPTH_FROM
    out = tmp_path / "candidates.json"
    rows = _run(bench, postgres_server, out, "{}", '{"dense_depth_from": 150}')
    assert [r["config"] for r in rows] == [{}, {"dense_depth_from": 150}]
    for row in rows:
        assert 0.0 <= row["agreement_at_10"] <= 1.0
        assert len(row["p50_ms_per_round"]) == 2
    # each round ran the configs in turn, four retrievals each, at their own threshold
    assert depths == [default] * 4 + [150] * 4 + [default] * 4 + [150] * 4
    after = queries.DENSE_DEPTH_FROM
    assert after == default  # (put back after the config's passes)
    oid = _database_oid(postgres_server)
    _run(bench, postgres_server, out, "{}")
    assert _database_oid(postgres_server) == oid  # not dropped and filled again
