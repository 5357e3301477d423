"""PostgresBackend's reflection lock against a real server: it excludes other connections, is
never left held by an interruption, is released when its holder dies, and needs a pool of two."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from langchain_reflective.backends.postgres import PostgresBackend

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def test_reflection_lock_excludes_other_connections(postgres_url: str) -> None:
    with (
        PostgresBackend.from_conn_string(postgres_url) as one,
        PostgresBackend.from_conn_string(postgres_url) as two,
    ):
        one.setup()
        with one.reflection_lock("alice"):
            with pytest.raises(TimeoutError), two.reflection_lock("alice", timeout=0):
                pass  # pragma: no cover
            with pytest.raises(TimeoutError), two.reflection_lock("alice", timeout=0.2):
                pass  # pragma: no cover
            with two.reflection_lock("bob", timeout=0):
                pass  # another namespace is not blocked
        with two.reflection_lock("alice", timeout=0):
            pass  # released on exit
        with pytest.raises(RuntimeError), one.reflection_lock("alice"):
            raise RuntimeError("the reflection failed")
        with two.reflection_lock("alice", timeout=0):
            pass  # released on errors too


@pytest.mark.parametrize("step", ["take", "release"])
def test_a_lock_interrupted_while_taken_or_released_is_not_left_held(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Ctrl-C (or a cancellation) while the lock was taken or released returned its
    connection to the pool still holding the lock: no other process could reflect on the
    namespace until that pooled session ended."""
    from langchain_reflective.backends.postgres import connection

    with PostgresBackend.from_conn_string(postgres_url, min_size=2, max_size=2) as backend:
        backend.setup()
        if step == "release":

            def interrupted(conn: Any, key: Any) -> None:
                raise KeyboardInterrupt

            monkeypatch.setattr(connection, "_unlock", interrupted)
            with pytest.raises(KeyboardInterrupt), backend.reflection_lock("alice"):
                pass
        else:
            real = psycopg.Connection.execute

            def interrupted_after(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                cursor = real(self, query, *args, **kwargs)
                if "pg_advisory_lock(" in str(query):  # taken on the server, then interrupted
                    raise KeyboardInterrupt
                return cursor

            monkeypatch.setattr(psycopg.Connection, "execute", interrupted_after)
            with pytest.raises(KeyboardInterrupt), backend.reflection_lock("alice", timeout=5):
                pass  # pragma: no cover
        monkeypatch.undo()
        with psycopg.connect(postgres_url, autocommit=True) as other:  # another session
            row = other.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (0x52464C54, "alice")
            ).fetchone()
            assert row == (True,)
        assert backend.count() == 0  # the pool goes on with a new connection


def test_a_dead_holder_releases_the_lock(postgres_url: str) -> None:
    holder = psycopg.connect(postgres_url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (0x52464C54, "alice"))
    with PostgresBackend.from_conn_string(postgres_url) as b:
        with pytest.raises(TimeoutError), b.reflection_lock("alice", timeout=0):
            pass  # pragma: no cover
        holder.close()  # the process holding it dies: its session ends
        with b.reflection_lock("alice", timeout=5):
            pass


def test_a_pool_too_small_for_the_reflection_lock_is_refused(postgres_url: str) -> None:
    with pytest.raises(ValueError, match="max_size"):
        PostgresBackend.from_conn_string(postgres_url, max_size=1)
