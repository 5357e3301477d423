"""The memories table's vector index: which kind, when to (re)build it, how wide to search it.

Two kinds (``VectorIndexSettings.kind``):

* ``"ivfflat"`` (the default for new databases): pgvector's IVFFlat, trained on the data. An
  insert only finds its nearest list centre and appends, so adds stay cheap (pgvector's HNSW
  insert costs ~2-3 ms per 384-d row here, more than everything else a write does). The table
  has no vector index until it holds ``min_rows`` memories (an exact scan of that few is
  cheap); then one is built with ``lists = sqrt(rows)``, and rebuilt whenever the table has
  grown ``growth`` times since the last training (the centres of a small sample go stale as
  data arrives, as the SQLite backend's IVF retrains). A rebuild is ``CREATE INDEX
  CONCURRENTLY`` of a new index, then ``DROP INDEX CONCURRENTLY`` of the old one, under a
  session advisory lock (:data:`~.schema.INDEX_LOCK`) so one process builds at a time; adds and
  retrievals carry on meanwhile (the old index answers until the new one is valid).
* ``"hnsw"``: pgvector's HNSW, built when the embeddings are bound; nothing to retrain, but
  every insert pays for the graph. Databases set up before the index was a choice keep it.

The database records its kind, the current index's name, the rows it was trained on and its
lists in ``reflective_meta``; every process reads them from there.

What the index holds depends on the vectors' dimension (:func:`indexed`): pgvector indexes
``vector`` columns of at most 2,000 dimensions, so up to 2,000 it indexes the column itself; up
to 4,000 (OpenAI's ``text-embedding-3-large`` has 3,072) it indexes each vector cast to
``halfvec`` (16-bit floats), which only orders the dense candidates: the statement gathering
them must order them by the same expression (:func:`dense_distance`, else the index is not
used), while every score is still computed from the stored ``vector``; above 4,000 (or 2,000
with a pgvector older than 0.7, which has no ``halfvec``) there is no vector index at all and
the dense candidates come from exact scans (``PostgresBackend.reindex`` builds none either).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import psycopg

from langchain_reflective.backends.postgres.conninfo import redacted
from langchain_reflective.backends.postgres.failures import storage_error
from langchain_reflective.backends.postgres.schema import INDEX_LOCK
from langchain_reflective.backends.postgres.timeouts import session_setting, unbounded

if TYPE_CHECKING:
    from langchain_reflective.backends.postgres.connection import Pools

__all__ = [
    "HALFVEC_INDEX_MAX_DIMENSIONS",
    "VECTOR_INDEX_MAX_DIMENSIONS",
    "IndexKind",
    "IndexState",
    "VectorIndex",
    "VectorIndexSettings",
    "build_index",
    "dense_distance",
    "indexed",
    "read_state",
]

logger = logging.getLogger(__name__)

IndexKind = Literal["ivfflat", "hnsw"]

_PREFIX = "reflective_memories_embedding_"
_USING = {
    "ivfflat": "ivfflat ({indexed}) WITH (lists = {lists})",
    "hnsw": "hnsw ({indexed})",
}

VECTOR_INDEX_MAX_DIMENSIONS = 2_000
"""pgvector's HNSW and IVFFlat index ``vector`` values of at most this many dimensions."""
HALFVEC_INDEX_MAX_DIMENSIONS = 4_000
"""... and ``halfvec`` values (16-bit floats) of at most this many (pgvector 0.7 and later)."""


def indexed(dimension: int, *, halfvec: bool = True) -> str | None:
    """What the vector index of ``dimension``-dimensional vectors holds, with its operator
    class: the column itself up to :data:`VECTOR_INDEX_MAX_DIMENSIONS`, each vector cast to
    ``halfvec`` up to :data:`HALFVEC_INDEX_MAX_DIMENSIONS` (if the server's pgvector has
    ``halfvec``: 0.7 and later); ``None`` when pgvector can index neither (exact scans)."""
    d = int(dimension)
    if d <= VECTOR_INDEX_MAX_DIMENSIONS:
        return "embedding vector_cosine_ops"
    if d <= HALFVEC_INDEX_MAX_DIMENSIONS and halfvec:
        return f"(embedding::halfvec({d})) halfvec_cosine_ops"
    return None


