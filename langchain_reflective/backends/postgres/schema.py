"""The Postgres schema: tables, indexes and forward-only migrations run by ``setup()``.

Every object is prefixed ``reflective_`` so the tables can share a database (and a schema)
with an application's own. Migrations are numbered from 1 and only ever appended: a database
at version ``v`` runs migrations ``v + 1 ..`` in one transaction, under a transaction-level
advisory lock, so several processes calling ``setup()`` at once apply each migration once.

The vector column is declared without a dimension until the first write binds one
(:func:`bind_sql`): the dimension is a property of the embedding model, which the schema cannot
know in advance; binding turns the column into ``vector(d)`` (and, for an HNSW database,
builds the index; an IVFFlat one is built once there are rows to train it on: see
``vector_index.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from langchain_reflective.backends.postgres.timeouts import unbounded_transaction
from langchain_reflective.errors import SchemaVersionError

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "APP_LOCK",
    "INDEX_LOCK",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SETUP_LOCK",
    "bind_meta",
    "bind_sql",
    "migrate",
    "newer_schema_error",
]

APP_LOCK = 0x52464C54
"""First key of every advisory lock this package takes ("RFLT"); the second key says which:
``(APP_LOCK, hashtext(namespace))`` is a namespace's reflection lock; :data:`SETUP_LOCK` guards
migrations and binding."""

SETUP_LOCK = (APP_LOCK + 1, 0)
"""The advisory lock held (transaction-level) while migrating or binding the embeddings."""

INDEX_LOCK = (APP_LOCK + 1, 1)
"""The advisory lock held (session-level) while building or rebuilding the vector index."""

_V1 = """
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE reflective_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE reflective_memories (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id text NOT NULL UNIQUE,
    namespace text NOT NULL,
    text text NOT NULL,
    kind text NOT NULL,
    created_at timestamptz NOT NULL,
    importance double precision NOT NULL,
    importance_source text NOT NULL,
    evidence text[] NOT NULL DEFAULT '{}',
    depth integer NOT NULL DEFAULT 0,
    metadata jsonb NOT NULL DEFAULT '{}',
    embedding vector NOT NULL,
    lex_terms text[] NOT NULL DEFAULT '{}',
    lex_tfs integer[] NOT NULL DEFAULT '{}',
    lex_len integer NOT NULL DEFAULT 0,
    ctx_terms text[] NOT NULL DEFAULT '{}',
    ctx_tfs integer[] NOT NULL DEFAULT '{}',
    ctx_len integer NOT NULL DEFAULT 0
);
CREATE INDEX reflective_memories_ns_seq ON reflective_memories (namespace, seq);
CREATE INDEX reflective_memories_ns_observations
    ON reflective_memories (namespace, seq) WHERE kind = 'observation';
CREATE INDEX reflective_memories_ns_importance
    ON reflective_memories (namespace, importance DESC, seq DESC);
CREATE INDEX reflective_memories_lex_terms ON reflective_memories USING gin (lex_terms);
CREATE INDEX reflective_memories_ctx_terms ON reflective_memories USING gin (ctx_terms);

CREATE TABLE reflective_access (
    seq bigint PRIMARY KEY REFERENCES reflective_memories (seq) ON DELETE CASCADE,
    namespace text NOT NULL,
    last_accessed_at timestamptz NOT NULL,
    prev_obs bigint,
    next_obs bigint
);
CREATE INDEX reflective_access_ns_at ON reflective_access (namespace, last_accessed_at DESC);

