"""The SQL of the Postgres backend: one statement for a retrieval's candidates, and the rest.

:func:`candidates_sql` builds the single statement (CTEs) that gathers a query's candidates
and everything scoring needs about them -- cosine similarity, lexical rank, timestamps,
importance, kind, the previous and next observation and *their* relevance -- so a retrieval
costs one round trip. Only the filter's active conditions are written into it (the planner
sees plain predicates, not ``param IS NULL OR ...``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_reflective.backends.base import RetrievalFilter

__all__ = ["RECORD_COLUMNS", "CandidateQuery", "candidates_sql"]

RECORD_COLUMNS = (
    "seq, id, text, kind, created_at, last_accessed_at, importance, importance_source, "
    "evidence, depth, namespace, metadata"
)
"""The columns :func:`row_to_record` (in ``backend``) reads, in order."""

# The query's tsquery: the query's lexemes ('english': stemmed, stopwords dropped) joined with
# OR, as BM25 matches any term; NULL when the query has no lexeme (then nothing matches).
_TSQUERY = (
    "(SELECT string_agg(quote_literal(w), ' | ')::tsquery "
    "FROM unnest(tsvector_to_array(to_tsvector('english'::regconfig, %(query)s))) AS w)"
)
_RANK = "ts_rank(m.tsv, q.tq)"


@dataclass(frozen=True, slots=True)
class CandidateQuery:
    """How many candidates of each kind to gather (see ``PostgresBackend.candidates``)."""

    exact: bool
    """Every memory matching the filter is a candidate (an exact scan; no index)."""
    lexical: bool
    """Compute lexical ranks (``ScoringConfig.uses_lexical``)."""
    neighbors: bool
    """Add each candidate observation's previous and next observation."""
    dense: int = 0
    """Nearest neighbours by cosine (HNSW) on the approximate path."""
    lexical_top: int = 0
    """Best lexical matches on the approximate path."""
    recent: int = 0
    """Most recently accessed memories on the approximate path."""
    important: int = 0
    """Most important memories on the approximate path."""


def _filter_sql(flt: RetrievalFilter, params: dict[str, Any], alias: str = "m") -> str:
    parts: list[str] = []
    if flt.kinds is not None:
        params["kinds"] = sorted(flt.kinds)
        parts.append(f"{alias}.kind = ANY(%(kinds)s::text[])")
    if flt.created_after is not None:
        params["after"] = flt.created_after
        parts.append(f"{alias}.created_at >= %(after)s")
    if flt.created_before is not None:
        params["before"] = flt.created_before
        parts.append(f"{alias}.created_at < %(before)s")
    return "".join(f" AND {p}" for p in parts)


