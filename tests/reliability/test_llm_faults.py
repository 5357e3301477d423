"""LLM faults: a model failing at a configurable rate during many adds and reflections.

Checked after every run: every acknowledged memory is stored exactly once with exactly the
importance the fake's last answer implies (the LLM rating, or the heuristic marked
``importance_source="heuristic"``), no failed reflection wrote anything or reset the counter,
the counter equals the importance added since the last reflection, errors surface (the record's
source, an exception in strict mode, the log and ``ReflectiveMemory.errors`` for background
reflections), and every retried transient fault waited the configured exponential backoff.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import (
    ImportanceConfig,
    ImportanceError,
    LLMImportanceScorer,
    MemoryConfig,
    MemoryStream,
    ReflectionConfig,
    ReflectionError,
    ReflectiveMemory,
    create_reflection_graph,
)
from langchain_reflective.importance import heuristic_rating
from tests.fakes import WordEmbeddings
from tests.reliability.conftest import Figures, Scale
from tests.reliability.faults import BACKOFF_WAITS, RETRY, FaultyChatModel

RATES = {
    "exception": 0.03,
    "timeout": 0.04,
    "connection": 0.03,
    "rate_limit": 0.04,
    "malformed": 0.04,
    "empty": 0.03,
}
"""21 % of all model calls fail, in six ways."""
WORDS = (
    "alice",
    "bob",
    "carol",
    "dave",
    "tea",
    "coffee",
    "paper",
    "library",
    "paris",
    "lisbon",
    "exam",
    "wedding",
    "garden",
    "piano",
    "train",
    "museum",
    "river",
    "report",
    "deadline",
    "concert",
    "hospital",
    "kitchen",
    "bicycle",
    "market",
    "winter",
)
REFLECTION = ReflectionConfig(min_relevance=-1.0, retry=RETRY)


def memory_text(i: int, rng: random.Random) -> str:
    return f"event {i}: " + " ".join(rng.choice(WORDS) for _ in range(6))


def make_memory(
    path: Path, model: FaultyChatModel, *, strict: bool = False, **config: Any
) -> ReflectiveMemory:
    scorer = LLMImportanceScorer(model, config=ImportanceConfig(retry=RETRY, strict=strict))
    stream = MemoryStream(WordEmbeddings(), path=path, importance_scorer=scorer)
    settings = {"reflect_threshold": 0, "reflect_every": 0, "background": False, **config}
    return ReflectiveMemory(model, stream, config=MemoryConfig(**settings), reflection=REFLECTION)


class SleepRecorder:
    """Records the backoff waits (``time.sleep`` / ``asyncio.sleep`` of tenacity)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.waits: list[float] = []
        real_sleep, real_asleep = time.sleep, asyncio.sleep

        def sleep(seconds: float) -> None:
            self.waits.append(round(seconds, 9))
            real_sleep(seconds)

        async def asleep(seconds: float, *args: Any, **kwargs: Any) -> Any:
            self.waits.append(round(seconds, 9))
            return await real_asleep(seconds, *args, **kwargs)

        monkeypatch.setattr(time, "sleep", sleep)
        monkeypatch.setattr(asyncio, "sleep", asleep)

    def backoffs(self) -> list[float]:
        """The waits between attempts (tenacity's; ``asyncio.sleep(0)`` yields excluded)."""
        return [w for w in self.waits if 0 < w <= RETRY.max_wait]


def check_store(
    memory: ReflectiveMemory,
    model: FaultyChatModel,
    acked: dict[str, str],
    reflections: dict[str, list[str]],
) -> dict[str, int]:
    """The invariants of a run; returns lost/duplicated counts (asserted 0)."""
    stream = memory.stream
    records = stream.recent(None)
    ids = Counter(r.id for r in records)
    observations = [r for r in records if r.kind == "observation"]
    texts = Counter(r.text for r in observations)
    lost = [rid for rid in acked if rid not in ids]
    duplicated = [t for t, n in texts.items() if n > 1] + [i for i, n in ids.items() if n > 1]
    assert not lost, f"acknowledged memories missing: {lost[:5]}"
    assert not duplicated, f"duplicated memories: {duplicated[:5]}"
    assert {r.id: r.text for r in observations} == acked  # nothing unacknowledged either
    assert len(stream) == len(records)
    # importance: exactly what the model's last answer implies, or the marked fallback
    for r in observations:
        rating = model.last_rating.get(r.text)
        if rating is not None:
            assert (r.importance_source, r.importance) == ("llm", rating / 10), r
        else:
            expected = heuristic_rating(r.text) / 10
            assert (r.importance_source, r.importance) == ("heuristic", expected), r
    # no partial reflection: the stored reflections are exactly those acknowledged, whole
    stored = {r.id: r for r in records if r.kind == "reflection"}
    assert set(stored) == {rid for group in reflections.values() for rid in group}
    for r in stored.values():
        assert r.evidence and all(e in ids for e in r.evidence) and r.depth >= 1
    # the counter equals what was added since the last reflection
    state = stream.reflection_state()
    since = stream.recent(None, since_last_reflection=True)
    assert state.adds_since == len(since)
    expected_sum = sum(r.importance for r in since if r.kind != "reflection")
    assert math.isclose(state.importance_sum, expected_sum, abs_tol=1e-9)
    return {"lost": len(lost), "duplicated": len(duplicated)}


