"""What a JSONL import checks line by line: vectors reused only at the stream's dimension,
bad vectors and fields refused naming their line (the batch holding one writes nothing),
deep nesting and huge integers; an export escapes a stored lone surrogate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from langchain_reflective import InvalidMemoryError, MemoryStream, StorageError
from tests.fakes import WordEmbeddings
from tests.unit.stream_facts import FACTS


class NamedEmbeddings(WordEmbeddings):
    """One model name at any dimension (as ``OpenAIEmbeddings(dimensions=...)``); counts the
    texts it embeds."""

    def __init__(self, size: int, *, declare: bool = False) -> None:
        super().__init__(size)
        self.model = "text-embedding-3-small"
        if declare:
            self.dimensions = size
        self.texts = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return super().embed_documents(texts)


def _export(tmp_path: Path, size: int, texts: list[str] = FACTS) -> Path:
    out = tmp_path / f"export-{size}.jsonl"
    with MemoryStream(NamedEmbeddings(size), path=tmp_path / f"source-{size}.db") as source:
        source.add(texts, importances=0.5)
        source.export_jsonl(out)
    return out


def test_import_reuses_vectors_only_of_the_stream_dimension(tmp_path: Path) -> None:
    """Same model name, another dimension: the export's 4-d vectors bound a new 8-d file to 4
    dimensions, and every later add or retrieve raised DimensionMismatchError. Now the texts
    are embedded again, as for another model; vectors of the right dimension are reused."""
    export = _export(tmp_path, 4)
    emb = NamedEmbeddings(8)
    with MemoryStream(emb, path=tmp_path / "new.db") as stream:
        assert stream.import_jsonl(export) == len(FACTS)
        assert stream.backend.dimension == 8
        assert emb.texts == 1 + len(FACTS)  # the probe, then every text
        stream.add("Dave likes coffee", importances=0.5)
        assert stream.retrieve("Bob Paris", k=1)[0].record.text in {FACTS[1], FACTS[3]}
    emb = NamedEmbeddings(8)
    with MemoryStream(emb, path=tmp_path / "bound.db") as stream:  # bound already: no probe
        stream.add("Dave likes coffee", importances=0.5)
        assert stream.import_jsonl(export) == len(FACTS)
        assert emb.texts == 1 + len(FACTS) and stream.backend.dimension == 8
    emb = NamedEmbeddings(8, declare=True)  # a declared dimension: no probe either
    with MemoryStream(emb, path=tmp_path / "declared.db") as stream:
        assert stream.import_jsonl(export) == len(FACTS)
        assert emb.texts == len(FACTS) and stream.backend.dimension == 8
    same = _export(tmp_path, 8)
    for declare, probes in ((False, 1), (True, 0)):
        emb = NamedEmbeddings(8, declare=declare)
        with MemoryStream(emb, path=tmp_path / f"same-{declare}.db") as stream:
            assert stream.import_jsonl(same) == len(FACTS)
            assert emb.texts == probes  # the export's vectors were reused
            assert stream.retrieve("Bob Paris", k=1)[0].record.text in {FACTS[1], FACTS[3]}


def _tampered(export: Path, lineno: int, **changes: object) -> Path:
    """``export`` with line ``lineno`` (1 is the header) changed, written as JSON does (a lone
    surrogate as the escape ``\\ud800``)."""
    lines = export.read_text(encoding="utf-8").splitlines()
    line = json.loads(lines[lineno - 1])
    line.update(changes)
    lines[lineno - 1] = json.dumps(line)
    out = export.with_name(f"tampered-{lineno}.jsonl")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.mark.parametrize(
    ("lineno", "vector", "message"),
    [
        (3, [0.5] * 7, "has 7 values; the export's vectors have 8"),
        (2, [0.5] * 4, "has 4 values; the export's vectors have 8"),  # the header's dimension
        (3, [float("nan")] * 8, "NaN"),
        (3, [0.0] * 8, "only zeros"),
        (3, ["a"] * 8, "list of numbers"),
        (3, [True] * 8, "list of numbers"),
        (3, 0.5, "non-empty list"),
    ],
)
def test_import_refuses_a_bad_vector_naming_its_line(
    tmp_path: Path, lineno: int, vector: object, message: str
) -> None:
    export = _tampered(_export(tmp_path, 8), lineno, vector=vector)
    emb = NamedEmbeddings(8)
    with MemoryStream(emb, path=tmp_path / "target.db") as stream:
        with pytest.raises(InvalidMemoryError, match=f"jsonl:{lineno}: .*{message}"):
            stream.import_jsonl(export)
        assert len(stream) == 0 and stream.backend.dimension is None  # nothing written


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("id", "\ud800x", "id cannot be encoded as UTF-8"),
        ("id", "", "id must be a non-empty string"),
        ("id", None, "id must be a non-empty string"),
        ("id", 7, "id must be a non-empty string"),
        ("namespace", "\udc00", "namespace cannot be encoded"),
        ("namespace", "", "namespace must be a non-empty string"),
        ("kind", "obs\ud800", "kind cannot be encoded"),
        ("kind", ["observation"], "kind must be a non-empty string"),
        ("evidence", ["\ud800"], "evidence id cannot be encoded"),
        ("evidence", [""], "evidence ids must be non-empty"),
        ("evidence", "abc", "evidence must be a list of ids"),
        ("evidence", [1], "evidence must be a list of ids"),
        ("importance_source", "\ud800", "importance_source must be one of"),
        ("importance_source", {"a": 1}, "importance_source must be one of"),
        ("importance_source", "made-up", "importance_source must be one of"),
        ("depth", 10**30, "depth must be an integer in"),
        ("depth", -5, "depth must be an integer in"),
        ("depth", 1.5, "depth must be an integer in"),
        ("depth", "3", "depth must be an integer in"),
        ("importance", True, "importance must be a number"),
        ("importance", 10**400, "malformed memory record"),
        ("metadata", {"k": "\ud800"}, "metadata cannot be encoded"),
    ],
)
def test_import_checks_every_field_as_add_does(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    """A lone surrogate in the id, namespace, kind or importance source escaped as a raw
    UnicodeEncodeError, a huge depth as OverflowError; one in the evidence was stored and
    broke every later export. Each is now an InvalidMemoryError naming the line, and the
    batch holding it writes nothing."""
    export = _tampered(_export(tmp_path, 8), 3, **{field: value})
    with MemoryStream(NamedEmbeddings(8), path=tmp_path / "target.db") as stream:
        stream.add("Dave likes coffee", importances=0.5)
        with pytest.raises(InvalidMemoryError, match=f"jsonl:3: .*{message}"):
            stream.import_jsonl(export)
        assert len(stream) == 1
        stream.export_jsonl(tmp_path / "again.jsonl")


def test_import_refuses_a_deeply_nested_line(tmp_path: Path, stream: MemoryStream) -> None:
    """JSON nested deeper than the parser's recursion limit was a raw RecursionError."""
    export = _export(tmp_path, 8)
    deep = export.with_name("deep.jsonl")
    deep.write_text(export.read_text(encoding="utf-8") + "[" * 100_000 + "]" * 100_000 + "\n")
    for namespace in (None, "elsewhere"):  # also on the first pass of a move
        with pytest.raises(InvalidMemoryError, match=f"deep.jsonl:{len(FACTS) + 2}: "):
            stream.import_jsonl(deep, namespace=namespace)
    assert len(stream) == 0


