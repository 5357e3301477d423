"""The embedded GGUF is assembled once, atomically: two first starts at once both get it, and a
file left half-written by a killed start is rebuilt (both failed with "unexpected sha256")."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from types import ModuleType

from langchain_reflective._local_server import _assembled

CONTENT = b"gguf" * 50_000
DIGEST = hashlib.sha256(CONTENT).hexdigest()


def fake_package(target: Path) -> ModuleType:
    """The chunk package's assemble(): writes in place, slowly, and refuses a bad file."""
    module = ModuleType("fake_gguf")

    def assemble(output_path: Path | None = None, overwrite: bool = False) -> Path:
        out = target if output_path is None else Path(output_path)
        if out.exists() and not overwrite:
            if hashlib.sha256(out.read_bytes()).hexdigest() != DIGEST:
                raise FileExistsError(f"{out} already exists with an unexpected sha256")
            return out
        with out.open("wb") as fh:
            for i in range(0, len(CONTENT), 20_000):
                fh.write(CONTENT[i : i + 20_000])
                fh.flush()
                time.sleep(0.005)  # another process may look meanwhile
        return out

    module.assemble = assemble  # type: ignore[attr-defined]
    module.default_output_path = lambda: target  # type: ignore[attr-defined]
    return module


def test_two_first_starts_at_once_both_get_the_file(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "model.gguf"
    package = fake_package(target)
    results: list[object] = []

    def start() -> None:
        try:
            results.append(_assembled(package).read_bytes() == CONTENT)
        except Exception as exc:  # pragma: no cover - the failure being tested for
            results.append(exc)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True, True]


def test_a_half_written_file_is_rebuilt(tmp_path: Path) -> None:
    target = tmp_path / "model.gguf"
    target.write_bytes(CONTENT[:1000])  # what a start killed mid-write left
    assert _assembled(fake_package(target)).read_bytes() == CONTENT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf", "model.gguf.lock"]
