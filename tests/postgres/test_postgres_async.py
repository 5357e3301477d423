"""PostgresBackend's async twins and async connection pools against a real server: the same
answers and settings as the sync ones, and closed in the event loop that opened them."""

from __future__ import annotations

import numpy as np
import pytest

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.scoring import ScoringConfig
from tests.postgres.sample_memories import T0, _fill

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


async def test_async_twins_match_sync(backend: PostgresBackend) -> None:
    records, vectors = _fill(backend, 20)
    kw = {"k": 4, "filter": RetrievalFilter(), "config": ScoringConfig.hybrid()}
    sync = backend.candidates("default", "tea", vectors[3], **kw)  # type: ignore[arg-type]
    got = await backend.acandidates("default", "tea", vectors[3], **kw)  # type: ignore[arg-type]
    assert np.array_equal(sync.keys, got.keys) and np.allclose(sync.relevance, got.relevance)
    touched = await backend.atouch("default", sync.keys[:2].tolist(), T0)
    assert all(r.last_accessed_at == T0 for r in touched.values()) and len(touched) == 2
    assert await backend.aget("default", [records[0].id]) == [records[0]]
    await backend.aclose()


async def test_sync_and_async_connections_carry_the_same_settings(postgres_url: str) -> None:
    names = ("TimeZone", "jit", "random_page_cost", "hnsw.ef_search", "ivfflat.iterative_scan")
    expected = ["UTC", "off", "1.1", "200", "relaxed_order"]
    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.setup()
    with backend._pools.conn() as conn:
        sync = [str(conn.execute(f'SHOW "{n}"').fetchone()[0]) for n in names]  # type: ignore[index]
    async with backend._pools.aconn() as aconn:
        found = [await (await aconn.execute(f'SHOW "{n}"')).fetchone() for n in names]
    await backend.aclose()  # (a sync close inside the loop would leave the async pool open)
    assert sync == expected
    assert [str(row[0]) for row in found if row is not None] == expected


async def test_async_with_closes_the_loops_connections(postgres_url: str) -> None:
    from langchain_reflective import MemoryStream
    from tests.fakes import WordEmbeddings

    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.setup()
    async with MemoryStream(WordEmbeddings(), backend=backend) as stream:
        await stream.aadd(["tea in Lisbon", "rain in Porto"])
        assert [h.record.text for h in await stream.aretrieve("tea", k=1)] == ["tea in Lisbon"]
        (_, pool), *_ = backend._pools._apools.values()
    assert pool.closed and backend._pools._apools == {}
    await stream.aclose()  # idempotent
    async with PostgresBackend.from_conn_string(postgres_url) as other:
        assert await other.acount("default") == 2
        hits = await other.acandidates(
            "default", "tea", np.asarray(WordEmbeddings().embed_query("tea"), np.float32), k=1,
            filter=RetrievalFilter(), config=ScoringConfig.hybrid(),
        )  # fmt: skip
        assert hits.size == 2
        (_, pool), *_ = other._pools._apools.values()
    assert pool.closed


async def test_a_sync_close_inside_the_loop_warns_and_leaves_aclose_able_to_finish(
    postgres_url: str,
) -> None:
    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.setup()
    async with backend._pools.aconn() as conn:  # opens this loop's async pool
        await conn.execute("SELECT 1")
    (_, pool), *_ = backend._pools._apools.values()
    with pytest.warns(RuntimeWarning, match=r"await backend\.aclose\(\)"):
        backend.close()
    assert not pool.closed
    await backend.aclose()
    assert pool.closed


async def test_a_reflective_memory_closes_the_loops_connections_with_async_with(
    postgres_url: str,
) -> None:
    """``async with ReflectiveMemory(...)`` (``aclose``) completes the queued memories, then
    closes the async connections of this loop, without the warning of a sync close."""
    import time
    import warnings

    from langchain_reflective import MemoryStream, ReflectiveMemory
    from tests.fakes import WordEmbeddings

    class SlowToDrain(WordEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            if "tea in Lisbon" in texts:  # the queued batch: still embedding at the close
                time.sleep(0.5)
            return super().embed_documents(texts)

    backend = PostgresBackend.from_conn_string(postgres_url)
    backend.setup()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        async with ReflectiveMemory(None, MemoryStream(SlowToDrain(), backend=backend)) as mem:
            await mem.aenqueue(["tea in Lisbon", "rain in Porto"], importances=0.5)
            await mem.aadd(["coffee in Braga"], importances=0.5)
            assert [h.record.text for h in await mem.stream.aretrieve("coffee", k=1)] == [
                "coffee in Braga"
            ]
            (_, pool), *_ = backend._pools._apools.values()
    assert pool.closed and backend._pools.closed
    with PostgresBackend.from_conn_string(postgres_url) as other:
        assert other.count("default") == 3
        assert other.count_pending() == 0
