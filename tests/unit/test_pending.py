"""Pending memories (the outbox): ``enqueue`` commits and returns; a background drain completes.

Covers the guarantee in :mod:`langchain_reflective.memory`: durable at once, visible to recent
context but not to retrieval until embedded, completed in batches under the same ids, never
twice, retried after a failure, completed at the next open, and an agent turn that never waits
for the rating model.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from langchain_reflective import MemoryStream
from langchain_reflective.backends.base import PendingMemory
from langchain_reflective.backends.sqlite import store as sqlite_store
from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
from langchain_reflective.errors import (
    DuplicateIdError,
    InvalidMemoryError,
    PendingConflictError,
    StorageError,
)
from langchain_reflective.importance import BaseImportanceScorer, ImportanceResult
from langchain_reflective.integrations.middleware import ReflectiveMemoryMiddleware
from langchain_reflective.memory import MemoryConfig, ReflectiveMemory
from tests.fakes import WordEmbeddings
from tests.unit.test_middleware import FakeChat, tool_call


class CountingScorer(BaseImportanceScorer):
    """Rates every text 0.7 as if a model had; counts its calls and the texts per call."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def score(self, texts: Sequence[str]) -> list[ImportanceResult]:
        self.batches.append(list(texts))
        return [ImportanceResult(0.7, "llm") for _ in texts]


