"""langchain-tests' standard tool suites (unit and integration) for the three memory tools."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import BaseTool
from langchain_tests.integration_tests import ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests

from langchain_reflective import MemoryStream
from langchain_reflective.integrations.tools import create_memory_tools
from langchain_reflective.memory import MemoryConfig, ReflectiveMemory
from tests.fakes import WordEmbeddings
from tests.unit.test_middleware import FakeChat

_DIR = Path(tempfile.mkdtemp(prefix="reflective-tools-standard-"))
_MEMORY: ReflectiveMemory | None = None


def _tool(name: str) -> BaseTool:
    global _MEMORY
    if _MEMORY is None:
        stream = MemoryStream(WordEmbeddings(), path=_DIR / "memory.db", namespace="standard")
        _MEMORY = ReflectiveMemory(FakeChat(), stream, config=MemoryConfig(background=False))
        _MEMORY.add(["The user likes green tea", "The user likes green tea with honey"])
    return {t.name: t for t in create_memory_tools(_MEMORY)}[name]


@pytest.fixture(scope="module", autouse=True)
def _close_memory() -> Iterator[None]:
    yield
    if _MEMORY is not None:
        _MEMORY.close()


class _Recall:
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("recall_memories")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "green tea", "k": 2}


class _Save:
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("save_memory")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"text": "The user moved to Lisbon", "importance": 0.7}


class _Reflect:
    @property
    def tool_constructor(self) -> BaseTool:
        return _tool("reflect_now")

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {}


class TestRecallUnit(_Recall, ToolsUnitTests):
    pass


class TestRecallIntegration(_Recall, ToolsIntegrationTests):
    pass


class TestSaveUnit(_Save, ToolsUnitTests):
    pass


class TestSaveIntegration(_Save, ToolsIntegrationTests):
    pass


class TestReflectUnit(_Reflect, ToolsUnitTests):
    pass


class TestReflectIntegration(_Reflect, ToolsIntegrationTests):
    pass
