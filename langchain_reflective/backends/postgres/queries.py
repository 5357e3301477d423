"""The SQL of the Postgres backend: one statement for a retrieval's candidates, and the rest.

:func:`candidates_sql` builds the single statement (CTEs) that gathers a query's candidates
and everything scoring needs about them -- cosine similarity, lexical rank, timestamps,
importance, kind, the previous and next observation and *their* relevance -- so a retrieval
costs one round trip. Only the filter's active conditions are written into it (the planner
sees plain predicates, not ``param IS NULL OR ...``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_reflective.backends.base import RetrievalFilter
from langchain_reflective.scoring import ScoringConfig

__all__ = [
    "ADD",
    "BM25_B",
    "BM25_K1",
    "DENSE_DEPTH_FROM",
    "K_MAX",
    "LOCAL_CHANGES",
    "LOCAL_HEAD",
    "PURGE_COUNTER",
    "RECONTEXT",
    "RECORDS",
    "RECORD_COLUMNS",
    "RELINK",
    "REMOVALS_KEPT",
    "RESET",
    "TOUCH",
    "TOUCH_CLOCK",
    "CandidateQuery",
    "candidates_sql",
    "local_rows_sql",
    "pending_sql",
    "recent_sql",
]

RECORD_COLUMNS = (
    "m.seq, m.id, m.text, m.kind, m.created_at, a.last_accessed_at, m.importance, "
    "m.importance_source, m.evidence, m.depth, m.namespace, m.metadata::text"
)
"""The columns :func:`~langchain_reflective.backends.postgres.rows.record_of` reads, in order,
from :data:`RECORDS`. The metadata comes as text, decoded row by row by ``record_of``: psycopg
would decode ``jsonb`` while fetching, where one row nested too deep for ``json.loads`` (stored
before ``records.MAX_NESTING``, or by hand) raised ``RecursionError`` for the whole read."""
RECORDS = "reflective_memories m JOIN reflective_access a ON a.seq = m.seq"
"""A memory and its access time."""

BM25_K1 = 1.5
"""BM25 term-frequency saturation (the SQLite backend's ``BM25Index`` default)."""
BM25_B = 0.75
"""BM25 length normalisation (the SQLite backend's ``BM25Index`` default)."""

# BM25 (Lucene's variant, as the SQLite backend computes it): N and the average length come from
# the namespace's counter row; df and tf from one pass over the memories holding a query term.


def _lexical_ctes(p: str, where: str) -> list[str]:
    """The BM25 CTEs over the ``{p}_*`` term columns (``lex`` or ``ctx``).

    ``hits`` is one row per (query term, memory of the namespace holding it), found through the GIN
    index of ``reflective_terms`` (narrow rows, no vectors) in one pass: the term's count in the
    memory (by position), the memory's length, whether it is an observation and whether it passes
    the filter. The document frequencies are counted from it (no second index scan), and ``lexall``
    sums each matching memory's BM25 (unfiltered, so its best score is the namespace's best:
    ``lexical_max``). A memory matching no query term scores 0. The constants are ``float8``: as
    ``numeric`` literals each row paid a ``numeric`` product and its conversion (the values are the
    same: ``0.75 * len`` is exact either way).
    """
    return [
        "stats AS MATERIALIZED (SELECT coalesce(max(c.lex_docs), 0)::float8 AS n, "
        f"CASE WHEN max(c.lex_docs) > 0 AND max(c.{p}_total) > 0 "
        f"THEN max(c.{p}_total)::float8 / max(c.lex_docs) ELSE 1.0 END AS avgdl "
        "FROM reflective_counters c WHERE c.namespace = %(ns)s)",
        "hits AS MATERIALIZED (SELECT t.term, t.qtf, m.seq, m.kind = 'observation' AS obs, "
        f"m.{p}_tfs[array_position(m.{p}_terms, t.term)] AS tf, m.{p}_len AS len, "
        f"(true{where}) AS ok "
        "FROM unnest(%(qterms)s::text[], %(qtfs)s::int[]) AS t(term, qtf) "
        f"JOIN reflective_terms m ON m.{p}_terms @> ARRAY[t.term] "
        "WHERE m.namespace = %(ns)s)",
        "qt AS MATERIALIZED (SELECT d.term, d.qtf * ln(1 + (s.n - d.c + 0.5) / (d.c + 0.5)) AS w "
        "FROM (SELECT term, min(qtf) AS qtf, count(*)::float8 AS c FROM hits GROUP BY term) d "
        "CROSS JOIN stats s)",
        "lexall AS MATERIALIZED (SELECT h.seq, bool_and(h.ok) AS ok, bool_or(h.obs) AS obs, "
        f"sum(qt.w * h.tf / (h.tf + {BM25_K1}::float8 * (1 - {BM25_B}::float8 "
        f"+ {BM25_B}::float8 * h.len / s.avgdl))) "
        "AS r FROM hits h JOIN qt ON qt.term = h.term CROSS JOIN stats s GROUP BY h.seq)",
        "lexpack AS MATERIALIZED (SELECT string_agg(int8send(seq), ''::bytea) AS s, "
        "string_agg(float8send(r), ''::bytea) AS v FROM lexall)",
    ]


K_MAX = 2**40
"""The largest ``k`` the candidate statement is written for: its limits (``4 * k``, and more
dense candidates in a large namespace) are ``bigint``s, which ``k = 3 * 10**18`` overflowed
(``StorageError: bigint out of range``, where the SQLite backend returns every memory). A
table holds fewer than ``4 * K_MAX`` rows (at most 2**32 pages of at most 291 rows), so a
larger ``k`` gathers the same candidates: every memory of the namespace."""


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
        memories: as many as their weight can matter against relevance's. A ``k`` above
        :data:`K_MAX` counts as ``K_MAX``: it asks for every memory all the same.
        """
        k = min(k, K_MAX)
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


DENSE_DEPTH_FROM = 250_000
"""Past this many memories in a namespace the server's statement gathers more dense candidates
than ``dense_candidates``: ``dense_candidates * sqrt(memories / DENSE_DEPTH_FROM)`` (640 at 1M),
as the SQLite backend and the local index do past their own 100,000 (they start from 128). The
more memories, the more lie within a near-tie of the tenth best, where recency, importance and
a neighbour's relevance decide. ``benchmarks/pg_candidates.py`` at 1M memories (100 queries,
docs/benchmarks.md): 320 dense candidates agreed with exact scoring at 0.835, 640 (this rule) at
0.987 for ~12% more p50 (177 -> 200 ms), the local index's threshold (1,012 there) at 0.990 for
~21-28% more; at 100k, 320 agree at 0.98-0.99."""

_DEPTH = (
    "depth AS MATERIALIZED (SELECT x.r, greatest(%(n_dense)s::float8, ceil(%(n_dense)s::float8 "
    "* sqrt(x.r / %(depth_from)s::float8)))::int8 AS n FROM (SELECT coalesce((SELECT c.lex_docs "
    "FROM reflective_counters c WHERE c.namespace = %(ns)s), 0)::float8 AS r) x)"
)
"""How many dense candidates to gather (``n``) in a namespace of ``r`` memories (its counter
row): ``n_dense``, more past :data:`DENSE_DEPTH_FROM` (``depth_from``). In the statement itself,
so it follows every process's writes. The planner cannot see this ``LIMIT`` (nor a generic
plan's ``LIMIT $n``) and plans with a guess; ``EXPLAIN ANALYZE`` at 100k and 1M memories still
shows the vector index's scan, and a small namespace among many still sorts its own rows
(``test_postgres_vector_index.py``)."""

_DENSE_BY_SORT = (
    "by_sort AS MATERIALIZED (SELECT d.r ^ 2 <= d.n * (SELECT greatest(t.reltuples, "
    "0) FROM pg_class t WHERE t.oid = 'reflective_memories'::regclass)::float8 AS s FROM depth d)"
)
"""Whether the dense candidates come from sorting the namespace's rows by cosine (read through
its btree index) instead of from the vector index: when the namespace holds ``r`` of the
table's ``R`` rows (``reltuples``, the planner's own estimate) and ``r ** 2 <= n * R`` (``n``:
the dense candidates, :data:`_DEPTH`). A vector index search filtered to one namespace reads
about ``n * R / r`` rows of the index before it has ``n`` of the namespace's; the sort reads
``r``, and is exact. So a user of a few thousand memories among many users is sorted (a 5k
namespace in a 100k table: the dense step 7.3 -> 4.5 ms, the retrieval 24.9 -> 17.8 ms p50,
``benchmarks/pg_tenants.py``), while a namespace that is most of its table keeps the index (a
10k namespace alone would read all 10k instead of ~1.7k). An unanalysed table (``reltuples``
unknown) keeps the index."""


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


_VALUES = (
    "-(m.embedding <#> q.v) AS rel, date_part('epoch', a.last_accessed_at) AS acc, "
    "date_part('epoch', m.created_at) AS created, m.importance AS imp, m.kind"
)
"""What scoring reads about a row (``m``: its memory, ``a``: its access row, ``q``: the query).
``date_part`` divides the exact microseconds in ``float8``: the same correctly rounded value as
``extract(epoch ...)::float8``, without ``extract``'s ``numeric`` arithmetic (~0.4 us a value)."""
_MEMORY = (
    "CROSS JOIN LATERAL (SELECT m.namespace, m.embedding, m.created_at, m.importance, m.kind "
    "FROM reflective_memories m WHERE m.seq = {key} OFFSET 0) m"
)
_ACCESS = (
    "CROSS JOIN LATERAL (SELECT a.last_accessed_at, a.prev_obs, a.next_obs "
    "FROM reflective_access a WHERE a.seq = {key} OFFSET 0) a"
)
# (each a primary-key lookup per row: OFFSET 0 keeps the planner from flattening the subquery
# and hashing the whole table instead when its estimates are off)


