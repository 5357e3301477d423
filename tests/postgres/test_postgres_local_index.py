"""``PostgresBackend(local_index=True)``: candidates gathered from the namespace held in
memory, exact against the server whatever another process (here: another backend on its own
pool) writes in between -- adds, deletes, replaces, touches, purges -- loaded in the
background, bounded in size, and dropped and loaded again when it cannot catch up."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

from langchain_reflective.backends.base import CandidateSet, RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend, local_index
from langchain_reflective.backends.postgres.queries import REMOVALS_KEPT
from langchain_reflective.errors import StorageError
from langchain_reflective.records import MemoryRecord
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k
from tests.postgres.sample_memories import DIM, T0, _fill, _records, _unit

pytestmark = [pytest.mark.postgres, pytest.mark.integration]

NOW = T0 + timedelta(days=30)
CONFIG = ScoringConfig.hybrid()


def _open(url: str, **kwargs: Any) -> PostgresBackend:
    backend = PostgresBackend.from_conn_string(url, max_size=4, **kwargs)
    backend.setup()
    backend.bind_embeddings("test-model", DIM)
    backend.configure(CONFIG)
    return backend


@pytest.fixture
def server(postgres_url: str) -> Iterator[PostgresBackend]:
    """The writer, and the reference: no local index (every answer from the server)."""
    backend = _open(postgres_url)
    yield backend
    backend.close()


@pytest.fixture
def local(postgres_url: str) -> Iterator[PostgresBackend]:
    backend = _open(postgres_url, local_index=True, local_index_wait=True)
    yield backend
    backend.close()


def _held(backend: PostgresBackend) -> dict[str, int]:
    held = backend._candidates.local
    assert held is not None
    return held.loaded()


def _ranking(
    backend: PostgresBackend,
    vector: np.ndarray,
    *,
    namespace: str = "default",
    query: str = "tea and music by the river",
    exact: bool = False,
    flt: RetrievalFilter | None = None,
) -> tuple[list[int], np.ndarray]:
    found = backend.candidates(
        namespace, query, vector, k=10, filter=flt or RetrievalFilter(), config=CONFIG,
        exact=exact,
    )  # fmt: skip
    comps, _ = score_candidates(CONFIG, found, NOW.timestamp())
    order = top_k(comps.score, min(10, found.size))
    return found.keys[order].tolist(), comps.score[order]


def _assert_same(
    local: PostgresBackend, server: PostgresBackend, namespace: str = "default"
) -> None:
    """The local index ranks the namespace as the server's exact scoring does, for several
    queries (up to float32 rounding of the cosines)."""
    rng = np.random.default_rng(7)
    for vector in _unit(rng, 4):
        for flt in (None, RetrievalFilter(kinds=frozenset({"observation"}))):
            keys, scores = _ranking(local, vector, namespace=namespace, flt=flt)
            want_keys, want_scores = _ranking(
                server, vector, namespace=namespace, exact=True, flt=flt
            )
            assert keys == want_keys
            np.testing.assert_allclose(scores, want_scores, atol=1e-6)
    assert namespace in _held(local)


def _keys_of(backend: PostgresBackend, records: list[MemoryRecord]) -> list[int]:
    found = backend.fetch(records[0].namespace, list(range(1, 100_000)))
    by_id = {r.id: k for k, r in found.items()}
    return [by_id[r.id] for r in records]


def test_every_write_of_another_process_is_seen_by_the_next_retrieval(
    local: PostgresBackend, server: PostgresBackend
) -> None:
    records, _ = _fill(server, 40)
    _assert_same(local, server)  # loaded on this first retrieval
    _fill(server, 15, seed=3)  # added elsewhere
    _assert_same(local, server)
    server.delete("default", [r.id for r in records[:6]])  # removed elsewhere
    _assert_same(local, server)
    keys = _keys_of(server, records[10:14])
    server.touch("default", keys, NOW)  # touched elsewhere: now the most recent
    _assert_same(local, server)
    fresh = _records(3, seed=9)
    server.replace("default", [records[20].id], fresh, _unit(np.random.default_rng(9), 3))
    _assert_same(local, server)
    server.touch("default", keys[:1], T0 - timedelta(days=1))  # an access time lowered
    _assert_same(local, server)
    assert server.purge("default") > 0  # purged elsewhere: dropped, loaded again
    assert _ranking(local, _unit(np.random.default_rng(1), 1)[0])[0] == []
    _fill(server, 12, seed=11)
    _assert_same(local, server)
    assert _held(local) == {"default": 12}


def test_a_connection_in_another_encoding_still_sees_other_writes(
    postgres_url: str, server: PostgresBackend
) -> None:
    """The catch-up and touch statements send the namespace as UTF-8 bytes: with
    ``client_encoding=LATIN1`` in the URL, "café" reached the server as "cafÃ©", so the
    local index never saw another process's writes and touches went to a namespace of
    their own."""
    sep = "&" if "?" in postgres_url else "?"
    latin = _open(postgres_url + f"{sep}client_encoding=LATIN1", local_index=True,
                  local_index_wait=True)  # fmt: skip
    try:
        records, _ = _fill(server, 20, namespace="café")
        _assert_same(latin, server, namespace="café")
        _fill(server, 7, namespace="café", seed=3)  # added elsewhere
        _assert_same(latin, server, namespace="café")
        assert _held(latin) == {"café": 27}
        keys = _keys_of(server, records[:2])
        latin.touch("café", keys, NOW)
    finally:
        latin.close()  # (writes the touches it holds)
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT DISTINCT namespace FROM reflective_access").fetchall()
    assert rows == [("café",)]
    assert all(r.accessed_at == NOW for r in server.fetch("café", keys).values())


def test_its_own_writes_and_touches_too(local: PostgresBackend, server: PostgresBackend) -> None:
    records, _ = _fill(local, 30)
    _assert_same(local, server)
    local.touch("default", _keys_of(local, records[:3]), NOW)
    local.delete("default", [records[5].id])
    _fill(local, 5, seed=4)
    _assert_same(local, server)


class _Counted:
    """Counts the local index's rankings and the catch-ups it had to apply."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ranked = 0
        self.applied = 0
        rank, apply = local_index.partition_candidates, local_index.LocalIndex._apply

        def counted_rank(*args: Any, **kwargs: Any) -> Any:
            self.ranked += 1
            return rank(*args, **kwargs)

        def counted_apply(*args: Any) -> Any:
            self.applied += 1
            return apply(*args)

        monkeypatch.setattr(local_index, "partition_candidates", counted_rank)
        monkeypatch.setattr(local_index.LocalIndex, "_apply", counted_apply)


