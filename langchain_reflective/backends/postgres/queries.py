"""The SQL of the Postgres backend: one statement for a retrieval's candidates, and the rest.

:func:`candidates_sql` builds the single statement (CTEs) that gathers a query's candidates
and everything scoring needs about them -- cosine similarity, lexical rank, timestamps,
importance, kind, the previous and next observation and *their* relevance -- so a retrieval
costs one round trip. Only the filter's active conditions are written into it (the planner
sees plain predicates, not ``param IS NULL OR ...``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.scoring import ScoringConfig

__all__ = [
    "ADD",
    "BM25_B",
    "BM25_K1",
    "RECORDS",
    "RECORD_COLUMNS",
    "RELINK",
    "RESET",
    "TOUCH",
    "CandidateQuery",
    "candidates_sql",
]

RECORD_COLUMNS = (
    "m.seq, m.id, m.text, m.kind, m.created_at, a.last_accessed_at, m.importance, "
    "m.importance_source, m.evidence, m.depth, m.namespace, m.metadata"
)
"""The columns ``_record`` (in ``backend``) reads, in order, from :data:`RECORDS`."""
RECORDS = "reflective_memories m JOIN reflective_access a ON a.seq = m.seq"
"""A memory and its access time."""

BM25_K1 = 1.5
"""BM25 term-frequency saturation (the SQLite backend's ``BM25Index`` default)."""
BM25_B = 0.75
"""BM25 length normalisation (the SQLite backend's ``BM25Index`` default)."""

# BM25 (Lucene's variant, as the SQLite backend computes it): N and the average length come from
# the namespace's counter row; df from the GIN index; per query term ``qtf * idf``.


def _bm25_parts(p: str) -> tuple[str, str, str, str]:
    """The BM25 CTEs and expressions over the ``{p}_*`` term columns (``lex`` or ``ctx``)."""
    stats = (
        "stats AS MATERIALIZED (SELECT coalesce(max(c.lex_docs), 0)::float8 AS n, "
        f"CASE WHEN max(c.lex_docs) > 0 AND max(c.{p}_total) > 0 "
        f"THEN max(c.{p}_total)::float8 / max(c.lex_docs) ELSE 1.0 END AS avgdl "
        "FROM reflective_counters c WHERE c.namespace = %(ns)s)"
    )
    qterms = (
        "qt AS MATERIALIZED (SELECT t.term, "
        "t.qtf * ln(1 + (s.n - df.c + 0.5) / (df.c + 0.5)) AS w "
        "FROM unnest(%(qterms)s::text[], %(qtfs)s::int[]) AS t(term, qtf) CROSS JOIN stats s "
        "CROSS JOIN LATERAL (SELECT count(*)::float8 AS c FROM reflective_memories d "
        f"WHERE d.namespace = %(ns)s AND d.{p}_terms @> ARRAY[t.term]) AS df WHERE df.c > 0)"
    )
    bm25 = (
        "(SELECT coalesce(sum(qt.w * x.tf / (x.tf + "
        f"{BM25_K1} * (1 - {BM25_B} + {BM25_B} * m.{p}_len / s.avgdl))), 0) "
        "FROM qt CROSS JOIN LATERAL "
        f"(SELECT m.{p}_tfs[array_position(m.{p}_terms, qt.term)] AS tf) AS x "
        "WHERE x.tf IS NOT NULL)"
    )
    return stats, qterms, bm25, f"m.{p}_terms && %(qterms)s::text[]"


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
    terms: str = "lex"
    """Which term columns the lexical half reads: ``lex`` (the memory's text) or ``ctx`` (with
    the previous observation's, ``ScoringConfig.lexical_context``)."""
    near: int = 0
    """How many of the best dense and lexical matches bring their neighbours along as
    candidates on the approximate path (with ``neighbors``)."""

    @classmethod
    def for_query(
        cls,
        config: ScoringConfig,
        *,
        k: int,
        exact: bool,
        dense: int,
        lexical: int,
        lexical_context: bool,
    ) -> CandidateQuery:
        """The candidate counts the SQLite backend's approximate path uses, for ``config``.

        Dense and lexical candidates: at least ``4 * k``; the most recent and most important
        memories: as many as their weight can matter against relevance's.
        """
        want_dense = max(dense, 4 * k)
        top = max(config.relevance_weight, config.lexical_weight, 1e-12)

        def share(weight: float) -> int:
            if weight <= 0:
                return 0
            return max(4 * k, min(want_dense, math.ceil(want_dense * weight / top)))

        return cls(
            exact=exact,
            lexical=config.uses_lexical,
            neighbors=config.neighbor_weight > 0,
            dense=want_dense,
            lexical_top=max(lexical, 4 * k),
            recent=share(config.recency_weight),
            important=share(config.importance_weight),
            terms="ctx" if lexical_context else "lex",
            near=max(4 * k, want_dense // 4),
        )


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
    query vector as pgvector text), ``qterms``/``qtfs`` (the query's distinct index terms and
    their counts), and the limits of ``spec``.

    Each result row: ``seq, is_candidate, relevance, lexical, accessed, created, importance,
    kind, previous seq, next seq, lexical max`` -- candidates first in ``seq`` order, then the
    neighbour rows (observations next to a candidate that are not candidates themselves).

    Relevance is the inner product (``<#>``): vectors are unit vectors, and pgvector sums its
    products in single precision, as the SQLite backend's FAISS index does, so equal cosines
    stay equal (``1 - <=>`` divides by the norms in double precision and splits such ties).

    The exact statement reads the namespace once; the approximate one gathers the candidate
    keys from the indexes. Both read each observation's neighbours from its links
    (``reflective_access``), and neither joins on estimates that stale statistics could turn
    into a quadratic plan.
    """
    where = _filter_sql(flt, params)
    min_rel = ""
    if flt.min_relevance is not None:
        params["min_rel"] = float(flt.min_relevance)
        min_rel = " AND -(m.embedding <#> q.v) >= %(min_rel)s"
    q = "q AS MATERIALIZED (SELECT %(vec)s::vector AS v)"
    stats_join = " CROSS JOIN stats s" if spec.lexical else ""
    stats, qterms, bm25, matches = _bm25_parts(spec.terms)
    if spec.lexical:
        q = f"{q},\n{stats},\n{qterms}"
    lex = f"CASE WHEN {matches} THEN {bm25} ELSE 0 END" if spec.lexical else "0.0"
    values = (
        f"-(m.embedding <#> q.v), {lex}, extract(epoch FROM a.last_accessed_at)::float8, "
        "extract(epoch FROM m.created_at)::float8, m.importance, m.kind"
    )
    if spec.exact:
        if spec.neighbors:
            links = "a.prev_obs, a.next_obs"
            near = (
                " OR b.seq IN (SELECT prev FROM base WHERE ok UNION SELECT nxt FROM base WHERE ok)"
            )
        else:
            links, near = "NULL::bigint, NULL::bigint", ""
        return f"""WITH {q},
base (seq, ok, rel, lex, accessed, created, importance, kind, prev, nxt) AS MATERIALIZED (
    SELECT m.seq, (true{where}{min_rel}), {values}, {links}
    FROM {RECORDS}, q{stats_join}
    WHERE m.namespace = %(ns)s
)
SELECT b.seq, b.ok, b.rel, b.lex, b.accessed, b.created, b.importance, b.kind, b.prev, b.nxt,
       (SELECT coalesce(max(lex), 0) FROM base)
FROM base b WHERE b.ok{near}
ORDER BY b.ok DESC, b.seq"""
    params.update(
        n_dense=spec.dense, n_lex=spec.lexical_top, n_rec=spec.recent, n_imp=spec.important
    )
    ctes = [
        q,
        "dense AS (SELECT m.seq, m.kind, m.embedding <=> (SELECT v FROM q) AS d "
        f"FROM reflective_memories m WHERE m.namespace = %(ns)s{where} "
        "ORDER BY d LIMIT %(n_dense)s)",
    ]
    pools = ["SELECT seq FROM dense"]
    lexmax = "0.0"
    if spec.lexical:
        # unfiltered, so its best rank is the namespace's best (lexical_max)
        p = spec.terms
        ctes.append(
            # every matching memory's BM25, once: per query term, the memories holding it (GIN),
            # its count there by position, summed per memory. The returned rows read theirs
            # from here too (a memory matching no query term scores 0).
            "lexall AS MATERIALIZED (SELECT m.seq, m.kind, sum(qt.w * x.tf / (x.tf + "
            f"{BM25_K1} * (1 - {BM25_B} + {BM25_B} * m.{p}_len / s.avgdl))) AS r, "
            f"(true{where}) AS ok FROM qt JOIN reflective_memories m "
            f"ON m.{p}_terms @> ARRAY[qt.term] CROSS JOIN stats s "
            f"CROSS JOIN LATERAL (SELECT m.{p}_tfs[array_position(m.{p}_terms, qt.term)] AS tf) x "
            "WHERE m.namespace = %(ns)s GROUP BY m.seq, s.avgdl)"
        )
        ctes.append("lex AS (SELECT * FROM lexall ORDER BY r DESC, seq LIMIT %(n_lex)s)")
        pools.append("SELECT seq FROM lex WHERE ok")
        lexmax = "(SELECT coalesce(max(r), 0) FROM lex)"
    if spec.recent:
        ctes.append(
            f"recent AS (SELECT m.seq FROM {RECORDS} "
            f"WHERE a.namespace = %(ns)s{where} "
            "ORDER BY a.last_accessed_at DESC LIMIT %(n_rec)s)"
        )
        pools.append("SELECT seq FROM recent")
    if spec.important:
        ctes.append(
            "important AS (SELECT m.seq FROM reflective_memories m "
            f"WHERE m.namespace = %(ns)s{where} "
            "ORDER BY m.importance DESC, m.seq DESC LIMIT %(n_imp)s)"
        )
        pools.append("SELECT seq FROM important")
    if spec.neighbors:
        # a memory also scores through its neighbours' relevance: the neighbours of the most
        # relevant memories are candidates too (as the SQLite backend gathers them)
        params["n_near"] = spec.near
        tops = ["(SELECT seq, kind FROM dense ORDER BY d LIMIT %(n_near)s)"]
        if spec.lexical:
            tops.append("(SELECT seq, kind FROM lex ORDER BY r DESC, seq LIMIT %(n_near)s)")
        ctes.append(
            f"top_rel AS (SELECT DISTINCT seq FROM ({' UNION ALL '.join(tops)}) t "
            "WHERE t.kind = 'observation')"
        )
        ctes.append(
            "top_links AS (SELECT a.prev_obs AS prev, a.next_obs AS nxt "
            "FROM top_rel t JOIN reflective_access a ON a.seq = t.seq)"
        )
        pools.append("SELECT prev FROM top_links UNION SELECT nxt FROM top_links")
        links = "a.prev_obs, a.next_obs"
    else:
        links = "NULL::bigint, NULL::bigint"
    ctes.append(
        f"cand (seq, prev, nxt) AS MATERIALIZED (SELECT m.seq, {links} "
        f"FROM {RECORDS}, q "
        f"WHERE m.seq IN ({' UNION '.join(pools)}) AND m.namespace = %(ns)s{where}{min_rel})"
    )
    ctes.append(
        "near AS (SELECT x.s FROM (SELECT prev AS s FROM cand UNION SELECT nxt FROM cand) x "
        "WHERE x.s IS NOT NULL AND NOT EXISTS (SELECT 1 FROM cand c WHERE c.seq = x.s))"
    )
    ctes.append(
        "picked (seq, ok, prev, nxt) AS (SELECT seq, true, prev, nxt FROM cand "
        "UNION ALL SELECT s, false, NULL::bigint, NULL::bigint FROM near)"
    )
    lexical_join = ""
    if spec.lexical:
        values = values.replace(lex, "coalesce(lr.r, 0)")
        lexical_join = "\nLEFT JOIN lexall lr ON lr.seq = r.seq"
    # each returned row's memory and access time by primary-key lookup (OFFSET 0 keeps the
    # planner from flattening the subquery and hashing the whole table instead)
    return (
        "WITH "
        + ",\n".join(ctes)
        + f"""
SELECT r.seq, r.ok, {values}, r.prev, r.nxt, {lexmax}
FROM picked r CROSS JOIN q
CROSS JOIN LATERAL (SELECT m.embedding, m.created_at, m.importance, m.kind
                    FROM reflective_memories m WHERE m.seq = r.seq OFFSET 0) m
CROSS JOIN LATERAL (SELECT a.last_accessed_at FROM reflective_access a
                    WHERE a.seq = r.seq OFFSET 0) a{lexical_join}
ORDER BY r.ok DESC, r.seq"""
    )


# -- writes and reads (the backend's other statements) ----------------------------------------

RESET = """
INSERT INTO reflective_counters AS c
    (namespace, importance_sum, adds, last_reflection_at, last_reflection_seq)
VALUES (%(ns)s, 0, 0, %(at)s,
        (SELECT coalesce(max(seq), 0) FROM reflective_memories WHERE namespace = %(ns)s))
ON CONFLICT (namespace) DO UPDATE SET importance_sum = 0, adds = 0,
    last_reflection_at = EXCLUDED.last_reflection_at,
    last_reflection_seq = EXCLUDED.last_reflection_seq
"""
ADD = """
INSERT INTO reflective_counters AS c (namespace, importance_sum, adds)
VALUES (%(ns)s, %(imp)s, %(adds)s)
ON CONFLICT (namespace) DO UPDATE SET importance_sum = c.importance_sum + EXCLUDED.importance_sum,
    adds = c.adds + EXCLUDED.adds
"""


TOUCH = (
    "UPDATE reflective_access a SET last_accessed_at = %s FROM reflective_memories m "
    f"WHERE a.namespace = %s AND a.seq = ANY(%s) AND m.seq = a.seq RETURNING {RECORD_COLUMNS}"
)


RELINK = """
UPDATE reflective_access a SET
    prev_obs = (SELECT max(p.seq) FROM reflective_memories p WHERE p.namespace = a.namespace
                AND p.kind = 'observation' AND p.seq < a.seq),
    next_obs = (SELECT min(n.seq) FROM reflective_memories n WHERE n.namespace = a.namespace
                AND n.kind = 'observation' AND n.seq > a.seq)
WHERE a.namespace = %s AND a.seq = ANY(%s)
"""
