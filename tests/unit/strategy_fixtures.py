"""The ``strategy`` fixture of the strategy tests: one built-in strategy per parameter, made by
the test module's factories and closed after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import BaseMemoryStrategy, ReflectiveMemoryStrategy, SemanticMemory

Make = Callable[[Path], BaseMemoryStrategy]


def strategy_fixture(makers: Mapping[str, Make]) -> Any:
    """A ``strategy`` fixture over ``makers`` (name -> factory of a strategy in ``tmp_path``):
    assign it to ``strategy`` in the test module."""

    @pytest.fixture(params=list(makers))
    def strategy(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseMemoryStrategy]:
        made = makers[request.param](tmp_path)
        yield made
        if isinstance(made, SemanticMemory):
            made.stream.close()
        if isinstance(made, ReflectiveMemoryStrategy):
            made.memory.close()

    return strategy