def _server_access_times(url: str, keys: list[int]) -> list[float]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT date_part('epoch', last_accessed_at) FROM reflective_access "
            "WHERE seq = ANY(%s) ORDER BY seq",
            (keys,),
        ).fetchall()
    return [float(r[0]) for r in rows]


def test_its_own_touches_leave_the_next_catch_up_nothing_to_apply(
    local: PostgresBackend,
    server: PostgresBackend,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A retrieval ranks while the catch-up statement runs, and that ranking stands when
    nothing changed: the process applies its own touches as it makes them (the server's
    access times, to the bit), so retrieving and touching again and again ranks once each."""
    records, _ = _fill(server, 40)
    _assert_same(local, server)
    counted = _Counted(monkeypatch)
    rng = np.random.default_rng(3)
    for i, vector in enumerate(_unit(rng, 5)):
        keys, _ = _ranking(local, vector)
        local.touch("default", keys, NOW + timedelta(hours=i))
    assert (counted.ranked, counted.applied) == (5, 0)
    held = local._candidates.local
    assert held is not None
    part = held._replicas["default"].part
    all_keys = _keys_of(server, records)
    rows = part.rows_of(all_keys)
    assert part.accessed.view[rows].tolist() == _server_access_times(postgres_url, all_keys)
    _assert_same(local, server)


def test_a_change_made_elsewhere_is_applied_and_ranked_again(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What another process changed since the last retrieval is applied once the catch-up
    statement answers, and the namespace is ranked again: the ranking made meanwhile, on the
    memories as they were, is not returned. After a catch-up that applied changes the next
    one is awaited before ranking, so a namespace others keep writing is ranked once."""
    records, _ = _fill(server, 30)
    _assert_same(local, server)
    counted = _Counted(monkeypatch)
    vector = _unit(np.random.default_rng(4), 1)[0]
    for change in range(3):
        if change == 0:
            _fill(server, 5, seed=8)  # added elsewhere
        elif change == 1:
            server.touch("default", _keys_of(server, records[:4]), NOW)  # touched elsewhere
        else:
            server.delete("default", [records[7].id])  # removed elsewhere
        before = counted.ranked
        keys, scores = _ranking(local, vector)
        assert counted.ranked - before == 2  # on the memories as they were, then as they are
        want_keys, want_scores = _ranking(server, vector, exact=True)
        assert keys == want_keys
        np.testing.assert_allclose(scores, want_scores, atol=1e-6)
        assert _ranking(local, vector)[0] == keys
        assert counted.ranked - before == 3  # nothing new since: ranked once
    assert counted.applied == 3
    # while others keep writing, each retrieval waits for the changes before it ranks: once
    for seed in (20, 21):
        _fill(server, 2, seed=seed)
        before = counted.ranked
        assert _ranking(local, vector)[0] == _ranking(server, vector, exact=True)[0]
        assert counted.ranked - before == (2 if seed == 20 else 1)


def test_a_ranking_that_fails_while_the_statement_runs_leaves_no_connection_busy(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catch-up's row is read even when the ranking made meanwhile fails: the error
    surfaces, the namespace is loaded again, and the pooled connection stays usable."""
    _fill(server, 20)
    _assert_same(local, server)
    real = local_index.partition_candidates

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("ranking failed")

    monkeypatch.setattr(local_index, "partition_candidates", broken)
    with pytest.raises(RuntimeError, match="ranking failed"):
        _ranking(local, _unit(np.random.default_rng(1), 1)[0])
    monkeypatch.setattr(local_index, "partition_candidates", real)
    pool = local._pools.pool
    for _ in range(pool.max_size + 1):  # every pooled connection answers
        with local._pools.conn() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    stats = pool.get_stats()
    assert stats.get("returns_bad", 0) == stats.get("connections_lost", 0) == 0  # none closed
    _assert_same(local, server)


def test_the_first_retrieval_is_answered_by_the_server_while_it_loads(
    postgres_url: str, server: PostgresBackend
) -> None:
    _fill(server, 30)
    vector = _unit(np.random.default_rng(2), 1)[0]
    want = _ranking(server, vector, exact=True)[0]
    with _open(postgres_url, local_index=True) as backend:
        assert _ranking(backend, vector)[0] == want  # from the server; a load has started
        deadline = time.monotonic() + 30
        while "default" not in _held(backend) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _held(backend) == {"default": 30}
        assert _ranking(backend, vector)[0] == want  # from memory
        assert backend.preload("default") and backend.preload("empty")
        assert _held(backend) == {"default": 30, "empty": 0}


def test_a_namespace_too_large_is_left_to_the_server_and_the_least_used_are_dropped(
    postgres_url: str, server: PostgresBackend
) -> None:
    _fill(server, 30, namespace="big")
    _fill(server, 12, namespace="a", seed=1)
    _fill(server, 12, namespace="b", seed=2)
    with _open(
        postgres_url, local_index=True, local_index_wait=True, local_index_max_memories=20
    ) as backend:
        vector = _unit(np.random.default_rng(3), 1)[0]
        got = _ranking(backend, vector, namespace="big")[0]
        assert got == _ranking(server, vector, namespace="big", exact=True)[0]  # the server's
        assert "big" not in _held(backend)
        _assert_same(backend, server, "a")
        _assert_same(backend, server, "b")  # a and b do not fit together: a, least used, goes
        assert _held(backend) == {"b": 12}
        _assert_same(backend, server, "a")
        assert _held(backend) == {"a": 12}


def test_a_process_that_fell_behind_the_listed_removals_loads_again(
    local: PostgresBackend, server: PostgresBackend, postgres_url: str
) -> None:
    records, _ = _fill(server, 30)
    _assert_same(local, server)
    server.delete("default", [records[0].id])
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # as if it were long ago
        conn.execute(
            "UPDATE reflective_counters SET removals = removals + %s WHERE namespace = 'default'",
            (REMOVALS_KEPT,),
        )
        conn.execute("DELETE FROM reflective_removed")
    server.delete("default", [records[1].id, records[2].id])
    _assert_same(local, server)  # its removals are gone: dropped, then loaded again
    assert _held(local) == {"default": 27}


def test_large_namespaces_rank_through_an_ivf_index_and_mostly_tombstones_reload(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_reflective.backends.sqlite import ann

    monkeypatch.setattr(local_index, "EXACT_LIMIT", 300)
    monkeypatch.setattr(ann, "_ANN_BACKGROUND_MIN", 1000)  # trained on a worker thread
    records = []
    for seed in range(4):
        records += _fill(server, 400, seed=seed)[0]
    held = local._candidates.local
    assert held is not None and held.load("default")
    part = held._replicas["default"].part
    assert part.ann is not None and part.ann_build is None  # loaded with its IVF index built
    assert part.live == 1600
    agree = []
    for vector in _unit(np.random.default_rng(5), 20):
        got = _ranking(local, vector)[0]
        want = _ranking(server, vector, exact=True)[0]
        agree.append(len(set(got) & set(want)) / 10)
    assert np.mean(agree) >= 0.9
    server.delete("default", [r.id for r in records[:900]])  # more deleted rows than live
    _assert_same(local, server)
    assert held._replicas["default"].part is not part  # compacted by loading it again


def test_a_growing_namespace_trains_its_ivf_index_on_a_worker_thread(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crossing ``EXACT_LIMIT`` starts a build the retrieval does not wait for: it scores
    exactly meanwhile, and a later retrieval installs the index."""
    monkeypatch.setattr(local_index, "EXACT_LIMIT", 300)
    _fill(server, 200)
    held = local._candidates.local
    assert held is not None and held.load("default")
    part = held._replicas["default"].part
    _fill(server, 200, seed=1)
    vector = _unit(np.random.default_rng(3), 1)[0]
    # one retrieval: it catches up past the limit and starts the build, which only a later
    # retrieval installs (no race): it scored exactly
    assert _ranking(local, vector)[0] == _ranking(server, vector, exact=True)[0]
    assert part.live == 400 and part.ann is None
    build = part.ann_build
    assert build is not None
    build.join()
    _ranking(local, vector)
    assert part.ann is not None and part.ann_build is None


def test_a_filter_matching_few_enough_memories_is_scored_exactly(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above ``EXACT_LIMIT`` an unfiltered retrieval takes the approximate path, but one whose
    filter matches at most ``FILTERED_EXACT_LIMIT`` memories is scored exactly."""
    monkeypatch.setattr(local_index, "EXACT_LIMIT", 300)
    monkeypatch.setattr(local_index, "FILTERED_EXACT_LIMIT", 350)
    _fill(server, 400)  # 320 observations, 80 reflections
    held = local._candidates.local
    assert held is not None and held.load("default")
    vector = _unit(np.random.default_rng(4), 1)[0]
    kinds = RetrievalFilter(kinds=frozenset({"observation"}))

    def candidates(flt: RetrievalFilter) -> CandidateSet:
        return local.candidates("default", "tea", vector, k=10, filter=flt, config=CONFIG)

    assert not candidates(RetrievalFilter()).exact
    found = candidates(kinds)
    assert found.exact and found.size == 320
    want = _ranking(server, vector, exact=True, flt=kinds)[0]
    assert _ranking(local, vector, flt=kinds)[0] == want


def test_async_retrievals_and_concurrent_writers(
    local: PostgresBackend, server: PostgresBackend
) -> None:
    _fill(server, 40)
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            for seed in range(20):
                records, _ = _fill(server, 5, seed=100 + seed)
                server.delete("default", [records[0].id])
        except BaseException as exc:
            errors.append(exc)
        finally:
            stop.set()

    def reader() -> None:
        try:
            rng = np.random.default_rng(threading.get_ident() % 1000)
            while not stop.is_set():
                local.candidates(
                    "default", "tea", _unit(rng, 1)[0], k=10, filter=RetrievalFilter(),
                    config=CONFIG,
                )  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=writer),
        *(threading.Thread(target=reader) for _ in range(3)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    _assert_same(local, server)

    async def both() -> tuple[list[int], list[int]]:
        vector = _unit(np.random.default_rng(8), 1)[0]
        found = await local.acandidates(
            "default", "tea", vector, k=10, filter=RetrievalFilter(), config=CONFIG
        )
        comps, _ = score_candidates(CONFIG, found, NOW.timestamp())
        got = found.keys[top_k(comps.score, 10)].tolist()
        return got, _ranking(server, vector, query="tea", exact=True)[0]

    got, want = asyncio.run(both())
    assert got == want


def test_a_change_of_lexical_context_loads_the_other_terms(
    local: PostgresBackend, server: PostgresBackend
) -> None:
    _fill(server, 40)
    _assert_same(local, server)
    for config in (ScoringConfig.hybrid(context=False), CONFIG):
        local.configure(config)
        server.configure(config)
        vector = _unit(np.random.default_rng(4), 1)[0]
        found = local.candidates(
            "default", "tea river", vector, k=10, filter=RetrievalFilter(), config=config
        )
        want = server.candidates(
            "default", "tea river", vector, k=10, filter=RetrievalFilter(), config=config,
            exact=True,
        )  # fmt: skip
        assert found.lexical is not None and want.lexical is not None
        by_key = dict(zip(want.keys.tolist(), want.lexical.tolist(), strict=True))
        assert [by_key[k] for k in found.keys[: found.size].tolist()] == pytest.approx(
            found.lexical[: found.size].tolist()
        )


def test_preload_needs_a_local_index_and_close_stops_a_load(
    postgres_url: str, server: PostgresBackend, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError, match="local_index=True"):
        server.preload("default")
    with pytest.raises(ValueError, match="local_index_max_memories"):
        PostgresBackend.from_conn_string(postgres_url, local_index=True, local_index_max_memories=0)
    _fill(server, 50)
    backend = _open(postgres_url, local_index=True)
    backend.candidates(
        "default", "tea", _unit(np.random.default_rng(1), 1)[0], k=10, filter=RetrievalFilter(),
        config=CONFIG,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING):
        backend.close()  # waits for the load it started, which stops
    assert not [r for r in caplog.records if "local index" in r.getMessage()]


async def test_apreload_loads_in_a_worker_thread(
    postgres_url: str, server: PostgresBackend
) -> None:
    _fill(server, 20)
    backend = _open(postgres_url, local_index=True)
    try:
        assert await backend.apreload("default")
        assert _held(backend) == {"default": 20}
        with pytest.raises(ValueError, match="local_index=True"):
            await server.apreload("default")
    finally:
        await backend.aclose()


@pytest.mark.parametrize("wait", [False, True], ids=["background", "in-thread"])
def test_a_load_that_fails_is_logged_and_not_tried_again_at_once(
    postgres_url: str,
    server: PostgresBackend,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    wait: bool,
) -> None:
    """A load that fails (here: no memory for the namespace), in the background or in the
    retrieving thread (``local_index_wait``), leaves the retrievals to the server, is logged
    once and is not tried again before ``RETRY_AFTER``."""
    _fill(server, 20)
    attempts: list[str] = []

    def broken(conn: Any, part: Any, namespace: str, *args: Any) -> int:
        attempts.append(namespace)
        raise MemoryError("no room for the namespace")

    monkeypatch.setattr(local_index, "_read_rows", broken)
    vector = _unit(np.random.default_rng(2), 1)[0]
    want = _ranking(server, vector, exact=True)[0]
    with (
        _open(postgres_url, local_index=True, local_index_wait=wait) as backend,
        caplog.at_level(logging.WARNING),
    ):
        for _ in range(3):
            assert _ranking(backend, vector)[0] == want  # the server's answer meanwhile
            held = backend._candidates.local
            assert held is not None
            for future in list(held._loading.values()):
                future.exception(timeout=10)
        time.sleep(0.1)  # (the done-callback runs right after the future's result is set)
        assert attempts == ["default"] and _held(backend) == {}
    warned = [r.getMessage() for r in caplog.records if "local index failed" in r.getMessage()]
    assert len(warned) == 1 and "no room" in warned[0]


def test_a_catch_up_that_fails_halfway_loads_the_namespace_again(
    local: PostgresBackend, server: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection lost after some new memories were applied must not leave them applied
    twice: the namespace is dropped and loaded again."""
    _fill(server, 30)
    _assert_same(local, server)
    _fill(server, 10, seed=5)
    real = local_index._read_rows

    def lost_after_reading(*args: Any) -> int:
        real(*args)
        raise psycopg.OperationalError("the connection was lost")

    monkeypatch.setattr(local_index, "_read_rows", lost_after_reading)
    with pytest.raises(StorageError, match="connection was lost"):
        _ranking(local, _unit(np.random.default_rng(1), 1)[0])
    monkeypatch.setattr(local_index, "_read_rows", real)
    _assert_same(local, server)
    assert _held(local) == {"default": 40}


def test_a_load_done_before_its_callback_is_registered_does_not_block(
    postgres_url: str,
) -> None:
    """A load can end before the retrieval that started it registers its callback (nothing
    bound yet: there is nothing to load); the callback then runs in the retrieving thread and
    must not wait for a lock that thread holds. Here the loader finishes each load before
    ``submit`` returns, as a fast one may."""
    from concurrent.futures import Future

    class Fast:
        def submit(self, fn: Any, *args: Any) -> Future[None]:
            done: Future[None] = Future()
            loader = threading.Thread(target=fn, args=args)
            loader.start()
            loader.join()
            done.set_result(None)
            return done

        def shutdown(self, **kwargs: Any) -> None:
            pass

    backend = PostgresBackend.from_conn_string(postgres_url, local_index=True)
    backend.setup()
    held = backend._candidates.local
    assert held is not None
    held._loader = Fast()  # type: ignore[assignment]
    finished = threading.Event()

    def retrieve() -> None:
        for _ in range(3):
            found = backend.candidates(
                "default", "tea", np.ones(DIM, np.float32) / 4, k=10, filter=RetrievalFilter(),
                config=CONFIG,
            )  # fmt: skip
            assert found.size == 0
        finished.set()

    threading.Thread(target=retrieve, daemon=True).start()
    assert finished.wait(30), "the retrieval waited for a lock it held"
    backend.close()