def dense_distance(
    dimension: int | None,
    state: IndexState,
    column: str = "m.embedding",
    query: str = "(SELECT v FROM q)",
) -> str:
    """The cosine distance from ``column`` to ``query`` (SQL expressions, a ``vector`` each)
    to order the dense candidates by, as the database's vector index (``state``) holds it: the
    planner uses an index only for the very expression it indexes. The vectors themselves,
    except under an index of vectors of more than :data:`VECTOR_INDEX_MAX_DIMENSIONS` (no
    other can be built), which holds them cast to ``halfvec``: both are cast, which orders the
    candidates to within ~1e-3 (16-bit floats); their scores, computed from the stored
    ``vector``, do not inherit that. Without an index (``state.name`` is ``None``) the exact
    ordering costs a scan either way.

    Such vectors (over 8 kB) are stored out of line (TOAST), which the planner's cost of
    sorting them by distance does not count: with a ``LIMIT`` it cannot see (a subquery, or a
    generic plan's ``$n``: it guesses a tenth of the rows) it sorted a 20k-row namespace
    (3,072-d, 580 ms) rather than use the IVFFlat index; with ``LIMIT 320`` it used it (35
    ms)."""
    if dimension is None or state.name is None or dimension <= VECTOR_INDEX_MAX_DIMENSIONS:
        return f"{column} <=> {query}"
    d = int(dimension)
    return f"{column}::halfvec({d}) <=> {query}::halfvec({d})"


def _using(conn: psycopg.Connection[Any], kind: IndexKind, lists: int = 0) -> str | None:
    """The ``USING ...`` clause of a ``kind`` index of the column's vectors (``None``: pgvector
    cannot index them)."""
    row = conn.execute("SELECT to_regtype('halfvec') IS NOT NULL").fetchone()
    what = indexed(_dimension(conn), halfvec=bool(row and row[0]))
    return None if what is None else "USING " + _USING[kind].format(indexed=what, lists=lists)


_NO_INDEX = (
    "no vector index: the vectors have {dimension:,} dimensions, and pgvector indexes at most "
    f"{HALFVEC_INDEX_MAX_DIMENSIONS:,} (as halfvec); the dense candidates come from exact scans"
)
_PERMANENT = ("0A", "42", "54")
"""SQLSTATE classes of a failed build that building again will not cure: a feature the server
lacks, a missing privilege (a role that may only read and write the tables), operator class or
other object, a program limit."""


def _sqlstate(exc: BaseException | None) -> str | None:
    """The SQLSTATE of ``exc`` or of the database error it was raised from."""
    while exc is not None:
        if isinstance(exc, psycopg.Error) and exc.sqlstate:
            return exc.sqlstate
        exc = exc.__cause__
    return None


def _permanent(exc: BaseException) -> bool:
    """Whether a build failed with ``exc`` will fail again however often it is retried."""
    state = _sqlstate(exc)
    return state is not None and state[:2] in _PERMANENT


def _dimension(conn: psycopg.Connection[Any]) -> int:
    """The vector column's dimension (0: not bound yet; seen in the transaction binding it)."""
    row = conn.execute(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'reflective_memories'::regclass "
        "AND attname = 'embedding'"
    ).fetchone()
    return max(int(row[0]), 0) if row else 0


