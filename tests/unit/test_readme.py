"""Every python snippet in the README runs as written, and what it says about setup is true.

Each ```python block runs on its own (self-contained: a fresh namespace, in a temporary
directory). The only fakes are the two functions the README names as the place where models
come from, ``langchain_reflective.local.default_chat_model`` and ``default_embeddings``: they
are patched to return the fake chat model of the middleware tests and bag-of-words embeddings.
"""

from __future__ import annotations

import contextlib
import re
import runpy
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import local
from langchain_reflective.memory import MEMORY_PREAMBLE
from tests.fakes import WordEmbeddings
from tests.unit.test_middleware import FakeChat

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks() -> list[tuple[str, str]]:
    """(the heading above it, the code) of every python block, in order."""
    text = README.read_text(encoding="utf-8")
    out = []
    for match in BLOCK.finditer(text):
        headings = re.findall(r"^#+ (.+)$", text[: match.start()], re.MULTILINE)
        out.append((headings[-1] if headings else "", match.group(1)))
    return out


BLOCKS = _blocks()


@pytest.fixture
def fake_models(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Patch the README's two model sources; returns what they handed out."""
    handed: dict[str, Any] = {"chat": [], "embeddings": 0}

    @contextlib.contextmanager
    def default_chat_model(**kwargs: Any) -> Iterator[FakeChat]:
        model = FakeChat()
        handed["chat"].append((model, kwargs))
        yield model

    def default_embeddings(**kwargs: Any) -> WordEmbeddings:
        handed["embeddings"] += 1
        return WordEmbeddings()

    monkeypatch.setattr(local, "default_chat_model", default_chat_model)
    monkeypatch.setattr(local, "default_embeddings", default_embeddings)
    return handed


def test_the_readme_has_the_snippets_it_promises() -> None:
    assert [h for h, _ in BLOCKS] == [
        "Quickstart",
        "Reflection",
        "LangChain and LangGraph",
        "Memory strategies (and your own)",
        "LangGraph store",
        "Reflective thinking",
        "Reflexion (learning from failed attempts)",
        "Outgrowing one machine",
        "In a web service or several workers",
    ]


@pytest.mark.parametrize(("heading", "code"), BLOCKS, ids=[h for h, _ in BLOCKS])
def test_every_python_snippet_runs_as_written(
    heading: str,
    code: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fake_models: dict[str, Any],
) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    runpy.run_path(str(script), run_name="__main__")  # a fresh namespace: nothing predefined
    out = capsys.readouterr().out
    if heading == "Quickstart":
        assert "Bob moved to Paris" in out and (tmp_path / "memory.db").exists()
    elif heading == "Reflection":
        model, kwargs = fake_models["chat"][0]
        assert kwargs == {"max_tokens": 1024}
        # the stored insights were printed with their evidence ids and depth
        assert re.search(r"^the user cares about Klaus.*\('\w+'.*\) 1$", out, re.MULTILINE)
        assert MEMORY_PREAMBLE in out  # the working context
        assert any("most salient high-level questions" in m.text for c in model.calls for m in c)
    elif heading == "LangChain and LangGraph":
        assert fake_models["embeddings"] == 1
        assert "OK." in out  # the fake model's answer
        assert "User: I moved to Lisbon in May." in out  # recorded, then retrieved
    elif heading == "LangGraph store":
        assert re.search(r"^Alice moved to Lisbon in May \(score \d\.\d\d\)$", out, re.MULTILINE)
        assert "{'text': 'Alice moved to Porto'} 2" in out  # updated in place
        assert "Oslo" not in out and (tmp_path / "store.db").exists()
    elif heading == "Reflective thinking":
        # the fake model answers "OK.": one round, no JSON summary -> the extractive fallback
        assert "1 model {'summary_malformed': 1}" in out and "2 model" in out
        assert "[Turn 1] Files: [main.ts, utils.ts]." in out and "[Turn 2] Benchmark" in out
        assert "(extractive fallback summary)" in out
        assert "Files: [main.ts, utils.ts]. Task: find why the import is slow." in out
        assert "[2]" in out  # the search for parseData found turn 2
        assert (tmp_path / "thinking.db").exists()
    elif heading == "Outgrowing one machine":
        assert "['Ana moved to Lisbon in May']" in out  # stored in Postgres, retrieved from it
    # "In a web service or several workers" only defines connect(): test_postgres_outage.py
    # runs it while its server starts


def test_install_instructions_work_from_a_checkout() -> None:
    text = README.read_text(encoding="utf-8")
    install = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    # the package is not on PyPI: no line may tell people to pip install it by name
    commands = re.findall(r"^pip install (.+)$", install, re.MULTILINE)
    assert commands and not any("langchain-reflective" in c for c in commands)
    editable = next(c for c in commands if c.startswith("-e"))
    spec = shlex.split(editable)[1]  # '.[local,cli,...]'
    extras = spec.split("[", 1)[1].rstrip("]").split(",")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    declared = re.findall(
        r"^([a-z]+) = \[", pyproject.split("[project.optional-dependencies]")[1], re.MULTILINE
    )
    assert set(extras) <= set(declared), (extras, declared)


def test_make_test_fast_runs_unit_tests_only() -> None:
    """The Makefile's test-fast collects only tests/unit, without slow or integration tests,
    which is what the README says."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ntest-fast:", 1)[1].split("\n\n", 1)[0].splitlines()[1]
    args = shlex.split(recipe.split("-m pytest", 1)[1])
    # (read, not run: collecting the suite in a subprocess took ~14 s of every CI run)
    paths = [a for a in args if not a.startswith("-") and a != args[args.index("-m") + 1]]
    assert paths == ["tests/unit"], args
    markers = args[args.index("-m") + 1]
    assert "not integration" in markers and "not slow" in markers, markers
    assert "unit tests only" in README.read_text(encoding="utf-8")


def test_readme_names_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make demo" in text and "make test" in text
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci


def test_make_test_keeps_each_session_server_on_one_worker() -> None:
    """``make test`` runs on pytest-xdist workers; without ``--dist loadgroup`` the groups
    tests/conftest.py gives the Postgres and llama.cpp tests are ignored and every worker
    starts its own servers."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ntest: lint", 1)[1].split("\n\n", 1)[0].splitlines()[1]
    args = shlex.split(recipe.split("-m pytest", 1)[1])
    assert "-n" in args and args[args.index("--dist") + 1] == "loadgroup", args
    assert "TEST_WORKERS" in README.read_text(encoding="utf-8")


def test_make_demo_creates_the_folder_of_its_memory_file() -> None:
    """``reflective demo`` refuses a --db whose directory does not exist (it never creates one
    behind the user's back), so the recipe must create it: on a fresh clone ``make demo``
    failed at once with "the directory .demo does not exist"."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    run = next(line for line in recipe if "reflective demo" in line)
    folder = Path(shlex.split(run)[shlex.split(run).index("--db") + 1]).parent
    made = [
        Path(arg)
        for line in recipe[: recipe.index(run)]
        if line.strip().startswith("mkdir -p")
        for arg in shlex.split(line)[2:]
    ]
    assert folder == Path(".") or folder in made, recipe
