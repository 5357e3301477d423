"""Child process for the local server's stop tests: stop while a request is being generated.

``python -m tests.integration.stop_child <mode>`` starts a :class:`LocalChatServer`, starts
one chat call on a thread (``ignore_eos``, so it generates exactly its ``max_tokens``), waits
until ``/slots`` shows it generating, then, by ``mode``:

* ``wait``: ``stop()``; prints ``STOPPED``, then ``CALL <completion tokens>`` once the call
  has returned and ``PORT <open>``;
* ``timeout``: ``stop(timeout=0.0)``; prints ``STOPPED running=<is_running>`` and
  ``BUSY <whether the server is still generating>``, then exits with the call running;
* ``exit``: prints ``EXITING`` and exits with the call running (the ``atexit`` stop);
* ``interrupt``: ``stop()`` interrupted by Ctrl-C (SIGINT) once it is waiting for the call
  (a longer one: 128 tokens, seconds of generation); prints ``INTERRUPTED
  running=<is_running>``, then exits with the call running. A ``stop()`` that returns instead
  prints ``NOT INTERRUPTED`` with how long it took and whether the call was still running.

The thread prints ``CALL ...`` when its call returns. The parent runs this under a timeout:
a stop that hangs shows as a child that never ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.request

from langchain_reflective.local import LocalChatServer


def _busy(address: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{address}/slots", timeout=5) as response:
        return any(slot.get("is_processing") for slot in json.loads(response.read()))


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def main(mode: str) -> None:
    server = LocalChatServer().start()
    address, port = server.address, server.port
    tokens = 128 if mode == "interrupt" else 64
    llm = server.chat_model(max_tokens=tokens, timeout=600, extra_body={"ignore_eos": True})

    def call() -> None:
        reply = llm.invoke("Tell a long story about a lighthouse keeper.")
        usage = reply.response_metadata["token_usage"]
        print(f"CALL {usage['completion_tokens']}", flush=True)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not _busy(address):
        if time.monotonic() > deadline:
            raise SystemExit("the call never started generating")
        time.sleep(0.02)

    if mode == "wait":
        server.stop()
        print("STOPPED", flush=True)
        thread.join()
        print(f"PORT {_port_open(port)}", flush=True)
    elif mode == "timeout":
        server.stop(timeout=0.0)
        print(f"STOPPED running={server.is_running}", flush=True)
        print(f"BUSY {_busy(address)}", flush=True)
    elif mode == "interrupt":
        waiting = threading.Event()
        wait_idle = LocalChatServer._wait_idle

        def watched(address: str, deadline: float) -> bool:
            waiting.set()
            return wait_idle(address, deadline)

        def interrupt() -> None:  # Ctrl-C while stop() waits (not before it began to)
            waiting.wait(timeout=30)
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGINT)

        LocalChatServer._wait_idle = staticmethod(watched)  # type: ignore[method-assign]
        # Ctrl-C as in a terminal: a process started from a shell without job control (CI in
        # the background) inherits SIGINT ignored, and Python then raises nothing for it
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Thread(target=interrupt, daemon=True).start()
        began = time.monotonic()
        try:
            server.stop()
        except KeyboardInterrupt:
            print(f"INTERRUPTED running={server.is_running}", flush=True)
        else:
            print(
                f"NOT INTERRUPTED after {time.monotonic() - began:.2f} s, "
                f"call running={thread.is_alive()}",
                flush=True,
            )
    else:
        print("EXITING", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
