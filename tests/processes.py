"""OS process helpers shared by the test suites."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs: it exists (someone else's process too, which may
    not be signalled from here) and is not a zombie (dead, only not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # (someone else's process)
        pass
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # (no /proc, or the process ended meanwhile)
        return True
    state = next((ln for ln in status.splitlines() if ln.startswith("State:")), "")
    return "Z" not in state
