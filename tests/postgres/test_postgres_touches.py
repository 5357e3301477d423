"""Touches with the local index (``touches.py``): a touch whose records the local index keeps
is answered in memory and written by the writer thread after it returns; the process reads
its own touches, the server gets the same access times to the bit, and a touch that cannot
be written is logged and makes the namespace load again."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from langchain_reflective.backends.postgres import PostgresBackend, touches
from langchain_reflective.backends.postgres.local_index import LocalIndex
from tests.postgres import test_postgres_local_index as local_index_tests
from tests.postgres.sample_memories import _fill, _unit
from tests.postgres.test_postgres_local_index import (
    NOW,
    _assert_same,
    _Counted,
    _held,
    _keys_of,
    _open,
    _ranking,
    _server_access_times,
)

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

# the local-index tests' fixtures: a backend with the local index, and another process
local = local_index_tests.local
server = local_index_tests.server


class _Writes:
    """Counts the touches the writer thread writes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        write = touches.Touches._write

        def counted(*args: Any) -> None:
            self.n += 1
            write(*args)

        monkeypatch.setattr(touches.Touches, "_write", counted)


def _slow_writer(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The writer waits ``seconds`` before it sends each touch."""
    send = touches.send_statement

    def slow(*args: Any) -> None:
        time.sleep(seconds)
        send(*args)

    monkeypatch.setattr(touches, "send_statement", slow)


def _ranked(
    local: PostgresBackend, server: PostgresBackend, n: int, *, seed: int
) -> tuple[list[int], np.ndarray]:
    """``n`` memories written by ``server``, loaded by ``local``; the top 10 ``local`` ranks
    for a query vector drawn from ``seed``, and that vector."""
    _fill(server, n)
    _assert_same(local, server)
    vector = _unit(np.random.default_rng(seed), 1)[0]
    return _ranking(local, vector)[0], vector


def _touched_once(
    local: PostgresBackend, server: PostgresBackend, n: int, *, seed: int
) -> list[int]:
    """:func:`_ranked`'s top 10, touched once (through the server: their records are kept
    from then on)."""
    keys, _ = _ranked(local, server, n, seed=seed)
    local.touch("default", keys, NOW)
    return keys


def _index(backend: PostgresBackend) -> LocalIndex:
    held = backend._candidates.local
    assert held is not None
    return held


def test_a_touch_of_records_held_is_answered_in_memory_and_written_after(
    local: PostgresBackend,
    server: PostgresBackend,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first touch of some memories goes to the server and the local index keeps their
    records; the next is answered from them, with the new access time, and the writer writes
    it: the process's next read sees it, the server holds it to the bit, and the next
    retrieval ranks once, applying nothing."""
    records, _ = _fill(server, 40)
    _assert_same(local, server)
    keys, _ = _ranking(local, _unit(np.random.default_rng(5), 1)[0])
    writes = _Writes(monkeypatch)
    first = local.touch("default", keys, NOW)
    assert writes.n == 0  # not held yet: one statement, answered by the server
    later = NOW + timedelta(hours=2)
    counted = _Counted(monkeypatch)
    second = local.touch("default", keys, later)
    local._touches.settle()
    assert writes.n == 1  # answered in memory, written by the writer
    assert set(second) == set(first)
    for key, record in second.items():
        assert _fields(record) == {**_fields(first[key]), "last_accessed_at": later}
    ids = [second[k].id for k in keys]
    assert [r.last_accessed_at for r in local.get("default", ids)] == [later] * len(keys)
    assert [r.last_accessed_at for r in server.get("default", ids)] == [later] * len(keys)
    part = _index(local)._replicas["default"].part
    all_keys = _keys_of(server, records)
    assert part.accessed.view[part.rows_of(all_keys)].tolist() == _server_access_times(
        postgres_url, all_keys
    )
    _ranking(local, _unit(np.random.default_rng(6), 1)[0])
    assert (counted.ranked, counted.applied) == (1, 0)
    _assert_same(local, server)


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def test_records_handed_out_are_copies(local: PostgresBackend, server: PostgresBackend) -> None:
    keys = _touched_once(local, server, 20, seed=2)
    answered = local.touch("default", keys, NOW)
    answered[keys[0]].metadata["i"] = "changed by the caller"  # type: ignore[index]
    again = local.touch("default", keys, NOW)
    assert again[keys[0]].metadata == server.fetch("default", keys[:1])[keys[0]].metadata