def candidates_sql(spec: CandidateQuery, flt: RetrievalFilter, params: dict[str, Any]) -> str:
    """The one statement returning a query's candidate rows, then its neighbour rows.

    Parameters it reads from ``params`` (filled in here for the filter): ``ns``, ``vec`` (the
    query vector as pgvector text), ``query`` (the query text), and the limits of ``spec``.

    Each result row: ``seq, is_candidate, relevance, lexical, accessed, created, importance,
    kind, previous seq, next seq, lexical max`` -- candidates first in ``seq`` order, then the
    neighbour rows (observations next to a candidate that are not candidates themselves).
    """
    where = _filter_sql(flt, params)
    min_rel = ""
    if flt.min_relevance is not None:
        params["min_rel"] = float(flt.min_relevance)
        min_rel = " AND 1 - (m.embedding <=> q.v) >= %(min_rel)s"
    tq = _TSQUERY if spec.lexical else "NULL::tsquery"
    ctes = [f"q AS MATERIALIZED (SELECT %(vec)s::vector AS v, {tq} AS tq)"]
    if spec.exact:
        ctes.append(
            "cand AS (SELECT m.seq, m.kind FROM reflective_memories m, q "
            f"WHERE m.namespace = %(ns)s{where}{min_rel})"
        )
        lexmax = (
            f"(SELECT max({_RANK}) FROM reflective_memories m, q "
            "WHERE m.namespace = %(ns)s AND m.tsv @@ q.tq)"
            if spec.lexical
            else "0.0"
        )
    else:
        params.update(
            n_dense=spec.dense, n_lex=spec.lexical_top, n_rec=spec.recent, n_imp=spec.important
        )
        ctes.append(
            "dense AS (SELECT m.seq FROM reflective_memories m "
            f"WHERE m.namespace = %(ns)s{where} "
            "ORDER BY m.embedding <=> (SELECT v FROM q) LIMIT %(n_dense)s)"
        )
        pools = ["SELECT seq FROM dense"]
        if spec.lexical:
            # unfiltered, so its best rank is the namespace's best (lexical_max)
            ok = f"true{where}"
            ctes.append(
                f"lex AS (SELECT m.seq, {_RANK} AS r, ({ok}) AS ok "
                "FROM reflective_memories m, q WHERE m.namespace = %(ns)s AND m.tsv @@ q.tq "
                "ORDER BY r DESC, m.seq LIMIT %(n_lex)s)"
            )
            pools.append("SELECT seq FROM lex WHERE ok")
        if spec.recent:
            ctes.append(
                "recent AS (SELECT m.seq FROM reflective_memories m "
                f"WHERE m.namespace = %(ns)s{where} "
                "ORDER BY m.last_accessed_at DESC LIMIT %(n_rec)s)"
            )
            pools.append("SELECT seq FROM recent")
        if spec.important:
            ctes.append(
                "important AS (SELECT m.seq FROM reflective_memories m "
                f"WHERE m.namespace = %(ns)s{where} "
                "ORDER BY m.importance DESC, m.seq DESC LIMIT %(n_imp)s)"
            )
            pools.append("SELECT seq FROM important")
        ctes.append(
            "cand AS (SELECT m.seq, m.kind FROM reflective_memories m, q "
            f"WHERE m.seq IN ({' UNION '.join(pools)}) AND m.namespace = %(ns)s{min_rel})"
        )
        lexmax = "(SELECT max(r) FROM lex)" if spec.lexical else "0.0"
    if spec.neighbors and spec.exact:
        ctes.append(
            "nb AS (SELECT o.seq, o.prev, o.next FROM ("
            "SELECT m.seq, lag(m.seq) OVER w AS prev, lead(m.seq) OVER w AS next "
            "FROM reflective_memories m "
            "WHERE m.namespace = %(ns)s AND m.kind = 'observation' WINDOW w AS (ORDER BY m.seq)"
            ") o JOIN cand c ON c.seq = o.seq)"
        )
    elif spec.neighbors:
        ctes.append(
            "nb AS (SELECT c.seq, "
            "(SELECT p.seq FROM reflective_memories p WHERE p.namespace = %(ns)s "
            "AND p.kind = 'observation' AND p.seq < c.seq ORDER BY p.seq DESC LIMIT 1) AS prev, "
            "(SELECT n.seq FROM reflective_memories n WHERE n.namespace = %(ns)s "
            "AND n.kind = 'observation' AND n.seq > c.seq ORDER BY n.seq LIMIT 1) AS next "
            "FROM cand c WHERE c.kind = 'observation')"
        )
    else:
        ctes.append(
            "nb AS (SELECT NULL::bigint AS seq, NULL::bigint AS prev, NULL::bigint AS next)"
        )
    ctes.append(
        "rows AS (SELECT seq, true AS is_cand FROM cand UNION ALL "
        "SELECT x.s, false FROM (SELECT prev AS s FROM nb UNION SELECT next FROM nb) x "
        "WHERE x.s IS NOT NULL AND x.s NOT IN (SELECT seq FROM cand))"
    )
    lexical = f"coalesce({_RANK}, 0)" if spec.lexical else "0.0"
    return (
        "WITH "
        + ",\n".join(ctes)
        + f"""
SELECT r.seq, r.is_cand, 1 - (m.embedding <=> q.v), {lexical},
       extract(epoch FROM m.last_accessed_at)::float8, extract(epoch FROM m.created_at)::float8,
       m.importance, m.kind, nb.prev, nb.next, coalesce({lexmax}, 0)
FROM rows r JOIN reflective_memories m ON m.seq = r.seq CROSS JOIN q
LEFT JOIN nb ON nb.seq = r.seq
ORDER BY r.is_cand DESC, r.seq"""
    )
