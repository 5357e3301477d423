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
from langchain_reflective.backends.types import PendingMemory
from langchain_reflective.records import new_memory_id
from tests.postgres.sample_memories import DIM, T0, _records, _unit

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


def test_a_purge_gives_a_namespace_without_a_counter_row_none(
    backend: PostgresBackend, postgres_url: str
) -> None:
    """A purge locks the namespace's counter row first, as the writes do; it created the row
    when missing, so purging a namespace that held only queued memories, or nothing, left a
    counter row behind (and for one too long for Postgres' index it failed: the backend
    answered 0 for any namespace over the identifier limit instead). Without a row nothing is
    stored there (every write makes it): the queue is emptied and no row is made."""
    queued = [PendingMemory(new_memory_id(), "queued", "q", "observation", T0, None, {})]
    backend.enqueue(queued)
    assert backend.purge("queued") == 0 and backend.purge("never") == 0
    assert backend.count_pending() == 0
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT namespace FROM reflective_counters").fetchall() == []
    _put(backend, 2, namespace="queued")  # (its first write makes the row, as before)
    assert backend.purge("queued") == 2 and backend.count("queued") == 0
    assert backend.reflection_state("queued").generation == 0


def test_a_namespaces_first_write_in_flight_comes_after_a_purge(
    backend: PostgresBackend, postgres_url: str
) -> None:
    """A purge finding no counter row does not wait for the namespace's first write in flight
    (whose row is not committed yet): the write comes after it, and keeps its memories and its
    BM25 statistics together."""
    import numpy as np

    first = _records(2, "first", seed=5)
    purged: list[int] = []
    with psycopg.connect(postgres_url) as conn:  # the first write, holding its new row
        lock_counter(conn, "first")
        oid = int(conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0])  # type: ignore[index]
        write_batch(conn, first, _unit(np.random.default_rng(5), 2), None, (), oid, locked=True)
        thread = threading.Thread(target=lambda: purged.append(backend.purge("first")))
        thread.start()
        thread.join(10)
        waited = thread.is_alive()
        conn.commit()
    thread.join(10)
    assert not waited and purged == [0]
    assert backend.count("first") == 2
    with psycopg.connect(postgres_url) as conn:
        docs = conn.execute(
            "SELECT lex_docs FROM reflective_counters WHERE namespace = 'first'"
        ).fetchone()
    assert docs == (2,)


# -- the catch-up statement, sent at once and read later (sent.py) ------------------------------


def _changes(conn: psycopg.Connection[Any], namespace: str, touches: int, removals: int) -> Any:
    from langchain_reflective.backends.postgres.queries import LOCAL_CHANGES
    from langchain_reflective.backends.postgres.rows import INT8_OID, TEXT_OID
    from langchain_reflective.backends.postgres.sent import receive_row, send_statement

    params = [namespace.encode(), str(touches).encode(), str(removals).encode()]
    send_statement(conn, LOCAL_CHANGES, params, (TEXT_OID, INT8_OID, INT8_OID))
    return receive_row(conn)


def test_the_catch_up_statement_reads_the_namespaces_changes(
    backend: PostgresBackend, postgres_url: str
) -> None:
    """The head (newest key, removals, live memories, touch clock) and what changed after the
    given clock and removal count, in binary, as the local index unpacks them."""
    import numpy as np

    from langchain_reflective.backends.postgres.rows import int_from_binary

    records = _put(backend, 5)
    keys = _keys(backend, records)
    backend.delete("default", [records[2].id])
    backend.touch("default", [keys[0], keys[4]], T0 + timedelta(days=1))
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        row = _changes(conn, "default", 0, 0)
        newest, removals, live, clock = (int_from_binary(v) for v in row[:4])
        assert (newest, removals, live, clock) == (keys[4], 1, 4, 1)
        touched = np.frombuffer(row[4], dtype=">i8").tolist()
        assert sorted(touched) == [keys[0], keys[4]]
        stamps = np.frombuffer(row[5], dtype=">f8")
        assert (stamps == (T0 + timedelta(days=1)).timestamp()).all()
        assert np.frombuffer(row[6], dtype=">i8").tolist() == [1]  # removal 1 ...
        assert np.frombuffer(row[7], dtype=">i8").tolist() == [keys[2]]  # ... of this key
        caught_up = _changes(conn, "default", 1, 1)  # nothing after them: NULLs
        assert caught_up[:4] == row[:4] and caught_up[4:] == [None] * 4
        never = _changes(conn, "nobody", 0, 0)  # a namespace never written: all NULL
        assert never == [None] * 8
        assert conn.execute("SELECT 1").fetchone() == (1,)  # (the connection is idle again)


def test_a_sent_statement_runs_on_the_server_before_its_row_is_read(postgres_url: str) -> None:
    """``send_statement`` returns with the statement on the wire: the server is running it
    while the caller works, before ``receive_row`` asks for the row."""
    from langchain_reflective.backends.postgres.sent import receive_row, send_statement

    with (
        psycopg.connect(postgres_url, autocommit=True) as conn,
        psycopg.connect(postgres_url, autocommit=True) as admin,
    ):
        pid = conn.info.backend_pid
        send_statement(conn, b"SELECT pg_sleep(30), $1::int", [b"7"], (20,))
        running = None
        for _ in range(500):  # (up to ~5 s for the server to report it)
            running = admin.execute(
                "SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if running is not None and running[0] == "active":
                break
            time.sleep(0.01)
        assert running is not None and running[0] == "active" and "pg_sleep" in running[1]
        admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
        with pytest.raises(psycopg.errors.QueryCanceled):  # (the server's error, by SQLSTATE)
            receive_row(conn)
        assert conn.execute("SELECT 1").fetchone() == (1,)  # idle and usable again


def test_a_sent_statements_error_keeps_its_diagnostics_and_no_rows_read_as_none(
    postgres_url: str,
) -> None:
    from langchain_reflective.backends.postgres.sent import receive_row, send_statement

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        send_statement(conn, b"SELECT 1 / $1::int", [b"0"], (20,))
        with pytest.raises(psycopg.errors.DivisionByZero) as caught:
            receive_row(conn)
        assert caught.value.diag.message_primary == "division by zero"
        send_statement(conn, b"SELECT 1 WHERE $1::int < 0", [b"1"], (20,))
        assert receive_row(conn) is None
        send_statement(conn, b"SELECT $1::bigint, NULL::bytea", [b"-5"], (20,))
        assert receive_row(conn) == [(-5).to_bytes(8, "big", signed=True), None]


def test_a_connection_lost_under_a_sent_statement_raises_and_is_broken(postgres_url: str) -> None:
    from langchain_reflective.backends.postgres.sent import receive_row, send_statement

    with (
        psycopg.connect(postgres_url, autocommit=True) as conn,
        psycopg.connect(postgres_url, autocommit=True) as admin,
    ):
        send_statement(conn, b"SELECT pg_sleep(30), $1::int", [b"1"], (20,))
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            receive_row(conn)
        assert conn.broken  # (so the pool drops it, and the backend retries a read elsewhere)