@dataclass(frozen=True, slots=True)
class VectorIndexSettings:
    """How ``PostgresBackend`` keeps and searches the vector index."""

    kind: IndexKind = "ivfflat"
    """The index a new database gets (an existing database keeps the kind it records;
    ``PostgresBackend.reindex(kind=...)`` switches it)."""
    min_rows: int = 5_000
    """IVFFlat: no vector index below this many memories (dense candidates by exact scan)."""
    growth: float = 4.0
    """IVFFlat: retrain once the table holds this many times the rows of the last training."""
    probes: int | None = None
    """IVFFlat lists searched per query; ``None``: :meth:`probes_for` (``sqrt(lists)``)."""
    auto: bool = True
    """Rebuild in a background thread of the process whose add crossed the threshold. Off:
    only ``PostgresBackend.reindex()`` builds."""

    def __post_init__(self) -> None:
        if self.kind not in _USING:
            raise ValueError(f"index must be 'ivfflat' or 'hnsw', got {self.kind!r}")
        if self.min_rows < 1:
            raise ValueError(f"ivf_min_rows must be positive, got {self.min_rows}")
        if not self.growth > 1:
            raise ValueError(f"ivf_growth must be above 1, got {self.growth}")
        if self.probes is not None and self.probes < 1:
            raise ValueError(f"ivf_probes must be positive, got {self.probes}")

    def lists_for(self, rows: int) -> int:
        """IVFFlat lists for a table of ``rows`` memories: ``sqrt(rows)``."""
        return max(1, round(math.sqrt(max(rows, 1))))

    def probes_for(self, lists: int) -> int:
        """Lists searched per query: ``probes`` if set, else ``sqrt(lists)`` (at least 8, the
        SQLite backend's IVF default), pgvector's suggested start; see docs/benchmarks.md for
        the agreement with exact scoring it gives."""
        if self.probes is not None:
            return min(self.probes, max(lists, 1))
        return min(max(lists, 1), max(8, math.ceil(math.sqrt(lists))))

    def due(self, state: IndexState, rows: int) -> bool:
        """Whether an IVFFlat index should be (re)built for a table of ``rows``."""
        if state.kind != "ivfflat" or rows < self.min_rows:
            return False
        return state.rows == 0 or rows >= self.growth * state.rows


@dataclass(frozen=True, slots=True)
class IndexState:
    """What the database records about its vector index (``reflective_meta``)."""

    kind: IndexKind = "ivfflat"
    """The database's index kind."""
    name: str | None = None
    """The current index (``None``: none built yet)."""
    rows: int = 0
    """Rows the current IVFFlat index was trained on (0: none)."""
    lists: int = 0
    """The current IVFFlat index's lists (0: none)."""


def read_state(conn: psycopg.Connection[Any], default: IndexKind) -> IndexState:
    """The database's index state (``default`` kind when it records none yet)."""
    rows = dict(
        conn.execute(
            "SELECT key, value FROM reflective_meta WHERE key LIKE 'vector\\_index%'"
        ).fetchall()
    )
    kind = rows.get("vector_index", default)
    return IndexState(
        kind="hnsw" if kind == "hnsw" else "ivfflat",
        name=rows.get("vector_index_name") or None,
        rows=int(rows.get("vector_index_rows", 0)),
        lists=int(rows.get("vector_index_lists", 0)),
    )


def write_state(conn: psycopg.Connection[Any], state: IndexState) -> None:
    """Record ``state`` in ``reflective_meta``."""
    values = {
        "vector_index": state.kind,
        "vector_index_name": state.name or "",
        "vector_index_rows": str(state.rows),
        "vector_index_lists": str(state.lists),
    }
    conn.cursor().executemany(
        "INSERT INTO reflective_meta (key, value) VALUES (%s, %s) "
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        list(values.items()),
    )


def _vector_indexes(conn: psycopg.Connection[Any]) -> list[tuple[str, bool]]:
    """``(name, valid)`` of every vector index this package made on the memories table."""
    rows = conn.execute(
        "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = 'reflective_memories'::regclass AND c.relname LIKE %s",
        (_PREFIX.replace("_", "\\_") + "%",),
    ).fetchall()
    return [(str(r[0]), bool(r[1])) for r in rows]