CREATE TABLE reflective_pending (
    pseq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id text NOT NULL UNIQUE,
    namespace text NOT NULL,
    text text NOT NULL,
    kind text NOT NULL,
    created_at timestamptz NOT NULL,
    importance double precision,
    metadata jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX reflective_pending_ns_pseq ON reflective_pending (namespace, pseq);

CREATE TABLE reflective_counters (
    namespace text PRIMARY KEY,
    importance_sum double precision NOT NULL DEFAULT 0,
    adds bigint NOT NULL DEFAULT 0,
    last_reflection_at timestamptz,
    last_reflection_seq bigint NOT NULL DEFAULT 0,
    lex_docs bigint NOT NULL DEFAULT 0,
    lex_total bigint NOT NULL DEFAULT 0,
    ctx_total bigint NOT NULL DEFAULT 0
);
"""
"""Version 1.

* ``reflective_memories``: one row per memory (the term columns moved to ``reflective_terms``
  in version 4). ``seq`` (an identity, never reused) is the backend's key and the insertion
  order; ``id`` was unique across namespaces (within its namespace since version 8, as in
  every backend). The lexical half is BM25 computed in SQL: ``lex_terms`` holds the memory's
  distinct index terms (lowercased words of two or more characters, English stopwords
  dropped, Snowball-stemmed -- the SQLite backend's tokenizer, so both rank alike),
  ``lex_tfs`` their counts and ``lex_len`` the number of terms; a GIN index on ``lex_terms``
  finds the memories that share a term with the query. ``ctx_*`` are the same for the
  memory's text with the previous observation's before it (for an observation; a copy of
  ``lex_*`` otherwise): what the lexical half reads when ``ScoringConfig.lexical_context``,
  as the SQLite backend indexes it. Both are kept, so the setting can change at any time.
  ``embedding`` gets an HNSW index (cosine) once bound.
* ``reflective_access``: each memory's ``last_accessed_at``, apart from the memory: every
  retrieval updates it, and an update of a row of ``reflective_memories`` would add entries to
  all of that table's indexes (the HNSW graph included), where this narrow table has two.
  ``prev_obs``/``next_obs`` link an observation to the previous and next live observation of
  its namespace (the neighbour context of scoring): kept by every write and delete, which hold
  the namespace's counter row, so a retrieval reads them instead of searching.
* ``reflective_pending``: the outbox of memories queued before they are embedded.
* ``reflective_counters``: the reflection counter of each namespace; a write adds to it in the
  same transaction (one row upsert, so concurrent writers serialise on the row and the sum is
  exact). ``last_reflection_seq`` is the newest ``seq`` of the namespace when it was reset.
  ``lex_docs``, ``lex_total`` and ``ctx_total`` are the namespace's number of memories and
  sums of their ``lex_len`` and ``ctx_len`` (BM25's ``N`` and average length), kept by every
  write and delete.
* ``reflective_meta``: the embedding model's identity and dimension.
"""

_V2 = """
ALTER TABLE reflective_memories SET (toast_tuple_target = 8160);
"""
"""Version 2: a memory's row is stored as it is (no compression, nothing moved out of line)
up to 8,160 bytes, Postgres' largest setting, instead of the default ~2 KB. A memory is its
text, a 384-1536-d vector (1.5-6 KB) and its term arrays: with the default, nearly every row
crossed ~2 KB, so Postgres compressed its term arrays (each BM25 term lookup then
decompressed two arrays: ~1 microsecond per memory holding a query term) and, with a longer
text or vector, moved the vector out of line (each cosine of a candidate then read the TOAST
table). Only rows written from now on are stored this way (rows already compressed stay
as they are until they are rewritten)."""

_V3 = """
INSERT INTO reflective_meta (key, value)
SELECT k, v FROM (VALUES ('vector_index', 'hnsw'),
                         ('vector_index_name', 'reflective_memories_embedding_hnsw'),
                         ('vector_index_rows', '0'), ('vector_index_lists', '0')) AS x(k, v)
WHERE to_regclass('reflective_memories_embedding_hnsw') IS NOT NULL
ON CONFLICT (key) DO NOTHING;
"""
"""Version 3: the vector index became a choice (``vector_index.py``) recorded in
``reflective_meta`` (``vector_index``, ``vector_index_name``, ``vector_index_rows``,
``vector_index_lists``). A database whose embeddings were bound under versions 1-2 has the HNSW
index and keeps it (recorded here); one not yet bound gets the backend's choice when bound."""

_V4 = """
CREATE TABLE reflective_terms (
    seq bigint PRIMARY KEY REFERENCES reflective_memories (seq) ON DELETE CASCADE,
    namespace text NOT NULL,
    kind text NOT NULL,
    created_at timestamptz NOT NULL,
    lex_terms text[] NOT NULL,
    lex_tfs integer[] NOT NULL,
    lex_len integer NOT NULL,
    ctx_terms text[] NOT NULL,
    ctx_tfs integer[] NOT NULL,
    ctx_len integer NOT NULL
);
INSERT INTO reflective_terms
SELECT seq, namespace, kind, created_at, lex_terms, lex_tfs, lex_len, ctx_terms, ctx_tfs, ctx_len
FROM reflective_memories;
CREATE INDEX reflective_terms_lex ON reflective_terms USING gin (lex_terms);
CREATE INDEX reflective_terms_ctx ON reflective_terms USING gin (ctx_terms);
DROP INDEX reflective_memories_lex_terms;
DROP INDEX reflective_memories_ctx_terms;
ALTER TABLE reflective_memories
    DROP COLUMN lex_terms, DROP COLUMN lex_tfs, DROP COLUMN lex_len,
    DROP COLUMN ctx_terms, DROP COLUMN ctx_tfs, DROP COLUMN ctx_len;
"""
"""Version 4: the lexical half moves to its own narrow table, ``reflective_terms`` (one row per
memory: its term columns as version 1 describes them, plus the namespace, kind and creation time
a filter reads), with the two GIN indexes. The lexical half reads a row for every memory holding
a query term (~20k at 1M memories): in ``reflective_memories`` each sat beside a 1.5-6 KB
vector, so those reads visited ~13k pages of a table larger than ``shared_buffers``; this table
is ~1/5 of the size (at 1M the term lookups took 78 -> 29 ms with the memories uncached, 41 ->
35 ms warm; ``docs/benchmarks.md``). Existing rows are copied over in the migration; the dropped
columns' space in ``reflective_memories`` is reused as rows are rewritten (``VACUUM FULL``
reclaims it at once). The migration holds ``reflective_memories``' table lock while it copies:
writes and retrievals wait for it (23 s at 1M memories here)."""

_V5 = """
ALTER INDEX reflective_terms_lex SET (gin_pending_list_limit = 256);
ALTER INDEX reflective_terms_ctx SET (gin_pending_list_limit = 256);
SELECT gin_clean_pending_list('reflective_terms_lex'),
       gin_clean_pending_list('reflective_terms_ctx');
"""
"""Version 5: the GIN indexes of ``reflective_terms`` keep at most 256 kB of new entries in
their *pending list* (Postgres' default is 4 MB), and the migration moves what is pending into
the index proper. A GIN index takes new rows into an unsorted pending list, merged into the index
only when the list outgrows its limit or (auto)vacuum runs; every lexical search reads the
whole list for each query term. With 4 MB, the last ~10k memories written sat there, and a
retrieval right after a burst of writes took 27.5 ms instead of 13.0 at 10k memories (37.3
instead of 24.0 at 100k); 256 kB bounds the list to under ~1k entries for ~11% fewer batched
adds per second (``fastupdate = off``, no list at all, cost 25-30%;
``benchmarks/pg_gin_pending.py``, ``docs/benchmarks.md``)."""

_V6 = """
ALTER TABLE reflective_counters
    ADD COLUMN IF NOT EXISTS reflection_generation bigint NOT NULL DEFAULT 0;
"""
"""Version 6: ``reflective_counters.reflection_generation`` counts each namespace's counter
resets (0 in every existing row: resets before the upgrade were not counted). It is the
counter's version: a reflection reads it with the counter and its reset is applied only if it is
unchanged (``CounterUpdate.consumed``), so of two reflections of a namespace that ran at once
-- in two processes or on two machines, without the reflection lock -- only the first stores
anything. A purge keeps it, so a version never repeats. Adding a column with a constant default
rewrites nothing (Postgres 11+), so the migration is instant."""

_V7 = """
ALTER TABLE reflective_counters ADD COLUMN IF NOT EXISTS removals bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS reflective_removed (
    namespace text NOT NULL,
    removal bigint NOT NULL,
    seq bigint NOT NULL,
    PRIMARY KEY (namespace, removal, seq)
);
CREATE TABLE IF NOT EXISTS reflective_touches (
    namespace text PRIMARY KEY,
    clock bigint NOT NULL
);
ALTER TABLE reflective_access ADD COLUMN IF NOT EXISTS touched bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS reflective_access_ns_touched ON reflective_access (namespace, touched)
    WHERE touched > 0;

CREATE OR REPLACE FUNCTION reflective_log_removals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH spaces AS (SELECT DISTINCT namespace FROM gone),
    counted AS MATERIALIZED (
        INSERT INTO reflective_counters AS c (namespace, removals)
        SELECT namespace, 1 FROM spaces
        ON CONFLICT (namespace) DO UPDATE SET removals = c.removals + 1
        RETURNING c.namespace, c.removals,
            NOT EXISTS (SELECT 1 FROM reflective_memories m
                        WHERE m.namespace = c.namespace) AS emptied),
    logged AS (
        INSERT INTO reflective_removed (namespace, removal, seq)
        SELECT c.namespace, c.removals, g.seq
        FROM counted c JOIN gone g ON g.namespace = c.namespace WHERE NOT c.emptied
        UNION ALL
        SELECT c.namespace, c.removals, 0 FROM counted c WHERE c.emptied)
    DELETE FROM reflective_removed d USING counted c
    WHERE d.namespace = c.namespace AND d.removal <= c.removals - 1000;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS reflective_memories_removed ON reflective_memories;
CREATE TRIGGER reflective_memories_removed AFTER DELETE ON reflective_memories
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION reflective_log_removals();

CREATE OR REPLACE FUNCTION reflective_stamp_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO reflective_touches AS c (namespace, clock) VALUES (NEW.namespace, 1)
    ON CONFLICT (namespace) DO UPDATE SET clock = c.clock + 1
    RETURNING c.clock INTO NEW.touched;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS reflective_access_touched ON reflective_access;
CREATE TRIGGER reflective_access_touched BEFORE UPDATE OF last_accessed_at
    ON reflective_access FOR EACH ROW WHEN (NEW.touched = OLD.touched)
    EXECUTE FUNCTION reflective_stamp_touch();
"""
"""Version 7: what changed in a namespace can be asked for, so a process keeping the namespace
in memory (``PostgresBackend(local_index=True)``, ``local_index.py``) catches up with one cheap
statement instead of reloading it. Memories added since are the keys above the newest it holds
(a namespace's writers take keys in commit order). Removals: a trigger on every statement that
deletes memories (this package's deletes, replaces and purges, an older package's, or one typed
by hand) counts one more ``reflective_counters.removals`` of each namespace it deleted from
(taking the namespace's counter row lock until the commit, so the count is in commit order) and
lists the keys in ``reflective_removed`` under that number, or the key 0 when it left the
namespace empty (a purge); the entries of all but the newest ``REMOVALS_KEPT`` (1,000) removals
are dropped as new ones come, and a process that fell further behind loads the namespace again.
Touches: ``reflective_touches.clock`` counts each namespace's touches in commit order (a touch
holds the clock row's lock until its commit) and ``reflective_access.touched`` holds the clock
that last touched a memory (indexed where it is set). This package's touch counts the clock once
and stamps its rows itself (``queries.TOUCH``); for any other update of an access time (an older
package, by hand) a row trigger counts and stamps it. Existing rows start at 0: nothing to catch
up on. Building the index reads ``reflective_access`` once (the whole migration: ~1 s at 100k
memories here)."""

_V8 = """
DO $$
DECLARE c record;
BEGIN
    FOR c IN
        SELECT con.conrelid::regclass AS tbl, con.conname
        FROM pg_constraint con
        JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1]
        WHERE con.contype = 'u' AND cardinality(con.conkey) = 1 AND a.attname = 'id'
          AND con.conrelid IN ('reflective_memories'::regclass, 'reflective_pending'::regclass)
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.tbl, c.conname);
    END LOOP;
END
$$;
ALTER TABLE reflective_memories
    DROP CONSTRAINT IF EXISTS reflective_memories_namespace_id_key,
    ADD CONSTRAINT reflective_memories_namespace_id_key UNIQUE (namespace, id);
ALTER TABLE reflective_pending
    DROP CONSTRAINT IF EXISTS reflective_pending_namespace_id_key,
    ADD CONSTRAINT reflective_pending_namespace_id_key UNIQUE (namespace, id);
"""
"""Version 8: an id is unique within its namespace, no longer in the whole database: one
namespace's ids neither reveal nor block another's. Ids derived from a namespace and a name (a
LangGraph store item's, a thinking turn's) can be computed by anyone who knows both, so with
database-wide ids one user could learn whether another's item existed by storing its id and
reading the error, and could take the id first. The unique constraint on ``id`` alone is found
by its column, whatever its name. The new unique index also serves the lookups by
namespace and id. Building it reads the table once, holding its lock meanwhile (writes and
retrievals wait): 0.5 s at 100k memories, 22 s at 1M here."""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8)
"""Forward-only migrations; ``MIGRATIONS[i]`` takes a database from version ``i`` to ``i + 1``."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The version this code writes."""


def bind_sql(dimension: int) -> str:
    """DDL that gives the vector column its dimension (the index: ``vector_index.py``)."""
    d = int(dimension)
    return f"ALTER TABLE reflective_memories ALTER COLUMN embedding TYPE vector({d});"


def bind_meta(
    conn: psycopg.Connection[Any], model: str, dimension: int, index: Callable[[Any], None]
) -> dict[str, str]:
    """The database's embedding identity (``reflective_meta``: ``dimension`` and
    ``embedding_model``), bound to ``model`` and ``dimension`` first if it has none: in the
    caller's transaction, under the setup lock, the vector column gets its dimension
    (:func:`bind_sql`) and ``index(conn)`` records or builds the vector index."""
    unbounded_transaction(conn)  # (waits as long as another process's setup holds the lock)
    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", SETUP_LOCK)
    rows = dict(conn.execute("SELECT key, value FROM reflective_meta").fetchall())
    if "dimension" not in rows:
        conn.execute(bind_sql(dimension))
        index(conn)
        conn.execute(
            "INSERT INTO reflective_meta (key, value) VALUES "
            "('dimension', %s), ('embedding_model', %s)",
            (str(int(dimension)), model),
        )
        rows = {"dimension": str(int(dimension)), "embedding_model": model}
    return rows


def newer_schema_error(version: int, detail: str = "") -> SchemaVersionError:
    """The error for a database at ``version``, set up by a newer version of this package."""
    return SchemaVersionError(
        f"the database is at schema version {version}, set up by a newer version of "
        f"langchain-reflective (this one knows up to {SCHEMA_VERSION})"
        f"{': ' + detail if detail else ''}. Upgrade the package."
    )


def _version(conn: psycopg.Connection[Any]) -> int:
    """The database's schema version (0 before setup), refused when newer than this code's."""
    from langchain_reflective._llm import run_sync
    from langchain_reflective.backends.postgres.failures import read_version

    current = run_sync(read_version(conn))
    if current > SCHEMA_VERSION:
        raise newer_schema_error(current)
    return current


def migrate(conn: psycopg.Connection[Any]) -> None:
    """Bring the database to :data:`SCHEMA_VERSION` in the caller's transaction: under the
    setup lock, each missing migration once, in order.

    Raises:
        SchemaVersionError: the database is at a newer version.
    """
    # up to date: no DDL at all, so a role that may only read and write the tables (an
    # administrator set them up) can call setup() at start-up too (CREATE TABLE IF NOT EXISTS
    # needs the CREATE privilege even when the table exists)
    if _version(conn) == SCHEMA_VERSION:
        return
    unbounded_transaction(conn)  # (a migration of a large table takes its time)
    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", SETUP_LOCK)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS reflective_schema_version ("
        "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    current = _version(conn)  # (again, under the lock: another process may have migrated)
    for version in range(current + 1, SCHEMA_VERSION + 1):
        conn.execute(MIGRATIONS[version - 1])
        conn.execute("INSERT INTO reflective_schema_version (version) VALUES (%s)", (version,))
