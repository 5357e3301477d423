"""Read-only storage for tests of reading memory files, also when the tests run as root.

Root ignores permission bits (``CAP_DAC_OVERRIDE``), so a ``chmod 555`` directory does not stop
it, and SQLite, which creates ``<file>-shm`` in C, cannot be made to fail by a monkeypatch (the
demo's read-only-directory twin patches its own Python probe instead). Here the test's thread
drops ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` from its effective capabilities for the
block (they stay permitted and are restored after), so root meets the permission bits as any
owner does: the real SQLite fails on a real read-only directory, as on a read-only mount.
Capabilities are per thread on Linux; the commands under test run on the test's thread. A
thread started inside the block copies the dropped set and keeps it for good, so every Python
thread started inside must have ended by the end of the block (an ``AssertionError`` names the
ones still running).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

_CAP_VERSION_3 = 0x20080522
_DAC_CAPS = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_THREADS_GRACE = 0.5
"""Seconds a thread started inside the block gets to end after it (one told to stop)."""


@contextlib.contextmanager
def permission_bits_apply() -> Iterator[None]:
    """Within the block, this thread is refused what the permission bits refuse (skips the
    test where that cannot be arranged). Python threads started inside must end inside: one
    still running after it fails the test (``AssertionError``), as it would keep the dropped
    capabilities for the rest of the worker."""
    with _threads_end_inside(), _dac_dropped():
        yield


@contextlib.contextmanager
def _threads_end_inside() -> Iterator[None]:
    before = set(threading.enumerate())
    try:
        yield
    finally:
        deadline = time.monotonic() + _THREADS_GRACE
        left = [t for t in threading.enumerate() if t not in before]
        for thread in left:
            thread.join(max(0.0, deadline - time.monotonic()))
        if running := sorted(t.name for t in left if t.is_alive()):
            message = (
                f"threads started inside permission_bits_apply() still run: {', '.join(running)}"
                " (each keeps CAP_DAC_OVERRIDE dropped for good: stop and join it in the block)"
            )
            failure = sys.exc_info()[1]
            if failure is None:
                raise AssertionError(message)
            failure.add_note(message)  # (the block's own failure goes on, with this said)


@contextlib.contextmanager
def _dac_dropped() -> Iterator[None]:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        yield  # an ordinary user meets the permission bits anyway
        return
    if not sys.platform.startswith("linux"):
        pytest.skip("root ignores permission bits here, and only Linux lets a thread drop that")
    libc = ctypes.CDLL(None, use_errno=True)
    header = _Header(_CAP_VERSION_3, 0)
    data = (_Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        pytest.skip(f"capget failed: {os.strerror(ctypes.get_errno())}")
    saved = data[0].effective
    data[0].effective = saved & ~_DAC_CAPS
    if libc.capset(ctypes.byref(header), data) != 0:
        pytest.skip(f"capset failed: {os.strerror(ctypes.get_errno())}")
    try:
        yield
    finally:
        data[0].effective = saved
        if libc.capset(ctypes.byref(header), data) != 0:  # pragma: no cover
            raise OSError(ctypes.get_errno(), "could not restore the test thread's capabilities")


@contextlib.contextmanager
def read_only(folder: Path, *, files: bool = False) -> Iterator[None]:
    """``folder`` as read-only storage for the block: no file can be created in it (and, with
    ``files``, none of its files written), for this process even as root. Restored after, so
    pytest can remove it (also when a ``chmod`` fails halfway)."""
    folder_mode = stat.S_IMODE(folder.stat().st_mode)
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} if files else {}
    try:
        folder.chmod(0o555)
        for path in modes:
            path.chmod(0o444)
        with permission_bits_apply():
            with pytest.raises(PermissionError):  # the simulation holds, or the test is wrong
                (folder / "probe").touch()
            yield
    finally:
        folder.chmod(folder_mode)
        for path, mode in modes.items():
            path.chmod(mode)


def listing(folder: Path) -> dict[str, bytes]:
    """Every file of ``folder`` with its bytes: what a read must leave as it found it."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
