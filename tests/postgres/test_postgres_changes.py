"""Schema version 7: what changed in a namespace can be asked for (removals and touches, in
commit order), and a purge waits for the namespace's writes in flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.queries import REMOVALS_KEPT
from langchain_reflective.backends.postgres.writes import lock_counter, write_batch
from tests.postgres.test_postgres_backend import DIM, T0, _records, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


@pytest.fixture
def backend(postgres_url: str) -> Iterator[PostgresBackend]:
    b = PostgresBackend.from_conn_string(postgres_url, max_size=4)
    b.setup()
    b.bind_embeddings("test-model", DIM)
    yield b
    b.close()


def _put(backend: PostgresBackend, n: int, namespace: str = "default", seed: int = 0) -> list[Any]:
    import numpy as np

    records = _records(n, namespace, seed=seed)
    backend.put(records, _unit(np.random.default_rng(seed), n))
    return records


def _log(url: str, namespace: str = "default") -> tuple[int, list[tuple[int, int]]]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT removals FROM reflective_counters WHERE namespace = %s", (namespace,)
        ).fetchone()
        entries = conn.execute(
            "SELECT removal, seq FROM reflective_removed WHERE namespace = %s "
            "ORDER BY removal, seq",
            (namespace,),
        ).fetchall()
    return (0 if row is None else int(row[0])), [(int(r), int(s)) for r, s in entries]


def _keys(backend: PostgresBackend, records: list[Any], namespace: str = "default") -> list[int]:
    found = backend.fetch(namespace, list(range(1, 10_000)))
    by_id = {r.id: k for k, r in found.items()}
    return [by_id[r.id] for r in records]


def test_each_removal_is_counted_and_lists_its_keys(
    backend: PostgresBackend, postgres_url: str
) -> None:
    records = _put(backend, 6)
    keys = _keys(backend, records)
    other = _put(backend, 2, namespace="other", seed=1)
    assert backend.delete("default", [records[1].id, records[4].id]) == 2
    assert backend.delete("default", ["no-such-id"]) == 0  # nothing removed: not counted
    backend.replace("default", [records[0].id], [], _unit_rows(0))
    assert _log(postgres_url) == (2, [(1, keys[1]), (1, keys[4]), (2, keys[0])])
    assert _log(postgres_url, "other") == (0, [])
    assert backend.purge("default") == 3
    removals, entries = _log(postgres_url)
    assert removals == 3 and entries[-1] == (3, 0)  # a purge: key 0, every memory
    assert backend.count("other") == len(other)


def _unit_rows(n: int) -> Any:
    import numpy as np

    return np.zeros((n, DIM), dtype=np.float32)


def test_only_the_newest_removals_keep_their_keys(
    backend: PostgresBackend, postgres_url: str
) -> None:
    records = _put(backend, 3)
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # as if after many removals
        conn.execute(
            "UPDATE reflective_counters SET removals = %s WHERE namespace = 'default'",
            (REMOVALS_KEPT + 5,),
        )
        conn.execute(
            "INSERT INTO reflective_removed SELECT 'default', r, 999 "
            "FROM generate_series(1, %s) AS r",
            (REMOVALS_KEPT + 5,),
        )
    backend.delete("default", [records[0].id])
    removals, entries = _log(postgres_url)
    assert removals == REMOVALS_KEPT + 6
    assert [r for r, _ in entries] == list(range(7, REMOVALS_KEPT + 7))


def test_touches_count_a_clock_and_stamp_their_rows(
    backend: PostgresBackend, postgres_url: str
) -> None:
    records = _put(backend, 4)
    keys = _keys(backend, records)
    backend.touch("default", keys[:2], T0 + timedelta(days=1))
    backend.touch("default", keys[1:3], T0 + timedelta(days=2))
    backend.touch("elsewhere", keys[:1], T0 + timedelta(days=3))  # not its namespace: nothing
    with psycopg.connect(postgres_url) as conn:
        clocks = dict(conn.execute("SELECT namespace, clock FROM reflective_touches").fetchall())
        stamped = conn.execute(
            "SELECT seq, touched FROM reflective_access WHERE namespace = 'default' ORDER BY seq"
        ).fetchall()
    assert clocks["default"] == 2
    assert stamped == [(keys[0], 1), (keys[1], 2), (keys[2], 2), (keys[3], 0)]
    assert backend.fetch("default", keys[:1])[keys[0]].last_accessed_at == T0 + timedelta(days=1)


def test_concurrent_touches_take_distinct_clocks_in_commit_order(
    backend: PostgresBackend, postgres_url: str
) -> None:
    records = _put(backend, 20)
    keys = _keys(backend, records)
    errors: list[BaseException] = []

    def toucher(i: int) -> None:
        try:
            for j in range(15):  # overlapping rows, in different orders
                chosen = keys[(i + j) % 20 :][:5] + keys[: (i * 3) % 7]
                backend.touch("default", chosen[::-1] if j % 2 else chosen, T0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=toucher, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT clock FROM reflective_touches").fetchone()
    assert row == (60,)


def test_a_purge_waits_for_a_write_in_flight_and_removes_it(
    backend: PostgresBackend, postgres_url: str
) -> None:
    """Before version 7 a purge deleted the rows it could see, then zeroed the BM25
    statistics after a write in flight committed: that write's memories outlived the purge."""
    import numpy as np

    _put(backend, 3)
    late = _records(2, seed=5)
    purged: list[int] = []
    with psycopg.connect(postgres_url) as conn:  # a write holding the counter row
        lock_counter(conn, "default")
        oid = int(conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0])  # type: ignore[index]
        write_batch(conn, late, _unit(np.random.default_rng(5), 2), None, (), oid, locked=True)
        thread = threading.Thread(target=lambda: purged.append(backend.purge("default")))
        thread.start()
        time.sleep(0.5)
        assert thread.is_alive()  # waiting for the write's counter row
        conn.commit()
    thread.join(10)
    assert purged == [5]
    assert backend.count("default") == 0
    with psycopg.connect(postgres_url) as conn:
        docs = conn.execute(
            "SELECT lex_docs FROM reflective_counters WHERE namespace = 'default'"
        ).fetchone()
    assert docs == (0,)


