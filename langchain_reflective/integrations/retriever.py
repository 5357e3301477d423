"""``ReflectiveRetriever``: the memory stream as a standard LangChain ``BaseRetriever``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, LangSmithRetrieverParams
from langchain_core.runnables import RunnableConfig, ensure_config
from pydantic import ConfigDict, Field, ValidatorFunctionWrapHandler, field_validator

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
    """The namespace to read (default: the run's owner, see ``namespace_key``, else the
    stream's)."""
    namespaces: list[str] | None = None
    """Several namespaces to rank as one instead (e.g. a user's and a shared one; see
    ``MemoryStream.retrieve``); each document's ``namespace`` metadata says where it lives."""
    filter: RetrievalFilter | dict[str, Any] | None = None
    """A default retrieval filter (a ``namespace`` in it names the namespace read, as
    ``namespace`` does; one in a filter given per call must match the namespace read, the run's
    owner included, else ``InvalidFilterError``)."""
    touch: bool = True
    """Whether retrieval updates ``last_accessed_at`` (as Generative Agents does)."""
    scoring: ScoringConfig | None = None
    """Override the stream's scoring."""
    namespace_key: str | None = "user_id"
    """The runtime-context attribute / ``configurable`` key naming the run's owner, read as
    the agent middleware and the memory tools read it: a retriever given neither
    ``namespace`` nor ``namespaces`` (here or per call) reads that owner's memories, e.g.
    ``chain.invoke(q, {"configurable": {"user_id": "alice"}})``; ``None``: never."""
    require_namespace: bool = False
    """Raise ``ValueError`` when a retrieval names no namespace and the run no owner,
    instead of reading the stream's default namespace (recommended for multi-user apps)."""

    @field_validator("filter", mode="wrap")
    @classmethod
    def _check_filter(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """A mapping is checked as a per-call filter is (unknown keys, bad values:
        ``InvalidFilterError``) and kept as given: pydantic made it a ``RetrievalFilter`` by
        its field names, dropping any other key (``kind``, a typo) without a word."""
        if isinstance(value, Mapping):
            RetrievalFilter.coerce(value)
            return dict(value)
        return handler(value)

    def invoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        return super().invoke(input, config, **self._with_owner(config, kwargs))

    async def ainvoke(
        self, input: str, config: RunnableConfig | None = None, **kwargs: Any
    ) -> list[Document]:
        return await super().ainvoke(input, config, **self._with_owner(config, kwargs))

    def _with_owner(self, config: RunnableConfig | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` naming the namespace the retrieval reads: a per-call ``namespace`` or
        ``namespaces``, else the retriever's, else its own filter's, else the run's owner, else
        the stream's. A filter given per call never chooses it (it may come from a request):
        its namespace must be that one (``InvalidFilterError``). ``None`` means "not given"."""
        kwargs = {key: value for key, value in kwargs.items() if value is not None}
        if "namespace" in kwargs or "namespaces" in kwargs or self.namespaces is not None:
            return kwargs  # (several namespaces: the stream refuses a filter's namespace)
        namespace = self.namespace
        if namespace is None:
            namespace = RetrievalFilter.coerce(self.filter).namespace
        if namespace is None:
            namespace = self._owner(config)
        return {**kwargs, "namespace": namespace}

    def _owner(self, config: RunnableConfig | None) -> str:
        """The run's owner, else the stream's namespace (``require_namespace``: an error)."""
        # (tools.py builds its recall tool on this retriever: imported here, not at the top)
        from langchain_reflective.integrations.tools import _current_run_context, namespace_from_run

        owner = None
        if self.namespace_key:
            owner = namespace_from_run(
                self.namespace_key, context=_current_run_context(), config=ensure_config(config)
            )
        if owner is not None:
            return owner
        if self.require_namespace:
            how = (
                f", or invoke it with config={{'configurable': {{{self.namespace_key!r}: ...}}}}"
                if self.namespace_key
                else ""
            )
            raise ValueError(
                f"no memory owner for this retrieval: give the retriever a namespace{how}"
            )
        return self.memory_stream.namespace

    def _get_ls_params(self, **kwargs: Any) -> LangSmithRetrieverParams:
        params = super()._get_ls_params(**kwargs)
        params["ls_retriever_name"] = "reflective"
        params["ls_vector_store_provider"] = "langchain-reflective"
        params["ls_embedding_provider"] = type(self.memory_stream.embeddings).__name__
        model = self.memory_stream.embedding_model
        if model:
            params["ls_embedding_model"] = model
        # the run's own figures, as the package's other runs carry them (``namespace``, ``k``):
        # LangSmith shows whose memories a retrieval read without opening its inputs
        extra: dict[str, Any] = {"k": kwargs.get("k", self.k)}
        namespaces = kwargs.get("namespaces", self.namespaces)
        if namespaces is not None:  # (as given when it is no list: the retrieval refuses it)
            many = isinstance(namespaces, Sequence) and not isinstance(namespaces, str)
            extra["namespaces"] = list(namespaces) if many else namespaces
        else:
            # (``invoke`` named the namespace read: ``_with_owner``; unchecked here, a bad one
            # fails in the retrieval with its own error)
            extra["namespace"] = kwargs.get("namespace", self.namespace)
        return {**params, **extra}  # type: ignore[typeddict-item]

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
            # one given per call replaces the retriever's namespace or namespaces, whichever
            "namespace": kwargs.get(
                "namespace", None if "namespaces" in kwargs else self.namespace
            ),
            "filter": kwargs.get("filter", self.filter),
            "touch": kwargs.get("touch", self.touch),
            "scoring": kwargs.get("scoring", self.scoring),
            "namespaces": kwargs.get(
                "namespaces", None if "namespace" in kwargs else self.namespaces
            ),
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
