"""The memory stream: the one flow that adds and retrieves memories over a backend.

``add`` = validate -> embed (one batched call) -> rate importance (one batch) -> ``backend.put``
(records, vectors and the reflection-counter change in one transaction). ``retrieve`` = embed
the query -> ``backend.candidates`` -> pure scoring (:mod:`langchain_reflective.scoring`, the
clock passed in) -> top ``k`` -> ``backend.touch`` (one write that also reads the hits back).

Each flow is written once, as a generator that yields the calls it needs (``_Call``); the
sync methods run those calls directly and the async twins await their ``a*`` twins (the
drivers, ``_run`` and ``_arun``, are in :mod:`langchain_reflective.stream_base`). Where the
memories live and how candidates are found is the backend's business
(:class:`~langchain_reflective.backends.base.BaseMemoryBackend`; SQLite by default). The
stream's reads and deletes come from :class:`~langchain_reflective.stream_base.StreamBase`, its
exports, imports and DataFrame view from :class:`~langchain_reflective.transfer.StreamTransfer`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_reflective.backends.base import (
    BaseMemoryBackend,
    PendingMemory,
    ReflectionState,
    RetrievalFilter,
    trusted_scored,
)
from langchain_reflective.backends.types import concat_candidates
from langchain_reflective.errors import EmbeddingError, InvalidFilterError, InvalidMemoryError
from langchain_reflective.importance import BaseImportanceScorer, HeuristicImportanceScorer
from langchain_reflective.records import (
    MemoryRecord,
    ScoredMemory,
    check_identifier,
    utc,
)
from langchain_reflective.scoring import ScoringConfig, score_candidates, top_k
from langchain_reflective.stream_base import _arun, _BackendCall, _Flow, _run
from langchain_reflective.transfer import StreamTransfer
from langchain_reflective.validation import (
    AddPlan,
    as_unit_vectors,
    check_query,
    embedding_identity,
    evidence_depths,
    pending_items,
    plan_add,
    plan_counter,
    plan_pending,
    plan_records,
)

if TYPE_CHECKING:
    from langchain_reflective.backends.sqlite import BaseRecordStore

__all__ = ["MemoryStream", "RetrievalFilter", "ScoredMemory", "embedding_identity"]

DEFAULT_EXACT_LIMIT = 20_000
"""The SQLite shortcut's default ``exact_limit`` (see :class:`SQLiteBackend`)."""


