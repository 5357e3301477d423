"""``LocalChatServer.start()`` with a fake ``xllamacpp``: Ctrl-C while llama.cpp builds its
server, and a port that cannot be used.

A Ctrl-C right after ``xllamacpp.Server(params)`` returned dropped the new server at once, and
its destructor could wait forever (6 hangs in 12 runs of an audit's reproduction on a busy
machine): the constructor returns just before its thread starts the main loop, and the stop the
destructor sends is overwritten when the loop starts. ``start()`` holds a Ctrl-C back around the
construction, so it arrives as a KeyboardInterrupt once the server is held; the server is then
released once its main loop answers (its port closed), a further Ctrl-C held back meanwhile.

A terminal's Ctrl-C goes to the whole process: the kernel hands it to any thread not blocking
SIGINT (numpy's, rich's, ...), and the main thread raises at its next bytecode. Blocking SIGINT
on the starting thread alone did not hold it back; the tests send it so, with another thread up.
"""

from __future__ import annotations

import errno
import gc
import os
import signal
import socket
import threading
import time
import weakref
from collections.abc import Iterator
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
        if FakeServer.ctrl_c_while_built:
            _ctrl_c()
        self.built = True
        self.listening_address = f"http://127.0.0.1:{params.port or 40000}"
        FakeServer.instances.append(weakref.ref(self))


def _ctrl_c() -> None:
    """What a terminal's Ctrl-C does: SIGINT to the process (any thread not blocking it may
    take it), then a C call that releases the GIL, as ``xllamacpp.Server(params)`` does."""
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)


@pytest.fixture(autouse=True)
def python_handles_ctrl_c() -> Iterator[None]:
    """SIGINT handled by Python (a KeyboardInterrupt), as in a process started from a terminal:
    one a non-interactive shell starts in the background (a CI runner's ``cmd &``) inherits
    SIGINT ignored, where a Ctrl-C does nothing, and these tests would prove nothing there."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def other_thread() -> Iterator[None]:
    """A thread that does not block SIGINT, as numpy's OpenBLAS pool or rich's refresh thread."""
    done = threading.Event()
    waiting = threading.Thread(target=done.wait, daemon=True)
    waiting.start()
    yield
    done.set()
    waiting.join()


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
    fake_llama: Path, other_thread: None
) -> None:
    """Before: the Ctrl-C, taken by the other thread, was raised on the main thread before
    the server was held (here halfway through the fake's constructor)."""
    FakeServer.ctrl_c_while_built = True
    handler = signal.getsignal(signal.SIGINT)
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
    assert signal.getsignal(signal.SIGINT) is handler, "the SIGINT handler was not restored"
    del caught


def test_a_ctrl_c_while_a_server_given_up_is_released_arrives_once_it_is_released(
    fake_llama: Path, other_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a second Ctrl-C cut the wait for the main loop short, skipped the release, and
    the server lived on in the traceback (destroyed whenever that was freed)."""

    def unhealthy(*args: object) -> None:
        raise LocalModelError("not healthy")

    def wait_loop(address: str) -> None:
        _ctrl_c()
        FakeServer.loop_waits.append(all(ref() is not None for ref in FakeServer.instances))

    monkeypatch.setattr(LocalChatServer, "_wait_healthy", staticmethod(unhealthy))
    monkeypatch.setattr(_local_server, "_wait_loop_started", wait_loop)
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt) as caught:
        LocalChatServer(model_path=fake_llama).start()
    [made] = FakeServer.instances
    assert FakeServer.loop_waits == [True], "the wait for the main loop was cut short"
    gc.collect()
    assert made() is None, "the server given up was not released"
    assert isinstance(caught.value.__context__, LocalModelError)
    assert signal.getsignal(signal.SIGINT) is handler
    del caught


def test_a_start_off_the_main_thread_blocks_sigint_there(fake_llama: Path) -> None:
    """Off the main thread the SIGINT handler cannot be changed: only the mask applies."""
    built: list[Any] = []
    failed: list[BaseException] = []

    def start() -> None:
        try:
            server = LocalChatServer(model_path=fake_llama).start()
        except BaseException as exc:  # (reported below)
            failed.append(exc)
            return
        built.append(server._server)
        server._server = server._address = None

    starter = threading.Thread(target=start)
    starter.start()
    starter.join()
    assert not failed, failed
    assert built[0].blocked_while_built and built[0].blocked_in_its_thread


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
    assert "Failed to init server" in message  # llama.cpp's own words are kept


def _port_in_time_wait() -> int:
    """A port whose last connection was closed by its server side first: it sits in TIME_WAIT,
    as after the previous run of a program on a fixed port."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = int(listener.getsockname()[1])
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()
    client.close()
    return port


@pytest.mark.skipif(os.name == "nt", reason="SO_REUSEADDR means another thing on Windows")
def test_a_port_in_time_wait_is_not_blamed(fake_llama: Path) -> None:
    """cpp-httplib binds with SO_REUSEADDR, so llama.cpp can listen on a port in TIME_WAIT;
    before, the probe (without it) blamed the port and llama.cpp's failure went unsaid."""
    port = _port_in_time_wait()
    assert _local_server._port_problem(port) is None
    FakeServer.fail_with = "Failed to init server, please check the input params."
    with pytest.raises(LocalModelError) as caught:
        LocalChatServer(model_path=fake_llama, port=port).start()
    message = str(caught.value)
    assert "cannot be used" not in message, message
    assert f"on 127.0.0.1:{port}: Failed to init server" in message


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


def test_stopping_waits_for_a_server_too_slow_to_say_it_is_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: a ``/slots`` request that timed out (a machine loaded by the generation itself)
    counted as "idle", and the server would be torn down under its running request (llama.cpp
    then waits for that request forever). Slow answers are now asked again until the deadline;
    a refused ``/slots`` (error status, closed port) still counts as idle."""
    import http.server
    import time

    monkeypatch.setattr(_local_server, "_SLOTS_TIMEOUT", 0.1)
    answered = threading.Event()
    statuses = {"/slots": 200}

    class Stalled(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not answered.is_set():
                time.sleep(0.3)  # longer than the request's timeout: no answer in time
                return
            self.send_response(statuses.get(self.path, 404))
            self.end_headers()
            self.wfile.write(b'[{"is_processing": false}]')

        def log_message(self, *args: object) -> None:
            pass

    wait_idle = LocalChatServer._wait_idle
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stalled) as httpd:
        worker = threading.Thread(target=httpd.serve_forever, daemon=True)
        worker.start()
        address = f"http://127.0.0.1:{httpd.server_port}"
        began = time.perf_counter()
        assert wait_idle(address, time.perf_counter() + 0.5) is False  # never answered
        assert time.perf_counter() - began >= 0.5
        answered.set()
        assert wait_idle(address, time.perf_counter() + 5) is True  # answers: idle twice
        statuses["/slots"] = 501  # (a server started without the slots endpoint)
        assert wait_idle(address, time.perf_counter() + 5) is True
        httpd.shutdown()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # (bound, not listening: connections are refused)
        assert wait_idle(f"http://127.0.0.1:{port}", time.perf_counter() + 5) is True
