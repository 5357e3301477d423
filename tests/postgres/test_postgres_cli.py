"""``reflective inspect``, ``export`` and ``import`` against a Postgres URL: moving a memory file
to a server is two commands, and back again gives the same export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.schema import SCHEMA_VERSION
from tests.integration.test_cli import (
    assert_one_line_error,
    flat,
    run_cli,
    write_memory_file,
)

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

cli_common = pytest.importorskip("langchain_reflective.cli._common")


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]


def test_a_memory_file_moves_to_postgres_and_back(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, postgres_url: str
) -> None:
    memory_file = write_memory_file(tmp_path / "memory.db")
    exported = tmp_path / "all.jsonl"
    assert run_cli(capsys, "export", memory_file, exported, "--all-namespaces")[0] == 0

    code, out, err = run_cli(capsys, "import", exported, postgres_url)  # creates the tables
    assert code == 0, err
    assert "Imported 7 memories" in out and "reusing the exported vectors" in flat(out)
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        assert backend.count("default") == 6 and backend.count("ben") == 1

    code, out, err = run_cli(capsys, "inspect", postgres_url)
    assert code == 0, err
    assert "Memory database (Postgres)" in out and "namespaces ben, default" in flat(out)
    assert f"schema version {SCHEMA_VERSION}" in flat(out)
    assert "none built yet (exact scans)" in flat(out)
    assert "Ana got a job in Lisbon" in out

    back = tmp_path / "back.jsonl"
    code, out, err = run_cli(capsys, "export", postgres_url, back, "--all-namespaces")
    assert code == 0, err
    assert "Exported 7 memories" in out
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(_records(back), key=key) == sorted(_records(exported), key=key)

    code, out, err = run_cli(capsys, "import", exported, postgres_url)  # again: nothing twice
    assert code == 0, err
    assert "Imported 0 memories" in out and "7 of its 7 were stored already" in out


def test_reading_a_database_without_memories_is_one_line_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], postgres_url: str, tmp_path: Path
) -> None:
    for args in (["inspect", postgres_url], ["export", postgres_url, tmp_path / "x.jsonl"]):
        code, out, err = run_cli(capsys, *args)
        assert_one_line_error(code, out, err, expect="holds no langchain-reflective memories")
        assert code == 1
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        assert backend.schema_version() == 0  # inspect and export created no tables
    assert not (tmp_path / "x.jsonl").exists()
    head, sep, query = postgres_url.partition("?")
    missing = f"{head.rsplit('/', 1)[0]}/no_such_database{sep}{query}"
    code, out, err = run_cli(capsys, "inspect", missing)
    assert_one_line_error(code, out, err, expect='database "no_such_database" does not exist')


def test_a_url_is_shown_without_its_password() -> None:
    shown = cli_common._shown(
        "postgresql://ana:s3cret@db.example:5432/mem?password=x2&sslmode=require"
    )
    assert "s3cret" not in shown and "x2" not in shown
    assert shown == "postgresql://ana:***@db.example:5432/mem?password=***&sslmode=require"
    plain = "postgresql://postgres:@/postgres?host=/tmp/sock"
    assert cli_common._shown(plain) == plain


def test_a_database_of_a_newer_version_is_refused(
    capsys: pytest.CaptureFixture[str], postgres_url: str
) -> None:
    """inspect and export refused it only when it had no tables; they showed a newer
    version's data as if it were this one's."""
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO reflective_schema_version (version) VALUES (%s)", (SCHEMA_VERSION + 1,)
        )
    code, out, err = run_cli(capsys, "inspect", postgres_url)
    assert_one_line_error(code, out, err, expect="newer langchain-reflective")
