"""PostgresBackend's connections against a real server: a wrong or malformed connection string
fails at once (never showing its password), the connections get TCP keepalives unless the
connection string sets them, and connections the server dropped are replaced, while idle
unseen, in use by running reads again (never writes)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.backends.postgres.conninfo import KEEPALIVES, with_keepalives
from langchain_reflective.backends.postgres.failures import ConnectionLostError
from langchain_reflective.errors import (
    StorageError,
)
from langchain_reflective.scoring import ScoringConfig
from tests.postgres.connection_faults import (
    _drop_connections,
)
from tests.postgres.sample_memories import _fill

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def test_a_wrong_connection_string_fails_at_once_with_the_servers_reason(
    postgres_server: str,
) -> None:
    """``from_conn_string`` checks the connection once: a missing database, a closed port or
    a malformed URL raise there, saying why (not at the first use, after the pool's 30 s
    wait, as "couldn't get a connection"); a malformed URL's password is not echoed."""
    head, sep, query = postgres_server.partition("?")
    missing = f"{head.rsplit('/', 1)[0]}/no_such_database{sep}{query}"
    with pytest.raises(StorageError, match='database "no_such_database" does not exist'):
        PostgresBackend.from_conn_string(missing)
    with pytest.raises(StorageError, match="refused"):
        PostgresBackend.from_conn_string("postgresql://ana@127.0.0.1:1/memories")
    with pytest.raises(StorageError, match="not a valid Postgres connection string") as bad:
        PostgresBackend.from_conn_string("postgresql://ana:s3cret@[db/memories")
    assert "s3cret" not in str(bad.value) and bad.value.__cause__ is None


@pytest.mark.parametrize(
    "url",
    [
        # an unencoded "/" ends libpq's host:port early: it quotes the password's head as "port"
        "postgresql://ana:Sup3rS3cret/x@/memories?host=/nonexistent",
        # an unencoded "%": libpq quotes the token, in the userinfo or as a parameter
        "postgresql://ana:Sup3rS3cretPW%zz@/memories?host=/nonexistent",
        "postgresql:///memories?host=/nonexistent&user=ana&password=Sup3rS3cretPW%zz",
        "host=/nonexistent port=x5 password='Sup3rS3cretPW' dbname=memories",
    ],
)
def test_a_malformed_connection_string_never_shows_its_password(url: str) -> None:
    """libpq quotes the parts of a connection string it cannot parse, and with a password
    holding an unencoded / or % those parts are the password: the error (and its chain, which
    ``--debug`` prints) shows ``***`` instead. No server is contacted."""
    with pytest.raises(StorageError) as bad:
        PostgresBackend.from_conn_string(url)
    assert "S3cret" not in str(bad.value) and bad.value.__cause__ is None
    assert "***" in str(bad.value) or "port" in str(bad.value)


_DEFAULTS = {key: str(value) for key, value in KEEPALIVES.items()}


@pytest.mark.parametrize(
    ("url", "own"),
    [
        ("postgresql://ana:pw@db.example:5432/memories?sslmode=require", {}),
        ("host=db.example dbname=memories", {}),
        ("postgresql://ana@db.example/memories?keepalives_idle=300", {"keepalives_idle": "300"}),
        ("host=db.example keepalives=0", {"keepalives": "0"}),
        (
            "host=db.example keepalives_count=9 keepalives_interval=1",
            {"keepalives_count": "9", "keepalives_interval": "1"},
        ),
    ],
)
def test_the_connections_get_tcp_keepalives_unless_the_connection_string_sets_them(
    url: str, own: dict[str, str]
) -> None:
    """Each keepalive setting the connection string leaves out gets its default; the ones it
    sets keep their value (``keepalives=0`` keeps them off), and everything else is kept."""
    given = conninfo_to_dict(url)
    assert conninfo_to_dict(with_keepalives(url)) == {**given, **_DEFAULTS, **own}


def test_a_connection_string_naming_a_service_is_left_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The service file may set the keepalives, and the connection string would override it."""
    assert with_keepalives("service=memories") == "service=memories"
    monkeypatch.setenv("PGSERVICE", "memories")
    assert with_keepalives("dbname=memories") == "dbname=memories"


def _settings(conn: psycopg.Connection[object]) -> dict[str, str]:
    """The connection's libpq settings in effect (with the ones it was not given)."""
    return {
        option.keyword.decode(): (option.val or b"").decode()
        for option in conn.pgconn.info
        if option.keyword.decode().startswith("keepalives")
    }