def ivfflat_build_kb(lists: int, dimension: int) -> int:
    """``maintenance_work_mem`` (kB) pgvector's IVFFlat build needs for ``lists`` lists.

    Its k-means keeps 50 sample vectors per list (at least 10,000), a lower bound per sample
    and list, and the centers; it refuses to start when that exceeds ``maintenance_work_mem``
    (64 MB by default: ~400 lists of 384-d vectors, i.e. ~160k memories). Twice that sum: it
    is a limit, not an allocation, and the sum measured up to 25% under pgvector's figures.
    """
    item = 8 + 4 * dimension
    samples = max(10_000, 50 * lists)
    need = samples * (item + 4 * lists + 8) + 4 * lists * item + 4 * lists * lists
    return math.ceil(2 * need / 1024)


@contextlib.contextmanager
def _build_memory(
    conn: psycopg.Connection[Any], kind: IndexKind, lists: int, dimension: int
) -> Iterator[None]:
    """Raise this connection's ``maintenance_work_mem`` to what an IVFFlat build of ``lists``
    lists of ``dimension``-dimensional vectors needs (never lower it), and restore it
    afterwards: the connection goes back to the pool."""
    row = conn.execute(
        "SELECT setting::bigint FROM pg_settings WHERE name = 'maintenance_work_mem'"
    ).fetchone()
    current = int(row[0]) if row else 0
    needed = ivfflat_build_kb(lists, dimension) if kind == "ivfflat" and dimension > 0 else 0
    if needed <= current:
        yield
        return
    with session_setting(conn, "maintenance_work_mem", f"{needed}kB"):
        yield


def build_index(
    conn: psycopg.Connection[Any],
    settings: VectorIndexSettings,
    *,
    kind: IndexKind | None = None,
    force: bool = False,
    wait: bool = True,
) -> IndexState | None:
    """(Re)build the vector index on ``conn`` (autocommit, outside a transaction).

    Takes the index lock (a session advisory lock); re-reads the state under it, so of several
    processes that saw the same threshold crossed, one builds and the others find it done.
    Builds the new index concurrently, records it, then drops the old one concurrently: adds
    and retrievals never wait for the build, and the table always has a valid index once it
    had one. An index left invalid by an interrupted build is dropped first. The tables are
    analysed after each build (the planner's statistics then follow the table's growth).

    Args:
        conn: an autocommit connection that no one else uses meanwhile.
        settings: thresholds and the default kind.
        kind: the kind to build (``None``: the database's).
        force: build even when :meth:`VectorIndexSettings.due` says it is not due.
        wait: wait for the index lock (polling: a statement blocked on it would deadlock with
            the holder's concurrent build); ``False``: return ``None`` at once when it is held.

    Vectors of more dimensions than pgvector indexes (:func:`indexed`) get no index: the
    state records the kind and no index (the old ones, if any, are dropped).

    Returns:
        The new state (without a name when the vectors cannot be indexed), or ``None`` when
        nothing was built.
    """
    with unbounded(conn):  # (not one of the calls users' timeouts bound: see _USERS_TIMEOUTS)
        return _build_index(conn, settings, kind=kind, force=force, wait=wait)


