"""Shared fixtures of the reliability suite: sizes (bounded or full) and the figures recorder.

Every test runs in two sizes: ``bounded`` (the default run; fast enough for CI) and ``full``
(marked ``slow``; select it with ``-m "slow or not slow"`` or ``-m slow``). Setting
``REFLECTIVE_RELIABILITY_FULL=1`` makes the bounded variants use the full sizes too.

Figures (faults injected, kill points, operations, inputs tried, lost/duplicated memories) are
collected per test; when ``REFLECTIVE_RELIABILITY_RESULTS`` names a file, they are written there
as JSON at the end of the session (``benchmarks/results/reliability.json`` in the docs).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

FULL_ENV = "REFLECTIVE_RELIABILITY_FULL"
RESULTS_ENV = "REFLECTIVE_RELIABILITY_RESULTS"


@dataclass(frozen=True)
class Scale:
    """How big one reliability run is."""

    name: str
    adds: int
    """Memories added in the LLM-fault run."""
    reflections: int
    """Explicit reflections in the LLM-fault run."""
    kill_points: int
    """SIGKILLs in the crash run."""
    ops: int
    """Mixed operations in each concurrency run."""
    namespaces: int
    """Namespaces in the isolation run."""
    queries: int
    """Random queries in the isolation run."""


BOUNDED = Scale(
    "bounded", adds=200, reflections=10, kill_points=10, ops=240, namespaces=12, queries=200
)
FULL = Scale(
    "full", adds=1200, reflections=60, kill_points=60, ops=1600, namespaces=60, queries=2000
)


@pytest.fixture(
    params=[
        pytest.param("bounded", id="bounded"),
        pytest.param("full", id="full", marks=pytest.mark.slow),
    ]
)
def scale(request: pytest.FixtureRequest) -> Scale:
    """The size of this run (``full`` is marked ``slow``)."""
    if request.param == "full" or os.environ.get(FULL_ENV) == "1":
        return FULL
    return BOUNDED


class Figures:
    """Thread-safe collector of the numbers the docs report."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.data: dict[str, dict[str, Any]] = {}

    def record(self, section: str, scale: str, **values: Any) -> None:
        with self._lock:
            entry = self.data.setdefault(section, {}).setdefault(scale, {})
            for key, value in values.items():
                if isinstance(value, int | float) and isinstance(entry.get(key), int | float):
                    entry[key] = entry[key] + value
                elif isinstance(value, dict) and isinstance(entry.get(key), dict):
                    merged = dict(entry[key])
                    for k, v in value.items():
                        merged[k] = merged.get(k, 0) + v
                    entry[key] = merged
                else:
                    entry[key] = value


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import sqlite3

        import faiss
        import langchain_core

        info["sqlite"] = sqlite3.sqlite_version
        info["faiss"] = faiss.__version__
        info["langchain_core"] = langchain_core.__version__
    except (ImportError, AttributeError):
        pass
    return info


@pytest.fixture(scope="session")
def figures() -> Iterator[Figures]:
    """Collects figures; written to ``$REFLECTIVE_RELIABILITY_RESULTS`` at the end."""
    if os.environ.get(RESULTS_ENV) and os.environ.get("PYTEST_XDIST_WORKER"):
        raise pytest.UsageError(
            f"{RESULTS_ENV} records one run's figures: run these tests without pytest-xdist "
            "(no -n), or each worker would overwrite the file with its share"
        )
    fig = Figures()
    started = datetime.now(UTC)
    yield fig
    target = os.environ.get(RESULTS_ENV)
    if not target or not fig.data:
        return
    out = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "duration_s": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": "pytest " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "machine": _machine(),
        "sections": fig.data,
    }
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n", encoding="utf-8")
