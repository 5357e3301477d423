"""docs/api.md lists exactly the public names: the root's ``__all__`` and each subpackage's.

The doc's layout: a ``##`` section per module, the root's headed "The root package: ...", a
subpackage's headed by its dotted path in a code span; inside, one entry per line starting with
``- `Name` `` (outside code blocks). A name exported but not documented, or documented but not
exported, fails with the names to add or remove.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import langchain_reflective
from langchain_reflective.errors import ReflectiveError

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ROOT_HEADING = "The root package: `langchain_reflective`"

_HEADING = re.compile(r"^## (.+?)\s*$", re.MULTILINE)
_ENTRY = re.compile(r"^- `([^`]+)`", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_ROOT_IMPORT = re.compile(r"from langchain_reflective import \(?([\w\s,]+)\)?")


def _defined_errors(module: ModuleType) -> list[str]:
    """The package's error classes a module defines (for a module whose ``__all__`` lists
    helpers instead: ``backends.postgres.failures``)."""
    return [
        name
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, ReflectiveError)
        and value.__module__ == module.__name__
    ]


def _all(module: ModuleType) -> list[str]:
    return list(module.__all__)


# module -> (extra it needs, or None; the names its section must list)
MODULES: dict[str, tuple[str | None, Callable[[ModuleType], list[str]]]] = {
    "langchain_reflective.local": (None, _all),
    "langchain_reflective.reflexion": (None, _all),
    "langchain_reflective.thinking": (None, _all),
    "langchain_reflective.strategies": (None, _all),
    "langchain_reflective.strategies.testing": (None, _all),
    "langchain_reflective.backends.postgres.failures": ("psycopg", _defined_errors),
}


def _sections() -> dict[str, str]:
    """The doc's ``##`` sections, heading -> body, with fenced code blocks removed."""
    text = _FENCE.sub("", API_DOC.read_text(encoding="utf-8"))
    headings = list(_HEADING.finditer(text))
    return {
        match.group(1): text[match.end() : nxt.start() if nxt else len(text)]
        for match, nxt in zip(headings, [*headings[1:], None], strict=True)
    }


def _entries(body: str) -> list[str]:
    """The names a section documents: each entry line's first code span, up to its ``(``."""
    return [span.split("(", 1)[0].strip() for span in _ENTRY.findall(body)]


def _compare(where: str, exported: list[str], documented: list[str]) -> None:
    missing = sorted(set(exported) - set(documented))
    extra = sorted(set(documented) - set(exported))
    duplicated = sorted({name for name in documented if documented.count(name) > 1})
    problems = []
    if missing:
        problems.append(f"add an entry ('- `Name`: ...') for {missing}")
    if extra:
        problems.append(f"remove {extra} (not in {where}'s __all__)")
    if duplicated:
        problems.append(f"list {duplicated} once")
    assert not problems, f"docs/api.md, section {where}: " + "; ".join(problems)


def test_root_section_lists_exactly_the_root_all() -> None:
    sections = _sections()
    assert ROOT_HEADING in sections, f"docs/api.md has no '## {ROOT_HEADING}' section"
    _compare(
        "langchain_reflective", list(langchain_reflective.__all__), _entries(sections[ROOT_HEADING])
    )


def test_doc_imports_from_the_root_only_exported_names() -> None:
    text = API_DOC.read_text(encoding="utf-8")
    imported = {
        name.strip()
        for group in _ROOT_IMPORT.findall(text)
        for name in group.split(",")
        if name.strip()
    }
    extra = sorted(imported - set(langchain_reflective.__all__))
    assert not extra, (
        f"docs/api.md imports {extra} from langchain_reflective, which does not export them"
    )


def test_every_module_section_is_checked() -> None:
    documented = {
        heading.strip("`")
        for heading in _sections()
        if heading.startswith("`langchain_reflective.") and heading.endswith("`")
    }
    assert documented == set(MODULES), (
        f"docs/api.md's module sections {sorted(documented)} differ from this test's MODULES "
        f"{sorted(MODULES)}: add the module here (or its section there)"
    )


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_section_lists_exactly_its_public_names(name: str) -> None:
    requires, public = MODULES[name]
    if requires is not None:
        pytest.importorskip(requires)
    module = importlib.import_module(name)
    sections = _sections()
    heading = f"`{name}`"
    assert heading in sections, f"docs/api.md has no '## {heading}' section"
    _compare(name, public(module), _entries(sections[heading]))
