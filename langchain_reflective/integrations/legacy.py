"""A classic ``BaseMemory`` adapter for legacy chains (``ConversationChain``, ``LLMChain``).

Needs the ``legacy`` extra (``pip install "langchain-reflective[legacy]"``). ``BaseMemory`` and
the chains that use it are deprecated upstream; new code should use
:class:`~langchain_reflective.integrations.middleware.ReflectiveMemoryMiddleware` with
``create_agent`` (or the memory directly in an LCEL chain / LangGraph graph). This module is kept
at the edge so classic chains can move to a reflective memory before they move off the chain.
"""

from __future__ import annotations

import warnings
from typing import Any

from langchain_core._api import LangChainDeprecationWarning
from langchain_core.messages import BaseMessage, SystemMessage
from pydantic import ConfigDict

try:
    from langchain_classic.base_memory import BaseMemory
    from langchain_classic.memory.utils import get_prompt_input_key
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        'ReflectiveChatMemory needs langchain-classic: pip install "langchain-reflective[legacy]"'
    ) from exc

from langchain_reflective.memory import ReflectiveMemory
from langchain_reflective.records import storable_text

__all__ = ["ReflectiveChatMemory"]

_DEPRECATION = (
    "ReflectiveChatMemory adapts langchain-reflective to the classic BaseMemory interface, which "
    "LangChain deprecated (langchain-classic; removal in 2.0). Use "
    "langchain_reflective.integrations.middleware.ReflectiveMemoryMiddleware with "
    "langchain.agents.create_agent, or ReflectiveMemory.build_context in an LCEL chain."
)


def _text(value: Any) -> str:
    """A chain's input or output as text: a message's text, not its repr."""
    return value.text if isinstance(value, BaseMessage) else str(value)


class ReflectiveChatMemory(BaseMemory):
    """A reflective long-term memory as a classic chain ``memory``.

    .. deprecated:: 0.1.0
        Like ``BaseMemory`` itself. Every instantiation emits a
        ``LangChainDeprecationWarning``; use ``ReflectiveMemoryMiddleware`` instead.

    * :meth:`load_memory_variables` returns the working context of
      :meth:`ReflectiveMemory.build_context` for the chain's input (insights, recent and relevant
      memories, fenced as data) under ``memory_key``.
    * :meth:`save_context` stores the input and the output as two observations (which may start
      a background reflection).
    * :meth:`clear` deletes every memory of the namespace.

    Example:
        .. code-block:: python

            from langchain_classic.chains import ConversationChain

            chain = ConversationChain(llm=model, memory=ReflectiveChatMemory(memory=memory))
            chain.invoke({"input": "I moved to Lisbon"})
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: ReflectiveMemory
    """The reflective memory to read and write."""
    namespace: str | None = None
    """Whose memories (default: the stream's namespace)."""
    memory_key: str = "history"
    """The prompt variable that receives the working context."""
    input_key: str | None = None
    """The chain input to store and to retrieve for (default: the only non-memory input)."""
    output_key: str | None = None
    """The chain output to store (default: the only output)."""
    return_messages: bool = False
    """Return the context as ``[SystemMessage]`` (for chat prompts) instead of a string."""
    user_prefix: str = "User: "
    """Prefix of a stored input."""
    assistant_prefix: str = "Assistant: "
    """Prefix of a stored output."""

    def __init__(self, **data: Any) -> None:
        warnings.warn(_DEPRECATION, LangChainDeprecationWarning, stacklevel=2)
        super().__init__(**data)

    @property
    def memory_variables(self) -> list[str]:
        """The one variable this memory adds to the chain's inputs."""
        return [self.memory_key]

    # -- helpers -------------------------------------------------------------------------------

    def _input(self, inputs: dict[str, Any]) -> str:
        key = self.input_key or get_prompt_input_key(inputs, self.memory_variables)
        return _text(inputs[key])

    def _output(self, outputs: dict[str, Any]) -> str:
        if self.output_key is not None:
            return _text(outputs[self.output_key])
        if len(outputs) == 1:
            return _text(next(iter(outputs.values())))
        if "output" in outputs:  # (an AgentExecutor's: output and intermediate_steps)
            return _text(outputs["output"])
        raise ValueError(f"the chain returned several outputs {sorted(outputs)}; set output_key")

    def _turn(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> list[str]:
        texts = [  # (never fail a chain that answered: a text too long is cut, a NUL replaced)
            storable_text(f"{self.user_prefix}{self._input(inputs).strip()}"),
            storable_text(f"{self.assistant_prefix}{self._output(outputs).strip()}"),
        ]
        return [
            t
            for t, p in zip(texts, (self.user_prefix, self.assistant_prefix), strict=True)
            if t != p
        ]

    def _wrap(self, context: str) -> dict[str, Any]:
        if self.return_messages:
            return {self.memory_key: [SystemMessage(content=context)]}
        return {self.memory_key: context}

    # -- BaseMemory ----------------------------------------------------------------------------

    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The working context for the chain's input."""
        query = storable_text(self._input(inputs)) if inputs else None
        return self._wrap(self.memory.build_context(query, namespace=self.namespace))

    async def aload_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Async twin of :meth:`load_memory_variables`."""
        query = storable_text(self._input(inputs)) if inputs else None
        return self._wrap(await self.memory.abuild_context(query, namespace=self.namespace))

    def save_context(self, inputs: dict[str, Any], outputs: dict[str, str]) -> None:
        """Store the input and the output as observations."""
        texts = self._turn(inputs, outputs)
        if texts:
            self.memory.add(texts, namespace=self.namespace, metadatas={"source": "legacy"})

    async def asave_context(self, inputs: dict[str, Any], outputs: dict[str, str]) -> None:
        """Async twin of :meth:`save_context`."""
        texts = self._turn(inputs, outputs)
        if texts:
            await self.memory.aadd(texts, namespace=self.namespace, metadatas={"source": "legacy"})

    def clear(self) -> None:
        """Delete every memory of the namespace (after pending reflections finish)."""
        self.memory.purge(namespace=self.namespace)