class MemoryStream(StreamTransfer):
    """A durable memory stream with Generative-Agents retrieval.

    Args:
        embeddings: the embedding model (any LangChain ``Embeddings``).
        path: the memory file of the embedded SQLite backend. ``None`` or ``":memory:"`` (and
            no ``backend``) keeps everything in memory.
        backend: where memories live (a :class:`BaseMemoryBackend`, e.g.
            ``PostgresBackend.from_conn_string(url)``); overrides ``path``. The stream closes
            it on :meth:`close` (a constructor that raises leaves it open).
        namespace: the default namespace (user/agent) for reads and writes. A namespace never
            sees another's memories.
        scoring: how retrieval ranks memories; defaults to :meth:`ScoringConfig.hybrid`.
        importance_scorer: rates memories added without an importance; defaults to the
            heuristic (pass ``LLMImportanceScorer(model)`` for LLM ratings).
        embedding_model: the identity stored with the memories; derived from ``embeddings``
            when omitted. Reopening memories with another model or dimension is an error.
        store: a custom SQLite record layer (:class:`BaseRecordStore`) for the SQLite backend;
            prefer ``backend=SQLiteBackend(store=...)``.
        exact_limit: SQLite shortcut only (see :class:`SQLiteBackend`): namespaces with at most
            this many live memories are scored exactly; larger ones score exactly only a
            candidate set. ``None`` always scores exactly.
        ann_candidates: SQLite shortcut only: dense and lexical candidates gathered above
            ``exact_limit`` (the dense ones grow past 100k memories).
        ann_nprobe: SQLite shortcut only: IVF lists searched above ``exact_limit``.

    Raises:
        TypeError: ``embeddings``, ``backend``, ``scoring``, ``importance_scorer`` or
            ``embedding_model`` of the wrong type.
        ValueError: both ``backend`` and ``path``/``store``; or, with the SQLite shortcut, a
            bad ``exact_limit``, ``ann_candidates`` or ``ann_nprobe``.
        InvalidMemoryError: an empty namespace, or a namespace or ``embedding_model`` that
            cannot be stored (a NUL character, a lone surrogate).
        EmbeddingError: the memories were written with another embedding model (the
            message says how to reopen them if it is the same model under another name).
        StorageError: the memory file cannot be opened or created (with the SQLite shortcut:
            ``ForeignFileError`` for a file that is not a memory file, ``SchemaVersionError``
            for one written by a newer version).

    Example:
        .. code-block:: python

            from langchain_core.embeddings import DeterministicFakeEmbedding
            from langchain_reflective import MemoryStream

            with MemoryStream(DeterministicFakeEmbedding(size=64), path="memory.db") as stream:
                stream.add(["Alice likes tea", "Bob moved to Paris"], importances=[0.3, 0.8])
                for hit in stream.retrieve("Where does Bob live?", k=1):
                    print(hit.record.text, hit.score)
    """

    def __init__(
        self,
        embeddings: Embeddings,
        *,
        path: str | os.PathLike[str] | None = None,
        backend: BaseMemoryBackend | None = None,
        namespace: str = "default",
        scoring: ScoringConfig | None = None,
        importance_scorer: BaseImportanceScorer | None = None,
        embedding_model: str | None = None,
        store: BaseRecordStore | None = None,
        exact_limit: int | None = DEFAULT_EXACT_LIMIT,
        ann_candidates: int = 128,
        ann_nprobe: int = 8,
    ) -> None:
        if not isinstance(embeddings, Embeddings):
            raise TypeError(
                f"embeddings must be a langchain_core Embeddings, got {type(embeddings).__name__}"
            )
        if backend is not None and not isinstance(backend, BaseMemoryBackend):
            raise TypeError(f"backend must be a BaseMemoryBackend, got {type(backend).__name__}")
        if backend is not None and (path is not None or store is not None):
            raise ValueError("pass either backend= or path=/store=, not both")
        for name, value, kind in (
            ("scoring", scoring, ScoringConfig),
            ("importance_scorer", importance_scorer, BaseImportanceScorer),
            ("embedding_model", embedding_model, str),
        ):
            if value is not None and not isinstance(value, kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
        if not isinstance(namespace, str) or not namespace:
            raise InvalidMemoryError("namespace must be a non-empty string")
        self.namespace = check_identifier(namespace, "namespace", writing=False)
        if embedding_model:
            check_identifier(embedding_model, "embedding_model")
        self.embeddings = embeddings
        self.scoring = scoring or ScoringConfig.hybrid()
        self.importance_scorer: BaseImportanceScorer = (
            importance_scorer or HeuristicImportanceScorer()
        )
        self.embedding_model = embedding_model or embedding_identity(embeddings)
        own_backend = backend is None
        if backend is None:
            from langchain_reflective.backends.sqlite import SQLiteBackend

            backend = SQLiteBackend(
                path,
                store=store,
                exact_limit=exact_limit,
                ann_candidates=ann_candidates,
                ann_nprobe=ann_nprobe,
            )
        self._backend = backend
        self.path: Path | None = getattr(backend, "path", None) if path is not None else None
        stored_model = backend.embedding_model
        if stored_model and embedding_model is None and stored_model != self.embedding_model:
            if own_backend:  # (a backend passed in stays the caller's until a stream takes it)
                backend.close()
            raise EmbeddingError(
                f"{path or 'the backend'} was written with embedding model {stored_model!r}, "
                f"not {self.embedding_model!r}; vectors from different models are not "
                f"comparable. Use the same model, or pass embedding_model={stored_model!r} if "
                "it is the same model under another name"
            )
        backend.configure(self.scoring)
        self._bound_dimension: int | None = None
        self._closed = False

    # -- add -----------------------------------------------------------------------------------

    def _plan(
        self,
        texts: str | Sequence[str],
        importances: float | Sequence[float | None] | None,
        kinds: str | Sequence[str],
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None,
        evidence: Sequence[Sequence[str]] | None,
        ids: Sequence[str] | None,
        namespace: str | None,
        now: datetime | None,
        reset_reflection_counter: bool | ReflectionState,
        replacing: Sequence[str] | None = None,
    ) -> AddPlan:
        self._check_open()
        return plan_add(
            texts,
            importances=importances,
            kinds=kinds,
            metadatas=metadatas,
            evidence=evidence,
            ids=ids,
            namespace=self._ns(namespace, writing=True),
            now=now,
            reset_reflection_counter=reset_reflection_counter,
            replacing=replacing,
        )

    def _models_flow(self, texts: Sequence[str], to_rate: Sequence[str]) -> _Flow:
        """Embed ``texts`` (one call) and rate ``to_rate`` (at most one batch); returns the
        checked unit vectors and the ratings."""
        raw = yield (self.embeddings, "embed_documents", (texts,), None)
        rated = (yield (self.importance_scorer, "score", (to_rate,), None)) if to_rate else []
        vectors = as_unit_vectors(raw, len(texts), type(self.embeddings).__name__)
        if len(rated) != len(to_rate):
            raise InvalidMemoryError("importance scorer returned the wrong number of results")
        return vectors, rated

    def models_accept(self, text: str, *, rate: bool) -> bool:
        """Whether the models embed (and, if ``rate``, rate) ``text`` as an add would, into a
        vector of the dimension the backend holds; nothing is stored. Any failure is
        ``False``. The pending drain uses it to tell an outage from one bad memory."""
        try:
            vectors, _ = _run(self._models_flow([text], [text] if rate else []))
        except Exception:
            return False
        bound = self._backend.dimension
        return bound is None or vectors.shape[1] == bound  # else: every memory would fail

    def _add_flow(self, plans: Sequence[AddPlan]) -> _Flow:
        """Embed and rate every plan's memories in one call each, then store each plan's in one
        transaction (one per namespace); returns the stored records."""
        if len(plans) == 1:  # every add: no flattening
            texts = plans[0].texts
            to_rate = [texts[i] for i in plans[0].to_rate] if plans[0].to_rate else []
        else:
            texts = [t for p in plans for t in p.texts]
            to_rate = [p.texts[i] for p in plans for i in p.to_rate]
        if not texts:
            return []
        vectors, rated = yield from self._models_flow(texts, to_rate)
        self._check_open()
        if self._bound_dimension != vectors.shape[1]:  # checked once per dimension
            bind = (self.embedding_model, vectors.shape[1])
            yield (self._backend, "bind_embeddings", bind, None)
            self._bound_dimension = vectors.shape[1]
        out: list[MemoryRecord] = []
        row = done = 0
        for plan in plans:
            n, k = len(plan.texts), len(plan.to_rate)
            depths = [0] * n
            if any(plan.evidence):
                wanted = sorted({e for ev in plan.evidence for e in ev})
                found = yield (self._backend, "get", (plan.namespace, wanted), None)
                depths = evidence_depths(plan, {r.id: r.depth for r in found})
            records = plan_records(plan, rated[done : done + k], depths)
            counter = plan_counter(plan, records)
            mine = vectors if n == len(texts) else vectors[row : row + n]
            if plan.replacing:  # delete and store in one transaction
                replace = (plan.namespace, plan.replacing, records, mine)
                yield (self._backend, "replace", replace, {"counter": counter})
            else:
                pending = plan.ids if plan.pending else ()
                yield (
                    self._backend,
                    "put",
                    (records, mine),
                    {"counter": counter, "pending": pending},
                )
            if len(plans) == 1:
                return records
            out.extend(records)
            row += n
            done += k
        return out

    def add(
        self,
        texts: str | Sequence[str],
        *,
        importances: float | Sequence[float | None] | None = None,
        kinds: str | Sequence[str] = "observation",
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        evidence: Sequence[Sequence[str]] | None = None,
        ids: Sequence[str] | None = None,
        namespace: str | None = None,
        now: datetime | None = None,
        reset_reflection_counter: bool | ReflectionState = False,
        replacing: Sequence[str] | None = None,
    ) -> list[MemoryRecord]:
        """Add memories: one embedding call and at most one importance batch per call.

        Args:
            texts: one text or many.
            importances: importance in [0, 1] per text (or one for all); ``None`` entries are
                rated by :attr:`importance_scorer`.
            kinds: the kind per text (or one for all).
            metadatas: JSON-serialisable metadata per text (or one for all).
            evidence: ids of cited records per text; the depth becomes
                ``1 + max(depth of evidence)``. The ids must exist in the same namespace.
            ids: explicit ids (default: new time-ordered UUIDv7s, see :func:`new_memory_id`).
            namespace: write to this namespace instead of the stream's default.
            now: creation time (timezone-aware; default: the current time).
            reset_reflection_counter: reset the namespace's reflection counter in the same
                transaction (to store reflections atomically); a ``ReflectionState`` (the
                counter as the reflection read it) takes off only that much, and if it came
                from :meth:`reflection_state` (it carries a ``generation``) the whole add is
                refused with ``ReflectionConflictError`` when another reset came since.
            replacing: ids of the namespace's memories to delete in the same transaction (an
                update in place: pass a memory's id here and in ``ids`` to replace it under the
                same id). A failure stores nothing and deletes nothing (with the built-in
                backends; see ``BaseMemoryBackend.replace``).

        Returns:
            The stored records, in order.

        Raises:
            InvalidMemoryError: bad text, kind, importance, metadata or evidence.
            EmbeddingError: the embeddings returned unusable vectors (nothing is stored).
            DimensionMismatchError: the vectors' dimension differs from the stored ones.
            ReflectionConflictError: ``reset_reflection_counter`` is a state read before
                another reset of the counter (nothing is stored).
        """
        plan = self._plan(
            texts,
            importances=importances,
            kinds=kinds,
            metadatas=metadatas,
            evidence=evidence,
            ids=ids,
            namespace=namespace,
            now=now,
            reset_reflection_counter=reset_reflection_counter,
            replacing=replacing,
        )
        result: list[MemoryRecord] = _run(self._add_flow([plan]))
        return result

    async def aadd(
        self,
        texts: str | Sequence[str],
        *,
        importances: float | Sequence[float | None] | None = None,
        kinds: str | Sequence[str] = "observation",
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        evidence: Sequence[Sequence[str]] | None = None,
        ids: Sequence[str] | None = None,
        namespace: str | None = None,
        now: datetime | None = None,
        reset_reflection_counter: bool | ReflectionState = False,
        replacing: Sequence[str] | None = None,
    ) -> list[MemoryRecord]:
        """Async twin of :meth:`add`.

        Cancelling it (``asyncio.wait_for`` timing out) while the write is under way does not
        stop the write, which runs in a worker thread: the memories may still be stored, whole.
        To retry safely, pass your own ``ids``: a retry of ids already stored fails with a
        :class:`~langchain_reflective.errors.DuplicateIdError` instead of storing the memories
        twice.
        """
        plan = self._plan(
            texts,
            importances=importances,
            kinds=kinds,
            metadatas=metadatas,
            evidence=evidence,
            ids=ids,
            namespace=namespace,
            now=now,
            reset_reflection_counter=reset_reflection_counter,
            replacing=replacing,
        )
        result: list[MemoryRecord] = await _arun(self._add_flow([plan]))
        return result

    # -- pending memories (the outbox) ----------------------------------------------------------

    def _plan_enqueue(
        self,
        texts: str | Sequence[str],
        importances: float | Sequence[float | None] | None,
        kinds: str | Sequence[str],
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None,
        namespace: str | None,
        now: datetime | None,
        ids: Sequence[str] | None = None,
    ) -> list[PendingMemory]:
        plan = self._plan(
            texts,
            importances=importances,
            kinds=kinds,
            metadatas=metadatas,
            evidence=None,
            ids=ids,
            namespace=namespace,
            now=now,
            reset_reflection_counter=False,
        )
        return pending_items(plan)

    def enqueue(
        self,
        texts: str | Sequence[str],
        *,
        importances: float | Sequence[float | None] | None = None,
        kinds: str | Sequence[str] = "observation",
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        namespace: str | None = None,
        now: datetime | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[PendingMemory]:
        """Write memories durably as *pending*: one commit, no embedding, no importance call.

        They are not retrievable until :meth:`complete_pending` embeds and rates them and
        stores them under the same ids (:class:`~langchain_reflective.memory.ReflectiveMemory`
        does that in the background). The arguments are validated like :meth:`add`'s;
        ``ids`` (one per text; new ones by default) are the ids the memories keep once stored.

        Returns:
            The queued memories, in order.

        Raises:
            InvalidMemoryError: bad text, kind, importance, metadata or id (nothing is queued).
            DuplicateIdError: an id is queued or stored in the namespace already (nothing is
                queued: a memory is queued or stored, never both).
        """
        items = self._plan_enqueue(texts, importances, kinds, metadatas, namespace, now, ids)
        self._backend.enqueue(items)
        return items

    async def aenqueue(
        self,
        texts: str | Sequence[str],
        *,
        importances: float | Sequence[float | None] | None = None,
        kinds: str | Sequence[str] = "observation",
        metadatas: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        namespace: str | None = None,
        now: datetime | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[PendingMemory]:
        """Async twin of :meth:`enqueue`: it awaits the backend's ``aenqueue``. Cancelled
        while the commit is under way, the memories may still be queued, whole."""
        items = self._plan_enqueue(texts, importances, kinds, metadatas, namespace, now, ids)
        await self._backend.aenqueue(items)
        return items

    def _plan_pending(
        self, n: int | None, namespace: str | None, all_namespaces: bool
    ) -> _BackendCall:
        self._check_open()
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise InvalidMemoryError(f"n must be a non-negative integer or None, got {n!r}")
        if all_namespaces:
            return "pending", (), {"limit": n}
        ns = self._ns(namespace)
        return "pending", (), {"namespace": ns, "limit": n, "newest": n is not None}

    def pending(
        self, n: int | None = None, *, namespace: str | None = None, all_namespaces: bool = False
    ) -> list[PendingMemory]:
        """Queued memories not yet completed, oldest first.

        Args:
            n: the newest ``n`` (all when ``None``); with ``all_namespaces`` the oldest ``n``.
            namespace: whose (default: the stream's); ignored with ``all_namespaces``.
            all_namespaces: every namespace's, in queue order (what a drain completes first).

        Raises:
            InvalidMemoryError: a negative or non-integer ``n``, a bad namespace.
        """
        found: list[PendingMemory] = self._call(self._plan_pending(n, namespace, all_namespaces))
        return found

    async def apending(
        self, n: int | None = None, *, namespace: str | None = None, all_namespaces: bool = False
    ) -> list[PendingMemory]:
        """Async twin of :meth:`pending`."""
        plan = self._plan_pending(n, namespace, all_namespaces)
        found: list[PendingMemory] = await self._acall(plan)
        return found

    def complete_pending(self, items: Sequence[PendingMemory]) -> list[MemoryRecord]:
        """Embed and rate queued memories and store them under their ids.

        One embedding call and at most one importance batch for all of ``items``; then one
        transaction per namespace stores its memories and removes them from the queue, so a
        memory is never stored twice nor lost (a crash before the commit leaves it queued).

        Raises:
            PendingConflictError: some of ``items`` were completed meanwhile (by another
                process); that namespace's memories were not stored by this call.
            EmbeddingError: unusable vectors (nothing is stored; the items stay queued).
        """
        self._check_open()
        result: list[MemoryRecord] = _run(self._add_flow(plan_pending(items)))
        return result

    async def acomplete_pending(self, items: Sequence[PendingMemory]) -> list[MemoryRecord]:
        """Async twin of :meth:`complete_pending`."""
        self._check_open()
        result: list[MemoryRecord] = await _arun(self._add_flow(plan_pending(items)))
        return result

    # -- retrieve ------------------------------------------------------------------------------

    def _retrieve_flow(
        self,
        query: str,
        *,
        k: int,
        now: datetime | None,
        filter: RetrievalFilter | Mapping[str, Any] | None,
        touch: bool,
        namespace: str | None,
        scoring: ScoringConfig | None,
        query_embedding: Sequence[float] | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> _Flow:
        self._check_open()
        query = check_query(query, k)
        flt = RetrievalFilter.coerce(filter)
        if flt.namespace is not None and namespace is not None and flt.namespace != namespace:
            raise InvalidFilterError(  # (a filter from a request must not widen a user's reads)
                f"the filter's namespace {flt.namespace!r} is not the namespace {namespace!r} "
                "this retrieval was given; pass one of them"
            )
        if namespaces is None:
            names = [self._ns(flt.namespace or namespace)]
        else:
            names = self._namespaces(namespaces, flt.namespace or namespace)
        config = scoring or self.scoring
        when = utc(now) if now is not None else datetime.now(UTC)
        if query_embedding is None:
            raw = yield (self.embeddings, "embed_query", (query,), None)
        else:  # checked below exactly as the model's answer would be
            raw = query_embedding
        # a numpy vector as a (1, dim) view: converting a list holding it costs more
        one = raw[None] if type(raw) is np.ndarray and raw.ndim == 1 else [raw]
        vector = as_unit_vectors(one, 1, type(self.embeddings).__name__)[0]
        self._check_open()
        sets = []
        for ns in names:
            found = yield (
                self._backend,
                "candidates",
                (ns, query, vector),
                {"k": k, "filter": flt, "config": config},
            )
            sets.append(found)
        origin = None
        if len(sets) > 1:  # one ranking: lexical relative to the best match of them all
            found, origin = concat_candidates(sets)
        if found.size == 0:
            return []
        comps, rec = score_candidates(config, found, when.timestamp())
        best = top_k(comps.score, k)
        keys = found.keys[best].tolist()
        owners = [0] * len(keys) if origin is None else origin[best].tolist()
        records_of: list[dict[int, MemoryRecord]] = []
        for i, ns in enumerate(names):
            mine = (
                keys
                if origin is None
                else [key for key, o in zip(keys, owners, strict=True) if o == i]
            )
            if not mine:
                records_of.append({})
            elif touch:  # one durable write that also reads the hits back
                records_of.append((yield (self._backend, "touch", (ns, mine, when), None)))
            else:
                records_of.append((yield (self._backend, "fetch", (ns, mine), None)))
        out: list[ScoredMemory] = []
        for key, owner, score, rel, lexical, recent, importance in zip(
            keys,
            owners,
            comps.score[best].tolist(),
            found.relevance[best].tolist(),
            comps.lexical[best].tolist(),
            rec[best].tolist(),
            comps.importance[best].tolist(),
            strict=True,
        ):
            record = records_of[owner].get(key)
            if record is None:  # deleted by another process in between
                continue
            out.append(trusted_scored(record, score, rel, lexical, recent, importance))
        return out

    def _namespaces(self, namespaces: Sequence[str], namespace: str | None) -> list[str]:
        """The checked names of ``retrieve(namespaces=...)``: each once, sorted."""
        if namespace is not None:
            raise InvalidMemoryError("give retrieve() namespace or namespaces, not both")
        if isinstance(namespaces, str) or not isinstance(namespaces, Sequence):
            raise InvalidMemoryError(
                "namespaces must be a list of namespace names (for one, pass namespace=...)"
            )
        names = sorted({self._ns(n) for n in namespaces})
        if not names:
            raise InvalidMemoryError("namespaces must name at least one namespace")
        return names

    def retrieve(
        self,
        query: str,
        *,
        k: int = 4,
        now: datetime | None = None,
        filter: RetrievalFilter | Mapping[str, Any] | None = None,
        touch: bool = True,
        namespace: str | None = None,
        scoring: ScoringConfig | None = None,
        query_embedding: Sequence[float] | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> list[ScoredMemory]:
        """The ``k`` best memories for ``query``, best first.

        Args:
            query: what to look for.
            k: how many memories to return.
            now: the time used for recency and as the new access time (default: now).
            filter: restrict kinds, creation time, minimum relevance or namespace.
            touch: update ``last_accessed_at`` of the returned memories (durably).
            namespace: read this namespace instead of the stream's default.
            scoring: override the stream's scoring for this call.
            query_embedding: ``query``'s embedding by this stream's ``embeddings``, when you
                already have it (e.g. to search several namespaces for one query): the
                embedding call is skipped; ``query`` still drives the lexical half. It is
                checked and normalised as the model's answer would be.
            namespaces: rank these namespaces as one (instead of ``namespace``): the ``k``
                best of them all, each memory's ``record.namespace`` saying where it lives.
                Min-max normalisation (``normalization="minmax"``) and the lexical half's
                ``/ max bm25`` run over all of them, so their scores compare; each namespace's
                BM25 statistics (term rarity) stay its own.

        Raises:
            InvalidMemoryError: empty query or bad ``k``; ``namespaces`` empty, a string, or
                given with ``namespace``.
            InvalidFilterError: unknown filter keys or bad values, or a filter ``namespace``
                that is not the ``namespace`` given.
            EmbeddingError: the query embedding is unusable.
            DimensionMismatchError: the embedding's dimension differs from the stored ones.
        """
        flow = self._retrieve_flow(
            query,
            k=k,
            now=now,
            filter=filter,
            touch=touch,
            namespace=namespace,
            scoring=scoring,
            query_embedding=query_embedding,
            namespaces=namespaces,
        )
        result: list[ScoredMemory] = _run(flow)
        return result

    async def aretrieve(
        self,
        query: str,
        *,
        k: int = 4,
        now: datetime | None = None,
        filter: RetrievalFilter | Mapping[str, Any] | None = None,
        touch: bool = True,
        namespace: str | None = None,
        scoring: ScoringConfig | None = None,
        query_embedding: Sequence[float] | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> list[ScoredMemory]:
        """Async twin of :meth:`retrieve`."""
        flow = self._retrieve_flow(
            query,
            k=k,
            now=now,
            filter=filter,
            touch=touch,
            namespace=namespace,
            scoring=scoring,
            query_embedding=query_embedding,
            namespaces=namespaces,
        )
        result: list[ScoredMemory] = await _arun(flow)
        return result
