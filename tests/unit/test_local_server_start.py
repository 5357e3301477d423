"""``LocalChatServer.start()`` with a fake ``xllamacpp``: Ctrl-C while llama.cpp builds its
server, and a port that cannot be used.

A Ctrl-C right after ``xllamacpp.Server(params)`` returned dropped the new server at once, and
its destructor could wait forever (6 hangs in 12 runs of an audit's reproduction on a busy
machine): the constructor returns just before its thread starts the main loop, and the stop the
destructor sends is overwritten when the loop starts. ``start()`` blocks SIGINT on its thread
around the construction (the threads llama.cpp spawns inherit the block), so a Ctrl-C meanwhile
arrives as a KeyboardInterrupt once the server is held; the server is then released once its
main loop answers (its port closed).
"""

from __future__ import annotations

import errno
import gc
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


def test_sigint_is_blocked_while_llama_cpp_builds_its_threads(fake_llama: Path) -> None:
    assert not _sigint_blocked()
    server = LocalChatServer(model_path=fake_llama)
    server.start()
    try:
        built = server._server
        assert built.blocked_while_built, "SIGINT reached the thread building the server"
        assert built.blocked_in_its_thread, "a thread llama.cpp spawns could get the Ctrl-C"
        assert not _sigint_blocked(), "the caller's signal mask was not restored"
    finally:
        server._server = server._address = None  # (a fake: nothing to stop)


def test_ctrl_c_while_built_arrives_once_the_server_exists_and_releases_it(
    fake_llama: Path,
) -> None:
    FakeServer.ctrl_c_while_built = True
    server = LocalChatServer(model_path=fake_llama)
    with pytest.raises(KeyboardInterrupt) as caught:
        server.start()
    [made] = FakeServer.instances  # built to the end: not interrupted halfway
    # dropped only once its main loop runs (dropped before, its destructor waits forever)
    assert FakeServer.loop_waits == [True]
    gc.collect()
    assert made() is None, "the interrupted start kept the server (and its port) alive"
    assert not server.is_running
    assert not _sigint_blocked()
    del caught


def test_a_caller_that_blocks_sigint_keeps_it_blocked(fake_llama: Path) -> None:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
    try:
        server = LocalChatServer(model_path=fake_llama).start()
        server._server = server._address = None
        assert _sigint_blocked()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


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


def test_the_release_waits_for_an_answer_of_the_main_loop() -> None:
    """``/slots`` answers only once the loop runs: the wait returns at the first answer (here
    after 0.3 s), and gives up at its timeout when nothing answers."""
    import http.server
    import time

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(0.3)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"[]")

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow) as httpd:
        worker = threading.Thread(target=httpd.serve_forever, daemon=True)
        worker.start()
        began = time.perf_counter()
        _local_server._wait_loop_started(f"http://127.0.0.1:{httpd.server_port}")
        assert 0.25 < time.perf_counter() - began < 5
        httpd.shutdown()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # (bound, not listening: connections are refused)
        began = time.perf_counter()
        _local_server._wait_loop_started(f"http://127.0.0.1:{port}", timeout=0.3)
        assert 0.3 <= time.perf_counter() - began < 3
