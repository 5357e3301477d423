"""Where a Postgres retrieval's candidates come from: the server's one statement, or the
process's local index of the namespace.

:class:`CandidateSource` answers ``PostgresBackend.candidates``: from the local index
(``local_index.py``) when the backend keeps one and holds the namespace, else with the single
statement of ``queries.candidates_sql`` (one round trip, fetched in binary).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg

from langchain_reflective._llm import Flow, Op, run_async, run_sync, threaded
from langchain_reflective.backends.postgres.connection import Pools
from langchain_reflective.backends.postgres.local_index import LocalIndex
from langchain_reflective.backends.postgres.queries import CandidateQuery, candidates_sql
from langchain_reflective.backends.postgres.rows import candidate_set, vector_text
from langchain_reflective.backends.postgres.vector_index import VectorIndex
from langchain_reflective.backends.postgres.writes import TOKENIZER
from langchain_reflective.backends.types import F32, CandidateSet, RetrievalFilter
from langchain_reflective.errors import DimensionMismatchError
from langchain_reflective.scoring import ScoringConfig

__all__ = ["CandidateSource"]


class CandidateSource:
    """A retrieval's candidates, from the local index or the server (see the module docstring).

    Args:
        pools: the backend's connection pools.
        index: the database's vector index (each connection's probes are set before a query).
        dense: nearest neighbours the server's statement gathers (``dense_candidates``).
        lexical: best lexical matches it gathers (``lexical_candidates``).
        local: the process's local index, or ``None``.
    """

    def __init__(
        self,
        pools: Pools,
        index: VectorIndex,
        *,
        dense: int,
        lexical: int,
        local: LocalIndex | None,
    ) -> None:
        self._pools = pools
        self._index = index
        self.dense = dense
        self.lexical = lexical
        self.local = local
        self.lexical_context = False
        """Whether the lexical half reads the terms with the previous observation's."""

    def configure(self, lexical_context: bool) -> None:
        self.lexical_context = lexical_context
        if self.local is not None:
            self.local.configure(lexical_context)

    def get(
        self,
        dimension: int | None,
        namespace: str,
        query: str,
        vector: F32,
        *,
        k: int,
        filter: RetrievalFilter,
        config: ScoringConfig,
        exact: bool,
    ) -> CandidateSet:
        """The candidates: the local index's, else the server's statement (one round trip)."""
        ask = (namespace, query, vector, k, filter, config, exact)
        return run_sync(self._gather(dimension, *ask))

    async def aget(
        self,
        dimension: int | None,
        namespace: str,
        query: str,
        vector: F32,
        *,
        k: int,
        filter: RetrievalFilter,
        config: ScoringConfig,
        exact: bool,
    ) -> CandidateSet:
        """Async twin of :meth:`get`: the local index in a worker thread (its catch-up is a
        statement on the sync pool, its ranking 1-5 ms of CPU), the server's statement on this
        event loop's pool."""
        ask = (namespace, query, vector, k, filter, config, exact)
        return await run_async(self._gather(dimension, *ask))

    def _gather(
        self,
        dimension: int | None,
        namespace: str,
        query: str,
        vector: F32,
        k: int,
        flt: RetrievalFilter,
        config: ScoringConfig,
        exact: bool,
    ) -> Flow[CandidateSet]:
        """:meth:`get`'s flow, written once for both: the local index, else the statement."""
        self._pools.check_process()  # (before the local index's locks)
        _check(dimension, vector)
        local = self.local
        if local is not None:
            found: CandidateSet | None = yield Op(
                local.candidates,
                threaded(local.candidates),
                (namespace, query, vector),
                {"k": k, "filter": flt, "config": config, "exact": exact},
            )
            if found is not None:  # (None: the namespace is not held yet)
                return found
        sql, params = self._statement(namespace, query, vector, k, flt, config, exact)

        def run(conn: psycopg.Connection[Any]) -> Any:
            self._index.prepare(conn)
            return conn.execute(sql, params, binary=True).fetchone()

        async def arun(conn: psycopg.AsyncConnection[Any]) -> Any:
            await self._index.aprepare(conn)
            return await (await conn.execute(sql, params, binary=True)).fetchone()

        row = yield Op(lambda: self._pools.retrying(run), lambda: self._pools.aretrying(arun))
        return candidate_set(row, config, exact)

    def _statement(
        self,
        namespace: str,
        query: str,
        vector: F32,
        k: int,
        flt: RetrievalFilter,
        config: ScoringConfig,
        exact: bool,
    ) -> tuple[str, dict[str, Any]]:
        spec = CandidateQuery.for_query(
            config,
            k=k,
            exact=exact,
            dense=self.dense,
            lexical=self.lexical,
            lexical_context=self.lexical_context,
        )
        terms = Counter(TOKENIZER.tokenize(query)) if spec.lexical else Counter[str]()
        params: dict[str, Any] = {
            "ns": namespace,
            "vec": vector_text(vector),
            "qterms": list(terms),
            "qtfs": list(terms.values()),
        }
        return candidates_sql(spec, flt, params), params


def _check(dimension: int | None, vector: F32) -> None:
    if dimension is not None and vector.shape[0] != dimension:
        raise DimensionMismatchError(
            f"the database holds {dimension}-dimensional vectors; the query vector has "
            f"{vector.shape[0]}"
        )