def test_adds_and_reflections_under_llm_faults(
    tmp_path: Path, scale: Scale, figures: Figures, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeps = SleepRecorder(monkeypatch)
    model = FaultyChatModel(rates=RATES, seed=1234)
    rng = random.Random(99)
    acked: dict[str, str] = {}
    reflections: dict[str, list[str]] = {}
    failed_reflections = 0
    every = max(1, scale.adds // scale.reflections)
    with make_memory(tmp_path / "m.db", model) as memory:
        # every other reflection runs strict: unusable answers raise instead of falling back
        strict = create_reflection_graph(
            model,
            memory.stream,
            config=ReflectionConfig(min_relevance=-1.0, retry=RETRY, strict=True),
        )
        for i in range(scale.adds):
            text = memory_text(i, rng)
            (record,) = memory.add(text)  # non-strict: a model failure never fails the add
            acked[record.id] = text
            if (i + 1) % every:
                continue
            before = memory.stream.reflection_state()
            n_before = len(memory.stream.recent(None, kinds=["reflection"]))
            try:
                if (i // every) % 2:
                    out = strict.invoke({"force": True})["reflections"]
                else:
                    out = memory.reflect()
            except ReflectionError as exc:
                failed_reflections += 1
                assert "nothing was written" in str(exc) or "strict" in str(exc)
                assert memory.stream.reflection_state() == before  # counter untouched
                assert len(memory.stream.recent(None, kinds=["reflection"])) == n_before
            else:
                reflections[f"r{i}"] = [r.id for r in out]
                state = memory.stream.reflection_state()
                assert (state.importance_sum, state.adds_since) == (0.0, 0)
        result = check_store(memory, model, acked, reflections)
    # retries with backoff: every transient fault that was not the last attempt was followed
    # by exactly the configured exponential wait
    assert model.expected_waits, "the run injected no retried fault"
    assert sorted(sleeps.backoffs()) == sorted(model.expected_waits)
    assert set(model.expected_waits) == {0.001, 0.002}  # the wait doubled on the 2nd retry
    assert 0 < failed_reflections < scale.reflections  # some failed, some succeeded
    heuristic = sum(1 for v in model.last_rating.values() if v is None)
    figures.record(
        "llm_faults",
        scale.name,
        adds=scale.adds,
        acknowledged=len(acked),
        reflections_attempted=scale.reflections,
        reflections_stored=len(reflections),
        reflections_failed=failed_reflections,
        model_calls=sum(model.calls.values()),
        faults_injected=dict(model.injected),
        faults_total=model.total_injected,
        retries_with_backoff=len(model.expected_waits),
        importance_fallbacks=heuristic,
        **result,
    )


async def test_async_adds_and_reflections_under_llm_faults(
    tmp_path: Path, scale: Scale, figures: Figures, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeps = SleepRecorder(monkeypatch)
    model = FaultyChatModel(rates=RATES, seed=4321)
    rng = random.Random(7)
    acked: dict[str, str] = {}
    reflections: dict[str, list[str]] = {}
    failed = 0
    n_adds = scale.adds // 2
    every = max(1, n_adds // max(1, scale.reflections // 2))
    memory = make_memory(tmp_path / "a.db", model)
    try:
        for start in range(0, n_adds, every):
            batch = [memory_text(i, rng) for i in range(start, min(n_adds, start + every))]
            results = await asyncio.gather(*(memory.aadd(t) for t in batch))
            for (record,), text in zip(results, batch, strict=True):
                acked[record.id] = text
            before = memory.stream.reflection_state()
            try:
                out = await memory.areflect()
            except ReflectionError:
                failed += 1
                assert memory.stream.reflection_state() == before
            else:
                reflections[f"r{start}"] = [r.id for r in out]
        result = check_store(memory, model, acked, reflections)
    finally:
        memory.close()
    assert sorted(sleeps.backoffs()) == sorted(model.expected_waits)
    figures.record(
        "llm_faults_async",
        scale.name,
        adds=n_adds,
        acknowledged=len(acked),
        reflections_stored=len(reflections),
        reflections_failed=failed,
        model_calls=sum(model.calls.values()),
        faults_injected=dict(model.injected),
        faults_total=model.total_injected,
        retries_with_backoff=len(model.expected_waits),
        **result,
    )


def test_strict_mode_raises_and_stores_nothing_for_the_failed_add(
    tmp_path: Path, scale: Scale, figures: Figures
) -> None:
    model = FaultyChatModel(rates={k: 2 * v for k, v in RATES.items()}, seed=5)
    rng = random.Random(3)
    acked: dict[str, str] = {}
    raised = 0
    n = scale.adds // 2
    with make_memory(tmp_path / "s.db", model, strict=True) as memory:
        for i in range(n):
            text = memory_text(i, rng)
            try:
                (record,) = memory.add(text)
            except ImportanceError as exc:
                raised += 1
                assert "could not be rated" in str(exc)
                assert model.last_rating[text] is None
            else:
                assert record.importance_source == "llm"
                acked[record.id] = text
        assert raised and acked
        result = check_store(memory, model, acked, {})
    figures.record(
        "llm_faults_strict",
        scale.name,
        adds=n,
        acknowledged=len(acked),
        raised_importance_error=raised,
        faults_injected=dict(model.injected),
        faults_total=model.total_injected,
        **result,
    )


def test_background_reflection_failures_are_logged_and_kept(
    tmp_path: Path, scale: Scale, figures: Figures, caplog: pytest.LogCaptureFixture
) -> None:
    rates = {"exception": 0.15, "malformed": 0.05, "timeout": 0.05}
    model = FaultyChatModel(rates=rates, seed=11)
    rng = random.Random(5)
    acked: dict[str, str] = {}
    n = scale.adds // 2
    caplog.set_level(logging.ERROR, logger="langchain_reflective.memory")
    with make_memory(tmp_path / "b.db", model, reflect_every=10, background=True) as memory:
        for i in range(n):
            text = memory_text(i, rng)
            (record,) = memory.add(text, namespace="user-1")
            acked[record.id] = text
            if (i + 1) % 10 == 0:
                # one background reflection per 10 adds, run to its end before the next adds:
                # the seeded faults then hit the same calls on every machine (triggers that
                # arrive while a reflection runs would otherwise coalesce depending on timing)
                assert memory.flush(timeout=120)
        assert memory.flush(timeout=120)
        failures = list(memory.errors)
        logged = [
            r
            for r in caplog.records
            if "background reflection for namespace 'user-1' failed" in r.getMessage()
        ]
        assert failures, "no background reflection failed: raise the fault rate"
        assert len(logged) == len(failures)
        # one line each, naming the cause; the traceback stays with the error in .errors
        assert all(not r.exc_info and "ReflectionError" in r.getMessage() for r in logged)
        assert all("\n" not in r.getMessage() for r in logged)
        assert all(f.namespace == "user-1" for f in failures)
        assert all(isinstance(f.error, ReflectionError) for f in failures)
        stream = memory.stream
        records = stream.recent(None, namespace="user-1")
        ids = Counter(r.id for r in records)
        observations = {r.id: r.text for r in records if r.kind == "observation"}
        assert observations == acked and max(ids.values()) == 1
        insights = [r for r in records if r.kind == "reflection"]
        assert insights and all(all(e in ids for e in r.evidence) for r in insights)
        by_time = Counter(r.created_at for r in insights)  # one group per stored reflection
        assert max(by_time.values()) <= REFLECTION.max_insights
    figures.record(
        "llm_faults_background",
        scale.name,
        adds=n,
        acknowledged=len(acked),
        background_failures_logged=len(logged),
        reflections_stored=len(by_time),
        faults_injected=dict(model.injected),
        faults_total=model.total_injected,
        lost=0,
        duplicated=0,
    )


def test_backoff_waits_follow_the_retry_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.test_reflection_fakes import ScriptedChatModel

    sleeps = SleepRecorder(monkeypatch)
    model = ScriptedChatModel(fail_on={"importance": TimeoutError("slow")}, fail_times=2)
    scorer = LLMImportanceScorer(model, config=ImportanceConfig(retry=RETRY))
    (result,) = scorer.score(["the exam is tomorrow"])
    assert result.source == "llm" and model.failures == ["importance", "importance"]
    # initial_wait=0.001, exp_base=2, jitter=0: the waits are 0.001 s then 0.002 s
    assert sleeps.backoffs() == sorted(BACKOFF_WAITS)[:2]
