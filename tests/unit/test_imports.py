from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import langchain_reflective


def test_all_is_sorted_and_importable() -> None:
    names = langchain_reflective.__all__
    assert names == sorted(names)
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(langchain_reflective, name) is not None, name


def test_public_names_are_documented() -> None:
    for name in langchain_reflective.__all__:
        obj = getattr(langchain_reflective, name)
        if callable(obj):
            assert obj.__doc__, f"{name} has no docstring"


def test_version_is_the_projects() -> None:
    """``__version__`` is the version pyproject.toml declares (not the source-tree fallback)."""
    with (Path(__file__).parents[2] / "pyproject.toml").open("rb") as f:
        declared = tomllib.load(f)["project"]["version"]
    assert langchain_reflective.__version__ == declared


def test_import_is_light_and_does_nothing() -> None:
    """Importing the package loads no heavy optional dependency and starts nothing."""
    code = (
        "import sys, threading, langchain_reflective;"
        "heavy = {'faiss', 'torch', 'sentence_transformers', 'pandas', 'xllamacpp',"
        " 'matplotlib', 'langchain_classic', 'psycopg'};"
        "print(sorted(heavy & set(sys.modules)), threading.active_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] 1", out.stdout + out.stderr


def test_py_typed_is_shipped() -> None:
    from importlib.resources import files

    assert files("langchain_reflective").joinpath("py.typed").is_file()


def test_the_package_never_mentions_pickle() -> None:
    """Issue acceptance: `grep -rn pickle langchain_reflective` finds nothing."""
    from pathlib import Path

    root = Path(langchain_reflective.__file__).parent
    hits = [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.suffix in {".py", ".json", ".typed"} and b"pickle" in p.read_bytes()
    ]
    assert hits == []


def test_reflexion_names_at_the_root() -> None:
    from langchain_reflective.reflexion import create_reflexion_graph, search_reflections

    assert langchain_reflective.create_reflexion_graph is create_reflexion_graph
    assert langchain_reflective.search_reflections is search_reflections


def test_postgres_backend_is_lazy_and_names_its_extra() -> None:
    """``PostgresBackend`` comes from the root without importing psycopg up front; without
    psycopg, using it is an ImportError that says which extra to install."""
    from langchain_reflective.backends.postgres import PostgresBackend

    assert langchain_reflective.PostgresBackend is PostgresBackend
    code = (
        "import sys; sys.modules['psycopg'] = None; import langchain_reflective\n"
        "try:\n    langchain_reflective.PostgresBackend\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # the command to run, as every other missing extra says it (not a checkout-only `-e .`)
    assert 'pip install "langchain-reflective[postgres]"' in out.stdout, out.stdout + out.stderr
