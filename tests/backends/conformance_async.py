"""The backend conformance suite (tests/backends/conformance.py): the async twins of the
backend's and the stream's methods answer as the sync methods do; async reflection locks
wait for each other."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.base import BaseMemoryBackend, CounterUpdate, RetrievalFilter
from langchain_reflective.errors import DimensionMismatchError
from langchain_reflective.scoring import ScoringConfig
from tests.backends.conformance_base import (
    MODEL,
    NOW,
    ConformanceBase,
    corpus,
    query_vector,
    vectors_of,
)
from tests.fakes import WordEmbeddings


class AsyncConformance(ConformanceBase):
    """The async twins."""

    # -- async twins ---------------------------------------------------------------------------

    def test_async_twins_match_the_sync_methods(
        self, backend: BaseMemoryBackend, loop: asyncio.AbstractEventLoop
    ) -> None:
        records = corpus(15)

        async def run() -> None:
            await backend.abind_embeddings(MODEL, 32)
            await backend.aput(
                records, vectors_of(records), counter=CounterUpdate("alice", adds=15)
            )
            assert await backend.aget("alice", [records[2].id]) == [records[2]]
            assert await backend.aget_one("alice", records[2].id) == records[2]
            assert await backend.aget_one("alice", "no-such-id") is None
            assert await backend.aget_one("bob", records[2].id) is None  # (another namespace)
            assert await backend.acount("alice") == 15
            assert (await backend.areflection_state("alice")).adds_since == 15
            found = await backend.acandidates(
                "alice",
                "tea",
                query_vector("tea"),
                k=3,
                filter=RetrievalFilter(),
                config=ScoringConfig.paper(),
            )
            keys = found.keys[:2].tolist()
            touched = await backend.atouch("alice", keys, NOW)
            assert set(touched) == set(keys)
            with pytest.raises(DimensionMismatchError):  # as the sync method refuses it
                await backend.acandidates(
                    "alice", "tea", np.ones(16, dtype=np.float32) / 4, k=3,
                    filter=RetrievalFilter(), config=ScoringConfig.paper(),
                )  # fmt: skip
            async with backend.areflection_lock("alice"):
                with pytest.raises(TimeoutError), backend.reflection_lock("alice", timeout=0):
                    pass
            assert await backend.adelete("alice", [records[0].id]) == 1
            assert await backend.apurge("alice") == 14

        loop.run_until_complete(run())

    def test_async_reflection_locks_wait_for_each_other_and_a_cancelled_wait_holds_nothing(
        self, backend: BaseMemoryBackend, loop: asyncio.AbstractEventLoop
    ) -> None:
        """``areflection_lock`` took the lock on one worker thread and released it from
        another; a file lock keeps its holders per thread, so a later wait on the first
        thread raised ``RuntimeError('Deadlock: ...')`` instead of waiting (SQLite file)."""
        inside: list[int] = []

        async def hold(i: int) -> None:
            async with backend.areflection_lock("alice"):
                inside.append(i)
                assert len(inside) == 1, "two holders of one namespace's lock at once"
                await asyncio.sleep(0.002)
                inside.remove(i)

        async def run() -> None:
            for _ in range(8):
                await asyncio.gather(*(hold(i) for i in range(4)))
            async with backend.areflection_lock("alice"):
                waiter = asyncio.ensure_future(hold(99))
                await asyncio.sleep(0.05)
                waiter.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiter
            async with (
                backend.areflection_lock("alice", timeout=5),  # (nothing left held)
                backend.areflection_lock("bob", timeout=0),  # (one lock per namespace)
            ):
                pass

        loop.run_until_complete(run())

    def test_stream_transfer_and_queue_twins_match_the_sync_methods(
        self,
        backends: Callable[[], BaseMemoryBackend],
        tmp_path: Path,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """``aexport_jsonl``/``aimport_jsonl`` write and read what the sync methods do, and
        ``aenqueue``/``apending`` queue what ``enqueue``/``pending`` do, on this backend."""

        def stream_of(backend: BaseMemoryBackend) -> MemoryStream:
            return MemoryStream(WordEmbeddings(32), backend=backend, embedding_model=MODEL)

        source = stream_of(backends())
        source.add([r.text for r in corpus(12)], importances=0.5, now=NOW)
        source.add("other ns", namespace="bob", now=NOW)
        sync_file, async_file = tmp_path / "sync.jsonl", tmp_path / "async.jsonl"
        sync_copy, async_copy = stream_of(backends()), stream_of(backends())

        async def run() -> None:
            assert await source.aexport_jsonl(async_file, namespaces="all") == 13
            assert source.export_jsonl(sync_file, namespaces="all") == 13
            assert async_file.read_bytes() == sync_file.read_bytes()
            assert await async_copy.aimport_jsonl(sync_file, batch_size=5) == 13
            assert sync_copy.import_jsonl(sync_file, batch_size=5) == 13
            assert await async_copy.aimport_jsonl(sync_file) == 0
            queued = await async_copy.aenqueue(["later w1", "later w2"], now=NOW)
            expected = sync_copy.enqueue(["later w1", "later w2"], now=NOW)
            assert [(p.text, p.created_at) for p in queued] == [
                (p.text, p.created_at) for p in expected
            ]
            pending = await async_copy.apending()
            assert [p.id for p in pending] == [p.id for p in queued]
            assert [p.text for p in pending] == [p.text for p in sync_copy.pending()]

        loop.run_until_complete(run())
        sync_copy.export_jsonl(sync_file, namespaces="all")
        async_copy.export_jsonl(async_file, namespaces="all")
        assert async_file.read_bytes() == sync_file.read_bytes()
