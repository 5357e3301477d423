"""``atomic_file``: concurrent writers of one cache file each rename a whole file of their own;
a failed write removes its own temporary file and no one else's."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from langchain_reflective.backends.sqlite._files import STALE_TEMP_SECONDS, atomic_file


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_interleaved_writers_of_one_target_both_rename_a_whole_file(tmp_path: Path) -> None:
    # both wrote <target>.tmp: the later writer truncated the earlier one's file and renamed
    # it; the earlier one then wrote on into the target (torn) and failed (FileNotFoundError)
    target = tmp_path / "cache.faiss"
    first = atomic_file(target)
    fa = first.__enter__()
    fa.write(b"A" * 10)
    fa.flush()
    second = atomic_file(target)
    fb = second.__enter__()
    fb.write(b"B" * 20)
    second.__exit__(None, None, None)
    assert target.read_bytes() == b"B" * 20
    fa.write(b"A" * 10)
    first.__exit__(None, None, None)
    assert target.read_bytes() == b"A" * 20
    assert _temps(tmp_path) == []
    assert target.stat().st_mode & 0o777 == 0o600


def test_a_failed_writer_removes_only_its_own_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "cache.bm25"
    target.write_bytes(b"old")
    first = atomic_file(target)
    fa = first.__enter__()
    fa.write(b"new")
    with pytest.raises(OSError, match="disk full"), atomic_file(target) as fb:
        fb.write(b"partial")
        raise OSError("disk full")
    assert len(_temps(tmp_path)) == 1  # the first writer's, still being written
    assert target.read_bytes() == b"old"
    first.__exit__(None, None, None)
    assert target.read_bytes() == b"new"
    assert _temps(tmp_path) == []


def test_many_threads_writing_one_target_never_fail_nor_tear_it(tmp_path: Path) -> None:
    target = tmp_path / "cache.f32"
    payloads = [bytes([65 + i]) * 200_000 for i in range(6)]
    start = threading.Barrier(len(payloads))
    errors: list[BaseException] = []

    def write(payload: bytes) -> None:
        try:
            start.wait(10)
            for _ in range(15):
                with atomic_file(target) as fh:
                    for lo in range(0, len(payload), 4096):  # many writes, to interleave
                        fh.write(payload[lo : lo + 4096])
                        fh.flush()
                assert target.read_bytes() in payloads
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert target.read_bytes() in payloads
    assert _temps(tmp_path) == []


def test_a_writer_removes_day_old_leftovers_of_its_target_only(tmp_path: Path) -> None:
    target = tmp_path / "cache.cols"
    old = tmp_path / "cache.cols.k1lled.tmp"  # a writer killed mid-write, long ago
    live = tmp_path / "cache.cols.wr1t1ng.tmp"  # another writer's, being written now
    other = tmp_path / "other.cols.k1lled.tmp"  # another target's
    for leftover in (old, live, other):
        leftover.write_bytes(b"x")
    long_ago = time.time() - STALE_TEMP_SECONDS - 60
    os.utime(old, (long_ago, long_ago))
    os.utime(other, (long_ago, long_ago))
    with atomic_file(target) as fh:
        fh.write(b"data")
    assert _temps(tmp_path) == sorted([live.name, other.name])
    assert target.read_bytes() == b"data"