def test_a_memory_removed_elsewhere_is_no_longer_answered_in_memory(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys, _ = _ranked(local, server, 30, seed=8)
    touched = local.touch("default", keys, NOW)
    server.delete("default", [touched[keys[0]].id])  # removed elsewhere
    _assert_same(local, server)  # (caught up: the removal applied)
    assert keys[0] not in _index(local)._replicas["default"].records
    writes = _Writes(monkeypatch)
    answer = local.touch("default", keys, NOW + timedelta(hours=1))
    assert keys[0] not in answer and set(answer) == set(keys[1:])
    assert writes.n == 0  # not every record held: the server answered


def test_a_catch_up_that_reads_back_only_its_own_touches_ranks_once(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the writer's clock cannot be counted in time (here: never), the next catch-up
    reads the touch back from the server; the access times are the ones the process applied
    already, so nothing is applied and the ranking made meanwhile stands."""
    keys, vector = _ranked(local, server, 30, seed=9)
    local.touch("default", keys, NOW)
    monkeypatch.setattr(LocalIndex, "own_clock", lambda self, namespace, clock, stamps: None)
    local.touch("default", keys, NOW + timedelta(minutes=5))  # answered in memory
    local._touches.settle()
    counted = _Counted(monkeypatch)
    assert _ranking(local, vector)[0] == _ranking(server, vector, exact=True)[0]
    assert (counted.ranked, counted.applied) == (1, 0)


def test_a_touch_that_cannot_be_written_is_logged_and_the_namespace_loaded_again(
    local: PostgresBackend,
    server: PostgresBackend,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys = _touched_once(local, server, 30, seed=3)
    monkeypatch.setattr(touches, "TOUCH_CLOCK", b"SELECT no_such_function($1, $2, $3)")
    with caplog.at_level(logging.WARNING, logger=touches.__name__):
        answered = local.touch("default", keys, NOW + timedelta(days=1))
        local._touches.settle()
    assert set(answered) == set(keys)
    assert "could not write the access time of" in caplog.text
    assert "default" not in _held(local)  # its access times are not the server's: dropped
    stored = server.fetch("default", keys)
    assert all(r.last_accessed_at == NOW for r in stored.values())  # the touch before it
    _assert_same(local, server)  # loaded again: exact


def test_close_writes_the_touches_still_pending(
    postgres_url: str, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = _open(postgres_url, local_index=True, local_index_wait=True)
    try:
        keys = _touched_once(local, server, 20, seed=4)
        _slow_writer(monkeypatch, 0.2)
        local.touch("default", keys, NOW + timedelta(days=2))  # answered in memory
    finally:
        local.close()
    stored = server.fetch("default", keys)
    assert [r.last_accessed_at for r in stored.values()] == [NOW + timedelta(days=2)] * len(keys)


def test_an_async_touch_is_answered_in_memory_too(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys, _ = _ranked(local, server, 20, seed=11)
    writes = _Writes(monkeypatch)
    later = NOW + timedelta(hours=3)

    async def run() -> list[Any]:
        first = await local.atouch("default", keys, NOW)
        assert writes.n == 0
        answered = await local.atouch("default", keys, later)
        await asyncio.to_thread(local._touches.settle)
        assert writes.n == 1 and set(answered) == set(first)
        ids = [answered[k].id for k in keys]
        try:
            return [r.last_accessed_at for r in await local.aget("default", ids)]
        finally:  # in this loop: its async pool, left to asyncio.run's shutdown, can hang it
            await local.aclose()

    assert asyncio.run(run()) == [later] * len(keys)


def test_the_writer_keeps_the_order_of_a_process_s_touches(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A touch the local index cannot answer waits for those the writer has not written yet
    (here: slowed down), so a later access time is never overwritten by an earlier one."""
    keys = _touched_once(local, server, 30, seed=12)
    _slow_writer(monkeypatch, 0.05)
    for hours in range(1, 4):
        local.touch("default", keys, NOW + timedelta(hours=hours))  # answered in memory
        index = _index(local)
        index._replicas["default"].records.pop(keys[0])  # the next one goes to the server
        local.touch("default", keys, NOW + timedelta(hours=hours, minutes=30))
        local._touches.settle()
        stored = server.fetch("default", keys)
        assert {r.last_accessed_at for r in stored.values()} == {
            NOW + timedelta(hours=hours, minutes=30)
        }


def test_a_naive_time_goes_to_the_server(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A naive access time is in the server's time zone, which the process does not know: such
    a touch is not answered in memory (where it would be stamped in the process's zone)."""
    keys = _touched_once(local, server, 20, seed=13)
    writes = _Writes(monkeypatch)
    answered = local.touch("default", keys, (NOW + timedelta(hours=1)).replace(tzinfo=None))
    assert writes.n == 0 and set(answered) == set(keys)
    assert {r.last_accessed_at for r in answered.values()} == {NOW + timedelta(hours=1)}
    _assert_same(local, server)


def _local_access_times(local: PostgresBackend, keys: list[int]) -> list[float]:
    part = _index(local)._replicas["default"].part
    return [float(t) for t in part.accessed.view[part.rows_of(sorted(keys))]]


def test_touches_made_together_are_written_in_one_statement(
    local: PostgresBackend,
    server: PostgresBackend,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Touches answered in memory while the writer gathers are written by one statement for
    their namespace; a memory touched twice gets the last access time given to it, on the
    server as on the local index (to the bit)."""
    keys = _touched_once(local, server, 30, seed=14)
    monkeypatch.setattr(touches, "GATHER", 60.0)  # gathering until something settles them
    writes = _Writes(monkeypatch)
    local.touch("default", keys[:6], NOW + timedelta(hours=2))
    local.touch("default", keys[3:], NOW + timedelta(hours=1))  # (an earlier time: it wins too)
    assert writes.n == 0
    local._touches.settle()
    assert writes.n == 1
    want = {k: NOW + timedelta(hours=2 if i < 3 else 1) for i, k in enumerate(keys)}
    assert {k: r.last_accessed_at for k, r in server.fetch("default", keys).items()} == want
    assert _local_access_times(local, keys) == _server_access_times(postgres_url, sorted(keys))
    _assert_same(local, server)


def test_a_touch_caught_up_from_elsewhere_before_this_one_is_written_is_overwritten(
    local: PostgresBackend,
    server: PostgresBackend,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another process touches the same memories after this process's touch was answered in
    memory, before the writer wrote it, and this process's next retrieval applies that touch.
    The writer's statement commits last, so the server keeps this process's access times: the
    local index must hold them again, not the other process's."""
    keys, vector = _ranked(local, server, 30, seed=15)
    local.touch("default", keys, NOW)  # through the server: the records are kept from now on
    monkeypatch.setattr(touches, "GATHER", 60.0)
    mine = NOW + timedelta(hours=1)
    local.touch("default", keys, mine)  # answered in memory, gathered
    server.touch("default", keys, NOW + timedelta(hours=2))  # elsewhere, committed first
    counted = _Counted(monkeypatch)
    _ranking(local, vector)  # catches up: the other touch is applied
    assert counted.applied == 1
    local._touches.settle()  # this process's touch, committed last
    assert {r.last_accessed_at for r in server.fetch("default", keys).values()} == {mine}
    assert _local_access_times(local, keys) == _server_access_times(postgres_url, sorted(keys))
    _assert_same(local, server)


def test_reads_and_close_write_the_gathered_touches_at_once(
    postgres_url: str, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of the process's own records and ``close`` end the writer's wait: neither waits
    out :data:`touches.GATHER` (here a minute), and both leave the touches on the server."""
    local = _open(postgres_url, local_index=True, local_index_wait=True)
    monkeypatch.setattr(touches, "GATHER", 60.0)
    try:
        keys = _touched_once(local, server, 20, seed=16)
        ids = [r.id for r in server.fetch("default", keys).values()]
        local.touch("default", keys, NOW + timedelta(hours=3))  # answered in memory
        started = time.monotonic()
        assert {r.last_accessed_at for r in local.get("default", ids)} == {NOW + timedelta(hours=3)}
        assert {r.last_accessed_at for r in server.get("default", ids)} == {
            NOW + timedelta(hours=3)
        }
        local.touch("default", keys, NOW + timedelta(hours=4))  # gathered again
    finally:
        local.close()
    assert time.monotonic() - started < 30  # (far below the minute either would wait)
    stored = server.fetch("default", keys)
    assert {r.last_accessed_at for r in stored.values()} == {NOW + timedelta(hours=4)}


_EXIT_WITHOUT_CLOSE = """
import sys
from datetime import datetime, timedelta, timezone
from langchain_reflective import MemoryStream, PostgresBackend
from langchain_reflective.backends.postgres import touches
from tests.fakes import WordEmbeddings

touches.GATHER = 1.0  # (still gathering when the interpreter starts to exit)
backend = PostgresBackend.from_conn_string(sys.argv[1], local_index=True, local_index_wait=True)
backend.setup()
stream = MemoryStream(WordEmbeddings(), backend=backend, namespace="exiting")
stream.add(["tea by the river"], importances=0.5)
when = datetime(2030, 1, 1, tzinfo=timezone.utc)
stream.retrieve("tea", k=1, now=when)  # through the server: the record is kept
stream.retrieve("tea", k=1, now=when + timedelta(hours=1))  # answered in memory, gathered
assert backend._touches.pending
"""


def test_a_process_that_exits_without_closing_still_writes_its_gathered_touches(
    postgres_url: str,
) -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WITHOUT_CLOSE, postgres_url],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "could not write" not in done.stderr
    with PostgresBackend.from_conn_string(postgres_url) as reader:
        [record] = reader.recent("exiting")
    assert record.last_accessed_at == datetime(2030, 1, 1, 1, tzinfo=UTC)


def test_a_touch_the_writer_cannot_take_is_written_by_the_caller(
    local: PostgresBackend, server: PostgresBackend
) -> None:
    """When the writer takes no new work (the interpreter is exiting), a touch answered in
    memory is written before it returns, and the next touch gathers again as usual."""
    keys = _touched_once(local, server, 20, seed=17)
    stopped = touches.ThreadPoolExecutor(1)
    stopped.shutdown()
    local._touches._writer = stopped  # (submit raises RuntimeError, as at exit)
    answered = local.touch("default", keys, NOW + timedelta(hours=5))
    assert set(answered) == set(keys)
    stored = server.fetch("default", keys)  # (written: nothing to settle)
    assert {r.last_accessed_at for r in stored.values()} == {NOW + timedelta(hours=5)}
    local._touches._writer = None
    local.touch("default", keys, NOW + timedelta(hours=6))
    local._touches.settle()
    stored = server.fetch("default", keys)
    assert {r.last_accessed_at for r in stored.values()} == {NOW + timedelta(hours=6)}
    _assert_same(local, server)


def test_a_failure_applying_written_times_reloads_the_namespace_and_raises_into_no_read(
    local: PostgresBackend,
    server: PostgresBackend,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys = _touched_once(local, server, 20, seed=18)

    def broken(*args: Any) -> None:
        raise RuntimeError("applying failed")

    monkeypatch.setattr(LocalIndex, "own_clock", broken)
    with caplog.at_level(logging.WARNING, logger=touches.__name__):
        local.touch("default", keys, NOW + timedelta(hours=7))  # answered in memory
        records = local.fetch("default", keys)  # settles: the writer raised nothing into it
    assert {r.last_accessed_at for r in records.values()} == {NOW + timedelta(hours=7)}
    assert "could not apply the access times" in caplog.text
    assert "default" not in _held(local)  # forgotten: loaded again at its next retrieval
    _assert_same(local, server)
