"""Every built-in strategy, ReflectiveMemory and the guide's custom strategy pass the contract."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_reflective import (
    BaseMemoryStrategy,
    HybridMemory,
    ImportanceMemory,
    MemoryConfig,
    MemoryStream,
    Observation,
    ReflectiveMemory,
    ReflectiveMemoryStrategy,
    SemanticMemory,
    VoidMemory,
    WindowMemory,
)
from langchain_reflective.strategies import fit_observations, observation_messages
from langchain_reflective.strategies.testing import StrategyConformanceTests
from tests.fakes import WordEmbeddings
from tests.unit.test_examples import EXAMPLES_DIR, load


class TestVoidMemory(StrategyConformanceTests):
    def make_strategy(self) -> BaseMemoryStrategy:
        return VoidMemory()

    def visible(self, committed: int) -> int:
        return 0


class TestWindowMemory(StrategyConformanceTests):
    def make_strategy(self) -> BaseMemoryStrategy:
        return WindowMemory(capacity=1000)


class TestSmallWindowMemory(StrategyConformanceTests):
    """A window smaller than what is committed: exactly ``capacity`` turns stay."""

    def make_strategy(self) -> BaseMemoryStrategy:
        return WindowMemory(capacity=2)

    def visible(self, committed: int) -> int:
        return min(committed, 2)


class TestImportanceMemory(StrategyConformanceTests):
    def make_strategy(self) -> BaseMemoryStrategy:
        return ImportanceMemory(max_size=5)

    def visible(self, committed: int) -> int:
        return min(committed, 5)


class TestHybridMemory(StrategyConformanceTests):
    """The conformance turns are important (0.9), so the hybrid keeps them beyond its window."""

    def make_strategy(self) -> BaseMemoryStrategy:
        return HybridMemory(capacity=2, threshold=0.5, max_important=10)

    def visible(self, committed: int) -> int:
        return min(committed, 2 + 10)


class TestHybridMemoryWindowOnly(StrategyConformanceTests):
    """Nothing reaches the threshold: the hybrid is a window."""

    def make_strategy(self) -> BaseMemoryStrategy:
        return HybridMemory(capacity=3, threshold=1.0, scorer=lambda obs: 0.2)

    def visible(self, committed: int) -> int:
        return min(committed, 3)


class TestSemanticMemory(StrategyConformanceTests):
    def make_strategy(self) -> BaseMemoryStrategy:
        return SemanticMemory(MemoryStream(WordEmbeddings()), k=60)

    def close_strategy(self, strategy: BaseMemoryStrategy) -> None:
        assert isinstance(strategy, SemanticMemory)
        strategy.stream.close()


class TestSemanticMemoryTopK(TestSemanticMemory):
    def make_strategy(self) -> BaseMemoryStrategy:
        return SemanticMemory(MemoryStream(WordEmbeddings()), k=2)

    def visible(self, committed: int) -> int:
        return min(committed, 2)


class TestReflectiveMemory(StrategyConformanceTests):
    """ReflectiveMemory behind the interface, on a SQLite file (no model: it never reflects)."""

    def make_strategy(self) -> BaseMemoryStrategy:
        self._dir = Path(tempfile.mkdtemp(prefix="reflective-conformance-"))
        stream = MemoryStream(WordEmbeddings(), path=self._dir / "memory.db")
        config = MemoryConfig(recent_capacity=1000, token_budget=100_000)
        return ReflectiveMemoryStrategy(ReflectiveMemory(None, stream, config=config))

    def close_strategy(self, strategy: BaseMemoryStrategy) -> None:
        assert isinstance(strategy, ReflectiveMemoryStrategy)
        strategy.memory.close()
        shutil.rmtree(self._dir, ignore_errors=True)


class TestPriorityMemoryExample(StrategyConformanceTests):
    """The custom strategy of ``examples/custom_memory.py``, as a user would test it."""

    def make_strategy(self) -> BaseMemoryStrategy:
        module: Any = next(load(EXAMPLES_DIR / "custom_memory.py"))
        return module.PriorityMemory(max_size=4)  # type: ignore[no-any-return]

    def visible(self, committed: int) -> int:
        return min(committed, 4)


def test_the_example_keeps_the_newest_of_equally_important_turns() -> None:
    """Every reply of 1,000+ characters scores 1.0: the example kept the oldest of equals, so
    once full of long answers it never kept a new one."""
    module: Any = next(load(EXAMPLES_DIR / "custom_memory.py"))
    memory = module.PriorityMemory(max_size=2)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i, city in enumerate(["Lisbon", "Porto", "Oslo"]):
        reply = f"You live in {city}. " + "x" * 1000
        memory.commit(
            Observation(query=f"I live in {city}", reply=reply, namespace="u",
                        created_at=start + timedelta(days=i))
        )  # fmt: skip
    text = " ".join(str(m.content) for m in memory.context([], namespace="u"))
    assert "Oslo" in text and "Porto" in text and "Lisbon" not in text


class KeptOnlyMemory(BaseMemoryStrategy):
    """Keeps only the turns whose metadata says ``keep`` (a filtering policy)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, list[Observation]] = {}

    def commit(self, observation: Observation) -> None:
        observation = self.check_observation(observation)
        if observation.metadata.get("keep") is not True:
            return
        with self._lock:
            self._kept.setdefault(self.resolve_namespace(observation.namespace), []).append(
                observation
            )

    def context(
        self,
        messages: Sequence[BaseMessage],
        *,
        budget: int | None = None,
        namespace: str | None = None,
    ) -> list[BaseMessage]:
        with self._lock:
            kept = list(self._kept.get(self.resolve_namespace(namespace), []))
        return observation_messages(fit_observations(kept, budget))

    def purge(self, *, namespace: str | None = None) -> None:
        with self._lock:
            self._kept.pop(self.resolve_namespace(namespace), None)


class TestMakeObservationIsUsedEverywhere(StrategyConformanceTests):
    """A strategy that needs its own turns overrides ``make_observation``, and every test
    (default namespace, budget, fencing) commits those turns, not turns of its own."""

    def make_strategy(self) -> BaseMemoryStrategy:
        return KeptOnlyMemory()

    def make_observation(self, group: int, index: int, *, namespace: str) -> Observation:
        observation = super().make_observation(group, index, namespace=namespace)
        return replace(observation, metadata={"keep": True})

    def test_the_fenced_turn_is_kept(self) -> None:
        strategy = self.make_strategy()
        seen: list[Observation] = []
        commit = strategy.commit
        strategy.commit = lambda obs: (seen.append(obs), commit(obs))[1]  # type: ignore[method-assign]
        self.make_strategy = lambda: strategy  # type: ignore[method-assign]
        self.test_remembered_text_stays_fenced()
        assert [o.metadata for o in seen] == [{"keep": True}] * 2  # the two hostile turns