# -- the catch-up statement on its generic plan (connection.generic_plan) -----------------------


def _plans(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """Generic and custom plans of this session's prepared ``LOCAL_CHANGES``."""
    row = conn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
        "WHERE statement LIKE '%%reflective_removed d WHERE d.namespace%%'"
    ).fetchone()
    assert row is not None, "LOCAL_CHANGES was not prepared"
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("own", ["auto", "force_custom_plan"])
def test_the_catch_up_statement_runs_on_its_generic_plan_and_keeps_the_connection_setting(
    backend: PostgresBackend, postgres_url: str, own: str
) -> None:
    from langchain_reflective.backends.postgres.connection import generic_plan
    from langchain_reflective.backends.postgres.queries import LOCAL_CHANGES

    records = _put(backend, 5)
    backend.delete("default", [records[2].id])
    params = {"ns": "default", "touches": 0, "removals": 0}
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"SET plan_cache_mode = {own}")
        plain = conn.execute(LOCAL_CHANGES, params, binary=True).fetchone()
        for _ in range(3):
            assert generic_plan(conn, LOCAL_CHANGES, params) == plain
        assert _plans(conn) == (3, 0)  # never planned for its parameters
        assert conn.execute("SHOW plan_cache_mode").fetchone() == (own,)
        # an error in the statement leaves the connection's setting, and the connection, usable
        with pytest.raises(psycopg.errors.DivisionByZero):
            generic_plan(conn, "SELECT 1 / %(zero)s", {"zero": 0})
        assert conn.execute("SHOW plan_cache_mode").fetchone() == (own,)
        assert generic_plan(conn, LOCAL_CHANGES, params) == plain


@pytest.mark.parametrize("without", ["pipelines", "prepared statements"])
def test_without_pipelines_or_prepared_statements_the_catch_up_statement_runs_as_usual(
    backend: PostgresBackend, postgres_url: str, monkeypatch: pytest.MonkeyPatch, without: str
) -> None:
    from langchain_reflective.backends.postgres.connection import generic_plan
    from langchain_reflective.backends.postgres.queries import LOCAL_CHANGES

    _put(backend, 3)
    params = {"ns": "default", "touches": 0, "removals": 0}
    if without == "pipelines":
        monkeypatch.setattr(psycopg.Pipeline, "is_supported", classmethod(lambda cls: False))
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        if without == "prepared statements":  # (as behind a pooler that cannot keep them)
            conn.prepare_threshold = None
        row = generic_plan(conn, LOCAL_CHANGES, params)
        assert row == conn.execute(LOCAL_CHANGES, params, binary=True).fetchone()
        assert row[0] is not None and int(row[2]) == 3  # the newest key; three live memories
        prepared = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        assert prepared == (0,)
