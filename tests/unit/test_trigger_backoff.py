"""After a reflection that a write started fails, writes skip the next reflections of its
namespace (``_trigger.BACKOFF_FIRST`` of them, doubled for each failure in a row); a reflection
that succeeds ends it. Without it an error that never goes away cost a whole reflection's
model calls again at every write."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream, _trigger
from langchain_reflective._trigger import BACKOFF_FIRST
from langchain_reflective.importance import RetryConfig
from langchain_reflective.memory import MemoryConfig, ReflectiveMemory
from langchain_reflective.reflection import ReflectionConfig
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

FAST = RetryConfig(initial_wait=0.0, max_wait=0.0, jitter=0.0)
EVENTS = [f"Klaus works on his research paper topic {i}" for i in range(5)]


def failing_model() -> ScriptedChatModel:
    return ScriptedChatModel(fail_on={"condense": TimeoutError("read timed out")}, fail_times=-1)


def make(tmp_path: Path, model: ScriptedChatModel, **config: Any) -> ReflectiveMemory:
    return ReflectiveMemory(
        model,
        MemoryStream(WordEmbeddings(), path=tmp_path / "m.db"),
        config=MemoryConfig(reflect_threshold=2.5, **config),
        reflection=ReflectionConfig(retry=FAST, min_relevance=-1.0),
    )


def add_due(memory: ReflectiveMemory, n: int, when: datetime) -> None:
    """``n`` writes, each finding the namespace due (its counter stays above the threshold
    while reflections fail), each waited for."""
    for i in range(n):
        memory.add(f"a small thing {i}", importances=0.1, now=when + timedelta(seconds=i))
        assert memory.flush(timeout=30)


def notes(memory: ReflectiveMemory) -> list[str]:
    return [" ".join(getattr(e.error, "__notes__", [])) for e in memory.errors]


def test_a_failing_reflection_backs_off_and_a_success_ends_it(
    tmp_path: Path, now: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    """The first failure makes writes skip the next 8 reflections, the second in a row the
    next 16 (said in the log line and in the failure's notes in ``errors``); once one
    succeeded, a new failure skips 8 again."""
    assert BACKOFF_FIRST == 8
    model = failing_model()
    with caplog.at_level(logging.ERROR, "langchain_reflective.memory"), make(tmp_path, model) as m:
        m.add(EVENTS, importances=0.5, now=now)
        assert m.flush(timeout=30) and len(m.errors) == 1
        assert model.count("questions") == 1
        assert "skip the next 8 reflections of 'default' (1 failure in a row" in notes(m)[0]
        assert "backing off" in caplog.records[-1].getMessage()
        add_due(m, 8, now + timedelta(hours=1))  # due each time, but skipped: no model call
        assert len(m.errors) == 1 and model.count("questions") == 1
        add_due(m, 1, now + timedelta(hours=2))
        assert len(m.errors) == 2 and model.count("questions") == 2
        assert "skip the next 16 reflections of 'default' (2 failures in a row" in notes(m)[1]
        add_due(m, 16, now + timedelta(hours=3))
        assert len(m.errors) == 2 and model.count("questions") == 2
        model.fail_on.clear()  # the model works again
        add_due(m, 1, now + timedelta(hours=4))
        assert m.stream.recent(kinds=["reflection"]) and len(m.errors) == 2
        model.fail_on["condense"] = TimeoutError("read timed out")
        m.add(EVENTS, importances=0.5, now=now + timedelta(hours=5))
        assert m.flush(timeout=30) and len(m.errors) == 3
        assert "skip the next 8 reflections of 'default' (1 failure in a row" in notes(m)[2]


def test_the_backoff_is_per_namespace(tmp_path: Path, now: datetime) -> None:
    model = failing_model()
    with make(tmp_path, model) as memory:
        memory.add(EVENTS, importances=0.5, now=now)
        assert memory.flush(timeout=30) and len(memory.errors) == 1
        memory.add(EVENTS, importances=0.5, now=now, namespace="bob")
        assert memory.flush(timeout=30) and len(memory.errors) == 2
        assert memory.errors[-1].namespace == "bob"


def test_reflect_is_not_held_back_and_its_success_ends_the_backoff(
    tmp_path: Path, now: datetime
) -> None:
    model = failing_model()
    with make(tmp_path, model) as memory:
        memory.add(EVENTS, importances=0.5, now=now)
        assert memory.flush(timeout=30) and len(memory.errors) == 1
        model.fail_on.clear()
        assert memory.reflect()  # an explicit call runs at once
        memory.add(EVENTS, importances=0.5, now=now + timedelta(hours=1))
        assert memory.flush(timeout=30)
        assert model.count("questions") == 3  # the failed one, reflect(), and this write's


@pytest.mark.parametrize(
    ("use_async", "background"),
    [(False, True), (False, False), (True, True), (True, False)],
    ids=["add", "add-inline", "aadd", "aadd-inline"],
)
async def test_another_reflection_of_the_namespace_ends_the_backoff(
    tmp_path: Path, now: datetime, use_async: bool, background: bool
) -> None:
    """A reset of the namespace's counter by another reflection (another process, a graph
    run) since the failed run read it means reflecting works again: nothing more skipped.
    Each way a write starts a reflection records the generation its failure read (an
    ``aadd`` with ``background=False`` recorded none, so its backoff outlived the reset)."""
    model = failing_model()
    with make(tmp_path, model, background=background) as memory:

        async def write(when: datetime) -> None:
            if use_async:
                await memory.aadd(EVENTS, importances=0.5, now=when)
            else:
                memory.add(EVENTS, importances=0.5, now=when)
            assert memory.flush(timeout=30)

        await write(now)
        assert len(memory.errors) == 1
        memory.stream.mark_reflected(now=now)  # as another process's reflection would
        await write(now + timedelta(hours=1))
        assert len(memory.errors) == 2 and model.count("questions") == 2


@pytest.mark.parametrize("use_async", [False, True], ids=["add", "aadd"])
async def test_inline_reflections_back_off_too(
    tmp_path: Path, now: datetime, use_async: bool
) -> None:
    """With ``background=False`` the failed reflection ran in the caller's write, and each
    later write paid for another one."""
    model = failing_model()
    with make(tmp_path, model, background=False) as memory:
        for i in range(1 + BACKOFF_FIRST):
            texts = [f"{e} ({i})" for e in EVENTS]
            if use_async:
                await memory.aadd(texts, importances=0.5, now=now + timedelta(hours=i))
            else:
                memory.add(texts, importances=0.5, now=now + timedelta(hours=i))
        assert len(memory.errors) == 1 and model.count("questions") == 1
        assert "skip the next 8 reflections" in notes(memory)[0]
        memory.add("one more", importances=0.1, now=now + timedelta(hours=10))
        assert len(memory.errors) == 2 and model.count("questions") == 2


def test_the_backoff_table_keeps_the_newest_failures(
    tmp_path: Path, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Backoffs are kept for the ``BACKOFF_KEPT`` namespaces that failed last: with a
    namespace per user and an outage that lasts, the table grew by one entry per namespace
    for the life of the process. A namespace dropped from it reflects again at its next due
    write (and backs off again if that fails); one still kept is skipped."""
    monkeypatch.setattr(_trigger, "BACKOFF_KEPT", 2)
    model = failing_model()
    with make(tmp_path, model) as memory:
        backoff = memory._trigger._backoff

        def write(ns: str, hour: int) -> None:
            memory.add(EVENTS, importances=0.5, now=now + timedelta(hours=hour), namespace=ns)
            assert memory.flush(timeout=30)

        for hour, ns in enumerate(["a", "b", "c"]):
            write(ns, hour)
        assert len(memory.errors) == 3 and list(backoff) == ["b", "c"]  # a, the oldest, dropped
        write("a", 3)  # reflected again, and failed
        assert len(memory.errors) == 4 and list(backoff) == ["c", "a"]
        write("c", 4)  # still backing off: skipped
        assert len(memory.errors) == 4 and list(backoff) == ["c", "a"]
        memory._trigger.failed("c", RuntimeError("again"))  # a failure in a row: the newest
        assert list(backoff) == ["a", "c"] and backoff["c"].failures == 2
