"""Checks of the ``reflective`` command that need no model: what it says when interrupted,
what it validates before it prints or loads anything."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings
from tests.unit.cli_run import one_line, run_cli
from tests.unit.read_only_storage import permission_bits_apply

cli = pytest.importorskip("langchain_reflective.cli", reason='needs the cli extra ("[cli]")')
cli_files = pytest.importorskip("langchain_reflective.cli.files")

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def memory_file(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(["Ana adopted a greyhound", "It rained"], importances=0.5, now=T0)
        stream.add("Ben likes chess", importances=0.5, now=T0, namespace="ben")
    return path


def test_ctrl_c_in_a_command_prints_one_line(
    memory_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: exit status 130 and nothing on stderr (typer turns the KeyboardInterrupt into
    its own exit, so the CLI's handler never ran)."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_files, "_open_stream", interrupted)
    code, _, err = run_cli(capsys, "inspect", memory_file)
    assert code == 130
    assert one_line(err) == "error: interrupted"


def test_ctrl_c_says_what_the_command_noted(
    memory_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "error: interrupted" alone: only the import command turned an interruption
    into an error with its notes; every command now does, where commands are registered."""

    def interrupted(*args: object, **kwargs: object) -> None:
        exc = KeyboardInterrupt()
        exc.add_note("the file was left as it was")
        raise exc

    monkeypatch.setattr(cli_files, "_open_stream", interrupted)
    code, _, err = run_cli(capsys, "inspect", memory_file)
    assert code == 130
    assert one_line(err) == "error: interrupted -- the file was left as it was"


def test_every_command_reports_interruptions() -> None:
    """The wrapper reaches the commands of groups too (``reflective reflexion ...``), and
    typer still reads each command's parameters through it."""
    app = cli.app

    def commands(application: object) -> list[object]:
        found = [info.callback for info in application.registered_commands]  # type: ignore[attr-defined]
        for group in application.registered_groups:  # type: ignore[attr-defined]
            found += commands(group.typer_instance)
        return found

    callbacks = commands(app)
    assert len(callbacks) > 4
    assert all(getattr(callback, "__wrapped__", None) for callback in callbacks)


def test_a_dollar_in_plot_titles_is_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: matplotlib parsed "$...$" in the namespace (title) and kind (legend) as math,
    and an unknown macro failed the plot with "unexpected ValueError"."""
    path = tmp_path / "dollar.db"
    namespace = "cost $\\undefinedmacro$ x"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(["a", "b"], importances=0.5, now=T0, namespace=namespace)
        stream.add("c", kinds="$x^$", importances=0.5, now=T0, namespace=namespace)
    png = tmp_path / "plot.png"
    code, _, err = run_cli(capsys, "inspect", path, "--plot", png, "-n", "0")
    assert code == 0, err
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.fixture
def no_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo fails the test if it gets as far as loading a model."""
    cli_demo = pytest.importorskip("langchain_reflective.cli.demo")

    def loaded(*args: object, **kwargs: object) -> None:
        raise AssertionError("the demo loaded a model before refusing --db")

    monkeypatch.setattr(cli_demo, "_load_embeddings", loaded)


@pytest.mark.usefixtures("no_models")
def test_demo_refuses_a_missing_directory_before_loading_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the demo created the directory behind the user's back (other commands refuse a
    missing directory, exit status 1)."""
    db = tmp_path / "nodir" / "x.db"
    code, _, err = run_cli(capsys, "demo", "--db", db)
    line = one_line(err)
    assert code == 1
    assert f"the directory {db.parent} does not exist" in line
    assert not db.parent.exists()


@pytest.mark.usefixtures("no_models")
@pytest.mark.parametrize("command", ["demo", "import", "export", "inspect"])
def test_a_folder_that_is_a_file_is_called_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], memory_file: Path, command: str
) -> None:
    """Before: "the directory X does not exist" for an X that is a file."""
    folder = tmp_path / "a-file"
    folder.write_text("not a folder")
    inside = folder / "x.db"
    export = tmp_path / "e.jsonl"
    assert run_cli(capsys, "export", memory_file, export)[0] == 0
    args = {
        "demo": ["demo", "--db", inside],
        "import": ["import", export, inside],
        "export": ["export", memory_file, folder / "e.jsonl"],
        "inspect": ["inspect", memory_file, "--plot", folder / "p.png"],
    }[command]
    code, _, err = run_cli(capsys, *args)
    line = one_line(err)
    assert code == 1 and f"{folder} is a file, not a directory" in line, line
    assert "does not exist" not in line


@pytest.mark.usefixtures("no_models")
def test_demo_refuses_a_read_only_directory_before_loading_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a read-only location failed only after the models had loaded (~28 s). The
    directory is made to fail as a read-only file system does (root writes a chmod 555 one)."""
    import errno
    from types import SimpleNamespace

    cli_demo = pytest.importorskip("langchain_reflective.cli.demo")

    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(cli_demo, "tempfile", SimpleNamespace(TemporaryFile=read_only))
    code, _, err = run_cli(capsys, "demo", "--db", tmp_path / "x.db")
    line = one_line(err)
    assert code == 1
    assert f"the directory {tmp_path} is not writable (Read-only file system)" in line


