"""The backend conformance suite on the SQLite backend: a file, and in memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from langchain_reflective.backends.base import BaseMemoryBackend
from langchain_reflective.backends.sqlite import SQLiteBackend
from tests.backends.conformance import BackendConformance


class TestSQLiteFileBackend(BackendConformance):
    lexical_matches_reference = True

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> Callable[[], BaseMemoryBackend]:
        files = iter(tmp_path / f"memory-{i}.db" for i in range(1000))
        return lambda: SQLiteBackend(next(files))


class TestSQLiteMemoryBackend(BackendConformance):
    lexical_matches_reference = True

    @pytest.fixture
    def make_backend(self) -> Callable[[], BaseMemoryBackend]:
        return lambda: SQLiteBackend(None)


class TestSQLiteApproximateBackend(BackendConformance):
    """A tiny ``exact_limit``: retrieval goes through the IVF candidate path, while
    ``candidates(exact=True)`` must still rank exactly like the reference."""

    lexical_matches_reference = True

    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> Callable[[], BaseMemoryBackend]:
        files = iter(tmp_path / f"memory-{i}.db" for i in range(1000))
        return lambda: SQLiteBackend(next(files), exact_limit=20, ann_candidates=16)


def test_the_path_shortcut_builds_the_sqlite_backend(tmp_path: Path) -> None:
    from langchain_reflective import MemoryStream
    from tests.fakes import WordEmbeddings

    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db", exact_limit=50) as stream:
        assert isinstance(stream.backend, SQLiteBackend)
        assert stream.backend.path == tmp_path / "m.db" and stream.exact_limit == 50
    with SQLiteBackend(None) as refused, pytest.raises(ValueError, match="either backend"):
        MemoryStream(WordEmbeddings(), path=tmp_path / "x.db", backend=refused)
    with pytest.raises(TypeError, match="BaseMemoryBackend"):
        MemoryStream(WordEmbeddings(), backend=object())  # type: ignore[arg-type]


def test_the_reflection_lock_of_a_file_holds_across_processes(tmp_path: Path) -> None:
    import subprocess
    import sys
    import textwrap

    db = tmp_path / "m.db"
    holder = textwrap.dedent(
        f"""
        import sys, time
        from langchain_reflective.backends.sqlite import SQLiteBackend
        backend = SQLiteBackend({str(db)!r})
        with backend.reflection_lock("alice"):
            print("held", flush=True)
            sys.stdin.readline()  # until the parent says so
        backend.close()
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:  # (its exit closes the pipes)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
            with SQLiteBackend(db) as backend:
                with pytest.raises(TimeoutError), backend.reflection_lock("alice", timeout=0.2):
                    pass
                with backend.reflection_lock("bob", timeout=0):  # other namespaces are free
                    pass
                assert proc.stdin is not None
                proc.stdin.write("\n")
                proc.stdin.flush()
                assert proc.wait(timeout=30) == 0
                with backend.reflection_lock("alice", timeout=5):  # released by the other process
                    pass
        finally:
            proc.kill()
