"""What the ``reflective`` command prints of memories never drives the terminal: control
characters (ESC sequences that clear the screen, set the window title or recolour, BEL, C1)
and bidi overrides in memory texts, namespaces, kinds, ids and error messages are shown as
escapes (``\\x1b``, ``\\u202e``), and rich markup in them stays text."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings

cli = pytest.importorskip("langchain_reflective.cli", reason='needs the cli extra ("[cli]")')
cli_common = pytest.importorskip("langchain_reflective.cli._common")
cli_demo = pytest.importorskip("langchain_reflective.cli.demo")
cli_scores = pytest.importorskip("langchain_reflective.cli.scores")

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
HOSTILE = "a\x1b[2J\x1b]0;pwned\x07b\u202eRTL\u2066c\x9b31m[bold]d[/]\x7f"
"""Clears the screen, sets the title, reverses the text, a C1 CSI, DEL, and markup."""
RAW = ("\x1b", "\x07", "\u202e", "\u2066", "\x9b", "\x7f")


def assert_shown_not_sent(text: str) -> None:
    """``text`` holds none of the raw characters, and shows them as escapes."""
    leaked = [repr(c) for c in RAW if c in text]
    assert not leaked, f"raw {leaked} reached the terminal: {text!r}"
    flat = "".join(text.split())  # (rich may wrap the escapes across lines)
    for shown in ("\\x1b[2J", "\\x1b]0;pwned\\x07", "\\u202eRTL\\u2066", "\\x9b31m", "\\x7f"):
        assert shown in flat, (shown, text)
    assert "[bold]d[/]" in flat  # markup stays text


def render(renderable: object) -> str:
    from rich.console import Console

    out = StringIO()
    Console(file=out, width=400, highlight=False).print(renderable)
    return out.getvalue()


@pytest.fixture
def hostile_file(tmp_path: Path) -> Path:
    path = tmp_path / "odd.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(["plain", f"text {HOSTILE}"], importances=0.5, now=T0, namespace=HOSTILE)
        stream.add(f"kind {HOSTILE}", kinds=HOSTILE, importances=0.5, now=T0, namespace=HOSTILE)
        stream.add("other", importances=0.5, now=T0, namespace="other")
    return path


def test_helper_shows_controls_and_keeps_text() -> None:
    visible = cli_common._visible
    assert visible("caf\u00e9 \u2603 \u65e5\u672c \u05e9\u05dc\u05d5\u05dd") == (
        "caf\u00e9 \u2603 \u65e5\u672c \u05e9\u05dc\u05d5\u05dd"
    )
    assert visible("a\tb\nc") == "a\tb\nc"
    assert visible("\x00\x1b\r\x7f\x85\x9f") == "\\x00\\x1b\\x0d\\x7f\\x85\\x9f"
    assert visible("\u202a\u202e\u2066\u2069") == "\\u202a\\u202e\\u2066\\u2069"


def test_safe_escapes_markup_and_shows_controls() -> None:
    """``_safe`` is ``_visible`` and rich's markup escape at once: rich prints the markup and
    a lone closing tag (which would fail the command) as written, and no control character."""
    safe = cli_common._safe
    assert safe("a[/]b") != "a[/]b"  # escaped for rich
    assert render(safe("[bold red]x[/] \x1b[2J [/] \u202e")).rstrip("\n") == (
        "[bold red]x[/] \\x1b[2J [/] \\u202e"
    )
    assert safe(cli_common._visible("\x1b[b]")) == safe("\x1b[b]")  # (_visible's escapes are)


def test_inspect_shows_control_characters_of_memories(
    hostile_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    cli_common._console.cache_clear()
    try:
        code = cli.run(["inspect", str(hostile_file), "--namespace", HOSTILE, "-n", "5"])
    finally:
        cli_common._console.cache_clear()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert_shown_not_sent(out)
    flat = "".join(out.split())
    assert "kinda\\x1b[2J" in flat and "texta\\x1b[2J" in flat  # the texts, in the table


def test_a_namespace_error_shows_control_characters(
    hostile_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.run(["export", str(hostile_file), str(hostile_file.with_suffix(".jsonl"))])
    err = capsys.readouterr().err
    assert code == 1
    [line] = [ln for ln in err.splitlines() if ln.strip()]
    assert line.startswith("error: the memories are in several namespaces")
    assert_shown_not_sent(line)


def test_score_table_shows_control_characters(tmp_path: Path) -> None:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as stream:
        stream.add(f"text {HOSTILE}", kinds=HOSTILE, importances=0.5, now=T0)
        stream.add("plain", importances=0.5, now=T0, metadatas=[{"dia_id": HOSTILE}])
        hits = stream.retrieve("text plain", k=2, now=T0, touch=False)
    out = render(cli_scores._score_table("Q", hits, ()))
    assert_shown_not_sent(out)
    assert "texta\\x1b[2J" in "".join(out.split())


def test_demo_insights_show_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with MemoryStream(WordEmbeddings(), path=tmp_path / "m.db") as stream:
        [turn] = stream.add(
            f"turn {HOSTILE}", importances=0.5, now=T0, metadatas=[{"dia_id": HOSTILE}]
        )
        [insight] = stream.add(
            f"insight {HOSTILE}", kinds="reflection", evidence=[[turn.id]], importances=0.9
        )
        cli_common._console.cache_clear()
        try:
            cli_demo._print_reflection(
                stream, {"questions": [f"why {HOSTILE}?"], "reflections": [insight]}
            )
            cli_demo._print_reflection(stream, {"skipped": HOSTILE})
        finally:
            cli_common._console.cache_clear()
    out = capsys.readouterr().out
    assert_shown_not_sent(out)
    flat = "".join(out.split())
    for shown in ("whya\\x1b[2J", "insighta\\x1b[2J", "turna\\x1b[2J", "evidencea\\x1b[2J"):
        assert shown in flat, shown


def test_emoji_codes_in_memories_stay_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the console kept rich's emoji codes, so a memory reading ":warning: check the
    :fire: alarm" was shown with emoji in place of its words."""
    path = tmp_path / "m.db"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add(":warning: check the :fire: alarm", importances=0.5, now=T0, namespace=":x:")
    monkeypatch.setenv("COLUMNS", "400")
    cli_common._console.cache_clear()
    try:
        code = cli.run(["inspect", str(path), "-n", "5"])
    finally:
        cli_common._console.cache_clear()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert ":warning: check the :fire: alarm" in out and ":x:" in out
    assert not {"\u26a0", "\U0001f525", "\u274c"} & set(out), out


def test_inspect_query_shows_markup_and_escapes_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inspect --query`` (a search): rich markup and an escape sequence in a memory text and
    in the query are shown as written, in the ranked table and its title."""
    cli_files = pytest.importorskip("langchain_reflective.cli.files")
    path = tmp_path / "m.db"
    text = "alarm [bold red]x[/] then \x1b[2J cleared"
    with MemoryStream(WordEmbeddings(), path=path) as stream:
        stream.add([text, "unrelated note"], importances=0.5, now=T0)
    monkeypatch.setattr(cli_files, "_load_embeddings", lambda *a, **k: WordEmbeddings())
    monkeypatch.setenv("COLUMNS", "400")
    cli_common._console.cache_clear()
    try:
        code = cli.run(["inspect", str(path), "-n", "0", "--query", "alarm [bold]q[/] \x1b[2J"])
    finally:
        cli_common._console.cache_clear()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "\x1b" not in out, repr(out)
    assert "Ranked for: alarm [bold]q[/] \\x1b[2J" in out  # the title
    assert "alarm [bold red]x[/] then \\x1b[2J cleared" in out  # the ranked memory