@pytest.mark.usefixtures("no_models")
def test_demo_refuses_read_only_places_before_loading_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real read-only places (as root too: the permission bits apply to this thread)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    empty = tmp_path / "empty.db"
    empty.touch()
    empty.chmod(0o444)
    try:
        with permission_bits_apply():
            code, _, err = run_cli(capsys, "demo", "--db", folder / "x.db")
            assert code == 1 and "is not writable" in one_line(err)
            code, _, err = run_cli(capsys, "demo", "--db", empty)
            assert code == 1 and "the file is read-only" in one_line(err)
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--as-of", "garbage"], 2, "--as-of must be"),
        (["--namespace", "nope"], 1, "namespace 'nope' not found"),
    ],
)
def test_inspect_checks_its_options_before_printing_anything(
    memory_file: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: int,
    says: str,
) -> None:
    """Before: the whole overview (file, models, counts per namespace) was printed, then the
    error."""
    status, out, err = run_cli(capsys, "inspect", memory_file, *args)
    assert status == code
    assert says in one_line(err)
    assert out == ""


def test_inspect_with_nothing_to_plot_prints_only_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.db"
    MemoryStream(WordEmbeddings(), path=path).close()
    code, out, err = run_cli(capsys, "inspect", path, "--plot", tmp_path / "p.png")
    assert code == 1 and "nothing to plot" in one_line(err) and out == ""
    code, out, err = run_cli(capsys, "inspect", path)
    assert code == 0 and "It holds no memories yet." in out, err


@pytest.mark.parametrize("command", ["inspect", "export", "import"])
def test_an_empty_namespace_option_is_a_usage_error(
    memory_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Before: ``import ... --namespace ''`` imported into the memories' own namespaces, as if
    no --namespace had been given (inspect and export said "not found", exit status 1)."""
    export = tmp_path / "out.jsonl"
    assert run_cli(capsys, "export", memory_file, export, "--all-namespaces")[0] == 0
    args = {
        "inspect": [memory_file],
        "export": [memory_file, tmp_path / "again.jsonl"],
        "import": [export, tmp_path / "copy.db"],
    }[command]
    code, _, err = run_cli(capsys, command, *args, "--namespace", "")
    assert code == 2
    assert "--namespace must not be empty" in one_line(err)
    assert not (tmp_path / "copy.db").exists() and not (tmp_path / "again.jsonl").exists()


def test_an_export_without_memories_imports_without_loading_a_model(
    tmp_path: Path,
    memory_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: an export of an empty file (no embedding model in its header) loaded the
    embedding model (seconds) to import nothing, and created an empty memory file."""

    def loaded(*args: object, **kwargs: object) -> None:
        raise AssertionError("the import loaded an embedding model for no memories")

    monkeypatch.setattr(cli_files, "_load_embeddings", loaded)
    empty = tmp_path / "empty.db"
    MemoryStream(WordEmbeddings(), path=empty).close()
    export = tmp_path / "none.jsonl"
    assert run_cli(capsys, "export", empty, export)[0] == 0
    code, out, err = run_cli(capsys, "import", export, tmp_path / "new.db")
    assert code == 0, err
    assert "Imported 0 memories" in out and "was not created" in " ".join(out.split())
    assert not (tmp_path / "new.db").exists()
    before = memory_file.read_bytes()
    code, out, err = run_cli(capsys, "import", export, memory_file)
    assert code == 0 and "Imported 0 memories" in out, err
    assert memory_file.read_bytes() == before


@pytest.mark.parametrize(
    ("given", "place"),
    [
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("POSTGRESQL://u:p@h:5/DB", "postgresql://u:p@h:5/DB"),
        ("Postgres://u@h/db", "postgres://u@h/db"),
        ("memory.db", Path("memory.db")),
        ("dir/postgresql:/x.db", Path("dir/postgresql:/x.db")),
    ],
)
def test_a_postgres_scheme_is_read_in_any_case(given: str, place: str | Path) -> None:
    """Before: ``POSTGRESQL://...`` was taken as a file path ("no such memory file")."""
    cli_common = pytest.importorskip("langchain_reflective.cli._common")
    assert cli_common._memory_place(given) == place


def test_an_upper_case_postgres_url_is_not_a_missing_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_cli(capsys, "inspect", "POSTGRESQL://nobody:secret@127.0.0.1:1/nowhere")
    line = one_line(err)
    assert code == 1
    assert "no such memory file" not in line and "secret" not in line
