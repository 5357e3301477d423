"""``PostgresBackend(local_index=True)`` under faults and races: each test reproduces a defect
found in review (each failed before its fix)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend, local_index
from tests.postgres.sample_memories import T0, _fill, _unit
from tests.postgres.test_postgres_local_index import (
    CONFIG,
    _assert_same,
    _held,
    _open,
    _ranking,
    local,  # noqa: F401  (fixtures)
    server,  # noqa: F401
)

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def test_local_index_max_memories_bounds_what_is_held_after_namespaces_grow(
    postgres_url: str,
    server: PostgresBackend,  # noqa: F811
) -> None:
    """``local_index_max_memories``: "most memories the local index holds; the least recently
    used namespaces are dropped beyond it, and a larger namespace is never loaded". Namespaces
    that grow after they were loaded are caught up and kept, whatever they hold."""
    _fill(server, 10, namespace="a", seed=1)
    _fill(server, 10, namespace="b", seed=2)
    with _open(
        postgres_url, local_index=True, local_index_wait=True, local_index_max_memories=20
    ) as backend:
        _assert_same(backend, server, "a")
        _assert_same(backend, server, "b")
        assert _held(backend) == {"a": 10, "b": 10}  # 20: within the bound
        _fill(server, 30, namespace="a", seed=3)  # written elsewhere: "a" now holds 40
        vector = _unit(np.random.default_rng(4), 1)[0]
        want = _ranking(server, vector, namespace="a", exact=True)[0]
        assert _ranking(backend, vector, namespace="a")[0] == want
        assert sum(_held(backend).values()) <= 20, _held(backend)
        assert _ranking(backend, vector, namespace="a")[0] == want  # (the server's answer)
        _fill(server, 5, namespace="b", seed=5)  # "b" grows within the bound: still held
        _assert_same(backend, server, "b")
        assert _held(backend) == {"b": 15}


@pytest.mark.parametrize(
    ("step", "held"),
    [
        ("_read_rows", {}),  # reading the new memories: dropped, the server answers
        ("send_statement", {"default": 40}),  # the catch-up statement: retried
    ],
)
def test_a_connection_lost_while_catching_up_still_answers_with_every_write(
    local: PostgresBackend,  # noqa: F811
    server: PostgresBackend,  # noqa: F811
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
    held: dict[str, int],
) -> None:
    """The server drops the connection (a restart, a failover, an idle connection killed)
    under a step of the catch-up. The catch-up statement (``sent.send_statement``, its row read
    after the ranking) is a read ``Pools.retrying`` sends again on a fresh connection: the
    namespace stays in memory. Reading the new memories (``_read_rows``) is not retried: the
    namespace is dropped, to be loaded again, and the server's statement answers. Either way
    the retrieval ranks every write, as the server does."""
    _fill(server, 30)
    _assert_same(local, server)
    _fill(server, 10, seed=5)  # new memories: the next retrieval reads them
    real = getattr(local_index, step)
    killed: list[int] = []

    def dropped_once(conn: Any, *args: Any) -> Any:
        if not killed:  # the server drops this connection
            pid = conn.info.backend_pid
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            killed.append(pid)
        return real(conn, *args)

    monkeypatch.setattr(local_index, step, dropped_once)
    vector = _unit(np.random.default_rng(1), 1)[0]
    want = _ranking(server, vector, exact=True)[0]
    assert _ranking(local, vector)[0] == want
    assert killed and local.local_namespaces() == held


def test_the_servers_statement_retries_a_dropped_connection(
    server: PostgresBackend,  # noqa: F811
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(The reference behaviour for the test above: the same drop, on the server's candidate
    statement, is retried and the retrieval succeeds.)"""
    _fill(server, 30)
    source = server._candidates
    real = source._index.prepare
    killed: list[int] = []

    def dropped_once(conn: Any) -> None:
        if not killed:
            pid = conn.info.backend_pid
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            killed.append(pid)
        real(conn)

    monkeypatch.setattr(source._index, "prepare", dropped_once)
    vector = _unit(np.random.default_rng(1), 1)[0]
    assert _ranking(server, vector)[0]
    assert killed


