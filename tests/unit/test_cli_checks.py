"""Checks of the ``reflective`` command that need no model: what it says when interrupted,
what it validates before it prints or loads anything."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings

cli = pytest.importorskip("langchain_reflective.cli", reason='needs the cli extra ("[cli]")')
cli_files = pytest.importorskip("langchain_reflective.cli.files")

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = cli.run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    [line] = [ln for ln in err.splitlines() if ln.strip()]
    assert line.startswith("error: "), line
    return line


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
