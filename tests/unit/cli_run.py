"""Running the ``reflective`` command in-process, for the CLI's unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """Run ``reflective <args>``; its exit status, stdout and stderr."""
    from langchain_reflective import cli

    code = cli.run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    """The one line of an error on stderr (it must be one, starting with ``error: ``)."""
    [line] = [ln for ln in err.splitlines() if ln.strip()]
    assert line.startswith("error: "), line
    return line