def test_a_touch_and_a_delete_of_the_next_observation_do_not_deadlock(
    server: PostgresBackend,  # noqa: F811
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(Not introduced by the local index: the touch statement was already a multi-row
    ``UPDATE`` before schema 7.) A delete locks the deleted memory's access row (the cascade),
    then its neighbours' (``RELINK``); a touch locks its rows in key order. A touch of an
    observation and the one after it, while the latter is deleted, takes the first row the
    delete relinks and waits for the deleted one: Postgres breaks the cycle by failing one of
    them (``deadlock detected``). The delete here pauses before relinking, as a busy server
    may, only to make the interleaving certain."""
    from langchain_reflective.backends.postgres import writes

    records, _ = _fill(server, 10)
    found = server.fetch("default", list(range(1, 1000)))
    key = {r.id: k for k, r in found.items()}
    x, y = key[records[1].id], key[records[2].id]  # two observations, x just before y
    slow = "WITH pause AS MATERIALIZED (SELECT pg_sleep(1.5)) " + writes.RELINK.replace(
        "WHERE a.namespace", "FROM pause WHERE a.namespace"
    )
    monkeypatch.setattr(writes, "RELINK", slow)
    errors: list[BaseException] = []

    def delete() -> None:
        try:
            server.delete("default", [records[2].id])
        except BaseException as exc:
            errors.append(exc)

    deleting = threading.Thread(target=delete)
    deleting.start()
    time.sleep(0.5)  # the delete holds y's access row and sleeps before relinking x
    try:
        server.touch("default", [x, y], records[0].created_at)
    except BaseException as exc:
        errors.append(exc)
    deleting.join(30)
    assert not errors, errors


def test_deletes_and_touches_by_any_writer_are_seen(
    local: PostgresBackend,  # noqa: F811
    server: PostgresBackend,  # noqa: F811
    postgres_url: str,
) -> None:
    """A worker of an older package (schema 6) touches with a statement that knows nothing of
    the touch clock, and an operator may delete by hand: schema 7's triggers count and list
    both, so a process keeping the namespace in memory sees what they touched and stops
    ranking what they deleted. (Found in review: before the triggers, the package logged only
    its own deletes and touches, and an older worker's delete stayed in every local index.)"""
    records, _ = _fill(server, 30)
    _assert_same(local, server)  # loaded
    keys = sorted(server.fetch("default", list(range(1, 1000))))
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # schema 6's touch statement
        conn.execute(
            "UPDATE reflective_access a SET last_accessed_at = %s FROM reflective_memories m "
            "WHERE a.namespace = 'default' AND a.seq = ANY(%s) AND m.seq = a.seq",
            (T0 + timedelta(days=29), keys[10:13]),
        )
    _assert_same(local, server)
    vector = _unit(np.random.default_rng(3), 1)[0]

    def held_keys() -> set[int]:
        found = local.candidates(
            "default", "tea", vector, k=10, filter=RetrievalFilter(), config=CONFIG
        )  # (exact: a namespace this small is scored whole)
        return set(found.keys[: found.size].tolist())

    with psycopg.connect(postgres_url, autocommit=True) as conn:  # by hand
        conn.execute("DELETE FROM reflective_memories WHERE id = %s", (records[5].id,))
    assert held_keys() == set(server.fetch("default", keys)) == set(keys) - {keys[5]}
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DELETE FROM reflective_memories WHERE namespace = 'default'")
    assert held_keys() == set()


def test_concurrent_first_retrievals_load_the_namespace_once(
    postgres_url: str,
    server: PostgresBackend,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``local_index_wait=True`` each thread whose retrieval finds the namespace not yet
    loaded reads the whole namespace itself: N threads (a threaded web server's first burst of
    requests) load it N times at once -- N times the memory (~2 KB a memory) and the reads of
    a load -- and all but one copy are thrown away."""
    _fill(server, 40)
    real = local_index._read_rows
    loads: list[int] = []

    def slow(conn: Any, part: Any, namespace: str, after: int, *args: Any) -> int:
        if after == 0:
            loads.append(threading.get_ident())
            time.sleep(0.5)  # a namespace of some size
        return real(conn, part, namespace, after, *args)

    monkeypatch.setattr(local_index, "_read_rows", slow)
    with _open(postgres_url, local_index=True, local_index_wait=True) as backend:
        start = threading.Barrier(4)
        errors: list[BaseException] = []

        def retrieve() -> None:
            try:
                start.wait()
                _ranking(backend, _unit(np.random.default_rng(1), 1)[0])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=retrieve) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
        assert _held(backend) == {"default": 40}
        assert len(loads) == 1, f"the namespace was loaded {len(loads)} times at once"


def test_a_version_6_database_with_memories_upgraded_by_concurrent_setups(
    postgres_url: str,
) -> None:
    """(Checked, passes.) A version 6 database holding memories, touched and deleted ones
    included, upgraded by four concurrent ``setup()`` calls: the local index then loads it
    and follows every later write."""
    from tests.postgres.test_postgres_migrations import _undo_version_7

    with _open(postgres_url) as b:
        records, _ = _fill(b, 40)
        b.delete("default", [records[0].id])
        b.touch("default", [5, 6], records[0].created_at)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        _undo_version_7(conn)
        conn.execute("DELETE FROM reflective_schema_version WHERE version >= 7")
    backends = [PostgresBackend.from_conn_string(postgres_url, max_size=2) for _ in range(4)]
    errors: list[BaseException] = []

    def setup(b: PostgresBackend) -> None:
        try:
            b.setup()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=setup, args=(b,)) for b in backends]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for b in backends:
        b.close()
    assert not errors
    with (
        _open(postgres_url) as srv,
        _open(postgres_url, local_index=True, local_index_wait=True) as loc,
    ):
        assert srv.schema_version() == 8
        _assert_same(loc, srv)
        srv.delete("default", [records[1].id])
        srv.touch("default", [7, 8], records[5].created_at)
        _fill(srv, 5, seed=9)
        _assert_same(loc, srv)