def _build_index(
    conn: psycopg.Connection[Any],
    settings: VectorIndexSettings,
    *,
    kind: IndexKind | None,
    force: bool,
    wait: bool,
) -> IndexState | None:
    # never a blocking pg_advisory_lock: CREATE INDEX CONCURRENTLY waits for every open
    # transaction, a statement blocked on this lock included, while holding the lock itself
    while True:
        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", INDEX_LOCK).fetchone()
        if row and row[0]:
            break
        if not wait:
            return None
        time.sleep(0.2)
    try:
        state = read_state(conn, settings.kind)
        row = conn.execute("SELECT count(*) FROM reflective_memories").fetchone()
        rows = int(row[0]) if row else 0
        target: IndexKind = kind or state.kind
        if not force and target == state.kind and not settings.due(state, rows):
            return None
        for name, valid in _vector_indexes(conn):
            if not valid:  # left by an interrupted build
                conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
        old = [name for name, valid in _vector_indexes(conn) if valid]
        generation = 1 + max(
            (int(n.rsplit("_", 1)[1]) for n in old if n.rsplit("_", 1)[1].isdigit()), default=0
        )
        lists = settings.lists_for(rows) if target == "ivfflat" else 0
        using = _using(conn, target, lists)
        if using is None:  # (no index pgvector can build: exact scans)
            new = IndexState(kind=target)
        else:
            name = f"{_PREFIX}{target}_{generation}"
            with _build_memory(conn, target, lists, _dimension(conn)):
                conn.execute(f'CREATE INDEX CONCURRENTLY "{name}" ON reflective_memories {using}')
            new = IndexState(
                kind=target, name=name, rows=rows if target == "ivfflat" else 0, lists=lists
            )
        with conn.transaction():
            write_state(conn, new)
        for name_old in old:
            conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name_old}"')
        # the tables grew (ivf_growth) since the planner last had statistics, perhaps from none:
        # without them it joined the lexical half's term rows by a plan ~1.6x slower (100k)
        conn.execute("ANALYZE reflective_memories, reflective_terms, reflective_access")
        return new
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", INDEX_LOCK)


