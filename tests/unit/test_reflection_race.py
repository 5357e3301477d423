"""Two reflection graph runs on one namespace at once, without the reflection lock: only the first
to store reflects; the other ends ``skipped="superseded"`` having written nothing (issue 13 for
the graph run alone). ``race`` is shared with the Postgres twin of these tests."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.base import ReflectionState
from langchain_reflective.errors import ReflectionConflictError
from langchain_reflective.importance import ImportanceConfig, LLMImportanceScorer, RetryConfig
from langchain_reflective.reflection import ReflectionConfig, create_reflection_graph
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_fakes import ScriptedChatModel

FAST = RetryConfig(initial_wait=0.0, max_wait=0.0, jitter=0.0)
OBSERVATIONS = [f"Klaus works on his research paper topic {i}" for i in range(1, 6)]

OpenStream = Callable[[LLMImportanceScorer], MemoryStream]
"""A new stream on the shared storage (its own connection: as another process would)."""


def scorer(model: ScriptedChatModel) -> LLMImportanceScorer:
    return LLMImportanceScorer(model, config=ImportanceConfig(retry=FAST))


def graph_of(model: ScriptedChatModel, stream: MemoryStream) -> Any:
    config = ReflectionConfig(threshold=2.5, retry=FAST)
    return create_reflection_graph(model, stream, config=config)


def check_one_reflection(
    out_a: dict[str, Any], out_b: dict[str, Any], stream: MemoryStream, now: datetime
) -> None:
    """B's insights are the only ones stored; A reports superseded; the counter is B's reset
    plus the memory stored after it, and counts that one reset."""
    assert out_b["skipped"] is None and out_b["reflections"]
    assert out_a["skipped"] == "superseded"
    assert out_a["reflections"] == [] and out_a["reflection_ids"] == []
    stored = stream.recent(kinds=["reflection"])
    assert sorted(r.id for r in stored) == sorted(out_b["reflection_ids"])
    state = stream.reflection_state()
    assert state.importance_sum == pytest.approx(0.9) and state.adds_since == 1
    assert state.last_reflection_at == now + timedelta(hours=1)
    assert state.generation == 1
    assert [r.text for r in stream.recent(kinds=["observation"])][-1] == "Maria visits Klaus"


Check = Callable[[dict[str, Any], dict[str, Any], MemoryStream, datetime], None]


def race(
    open_stream: OpenStream,
    now: datetime,
    *,
    mode: str,
    force: bool = False,
    empty: bool = False,
    check: Check = check_one_reflection,
) -> None:
    """Run A; right after its gate read the counter (at its first model call), run B whole on
    another stream of the same storage, then store one more memory (0.9); then let A go on, and
    ``check(out_a, out_b, stream_a, now)``.

    Both runs carry the same explicit clock. ``empty``: A finds no insights, so its store step
    only resets the counter (``reset_on_empty``). ``mode="async"`` runs both with ``ainvoke``,
    each in its own event loop (B's in its own thread), and closes each stream in its loop.
    """
    when = now + timedelta(hours=1)
    inputs = {"now": when, "force": force}
    model_b = ScriptedChatModel()
    stream_b = open_stream(scorer(model_b))
    graph_b = graph_of(model_b, stream_b)
    outs_b: list[dict[str, Any]] = []

    def run_b() -> None:  # a plain thread: nothing of A's run context leaks into B's run
        if mode == "sync":
            outs_b.append(graph_b.invoke(inputs))
            stream_b.add("Maria visits Klaus", importances=0.9, now=now)
            stream_b.close()
            return

        async def run() -> None:
            outs_b.append(await graph_b.ainvoke(inputs))
            await stream_b.aadd("Maria visits Klaus", importances=0.9, now=now)
            await stream_b.aclose()

        asyncio.run(run())

    def hold(kind: str) -> None:
        if kind == "questions" and not outs_b:
            worker = threading.Thread(target=run_b)
            worker.start()
            worker.join()
            assert outs_b, "run B failed"

    async def ahold(kind: str) -> None:
        await asyncio.to_thread(hold, kind)

    model_a = ScriptedChatModel(
        gate=hold, agate=ahold, overrides={"insights": "nothing usable"} if empty else {}
    )
    stream_a = open_stream(scorer(model_a))
    stream_a.add(OBSERVATIONS, importances=0.5, now=now)  # sum 2.5: both gates say go
    graph_a = graph_of(model_a, stream_a)
    if mode == "sync":
        with stream_a:
            check(graph_a.invoke(inputs), outs_b[0] if outs_b else {}, stream_a, now)
    else:

        async def run_a() -> None:
            async with stream_a:
                out_a = await graph_a.ainvoke(inputs)
                check(out_a, outs_b[0] if outs_b else {}, stream_a, now)

        asyncio.run(run_a())
    assert model_a.count("questions") == 1 and outs_b  # A did run past its gate, B meanwhile


def sqlite_streams(path: Path) -> OpenStream:
    return lambda s: MemoryStream(WordEmbeddings(), path=path, importance_scorer=s)


@pytest.mark.parametrize("force", [False, True], ids=["due", "forced"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_of_two_runs_at_once_only_the_first_to_store_reflects(
    now: datetime, tmp_path: Path, mode: str, force: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="langchain_reflective.reflection.graph"):
        race(sqlite_streams(tmp_path / "m.db"), now, mode=mode, force=force)
    assert any("superseded" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_superseded_run_that_found_nothing_does_not_reset_the_counter_again(
    now: datetime, tmp_path: Path, mode: str
) -> None:
    """``reset_on_empty``: A's reset without insights follows the same rule (otherwise it would
    take what its gate counted off the counter again, losing the memory stored after B)."""
    race(sqlite_streams(tmp_path / "m.db"), now, mode=mode, empty=True)


def test_a_run_after_a_superseded_one_reflects_as_usual(now: datetime, tmp_path: Path) -> None:
    def then_reflect_again(
        out_a: dict[str, Any], out_b: dict[str, Any], stream: MemoryStream, now: datetime
    ) -> None:
        check_one_reflection(out_a, out_b, stream, now)
        model = ScriptedChatModel()
        stream.importance_scorer = scorer(model)
        stream.add([f"Klaus meets Maria at the cafe {i}" for i in range(4)], importances=0.5)
        again = graph_of(model, stream).invoke({"now": now + timedelta(hours=2)})
        assert again["skipped"] is None and again["reflections"]
        assert stream.reflection_state().generation == 2

    race(sqlite_streams(tmp_path / "m.db"), now, mode="sync", check=then_reflect_again)


def test_a_stale_counter_passed_to_add_stores_nothing(now: datetime, tmp_path: Path) -> None:
    """The same rule for any caller of ``MemoryStream.add``/``mark_reflected`` that passes the
    counter it read; a state built by hand (no generation) resets as before."""
    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as stream:
        stream.add(OBSERVATIONS, importances=0.5, now=now)
        seen = stream.reflection_state()
        stream.add("first insight", kinds="reflection", importances=0.5, now=now,
                   reset_reflection_counter=seen)  # fmt: skip
        with pytest.raises(ReflectionConflictError, match="another reflection was stored"):
            stream.add("late insight", kinds="reflection", importances=0.5, now=now,
                       reset_reflection_counter=seen)  # fmt: skip
        with pytest.raises(ReflectionConflictError):
            asyncio.run(stream.amark_reflected(now=now, consumed=seen))
        assert [r.text for r in stream.recent(kinds=["reflection"])] == ["first insight"]
        assert stream.reflection_state().generation == 1
        stream.add("late insight", kinds="reflection", importances=0.5, now=now,
                   reset_reflection_counter=ReflectionState(2.5, 5))  # fmt: skip
        assert stream.reflection_state().generation == 2