def _packed(lexical: bool) -> str:
    """The one result row: each column of ``rows`` packed into one value, then the BM25
    scores of ``lexall`` (see the docstring of :func:`candidates_sql`)."""
    lex = "(SELECT s FROM lexpack), (SELECT v FROM lexpack)" if lexical else "NULL, NULL"
    return (
        "SELECT string_agg(int8send(r.seq), ''::bytea), string_agg(boolsend(r.ok), ''::bytea), "
        "string_agg(float8send(r.rel), ''::bytea), string_agg(float8send(r.acc), ''::bytea), "
        "string_agg(float8send(r.created), ''::bytea), "
        "string_agg(float8send(r.imp), ''::bytea), array_agg(r.kind), "
        "string_agg(int8send(coalesce(r.prev, -1)), ''::bytea), "
        f"string_agg(int8send(coalesce(r.nxt, -1)), ''::bytea), {lex}\n"
        "FROM rows r"
    )


def candidates_sql(spec: CandidateQuery, flt: RetrievalFilter, params: dict[str, Any]) -> str:
    """The one statement returning a query's candidates and their neighbours, packed.

    Parameters it reads from ``params`` (filled in here for the filter): ``ns``, ``vec`` (the
    query vector as pgvector text), ``qterms``/``qtfs`` (the query's distinct index terms and
    their counts), and the limits of ``spec``.

    It returns one row (fetch it in binary): ``seq``, ``is_candidate``, ``relevance``,
    ``accessed``, ``created``, ``importance`` (each the rows' values concatenated in their
    binary wire form: big-endian ``int8``, one byte per ``bool``, big-endian ``float8``),
    ``kind`` (a ``text[]``), ``previous seq`` and ``next seq`` (``int8``, ``-1`` for none), then
    the key and BM25 score of every memory of the namespace matching a query term (packed
    alike; ``NULL`` without ``spec.lexical``), from which the client reads the rows' scores
    (0 for the others) and the namespace's best. The rows come in no particular order (all
    columns in the same one): the candidates, and the neighbour rows (observations next to a
    candidate that are not candidates themselves, or with ``exact`` any memory next to one).
    Packed, the rows cost the server a few bytes each and the client one ``numpy`` view per
    column instead of a Python object per value; and no join of the rows with the BM25 scores
    is left to the planner, which, before the tables are analysed, took a nested loop over
    both (~30 ms for 400 rows).

    Relevance is the inner product (``<#>``): vectors are unit vectors, and pgvector sums its
    products in single precision, as the SQLite backend's FAISS index does, so equal cosines
    stay equal (``1 - <=>`` divides by the norms in double precision and splits such ties).

    The exact statement reads the namespace once; the approximate one gathers the candidate
    keys from the indexes, then reads each row's memory and access row once by primary key.
    Both read each observation's neighbours from its links (``reflective_access``), and
    neither joins on estimates that stale statistics could turn into a quadratic plan.
    """
    where = _filter_sql(flt, params)
    min_rel = ""
    if flt.min_relevance is not None:
        params["min_rel"] = float(flt.min_relevance)
        min_rel = " AND -(m.embedding <#> q.v) >= %(min_rel)s"
    ctes = ["q AS MATERIALIZED (SELECT %(vec)s::vector AS v)"]
    if spec.lexical:
        ctes += _lexical_ctes(spec.terms, where)
    links = (
        "a.prev_obs AS prev, a.next_obs AS nxt"
        if spec.neighbors
        else "NULL::bigint AS prev, NULL::bigint AS nxt"
    )
    if spec.exact:
        ctes.append(
            f"base AS MATERIALIZED (SELECT m.seq, (true{where}{min_rel}) AS ok, {_VALUES}, "
            f"{links} FROM {RECORDS}, q WHERE m.namespace = %(ns)s)"
        )
        near = ""
        if spec.neighbors:
            near = (
                " OR b.seq IN (SELECT prev FROM base WHERE ok UNION SELECT nxt FROM base WHERE ok)"
            )
        ctes.append(f"rows AS (SELECT * FROM base b WHERE b.ok{near})")
        return "WITH " + ",\n".join(ctes) + "\n" + _packed(spec.lexical)
    params.update(
        n_dense=spec.dense, n_lex=spec.lexical_top, n_rec=spec.recent, n_imp=spec.important
    )
    # the nearest memories: by sorting the namespace's own rows when it is small against the
    # table, else from the vector index (see _DENSE_BY_SORT); one branch runs, the other's
    # one-time filter is false. They are the nearest the filter keeps. With a relevance
    # threshold they always come from the sort, filtered by it: the index's nearest rows,
    # filtered after, held fewer than k of the memories passing (k asked, fewer returned),
    # and the threshold inside the index scan read every list of the table (iterative_scan
    # goes on until it has n rows, and a useful threshold passes fewer: 3-4x slower at 110k
    # rows). The sort reads the namespace's rows, and is exact.
    dense_min_rel, by_sort = "", _DENSE_BY_SORT
    if flt.min_relevance is not None:
        dense_min_rel = " AND -(m.embedding <#> (SELECT v FROM q)) >= %(min_rel)s"
        by_sort = "by_sort AS MATERIALIZED (SELECT true AS s)"
    near_rows = (
        "SELECT m.seq, m.kind, m.embedding <=> (SELECT v FROM q) AS d "
        f"FROM reflective_memories m WHERE m.namespace = %(ns)s{where}{dense_min_rel} AND "
    )
    params["depth_from"] = DENSE_DEPTH_FROM
    ctes += [_DEPTH, by_sort]
    ctes.append(
        f"dense AS ((SELECT * FROM ({near_rows}(SELECT s FROM by_sort) OFFSET 0) x "
        "ORDER BY d LIMIT (SELECT n FROM depth)) "
        f"UNION ALL ({near_rows}NOT (SELECT s FROM by_sort) ORDER BY d "
        "LIMIT (SELECT n FROM depth)))"
    )
    pools = ["SELECT seq FROM dense"]
    if spec.lexical:
        # the best matches among the filter's (QueryScores.top_among): the namespace's best
        # may all fail a selective filter, which would leave it no lexical candidate
        ctes.append("lex AS (SELECT * FROM lexall WHERE ok ORDER BY r DESC, seq LIMIT %(n_lex)s)")
        pools.append("SELECT seq FROM lex")
    if spec.recent:
        if where:
            ctes.append(
                f"recent AS (SELECT m.seq FROM {RECORDS} "
                f"WHERE a.namespace = %(ns)s{where} "
                "ORDER BY a.last_accessed_at DESC LIMIT %(n_rec)s)"
            )
        else:  # the access table alone
            ctes.append(
                "recent AS (SELECT a.seq FROM reflective_access a WHERE a.namespace = %(ns)s "
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
        tops = ["(SELECT seq, kind = 'observation' AS obs FROM dense ORDER BY d LIMIT %(n_near)s)"]
        if spec.lexical:
            tops.append("(SELECT seq, obs FROM lex ORDER BY r DESC, seq LIMIT %(n_near)s)")
        ctes.append(
            f"top_rel AS (SELECT DISTINCT seq FROM ({' UNION ALL '.join(tops)}) t WHERE t.obs)"
        )
        ctes.append(
            "top_links AS (SELECT a.prev_obs AS prev, a.next_obs AS nxt "
            f"FROM top_rel t {_ACCESS.format(key='t.seq')})"
        )
        pools.append("SELECT prev FROM top_links UNION SELECT nxt FROM top_links")
    ctes.append(f"pool AS ({' UNION '.join(pools)})")
    ctes.append(
        f"cand AS MATERIALIZED (SELECT p.seq, true AS ok, {_VALUES}, {links} "
        f"FROM pool p CROSS JOIN q {_MEMORY.format(key='p.seq')} {_ACCESS.format(key='p.seq')} "
        f"WHERE m.namespace = %(ns)s{where}{min_rel})"
    )
    if spec.neighbors:
        ctes.append(
            "near AS (SELECT x.s FROM (SELECT prev AS s FROM cand UNION SELECT nxt FROM cand) x "
            "WHERE x.s IS NOT NULL AND NOT EXISTS (SELECT 1 FROM cand c WHERE c.seq = x.s))"
        )
        ctes.append(
            "rows AS (SELECT * FROM cand UNION ALL "
            f"SELECT n.s, false, {_VALUES}, NULL::bigint, NULL::bigint "
            f"FROM near n CROSS JOIN q {_MEMORY.format(key='n.s')} "
            f"{_ACCESS.format(key='n.s')})"
        )
    else:
        ctes.append("rows AS (SELECT * FROM cand)")
    return "WITH " + ",\n".join(ctes) + "\n" + _packed(spec.lexical)


# -- writes and reads (the backend's other statements) ----------------------------------------

RESET = """
INSERT INTO reflective_counters AS c
    (namespace, importance_sum, adds, last_reflection_at, last_reflection_seq,
     reflection_generation)
VALUES (%(ns)s, 0, 0, %(at)s,
        (SELECT coalesce(max(seq), 0) FROM reflective_memories WHERE namespace = %(ns)s), 1)
ON CONFLICT (namespace) DO UPDATE SET
    importance_sum = greatest(c.importance_sum - %(imp)s, 0),
    adds = greatest(c.adds - %(adds)s, 0),
    last_reflection_at = EXCLUDED.last_reflection_at,
    last_reflection_seq = EXCLUDED.last_reflection_seq,
    reflection_generation = c.reflection_generation + 1
WHERE %(gen)s::bigint IS NULL OR c.reflection_generation = %(gen)s::bigint
RETURNING c.reflection_generation
"""
"""Reset a namespace's counter by what a reflection consumed; with a generation (``gen``) only
if it is still the row's: no row back means another reset came first (the row is locked by the
statement, or earlier by the caller's write, so nothing can come between the check and the
update). A row created here is the first reset: generation 1."""
PURGE_COUNTER = (
    "UPDATE reflective_counters SET importance_sum = 0, adds = 0, last_reflection_at = NULL, "
    "last_reflection_seq = 0, lex_docs = 0, lex_total = 0, ctx_total = 0 WHERE namespace = %s"
)
"""A purge zeroes the namespace's counter row instead of deleting it: its
``reflection_generation`` must never repeat (see :data:`RESET`)."""
ADD = """
INSERT INTO reflective_counters AS c (namespace, importance_sum, adds)
VALUES (%(ns)s, %(imp)s, %(adds)s)
ON CONFLICT (namespace) DO UPDATE SET importance_sum = c.importance_sum + EXCLUDED.importance_sum,
    adds = c.adds + EXCLUDED.adds
"""


def _touch(ns: str, keys: str, when: str, returning: str, joined: str, where: str = "") -> str:
    """The touch statement with these placeholders for its parameters, returning ``returning``
    (``joined``: more tables and a comma, e.g. the memories' when it returns the records, with
    ``where`` joining them)."""
    return (
        "WITH lazy AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)), "
        "clock AS MATERIALIZED (INSERT INTO reflective_touches AS c (namespace, clock) "
        f"VALUES ({ns}, 1) ON CONFLICT (namespace) DO UPDATE SET clock = c.clock + 1 "
        "RETURNING c.clock), "
        # the rows locked in key order, after the clock (the one-time filter reads it first): as
        # a delete locks its rows (writes.delete_memories), so neither waits for the other in a
        # cycle
        "locked AS MATERIALIZED (SELECT a.seq FROM reflective_access a "
        f"WHERE (SELECT clock FROM clock) > 0 AND a.namespace = {ns} AND a.seq = ANY({keys}) "
        "ORDER BY a.seq FOR UPDATE) "
        f"UPDATE reflective_access a SET last_accessed_at = {when}, "
        f"touched = (SELECT clock FROM clock) FROM locked l, {joined}lazy "
        f"WHERE a.seq = l.seq {where}"
        f"RETURNING {returning}"
    )


TOUCH = _touch(
    "%(ns)s",
    "%(keys)s",
    "%(when)s",
    f"a.touched, {RECORD_COLUMNS}",
    "reflective_memories m, ",
    "AND m.seq = a.seq ",
)
"""New access times, returning the records: one statement, its own transaction (autocommit),
committed without waiting for the WAL flush (``synchronous_commit`` off for this transaction
only, set by the statement itself, so a touch costs one round trip instead of four). It counts
the namespace's touch clock (``reflective_touches``, schema version 7) and stamps the rows with
it (so the row trigger for other writers' touches does not run): the clock row's lock, held for
the touch's short transaction, makes a namespace's touches take turns, so the clock follows
their commit order (~0.04 ms more per touch here); then it locks the rows in key order, as a
delete does. Each row returned is the clock, then the record (:data:`RECORD_COLUMNS`): a local
index applies its own touch from them (``LocalIndex.own_touch``)."""

TOUCH_CLOCK = _touch(
    "$1",
    "$2::int8[]",
    "g.at",
    "a.touched",
    "unnest($2::int8[], $3::timestamptz[]) AS g (seq, at), ",
    "AND g.seq = a.seq ",
).encode()
""":data:`TOUCH` returning only the clock, for the touches whose records the local index
returned (``touches.py``), each memory with its own access time: sent with
``sent.send_statement`` (``$1`` the namespace, ``$2`` the keys as an ``int8[]`` literal, ``$3``
their times, in the same order, as a ``timestamptz[]`` literal of ISO times; no key twice)."""

REMOVALS_KEPT = 1000
"""Removals of a namespace whose keys ``reflective_removed`` keeps: the number written into
schema version 7's trigger ``reflective_log_removals`` (change both together)."""


def recent_sql(
    namespace: str,
    *,
    n: int | None,
    kinds: Sequence[str] | None,
    since_last_reflection: bool,
    by_importance: bool,
) -> tuple[str, dict[str, Any]]:
    """``PostgresBackend.recent``'s statement and parameters: the newest ``n`` records of
    ``namespace`` (newest first), or its most important (``by_importance``), optionally of
    some kinds or after its last reflection."""
    sql = f"SELECT {RECORD_COLUMNS} FROM {RECORDS} WHERE m.namespace = %(ns)s"
    params: dict[str, Any] = {"ns": namespace}
    if kinds is not None:
        sql += " AND m.kind = ANY(%(kinds)s::text[])"
        params["kinds"] = list(kinds)
    if since_last_reflection:
        sql += (
            " AND m.seq > coalesce((SELECT last_reflection_seq FROM reflective_counters "
            "WHERE namespace = %(ns)s), 0)"
        )
    order = "m.importance DESC, m.seq DESC" if by_importance else "m.seq DESC"
    sql += f" ORDER BY {order}"
    if n is not None:
        sql += " LIMIT %(n)s"
        params["n"] = max(int(n), 0)
    return sql, params


def pending_sql(namespace: str | None, *, limit: int | None, newest: bool) -> tuple[str, list[Any]]:
    """``PostgresBackend.pending``'s statement and parameters: the queued memories of
    ``namespace`` (of all when ``None``) in queue order, or the newest ``limit`` of them newest
    first (``newest``), as :func:`~langchain_reflective.backends.postgres.rows.pending_of`
    reads them."""
    sql = (
        "SELECT id, namespace, text, kind, created_at, importance, metadata::text "
        "FROM reflective_pending"
    )  # (metadata as text: see RECORD_COLUMNS)
    params: list[Any] = []
    if namespace is not None:
        sql += " WHERE namespace = %s"
        params.append(namespace)
    sql += " ORDER BY pseq DESC" if newest else " ORDER BY pseq"
    if limit is not None:
        sql += " LIMIT %s"
        params.append(int(limit))
    return sql, params


RELINK = """
UPDATE reflective_access a SET
    prev_obs = (SELECT max(p.seq) FROM reflective_memories p WHERE p.namespace = a.namespace
                AND p.kind = 'observation' AND p.seq < a.seq),
    next_obs = (SELECT min(n.seq) FROM reflective_memories n WHERE n.namespace = a.namespace
                AND n.kind = 'observation' AND n.seq > a.seq)
WHERE a.namespace = %s AND a.seq = ANY(%s)
"""

RECONTEXT = """
WITH s AS (SELECT a.seq, a.prev_obs FROM reflective_access a WHERE a.seq = ANY(%(seqs)s)),
parts AS (
    SELECT s.seq, u.term, u.tf, u.pos FROM s JOIN reflective_terms p ON p.seq = s.prev_obs,
        unnest(p.lex_terms, p.lex_tfs) WITH ORDINALITY AS u (term, tf, pos)
    UNION ALL
    SELECT s.seq, u.term, u.tf, u.pos + 2147483648 FROM s JOIN reflective_terms o ON o.seq = s.seq,
        unnest(o.lex_terms, o.lex_tfs) WITH ORDINALITY AS u (term, tf, pos)
),
summed AS (SELECT seq, term, sum(tf)::int4 AS tf, min(pos) AS pos FROM parts GROUP BY seq, term),
docs AS (
    SELECT s.seq,
        coalesce(array_agg(m.term ORDER BY m.pos) FILTER (WHERE m.term IS NOT NULL),
                 '{}'::text[]) AS terms,
        coalesce(array_agg(m.tf ORDER BY m.pos) FILTER (WHERE m.term IS NOT NULL),
                 '{}'::int4[]) AS tfs,
        coalesce(sum(m.tf), 0)::int4 AS len
    FROM s LEFT JOIN summed m ON m.seq = s.seq GROUP BY s.seq
),
old AS (SELECT t.seq, t.ctx_len FROM reflective_terms t WHERE t.seq = ANY(%(seqs)s)),
changed AS (
    UPDATE reflective_terms t SET ctx_terms = d.terms, ctx_tfs = d.tfs, ctx_len = d.len
    FROM docs d JOIN old o ON o.seq = d.seq WHERE t.seq = d.seq
    RETURNING t.ctx_len - o.ctx_len AS grown
)
SELECT coalesce(sum(grown), 0)::int8 FROM changed
"""
"""The lexical context (``ctx_*``) of the observations ``seqs`` after :data:`RELINK`: each
one's own terms plus those of its previous observation now, as ``writes.write_memories``
computes them at insert (``Counter(previous) + Counter(own)``: the previous one's terms
first, in their order, then its own new ones); returns how much their ``ctx_len`` grew in all
(for the namespace's ``ctx_total``). A delete runs it for the observations whose previous one
it deleted, so their documents become what they would be had it never been written."""


# -- the local index (``local_index.py``): what changed in a namespace, and its rows ------------


def _head(ns: str) -> str:
    """The namespace's newest key, removal count, live memories and touch clock, with ``ns``
    the namespace's parameter."""
    return (
        f"(SELECT max(m.seq) FROM reflective_memories m WHERE m.namespace = {ns}) AS newest, "
        "c.removals, c.lex_docs, (SELECT t.clock FROM reflective_touches t "
        f"WHERE t.namespace = {ns}) AS touches"
    )


LOCAL_HEAD = (
    f"SELECT {_head('%(ns)s')} FROM (SELECT 1) AS one "
    "LEFT JOIN reflective_counters c ON c.namespace = %(ns)s"
)
"""A namespace's newest key, removal count, live memories and touch clock (each ``NULL`` for
a namespace never written): where a load of the namespace starts from."""

LOCAL_CHANGES = (
    f"SELECT {_head('$1')}, x.seqs, x.acc, r.removal, r.seqs FROM (SELECT 1) AS one "
    "LEFT JOIN reflective_counters c ON c.namespace = $1, "
    "(SELECT string_agg(int8send(a.seq), ''::bytea) AS seqs, "
    "string_agg(float8send(date_part('epoch', a.last_accessed_at)), ''::bytea) AS acc "
    "FROM reflective_access a WHERE a.namespace = $1 AND a.touched > $2 "
    "AND a.touched > 0) AS x, "
    "(SELECT string_agg(int8send(d.removal), ''::bytea) AS removal, "
    "string_agg(int8send(d.seq), ''::bytea) AS seqs "
    "FROM reflective_removed d WHERE d.namespace = $1 AND d.removal > $3) AS r"
).encode()
""":data:`LOCAL_HEAD`, then what changed since a local index last looked: the keys and access
times (packed) of the memories touched after clock ``$2``, and the removal numbers and keys
(packed) of the removals after ``$3`` (``$1``: the namespace). One row, in one snapshot; with
nothing changed, three index probes and two empty index scans. Sent with
``sent.send_statement`` (libpq's own parameters, hence ``$n`` and bytes), its row read in
binary."""


def local_rows_sql(terms: str) -> str:
    """The next ``limit`` memories of a namespace after key ``after``, packed into one row
    (fetch it in binary): how many and the newest key, then each column concatenated --
    keys (``int8``), creation and access times and importance (``float8`` seconds and
    values), kinds (``text[]``), vectors (``vector_send``), and the BM25 terms and counts of
    the ``terms`` columns (``lex`` or ``ctx``) as lines of space-separated values. The access
    and term rows are read by primary key (``OFFSET 0``: no hash join reading the tables whole
    to catch up on a few memories)."""
    return (
        "SELECT count(*), max(s.seq), string_agg(int8send(s.seq), ''::bytea), "
        "string_agg(float8send(date_part('epoch', s.created_at)), ''::bytea), "
        "string_agg(float8send(date_part('epoch', a.last_accessed_at)), ''::bytea), "
        "string_agg(float8send(s.importance), ''::bytea), array_agg(s.kind), "
        "string_agg(vector_send(s.embedding), ''::bytea), "
        "string_agg(array_to_string(t.terms, ' '), E'\\n'), "
        "string_agg(array_to_string(t.tfs, ' '), E'\\n') "
        "FROM (SELECT m.seq, m.created_at, m.importance, m.kind, m.embedding "
        "FROM reflective_memories m WHERE m.namespace = %(ns)s AND m.seq > %(after)s "
        "ORDER BY m.seq LIMIT %(limit)s) AS s "
        "CROSS JOIN LATERAL (SELECT a.last_accessed_at FROM reflective_access a "
        "WHERE a.seq = s.seq OFFSET 0) AS a "
        f"CROSS JOIN LATERAL (SELECT t.{terms}_terms AS terms, t.{terms}_tfs AS tfs "
        "FROM reflective_terms t WHERE t.seq = s.seq OFFSET 0) AS t"
    )
