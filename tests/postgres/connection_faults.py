"""What a server restart, a failover or a lost reply does to the Postgres backend's connections,
for its tests: every other connection dropped (``_drop_connections``), commits that wait for a
standby that never comes, and a connection terminated while its commit waits."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import psycopg


def _drop_connections(url: str) -> int:
    """What a server restart, a failover or a proxy's idle timeout does to a pool: every other
    connection to the database is closed by the server (waiting until each is gone)."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def _commits_wait_for_a_standby(url: str) -> Iterator[None]:
    """Every commit waits for a synchronous standby that never comes: the transaction is
    committed on the server, but its client has no reply until the wait ends. Terminating
    such a connection is a commit whose reply was lost (a failover or a network cut at the
    wrong moment)."""

    def reconfigure(names: str | None) -> None:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SET synchronous_commit = local")  # (its own commits do not wait)
            if names is None:
                admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            else:
                admin.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
            admin.execute("SELECT pg_reload_conf()")
        # the reload is asynchronous: once a new session sees the setting, the server has
        # re-read its configuration and signalled every session, so the pool's connections
        # apply it before their next statement (else, on a loaded machine, a commit could
        # still not wait)
        want = names or ""
        for _ in range(200):
            with psycopg.connect(url, autocommit=True) as probe:
                row = probe.execute("SHOW synchronous_standby_names").fetchone()
            if row and row[0] == want:
                return
            time.sleep(0.05)
        raise AssertionError(f"synchronous_standby_names never became {want!r}")

    reconfigure("no_such_standby")
    try:
        yield
    finally:
        reconfigure(None)


@contextlib.contextmanager
def _terminated_while_waiting_for_the_standby(url: str) -> Iterator[None]:
    """Around a write: a thread terminates the first connection it finds waiting for the
    standby; fails if none waited."""
    done: list[bool] = []

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as admin:
            for _ in range(600):
                row = admin.execute(
                    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event = 'SyncRep'"
                ).fetchone()
                if row:
                    done.append(bool(row[0]))
                    return
                time.sleep(0.05)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        thread.join()
    assert done == [True], "no commit waited for the standby"
