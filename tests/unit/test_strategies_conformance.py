"""Every built-in strategy, ReflectiveMemory and the guide's custom strategy pass the contract."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from langchain_reflective import (
    BaseMemoryStrategy,
    HybridMemory,
    ImportanceMemory,
    MemoryConfig,
    MemoryStream,
    ReflectiveMemory,
    ReflectiveMemoryStrategy,
    SemanticMemory,
    VoidMemory,
    WindowMemory,
)
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
