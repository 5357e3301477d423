"""``LocalChatServer.start()`` with a fake ``xllamacpp``: a port that cannot be used is named
(llama.cpp says "Failed to init server, please check the input params" whatever the cause)."""

from __future__ import annotations

import errno
import os
import signal
import socket
import threading
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from langchain_reflective import _local_server
from langchain_reflective._local_server import LocalChatServer, LocalModelError

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")


def _sigint_blocked() -> bool:
    return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])


class FakeServer:
    """Stands in for ``xllamacpp.Server``: records the signal masks while it is built (on the
    building thread and on a thread it spawns, as llama.cpp does), and can be told to receive
    a Ctrl-C or to fail as llama.cpp does on a taken port."""

    instances: ClassVar[list[weakref.ref[FakeServer]]] = []
    loop_waits: ClassVar[list[bool]] = []
    ctrl_c_while_built = False
    fail_with: str | None = None

    def __init__(self, params: Any) -> None:
        self.blocked_while_built = _sigint_blocked()
        seen: list[bool] = []
        spawned = threading.Thread(target=lambda: seen.append(_sigint_blocked()))
        spawned.start()
        spawned.join()
        self.blocked_in_its_thread = seen[0]
        if FakeServer.fail_with is not None:
            raise RuntimeError(FakeServer.fail_with)
        if FakeServer.ctrl_c_while_built:  # (to this thread: no other thread can take it)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            for _ in range(1000):  # time for a delivered signal to become a KeyboardInterrupt
                pass
        self.built = True
        self.listening_address = f"http://127.0.0.1:{params.port or 40000}"
        FakeServer.instances.append(weakref.ref(self))


class Params(SimpleNamespace):
    """``xllamacpp.CommonParams``: nested settings, any attribute accepted."""

    def __init__(self) -> None:
        super().__init__(
            model=SimpleNamespace(),
            cpuparams=SimpleNamespace(),
            cpuparams_batch=SimpleNamespace(),
            sampling=SimpleNamespace(),
        )


@pytest.fixture
def fake_llama(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A fake xllamacpp, a model file and a server that is healthy at once; returns the file."""
    fake = SimpleNamespace(CommonParams=Params, Server=FakeServer)
    monkeypatch.setattr(_local_server, "_import_local", lambda name: fake)
    monkeypatch.setattr(LocalChatServer, "_wait_healthy", staticmethod(lambda *a: None))
    monkeypatch.setattr(FakeServer, "loop_waits", [])

    def wait_loop(address: str) -> None:  # records whether the server was still held
        FakeServer.loop_waits.append(all(ref() is not None for ref in FakeServer.instances))

    monkeypatch.setattr(_local_server, "_wait_loop_started", wait_loop, raising=False)
    monkeypatch.setattr(FakeServer, "instances", [])
    monkeypatch.setattr(FakeServer, "ctrl_c_while_built", False)
    monkeypatch.setattr(FakeServer, "fail_with", None)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    return model


def test_a_taken_port_is_named(fake_llama: Path) -> None:
    """Before: "Failed to init server, please check the input params", whatever the port."""
    FakeServer.fail_with = "Failed to init server, please check the input params."
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(LocalModelError) as caught:
            LocalChatServer(model_path=fake_llama, port=port).start()
    message = str(caught.value)
    assert f"port {port} on 127.0.0.1 cannot be used" in message, message
    assert os.strerror(errno.EADDRINUSE) in message
    assert "port=" in message  # what to do


def test_another_start_failure_names_the_address(fake_llama: Path) -> None:
    FakeServer.fail_with = "Failed to init server, please check the input params."
    with pytest.raises(LocalModelError) as caught:
        LocalChatServer(model_path=fake_llama).start()
    message = str(caught.value)
    assert "on 127.0.0.1 (a free port)" in message
    assert "Failed to init server" in message and "verbose=True" in message