class GatedScorer(CountingScorer):
    """A rating model that does not answer until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.started = threading.Event()

    def score(self, texts: Sequence[str]) -> list[ImportanceResult]:
        self.started.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return super().score(texts)


class FailingEmbeddings(WordEmbeddings):
    """Fails ``embed_documents`` while ``down`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.down:
            raise ConnectionError("embedding service unavailable")
        return super().embed_documents(texts)


def open_memory(
    path: Path, scorer: BaseImportanceScorer | None = None, **config
) -> ReflectiveMemory:
    stream = MemoryStream(WordEmbeddings(), path=path, importance_scorer=scorer)
    return ReflectiveMemory(None, stream, config=MemoryConfig(**config))


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[ReflectiveMemory, GatedScorer]]:
    scorer = GatedScorer()
    memory = open_memory(tmp_path / "m.db", scorer)
    yield memory, scorer
    scorer.gate.set()
    memory.close()


def test_enqueue_is_durable_and_recent_but_not_retrievable_until_completed(
    gated: tuple[ReflectiveMemory, GatedScorer], now
) -> None:
    memory, scorer = gated
    ids = memory.enqueue(
        ["Alice adopted a grey cat named Miso", "Alice works night shifts"],
        namespace="alice",
        metadatas={"role": "user"},
        now=now,
    )
    assert scorer.started.wait(30)  # the drain is blocked in the rating call
    queued = memory.stream.pending(namespace="alice")
    assert [p.id for p in queued] == ids and all(p.created_at == now for p in queued)
    assert memory.stream.count(namespace="alice") == 0
    assert memory.retrieve("grey cat Miso", namespace="alice", now=now) == []
    context = memory.build_context("grey cat Miso", namespace="alice", now=now)
    assert "Recent observations" in context and "grey cat named Miso" in context
    assert "Memories relevant" not in context
    assert memory.stream.pending(namespace="bob") == []  # namespaces stay apart

    scorer.gate.set()
    assert memory.flush(timeout=30)
    assert memory.stream.pending(namespace="alice") == []
    stored = memory.stream.get(ids, namespace="alice")
    assert [r.id for r in stored] == ids
    assert all(r.importance_source == "llm" and r.created_at == now for r in stored)
    assert stored[0].metadata == {"role": "user"}
    (hit,) = memory.retrieve("grey cat Miso", k=1, namespace="alice", now=now)
    assert hit.record.id == ids[0]
    state = memory.stream.reflection_state("alice")
    assert state.adds_since == 2 and state.importance_sum == pytest.approx(1.4)


def test_one_embedding_call_and_one_rating_batch_per_drain(tmp_path: Path, now) -> None:
    scorer = CountingScorer()
    path = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:  # enqueue without a drain
        stream.enqueue(["a fact about tea", "a fact about chess"], namespace="a", now=now)
        stream.enqueue("given one", namespace="b", importances=0.4, now=now)
        stream.enqueue(["x one", "x two", "x three"], namespace="a", now=now)
    embeddings = WordEmbeddings()
    stream = MemoryStream(embeddings, path=path, importance_scorer=scorer)
    with ReflectiveMemory(None, stream, config=MemoryConfig(drain_batch=4)) as memory:
        assert memory.flush(timeout=30)  # leftovers are completed at open
        assert embeddings.document_calls == 2  # 6 pending, batches of 4
        assert [len(b) for b in scorer.batches] == [3, 2]  # the given importance is not rated
        assert memory.stream.count(namespace="a") == 5
        (given,) = memory.stream.recent(None, namespace="b")
        assert (given.importance, given.importance_source) == (0.4, "given")


def test_a_memory_is_never_completed_twice(stream: MemoryStream, now) -> None:
    items = stream.enqueue(["one", "two"], now=now)
    stream.complete_pending(items)
    with pytest.raises(PendingConflictError):
        stream.complete_pending(items)  # another process got there first
    assert stream.count() == 2 and stream.pending() == []


def test_a_failed_batch_stays_queued_and_is_retried(tmp_path: Path, now) -> None:
    embeddings = FailingEmbeddings()
    stream = MemoryStream(embeddings, path=tmp_path / "m.db")
    with ReflectiveMemory(None, stream) as memory:
        (memory_id,) = memory.enqueue("Bob plays the cello", namespace="bob", now=now)
        assert not memory.flush(timeout=30)  # the drain failed: still pending
        assert [p.id for p in memory.stream.pending(namespace="bob")] == [memory_id]
        failure = memory.errors[-1]
        assert failure.stage == "pending" and isinstance(failure.error, ConnectionError)
        embeddings.down = False
        assert memory.flush(timeout=30)  # flush retries the queue
        assert [r.id for r in memory.stream.recent(None, namespace="bob")] == [memory_id]


class RefusingEmbeddings(FailingEmbeddings):
    """A context-limited model: refuses (HTTP 400 for the whole call) any batch holding a text
    with ``POISON`` in it, while ``down`` is unset; fails everything while ``down``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.refuse = True
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.refuse and any("POISON" in t for t in texts):
            raise ValueError("400: maximum context length is 8192 tokens")
        return super().embed_documents(texts)


class StrictRater(CountingScorer):
    """A rater that raises on any batch holding ``HOSTILE`` (what a strict LLM rater does)."""

    def score(self, texts: Sequence[str]) -> list[ImportanceResult]:
        if any("HOSTILE" in t for t in texts):
            raise RuntimeError("could not rate")
        return super().score(texts)


def open_inline(
    path: Path, embeddings: WordEmbeddings, scorer: BaseImportanceScorer | None = None, **config
) -> ReflectiveMemory:
    """Drains run inside ``enqueue``/``flush``: one pass per call, so attempts are exact."""
    stream = MemoryStream(embeddings, path=path, importance_scorer=scorer)
    return ReflectiveMemory(None, stream, config=MemoryConfig(background=False, **config))


def test_a_memory_the_model_always_refuses_does_not_block_other_users(
    tmp_path: Path, now, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="langchain_reflective.memory")
    embeddings = RefusingEmbeddings()
    with open_inline(tmp_path / "m.db", embeddings, drain_max_attempts=2) as memory:
        (poison,) = memory.enqueue("pasted log POISON", namespace="mallory", now=now)
        ids = []
        for i in range(4):
            ids += memory.enqueue(f"bob's turn {i} about tea", namespace="bob", now=now)
            assert [r.id for r in memory.stream.recent(None, namespace="bob")] == ids
            if i == 0:  # one attempt per drain, not retried until quarantined within one
                assert memory.quarantined == [] and len(memory.errors) == 2
        assert memory.stream.pending(namespace="bob") == []
        # failed alone in two drains while others were stored: set aside, still pending
        (quarantined,) = memory.quarantined
        assert (quarantined.item.id, quarantined.attempts) == (poison, 2)
        assert isinstance(quarantined.error, ValueError)
        assert [p.id for p in memory.stream.pending(namespace="mallory")] == [poison]
        assert {e.namespace for e in memory.errors} == {"mallory"}  # bob's drains succeeded
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        # the first drain had nothing else to try (see the lone-memory test), then quarantined
        assert len(warnings) == 2 and "no other memory was pending" in warnings[0]
        assert "quarantined" in warnings[1]
        assert poison in warnings[1] and "maximum context length" in warnings[1]
        # later drains no longer try it: one embedding call per turn
        before = len(embeddings.calls)
        memory.enqueue("bob again", namespace="bob", now=now)
        assert embeddings.calls[before:] == [["bob again"]]
        assert not memory.flush(timeout=30)  # something is still pending: the quarantined one


def test_a_lone_refused_memory_warns_once_then_logs_at_debug(tmp_path: Path, now, caplog) -> None:
    # the only pending memory fails: with nothing else to try, a refusal cannot be told from an
    # outage, so no attempt is counted; it logged an ERROR at every drain, forever
    caplog.set_level(logging.DEBUG, logger="langchain_reflective")
    embeddings = RefusingEmbeddings()
    with open_inline(tmp_path / "m.db", embeddings, drain_max_attempts=2) as memory:
        (poison,) = memory.enqueue("pasted log POISON", namespace="mallory", now=now)
        for _ in range(5):
            assert not memory.flush(timeout=30)
        failures = [  # the one-line records (each comes with a DEBUG one with the traceback)
            r
            for r in caplog.records
            if "no other memory was pending" in r.getMessage() and r.exc_info is None
        ]
        assert [r.levelno for r in failures] == [logging.WARNING] + [logging.DEBUG] * 5
        assert poison in failures[0].getMessage() and "logged at DEBUG" in failures[0].getMessage()
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(memory.errors) == 6  # every failure is still recorded
        assert memory.quarantined == []  # nothing was counted against it
        # once others are pending it is counted and quarantined as before
        memory.enqueue("bob's turn", namespace="bob", now=now)
        memory.enqueue("bob's next turn", namespace="bob", now=now)
        assert [q.item.id for q in memory.quarantined] == [poison]
        assert memory.stream.count(namespace="bob") == 2
        # a second lone memory gets its own warning
        caplog.clear()
        (other,) = memory.enqueue("another POISON", namespace="eve", now=now)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and other in warnings[0]


def test_a_refused_memory_in_a_mixed_batch_costs_the_others_nothing(tmp_path: Path, now) -> None:
    path = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:  # queued, no drain yet
        stream.enqueue(["a one", "a two"], namespace="a", now=now)
        stream.enqueue(["huge POISON", "m fine"], namespace="mallory", now=now)
        stream.enqueue([f"b turn {i}" for i in range(28)], namespace="b", now=now)
    embeddings = RefusingEmbeddings()
    with open_inline(path, embeddings, drain_batch=32) as memory:
        assert memory.stream.count(namespace="a") == 2 and memory.stream.count(namespace="b") == 28
        assert [r.text for r in memory.stream.recent(None, namespace="mallory")] == ["m fine"]
        assert [p.text for p in memory.stream.pending(None, all_namespaces=True)] == ["huge POISON"]
        # the batch, a probe, then halving: about 2 log2(32) calls, not one per memory
        assert len(embeddings.calls) <= 14  # one by one would be 33


def test_a_memory_the_rater_cannot_rate_does_not_block_other_users(tmp_path: Path, now) -> None:
    with open_inline(
        tmp_path / "m.db", WordEmbeddings(), StrictRater(), drain_max_attempts=1
    ) as memory:
        (hostile,) = memory.enqueue("HOSTILE turn", namespace="mallory", now=now)
        memory.enqueue(["bob likes tea", "bob likes chess"], namespace="bob", now=now)
        assert memory.stream.count(namespace="bob") == 2
        assert [q.item.id for q in memory.quarantined] == [hostile]
        # a memory with a given importance is not rated: the same text completes
        memory.enqueue("HOSTILE but rated", namespace="mallory", importances=0.5, now=now)
        assert memory.stream.count(namespace="mallory") == 1


def test_an_outage_for_everyone_is_retried_later_not_quarantined(tmp_path: Path, now) -> None:
    embeddings = RefusingEmbeddings()
    embeddings.down = True
    with open_inline(tmp_path / "m.db", embeddings, drain_max_attempts=1) as memory:
        ids = []
        for i in range(5):
            ids += memory.enqueue([f"turn {i} of alice"], namespace="alice", now=now)
            ids += memory.enqueue([f"turn {i} of bob"], namespace="bob", now=now)
            assert not memory.flush(timeout=30)
        assert memory.quarantined == []  # nothing completed: no memory is to blame
        assert memory.stream.backend.count_pending() == 10
        assert all(isinstance(e.error, ConnectionError) for e in memory.errors)
        # a pass during the outage tries the batch and one memory alone, no more
        before = len(embeddings.calls)
        memory.flush(timeout=30)
        assert len(embeddings.calls) - before == 2
        embeddings.down = False
        assert memory.flush(timeout=30)
        stored = memory.stream.get(ids[0::2], namespace="alice")
        assert len(stored) == 5 and memory.stream.count(namespace="bob") == 5


def test_a_failing_store_is_not_blamed_on_the_memories(
    tmp_path: Path, now, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_inline(tmp_path / "m.db", RefusingEmbeddings(), drain_max_attempts=1) as memory:
        backend = memory.stream.backend
        real_put = backend.put

        def put(*args, **kwargs):  # the disk is full
            raise StorageError("database or disk is full")

        (poison,) = memory.enqueue("POISON", namespace="a", now=now)
        monkeypatch.setattr(backend, "put", put)
        ids = memory.enqueue(["b one", "b two"], namespace="b", now=now)
        # the poison failed alone (the models work: the check stores nothing); b's memories
        # then failed to be written: the store's failure, not theirs
        assert [q.item.id for q in memory.quarantined] == [poison]
        assert [p.id for p in memory.stream.pending(namespace="b")] == ids
        assert isinstance(memory.errors[-1].error, StorageError)
        monkeypatch.setattr(backend, "put", real_put)
        memory.flush(timeout=30)
        assert memory.stream.count(namespace="b") == 2


def test_quarantined_memories_can_be_retried_or_discarded(tmp_path: Path, now) -> None:
    embeddings = RefusingEmbeddings()
    with open_inline(tmp_path / "m.db", embeddings, drain_max_attempts=1) as memory:
        first = memory.enqueue("POISON one", namespace="mallory", now=now)
        second = memory.enqueue("POISON two", namespace="mallory", now=now)
        memory.enqueue("bob's turn", namespace="bob", now=now)
        assert sorted(q.item.id for q in memory.quarantined) == sorted(first + second)
        assert memory.retry_quarantined("unknown") == 0

        # the operator fixes the model (a larger context) and retries one of them
        embeddings.refuse = False
        assert memory.retry_quarantined(first) == 1
        assert memory.flush(timeout=30) is False  # the other one is still set aside
        assert memory.stream.get(first, namespace="mallory")[0].text == "POISON one"
        assert [q.item.id for q in memory.quarantined] == second

        assert memory.discard_quarantined() == 1
        assert memory.quarantined == [] and memory.stream.backend.count_pending() == 0
        assert memory.stream.get(second, namespace="mallory") == []
        assert memory.flush(timeout=30)


def test_a_quarantined_id_sets_aside_only_its_own_namespaces_memory(tmp_path: Path, now) -> None:
    """Two namespaces may queue one id: mallory's memory quarantined under ``p1`` does not
    make the drain skip bob's ``p1`` (attempts and the quarantine were keyed by id alone)."""
    embeddings = RefusingEmbeddings()
    with open_inline(tmp_path / "m.db", embeddings, drain_max_attempts=1) as memory:
        backend = memory.stream.backend
        backend.enqueue([PendingMemory("p1", "mallory", "POISON", "observation", now, 0.5, {})])
        backend.enqueue([PendingMemory("p0", "carol", "carol's turn", "observation", now, 0.5,
                                       {})])  # fmt: skip
        memory.flush(timeout=30)
        assert [(q.item.namespace, q.item.id) for q in memory.quarantined] == [("mallory", "p1")]
        backend.enqueue([PendingMemory("p1", "bob", "bob's turn", "observation", now, 0.5, {})])
        memory.flush(timeout=30)
        assert [r.text for r in memory.stream.get("p1", namespace="bob")] == ["bob's turn"]
        assert [(p.namespace, p.id) for p in backend.pending()] == [("mallory", "p1")]
        assert memory.discard_quarantined("p1") == 1
        assert backend.count_pending() == 0


def test_retry_and_discard_can_act_for_one_namespace(tmp_path: Path, now) -> None:
    """Ids are unique per namespace only: an operator acting for mallory names her namespace,
    and eve's quarantined memory of the same id stays as it was."""
    embeddings = RefusingEmbeddings()
    with open_inline(tmp_path / "m.db", embeddings, drain_max_attempts=1) as memory:
        backend = memory.stream.backend
        for namespace in ("mallory", "eve"):
            backend.enqueue([PendingMemory("p1", namespace, f"POISON of {namespace}",
                                           "observation", now, 0.5, {})])  # fmt: skip
        memory.enqueue("bob's turn", namespace="bob", now=now)
        quarantined = sorted((q.item.namespace, q.item.id) for q in memory.quarantined)
        assert quarantined == [("eve", "p1"), ("mallory", "p1")]

        for bad in ("", 42):
            with pytest.raises(InvalidMemoryError):
                memory.discard_quarantined("p1", namespace=bad)  # type: ignore[arg-type]
        assert memory.discard_quarantined("p1", namespace="mallory") == 1
        assert [(p.namespace, p.id) for p in backend.pending()] == [("eve", "p1")]
        assert memory.retry_quarantined(namespace="mallory") == 0
        embeddings.refuse = False
        assert memory.retry_quarantined("p1", namespace="eve") == 1
        assert memory.flush(timeout=30)
        assert [r.text for r in memory.stream.get("p1", namespace="eve")] == ["POISON of eve"]
        assert memory.stream.get("p1", namespace="mallory") == []


def test_quarantine_twins_retry_and_discard_as_the_sync_methods(tmp_path: Path, now) -> None:
    embeddings = RefusingEmbeddings()
    with open_inline(tmp_path / "m.db", embeddings, drain_max_attempts=1) as memory:
        first = memory.enqueue("POISON one", namespace="mallory", now=now)
        second = memory.enqueue("POISON two", namespace="mallory", now=now)
        memory.enqueue("bob's turn", namespace="bob", now=now)
        embeddings.refuse = False

        async def run() -> tuple[int, int]:
            return await memory.aretry_quarantined(first), await memory.adiscard_quarantined()

        assert asyncio.run(run()) == (1, 1)
        assert memory.stream.get(first, namespace="mallory")[0].text == "POISON one"
        assert memory.stream.get(second, namespace="mallory") == []
        assert memory.quarantined == [] and memory.stream.backend.count_pending() == 0


def test_a_poisoned_queue_drains_in_the_background(tmp_path: Path, now) -> None:
    """The reviewer's reproduction: background drains, one flush per turn."""
    stream = MemoryStream(RefusingEmbeddings(), path=tmp_path / "m.db")
    with ReflectiveMemory(None, stream) as memory:
        memory.enqueue("pasted log POISON", namespace="mallory", now=now)
        for i in range(5):
            memory.enqueue(f"ordinary turn {i} about tea", namespace="bob", now=now)
            memory.flush(timeout=30)
        assert stream.count(namespace="bob") == 5 and stream.pending(namespace="bob") == []
        assert stream.backend.count_pending() == 1


def test_bad_input_is_rejected_before_anything_is_queued(stream: MemoryStream) -> None:
    with ReflectiveMemory(None, stream, config=MemoryConfig(background=False)) as memory:
        with pytest.raises(InvalidMemoryError):
            memory.enqueue(["fine", ""])
        with pytest.raises(InvalidMemoryError):
            memory.enqueue("fine", importances=2.0)
        assert memory.stream.pending() == [] and memory.stream.count() == 0
        # background=False completes before enqueue returns, like add()
        (memory_id,) = memory.enqueue("inline")
        assert memory.stream.get(memory_id)[0].text == "inline"


def test_purge_drops_pending_memories(stream: MemoryStream) -> None:
    stream.enqueue(["queued"], namespace="carol")
    stream.enqueue(["kept"], namespace="dave")
    stream.purge(namespace="carol")
    assert stream.pending(namespace="carol") == []
    assert [p.text for p in stream.pending(namespace="dave")] == ["kept"]


def test_schema_3_files_are_upgraded_with_an_empty_queue(tmp_path: Path, now) -> None:
    path = tmp_path / "old.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add("written by schema 3", importances=0.5, now=now)
    conn = sqlite3.connect(path)  # what the previous release wrote: no pending table
    conn.execute("DROP TABLE pending")
    conn.execute("ALTER TABLE counters DROP COLUMN reflection_generation")  # new in version 5
    conn.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    stream = MemoryStream(WordEmbeddings(), path=path)
    with ReflectiveMemory(None, stream) as memory:
        assert stream.store.get_meta("schema_version") == str(sqlite_store.SCHEMA_VERSION)
        assert stream.pending() == []
        memory.enqueue("written by schema 4", now=now)
        assert memory.flush(timeout=30)
        assert [r.text for r in stream.recent(None)] == [
            "written by schema 3",
            "written by schema 4",
        ]
    store = SQLiteRecordStore(path)  # reopening upgrades nothing again
    try:
        assert store.get_meta("schema_version") == str(sqlite_store.SCHEMA_VERSION)
        assert store.count_pending() == 0
    finally:
        store.close()


# -- the agent's turn ----------------------------------------------------------------------------


def test_an_agent_turn_never_waits_for_the_rating_model(
    gated: tuple[ReflectiveMemory, GatedScorer],
) -> None:
    memory, scorer = gated
    model = FakeChat(script=["Noted.", "You have a cat."])
    agent = create_agent(model, middleware=[ReflectiveMemoryMiddleware(memory)])
    ctx = {"user_id": "alice"}
    agent.invoke({"messages": [HumanMessage("I adopted a cat named Miso")]}, context=ctx)
    # the turn returned while the rating model is still blocked: nothing rated, all pending
    assert scorer.started.wait(30) and scorer.batches == []
    assert len(memory.stream.pending(namespace="alice")) == 2
    agent.invoke({"messages": [HumanMessage("What pet do I have?")]}, context=ctx)
    # the first turn was in the second call's context although it is not embedded yet
    assert "I adopted a cat named Miso" in "\n".join(m.text for m in model.agent_calls[1])
    scorer.gate.set()
    assert memory.flush(timeout=30)
    texts = [r.text for r in memory.stream.recent(None, namespace="alice")]
    assert texts == [
        "User: I adopted a cat named Miso",
        "Assistant: Noted.",
        "User: What pet do I have?",
        "Assistant: You have a cat.",
    ]


class Forecast(BaseModel):
    city: str
    temperature_c: int


def test_a_structured_output_ending_records_the_structured_answer(tmp_path: Path) -> None:
    with open_memory(tmp_path / "m.db") as memory:
        model = FakeChat(script=[tool_call("Forecast", {"city": "Lisbon", "temperature_c": 21})])
        agent = create_agent(
            model,
            response_format=ToolStrategy(Forecast),
            middleware=[ReflectiveMemoryMiddleware(memory)],
        )
        out = agent.invoke(
            {"messages": [HumanMessage("Weather in Lisbon?")]}, context={"user_id": "ann"}
        )
        assert out["structured_response"] == Forecast(city="Lisbon", temperature_c=21)
        assert memory.flush(timeout=30)
        user, answer = memory.stream.recent(None, namespace="ann")
        assert user.text == "User: Weather in Lisbon?"
        assert Forecast.model_validate_json(answer.text.removeprefix("Assistant: ")) == Forecast(
            city="Lisbon", temperature_c=21
        )
        assert answer.metadata["role"] == "assistant"


def test_flush_after_the_stream_was_closed_directly(tmp_path: Path) -> None:
    """The exit hook flushes every live memory: one whose stream is closed has nothing left."""
    memory = open_memory(tmp_path / "m.db")
    memory.stream.close()
    assert memory.flush(timeout=5)
    memory.close()


def test_isolating_a_refused_memory_keeps_each_namespace_in_queue_order(
    tmp_path: Path, now
) -> None:
    """The memories completed around a refused one are stored in the order they were queued:
    observations are linked to their neighbours in storage order (the neighbour context of the
    default scoring), so completing a later turn first would link the turns wrongly."""
    path = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:  # queued, no drain yet
        stream.enqueue("a POISON paste", namespace="a", now=now)
        stream.enqueue([f"a turn {i}" for i in range(1, 5)], namespace="a", now=now)
        stream.enqueue("b POISON paste", namespace="b", now=now)
        stream.enqueue([f"b turn {i}" for i in range(1, 5)], namespace="b", now=now)
    with open_inline(path, RefusingEmbeddings(), drain_batch=4) as memory:
        for ns in ("a", "b"):
            stored = [r.text for r in memory.stream.recent(None, namespace=ns)]
            assert stored == [f"{ns} turn {i}" for i in range(1, 5)]
        assert len(memory.stream.pending(None, all_namespaces=True)) == 2


def test_a_queued_memory_whose_id_was_stored_meanwhile_is_set_aside(
    tmp_path: Path, now, caplog
) -> None:
    """A memory added under the id of a queued one (``add(ids=...)`` with an id ``enqueue``
    returned) leaves that id stored and queued: its completion can only fail. It failed every
    pass, and the memories queued after it were never stored; it is quarantined at once now."""
    caplog.set_level(logging.WARNING, logger="langchain_reflective.memory")
    with open_inline(tmp_path / "m.db", WordEmbeddings()) as memory:
        memory.stream.enqueue(["queued first"], ids=["x1"], now=now)
        memory.stream.enqueue(["queued second"], ids=["x2"], now=now)
        memory.stream.add(["added under x1"], ids=["x1"], importances=0.5, now=now)
        assert not memory.flush(timeout=30)  # x1 stays pending (quarantined)
        assert [r.text for r in memory.stream.get(["x1", "x2"])] == [
            "added under x1",
            "queued second",
        ]
        (quarantined,) = memory.quarantined
        assert quarantined.item.id == "x1"
        assert isinstance(quarantined.error, DuplicateIdError)
        assert "a memory is stored under its id already" in caplog.text
        assert [p.id for p in memory.stream.pending()] == ["x1"]
        assert memory.discard_quarantined() == 1
        assert memory.stream.pending() == [] and memory.flush(timeout=30)