@pytest.mark.parametrize("namespace", [None, "team"])
def test_an_integer_past_pythons_digit_limit_is_refused_with_its_line(
    tmp_path: Path, stream, namespace: str | None
) -> None:
    stream.add(["tea"], importances=0.5)
    export = tmp_path / "e.jsonl"
    stream.export_jsonl(export)
    header, line = export.read_text(encoding="utf-8").splitlines()
    bad = line.replace('"depth": 0', '"depth": ' + "9" * 5000)
    assert bad != line
    export.write_text(f"{header}\n{bad}\n", encoding="utf-8")
    with MemoryStream(WordEmbeddings(), path=tmp_path / "t.db") as target:
        with pytest.raises(InvalidMemoryError, match=r"e\.jsonl:2: .*digits"):
            target.import_jsonl(export, namespace=namespace)
        assert target.count() == 0


def test_export_escapes_a_stored_lone_surrogate_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone surrogate stored by an import before imports checked evidence made every export
    of its namespace fail with UnicodeEncodeError, leaving ``<path>.tmp`` behind. It is now
    written escaped (the export succeeds; importing that line is refused, naming it), and a
    failed export removes its temporary file."""
    from langchain_reflective.backends.types import trusted_record

    with MemoryStream(NamedEmbeddings(8), path=tmp_path / "old.db") as stream:
        (fact,) = stream.add("Alice likes tea", importances=0.5)
        poisoned = trusted_record(
            "x1", "insight", "reflection", fact.created_at, fact.created_at, 0.5, "given",
            ("\ud800",), 1, "default", {},
        )  # fmt: skip
        stream.backend.put([poisoned], np.ones((1, 8), dtype=np.float32) / np.sqrt(8))
        out = tmp_path / "out.jsonl"
        assert stream.export_jsonl(out) == 2
        assert out.read_bytes().decode("utf-8").count("\\ud800") == 1
        assert not list(tmp_path.glob("out.jsonl.*"))
        with (
            MemoryStream(NamedEmbeddings(8), path=tmp_path / "copy.db") as copy,
            pytest.raises(InvalidMemoryError, match="jsonl:3: evidence id cannot"),
        ):
            copy.import_jsonl(out)

        def broken(*args: object, **kwargs: object) -> object:
            raise StorageError("disk went away")

        before = out.read_bytes()
        monkeypatch.setattr(stream.backend, "iter_records", broken)
        with pytest.raises(StorageError):
            stream.export_jsonl(out)
        assert not list(tmp_path.glob("out.jsonl.*"))
        assert out.read_bytes() == before