class VectorIndex:
    """One backend's view of the vector index: the cached state, the search width each
    connection was given, and the background rebuild.

    Args:
        pools: the backend's connections.
        settings: thresholds, probes and the kind a new database gets.
        refresh: seconds a read of the state stays fresh (other processes may rebuild).
    """

    def __init__(self, pools: Pools, settings: VectorIndexSettings, *, refresh: float = 5.0):
        self._pools = pools
        self.settings = settings
        self._refresh = refresh
        self._state: IndexState | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()
        self._builder: threading.Thread | None = None
        self._building: psycopg.Connection[Any] | None = None
        self._retry_at = 0.0
        self._closed = False
        self._probes: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    # -- state ---------------------------------------------------------------------------------

    def state(self) -> IndexState:
        """The database's index state (cached for ``refresh`` seconds)."""
        if self._state is None or time.monotonic() - self._read_at > self._refresh:
            with self._pools.conn() as conn:
                self._set(read_state(conn, self.settings.kind))
        assert self._state is not None
        return self._state

    def _set(self, state: IndexState) -> None:
        self._state = state
        self._read_at = time.monotonic()

    def bind(self, conn: psycopg.Connection[Any]) -> None:
        """When the embeddings are first bound (in that transaction, the column given its
        dimension): record the kind and, for HNSW, build the index (the table is empty; an
        IVFFlat index waits for rows; vectors of more dimensions than pgvector indexes get
        none: :func:`indexed`)."""
        kind = self.settings.kind
        name = None
        using = _using(conn, "hnsw") if kind == "hnsw" else None
        if using is not None:
            name = f"{_PREFIX}hnsw"
            conn.execute(f'CREATE INDEX IF NOT EXISTS "{name}" ON reflective_memories {using}')
        state = IndexState(kind=kind, name=name)
        write_state(conn, state)
        self._state = None  # read after the commit

    # -- searching -----------------------------------------------------------------------------

    def _want(self) -> int | None:
        state = self.state()
        if state.kind != "ivfflat" or state.lists <= 0:
            return None
        return self.settings.probes_for(state.lists)

    def prepare(self, conn: psycopg.Connection[Any]) -> None:
        """Give ``conn`` the IVFFlat search width of the current index (once per change)."""
        want = self._want()
        if want is not None and self._probes.get(conn) != want:
            conn.execute(f"SET ivfflat.probes = {int(want)}")
            self._probes[conn] = want

    async def aprepare(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Async twin of :meth:`prepare`."""
        want = self._want()
        if want is not None and self._probes.get(conn) != want:
            await conn.execute(f"SET ivfflat.probes = {int(want)}")
            self._probes[conn] = want

    # -- building ------------------------------------------------------------------------------

    def distance(self, dimension: int | None) -> str:
        """:func:`dense_distance` under the current index (the statement gathering the dense
        candidates orders them by it, so that the index serves it)."""
        return dense_distance(dimension, self.state())

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of its own for a build (one the pool does not hand out meanwhile);
        database errors leave as the package's (:func:`.failures.storage_error`)."""
        conninfo = self._pools.conninfo
        if conninfo is None:
            with self._pools.conn() as conn:
                yield conn
            return
        with self._pools.conn() as _:  # the pool's errors and closed check
            pass
        try:
            conn = psycopg.connect(conninfo, autocommit=True)
        except psycopg.Error as exc:  # (not chained: libpq's message may quote the password)
            error = storage_error(exc)
            raise type(error)(redacted(str(error), conninfo)) from None
        with self._lock:
            self._building = conn
        try:
            yield conn
        except psycopg.Error as exc:
            raise storage_error(exc) from exc
        finally:
            with self._lock:
                self._building = None
            conn.close()

    def rebuild(self, *, kind: IndexKind | None = None, force: bool = True) -> IndexState | None:
        """Build the index now (waiting for any other build to finish first); vectors pgvector
        cannot index get none (a warning says so: :func:`indexed`).

        Raises:
            StorageError: the build failed (the old index, if any, still serves).
        """
        with self._connection() as conn:
            state = build_index(conn, self.settings, kind=kind, force=force)
            self._set(read_state(conn, self.settings.kind))
            dimension = _dimension(conn) if state is not None and state.name is None else 0
        if dimension:
            logger.warning(_NO_INDEX.format(dimension=dimension))
        # (a background build failed for good may run again: what failed may be fixed)
        self._retry_at = math.inf if dimension else 0.0
        return state

    def after_put(self, rows: int) -> None:
        """Start a background rebuild if a table of ``rows`` is due one and none is running
        in this process (at most one attempt per 10 seconds when another process holds the
        index lock or a build failed; none after a build that cannot succeed: see
        :meth:`_background`)."""
        if not self.settings.auto or self._closed:
            return
        if not self.settings.due(self.state(), rows):
            return
        with self._lock:
            if self._builder is not None and self._builder.is_alive():
                return
            if time.monotonic() < self._retry_at:
                return
            self._builder = threading.Thread(
                target=self._background, name="reflective-pg-reindex", daemon=True
            )
            self._builder.start()

    def _background(self) -> None:
        """One background build. A failure leaves the old index serving and is retried by an
        add 10 s later, unless building again cannot help (:func:`_permanent`: e.g. a missing
        privilege) or nothing can be built (vectors pgvector cannot index): then this process
        says so once and builds no more until :meth:`rebuild` succeeds."""
        built = None
        retry = 10.0
        dimension = 0
        try:
            with self._connection() as conn:
                built = build_index(conn, self.settings, wait=False)
                self._set(read_state(conn, self.settings.kind))
                if built is not None and built.name is None:
                    dimension = _dimension(conn)
        except Exception as exc:
            if _permanent(exc):
                retry = math.inf
            if not self._closed:
                logger.warning(
                    "rebuilding the vector index failed%s",
                    "; it would fail again, so this process builds no more until "
                    "PostgresBackend.reindex() succeeds"
                    if retry == math.inf
                    else "",
                    exc_info=True,
                )
        if dimension:
            logger.info(_NO_INDEX.format(dimension=dimension))
            retry = math.inf
        if built is None or dimension:  # (or another process holds the lock)
            self._retry_at = time.monotonic() + retry

    def wait(self, timeout: float | None = None) -> None:
        """Wait for this process's background rebuild, if one is running."""
        builder = self._builder
        if builder is not None:
            builder.join(timeout)

    def close(self) -> None:
        """Cancel this process's background rebuild (an interrupted build leaves an invalid
        index, which the next build drops) and wait for its thread."""
        self._closed = True
        with self._lock:
            conn = self._building
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.cancel_safe()
        self.wait()