@contextlib.contextmanager
def _tcp_port_to(socket_path: str) -> Iterator[int]:
    """A local TCP port whose connections are relayed to the server's Unix socket (the test
    server listens on no TCP port)."""
    listener = socket.create_server(("127.0.0.1", 0))
    opened: list[socket.socket] = [listener]

    def relay(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # (closed: the test is over)
                return
            server = socket.socket(socket.AF_UNIX)
            server.connect(socket_path)
            opened.extend((client, server))
            for pair in ((client, server), (server, client)):
                threading.Thread(target=relay, args=pair, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        for sock in opened:
            sock.close()


def test_the_pools_tcp_connections_carry_the_keepalives_and_unix_sockets_still_connect(
    postgres_url: str,
) -> None:
    """Over the server's Unix socket (libpq ignores keepalives there) the backend connects and
    works as before; over TCP its pooled connections' sockets carry the settings."""
    with PostgresBackend.from_conn_string(postgres_url) as backend:
        backend.setup()
        assert backend.count() == 0
        with backend._pools.conn() as conn:
            assert _settings(conn) == _DEFAULTS
            host, port = conn.info.host, conn.info.port
    with _tcp_port_to(f"{host}/.s.PGSQL.{port}") as tcp:
        url = make_conninfo(postgres_url, host="127.0.0.1", port=tcp)
        with PostgresBackend.from_conn_string(url) as backend:
            assert backend.count() == 0
            with backend._pools.conn() as conn:
                sock = socket.socket(fileno=conn.fileno())
                try:
                    assert sock.family == socket.AF_INET
                    got = [
                        sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                    ]
                finally:
                    sock.detach()  # (the socket stays the connection's)
    assert got == [1, 30, 10, 3]


def test_connections_the_server_dropped_while_idle_are_replaced_unseen(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pooled connection idle for a while is checked before use: after the server dropped
    them all, the next calls succeed on new connections, a delete included (a delete is never
    run again, so only the check saves it). The async pool's calls are reads, which the retry
    would also save: that part checks the two together."""
    from langchain_reflective.backends.postgres import connection

    with PostgresBackend.from_conn_string(postgres_url, min_size=3) as backend:
        backend.setup()
        records, vectors = _fill(backend, 3)
        for _ in range(4):
            assert backend.count("default") == 3
        monkeypatch.setattr(connection, "IDLE_CHECK_SECONDS", 0.0)  # every connection is idle
        assert _drop_connections(postgres_url) >= 3
        assert backend.delete("default", [records[0].id]) == 1  # no StorageError
        assert backend.count("default") == 2
        backend.put([records[0]], vectors[:1])

    async def candidates(backend: PostgresBackend) -> int:  # (through the async pool)
        found = await backend.acandidates(
            "default", "tea", vectors[0], k=3, filter=RetrievalFilter(),
            config=ScoringConfig.hybrid(),
        )  # fmt: skip
        return found.size

    async def run() -> None:
        async with PostgresBackend.from_conn_string(postgres_url) as other:
            assert await candidates(other) == 3
            assert _drop_connections(postgres_url) >= 2
            assert await candidates(other) == 3

    asyncio.run(run())


def test_a_connection_dropped_in_use_is_retried_for_reads_never_for_writes(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections in steady use are not checked. When the server drops them, a read (or a
    touch, which only sets values) runs again on a new connection; a delete fails with a
    StorageError rather than run twice; then the pool has discarded the other dead ones."""
    from langchain_reflective.backends.postgres import connection

    monkeypatch.setattr(connection, "IDLE_CHECK_SECONDS", 3600.0)
    with PostgresBackend.from_conn_string(postgres_url, min_size=3) as backend:
        backend.setup()
        records, vectors = _fill(backend, 3)

        def candidates() -> int:
            found = backend.candidates(
                "default", "tea", vectors[0], k=3, filter=RetrievalFilter(),
                config=ScoringConfig.hybrid(),
            )  # fmt: skip
            return found.size

        for _ in range(4):
            assert backend.count("default") == 3
        assert _drop_connections(postgres_url) >= 3
        assert backend.count("default") == 3  # a read: run again
        assert _drop_connections(postgres_url) >= 3
        assert candidates() == 3
        assert _drop_connections(postgres_url) >= 3
        with pytest.raises(ConnectionLostError, match="connection to Postgres failed"):
            backend.delete("default", [records[0].id])  # a write: not run twice
        assert backend.count("default") == 3 and candidates() == 3

        async def run() -> None:
            try:
                found = await backend.acandidates(
                    "default", "tea", vectors[0], k=3, filter=RetrievalFilter(),
                    config=ScoringConfig.hybrid(),
                )  # fmt: skip
                assert found.size == 3
                assert _drop_connections(postgres_url) >= 1
                keys = found.keys[:1].tolist()
                assert len(await backend.atouch("default", keys, datetime.now(UTC))) == 1
            finally:
                await backend.aclose()  # (this loop's pool, closed in it)

        asyncio.run(run())
