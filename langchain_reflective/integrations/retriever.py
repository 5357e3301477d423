"""``ReflectiveRetriever``: the memory stream as a standard LangChain ``BaseRetriever``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, LangSmithRetrieverParams
from pydantic import ConfigDict, Field

from langchain_reflective.scoring import ScoringConfig
from langchain_reflective.stream import MemoryStream, RetrievalFilter

__all__ = ["ReflectiveRetriever"]


class ReflectiveRetriever(BaseRetriever):
    """Retrieve memories from a :class:`MemoryStream` as ``Document``s.

    Each document's ``id`` is the memory id; its metadata carries the kind, timestamps,
    importance, evidence and every score component (``score``, ``relevance``, ``lexical``,
    ``recency``, ``importance``).

    Example:
        .. code-block:: python

            retriever = ReflectiveRetriever(memory_stream=stream, k=5)
            docs = retriever.invoke("What does Alice like?")
            docs = retriever.invoke("What does Alice like?", k=2)  # per call
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory_stream: MemoryStream
    """The memory stream to search."""
    k: int = Field(default=4, ge=1)
    """How many documents to return (overridable per call with ``k=``)."""
    namespace: str | None = None
    """The namespace to read (default: the stream's)."""
    namespaces: list[str] | None = None
    """Several namespaces to rank as one instead (e.g. a user's and a shared one; see
    ``MemoryStream.retrieve``); each document's ``namespace`` metadata says where it lives."""
    filter: RetrievalFilter | dict[str, Any] | None = None
    """A default retrieval filter."""
    touch: bool = True
    """Whether retrieval updates ``last_accessed_at`` (as Generative Agents does)."""
    scoring: ScoringConfig | None = None
    """Override the stream's scoring."""

    def _get_ls_params(self, **kwargs: Any) -> LangSmithRetrieverParams:
        params = super()._get_ls_params(**kwargs)
        params["ls_retriever_name"] = "reflective"
        params["ls_vector_store_provider"] = "langchain-reflective"
        params["ls_embedding_provider"] = type(self.memory_stream.embeddings).__name__
        return params

    def _call_args(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(kwargs) - {
            "k",
            "namespace",
            "namespaces",
            "filter",
            "now",
            "touch",
            "scoring",
        }
        if unknown:
            raise TypeError(f"unexpected retriever argument(s): {sorted(unknown)}")
        args: dict[str, Any] = {
            "k": kwargs.get("k", self.k),
            "namespace": kwargs.get("namespace", self.namespace),
            "filter": kwargs.get("filter", self.filter),
            "touch": kwargs.get("touch", self.touch),
            "scoring": kwargs.get("scoring", self.scoring),
            "namespaces": kwargs.get("namespaces", self.namespaces),
        }
        now = kwargs.get("now")
        if now is not None:
            if not isinstance(now, datetime):
                raise TypeError("now must be a timezone-aware datetime")
            args["now"] = now
        return args

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        hits = self.memory_stream.retrieve(query, **self._call_args(kwargs))
        return [h.to_document() for h in hits]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        hits = await self.memory_stream.aretrieve(query, **self._call_args(kwargs))
        return [h.to_document() for h in hits]
