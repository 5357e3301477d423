"""``PendingDrain``: one process's passes over the pending queue, and the memories it set aside.

A pass completes pending memories ``drain_batch`` at a time, oldest first
(:meth:`MemoryStream.complete_pending`: embed, rate, store under the same ids). A batch that
fails is not retried as a whole: the pass first checks that the models work at all on one
other memory (the newest pending one, of another namespace when there is one: embedded and
rated as a completion would, not stored, so every memory is still stored in queue order). If
that fails too, the models are down for everyone: the pass stops, nothing is counted against
any memory, and the queue is retried at the next pass. When there is no other memory to try
(the failing memory is the only one this process's passes may complete), whether the models
refuse it or are down cannot be told: the pass stops without counting an attempt, as for an
outage, and a failure of that memory is logged at WARNING the first time and at DEBUG after
that (in this process), so a lone memory the models refuse does not log a warning at every
pass; every failure is still recorded (``ReflectiveMemory.errors``). If it succeeds, the batch is
halved until each memory that fails is alone, so every other memory of the batch is stored;
each memory that failed alone counts one attempt, is skipped for the rest of the pass and,
after ``MemoryConfig.drain_max_attempts``, is quarantined: still pending (nothing is lost),
skipped by this process's passes until released or discarded. A store failure
(``StorageError``) is never counted against a memory, but for one: a pending memory whose id is
stored already (a memory was added under that id while it was queued) can never be completed,
so it is quarantined at once, and the rest of the queue goes on. Attempt counts and the
quarantine live in this process only (no schema change): another process, or a restart, tries
such a memory again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from langchain_reflective.errors import DuplicateIdError, PendingConflictError, StorageError
from langchain_reflective.memory_config import MemoryConfig, QuarantinedMemory

if TYPE_CHECKING:
    from langchain_reflective.backends.types import PendingMemory
    from langchain_reflective.stream import MemoryStream

__all__ = ["PendingDrain"]

Stored = Callable[[str], None]
"""Called with each namespace a completed batch stored memories in (to maybe reflect)."""
Failed = Callable[[str, Exception, "str | None", int], None]
"""Called with ``(namespace, error, what failed or None for the standard text, log level)``."""


def id_list(ids: str | Sequence[str]) -> list[str]:
    return [ids] if isinstance(ids, str) else list(ids)


Key = tuple[str, str]
"""A pending memory's ``(namespace, id)``: an id is unique within its namespace only."""


_QUARANTINED = (
    "quarantined: it stays pending but this process's drains skip it (see "
    "ReflectiveMemory.quarantined, retry_quarantined, discard_quarantined)"
)
"""What the warning of a quarantine says of it."""


def _key(item: PendingMemory) -> Key:
    return (item.namespace, item.id)


class PendingDrain:
    """Drain passes over ``stream``'s pending queue (see the module documentation).

    Args:
        stream: the stream whose queue is completed (all its namespaces).
        config: ``drain_batch`` and ``drain_max_attempts``.
        stored: called after each completed batch, once per namespace it stored memories in.
        failed: records a failure (log line and ``ReflectiveMemory.errors``).
    """

    def __init__(
        self, stream: MemoryStream, config: MemoryConfig, *, stored: Stored, failed: Failed
    ) -> None:
        self.stream = stream
        self.config = config
        self._stored = stored
        self._failed = failed
        self._lock = threading.Lock()
        self._attempts: dict[Key, int] = {}
        """Pending memory -> passes in which it failed on its own while others were completed."""
        self._quarantine: dict[Key, QuarantinedMemory] = {}
        self._lone_reported: set[Key] = set()
        """Pending memories whose failure as the only memory to try was logged at WARNING
        (further such failures are logged at DEBUG); removed when completed or discarded."""

    def run(self) -> None:
        """One pass: complete every pending memory that is not set aside.

        Traced as one ``pending_drain`` run: a pass completes whatever is queued (other calls'
        memories too), so its ratings are shown as this pass's, under the call that started it.
        A pass with nothing queued (one asked for while another emptied the queue) is not
        traced.
        """
        from langchain_core.runnables import RunnableLambda

        first = self._next_batch(set())
        if not first[0]:
            return
        drain: RunnableLambda[None, None] = RunnableLambda(
            lambda _: self._pass(*first), name="pending_drain"
        )
        drain.invoke(None, {"tags": ["langchain-reflective", "pending"]})

    def _next_batch(self, failed: set[Key]) -> tuple[list[PendingMemory], set[Key]]:
        """The next batch to complete (empty: nothing left, or the read failed and was
        recorded) and the memories set aside: ``failed`` in this pass, and the quarantined."""
        skip = failed | self._quarantined_ids()
        try:
            limit = self.config.drain_batch + len(skip)
            queued = self.stream.pending(limit, all_namespaces=True)
        except Exception as exc:  # the stream was closed under us, or the file failed
            self._failed(self.stream.namespace, exc, None, logging.ERROR)
            return [], skip
        return [p for p in queued if _key(p) not in skip][: self.config.drain_batch], skip

    def _pass(self, batch: list[PendingMemory], skip: set[Key]) -> None:
        conflicts = 0
        failed: set[Key] = set()  # failed alone in this pass: not tried again in it
        while batch:
            try:
                try:
                    self._complete(batch)
                except DuplicateIdError as exc:
                    if not self._set_aside_stored(batch, exc):
                        raise  # none of them is stored: the store's failure, see below
                except StorageError:  # the store's failure, not the memories': see below
                    raise
                except Exception as exc:
                    probe = self._probe(batch, skip)
                    if probe is None:  # nothing else to try: refused, or an outage?
                        self._failed_lone(batch[0], exc)
                        return
                    if not self.stream.models_accept(probe.text, rate=probe.importance is None):
                        self._failed(batch[0].namespace, exc, None, logging.ERROR)  # an outage
                        return
                    self._isolate(batch, failed, exc)
            except PendingConflictError:
                conflicts += 1  # another process completed some of them: read the queue again
                if conflicts > 3:
                    return
            except StorageError as exc:  # the file or database, not these memories: retry later
                self._failed(batch[0].namespace, exc, None, logging.ERROR)
                return
            batch, skip = self._next_batch(failed)

    def _set_aside_stored(self, batch: Sequence[PendingMemory], exc: DuplicateIdError) -> bool:
        """Quarantine the memories of ``batch`` whose id is stored in their namespace already
        (completing them can only fail again); whether there were any."""
        found: list[PendingMemory] = []
        for namespace in dict.fromkeys(p.namespace for p in batch):
            mine = [p for p in batch if p.namespace == namespace]
            stored = {r.id for r in self.stream.get([p.id for p in mine], namespace=namespace)}
            found += [p for p in mine if p.id in stored]
        for item in found:
            with self._lock:
                self._set_aside(item, exc, 1)
            what = (
                f"pending memory {item.id!r} of namespace {item.namespace!r} cannot be "
                "completed: a memory is stored under its id already (added under that id while "
                f"it was queued); {_QUARANTINED}"
            )
            self._failed(item.namespace, exc, what, logging.WARNING)
        return bool(found)

    def _set_aside(self, item: PendingMemory, exc: Exception, attempts: int) -> None:
        """Quarantine ``item`` after ``attempts`` (the caller holds the lock)."""
        self._attempts.pop(_key(item), None)
        self._quarantine[_key(item)] = QuarantinedMemory(item, exc, attempts, datetime.now(UTC))

    def _complete(self, items: Sequence[PendingMemory]) -> None:
        """Complete ``items`` in one call (raises as ``complete_pending``), then report them."""
        records = self.stream.complete_pending(items)
        with self._lock:
            for item in items:
                self._attempts.pop(_key(item), None)
                self._lone_reported.discard(_key(item))
        for namespace in dict.fromkeys(r.namespace for r in records):
            self._stored(namespace)

    def _probe(self, batch: Sequence[PendingMemory], skip: set[Key]) -> PendingMemory | None:
        """The memory on which to check that the models work after ``batch`` failed (``None``:
        there is no other memory to try). The check (``MemoryStream.models_accept``) embeds it
        (and rates it, when it has no importance) as a completion would, with a vector of the
        store's dimension, but does not store it, so every memory is still stored in queue
        order (observations are linked to their neighbours in the order they are stored).

        The newest pending memory, of another namespace than the failed batch's oldest when
        there is one: a memory that always fails sits at the head of the queue, and whoever
        enqueued it may have enqueued more after it.
        """
        window = self.stream.backend.pending(limit=len(skip) + len(batch) + 1, newest=True)
        failing = _key(batch[0])
        candidates = [p for p in reversed(window) if _key(p) not in skip and _key(p) != failing]
        probe = next((p for p in candidates if p.namespace != batch[0].namespace), None)
        return probe or next(iter(candidates), None)

    def _isolate(
        self, items: list[PendingMemory], failed: set[Key], error: Exception | None
    ) -> None:
        """Complete ``items``, halving a group that fails until each failing memory is alone
        (only once the models are known to work: see :meth:`run`). ``error``: how ``items``
        already failed as one call (``None``: not tried yet)."""
        if not items:
            return
        if error is None:
            try:
                self._complete(items)
                return
            except StorageError:
                raise
            except Exception as exc:
                error = exc
        if len(items) == 1:
            failed.add(_key(items[0]))
            self._failed_alone(items[0], error)
            return
        middle = len(items) // 2
        self._isolate(items[:middle], failed, None)
        self._isolate(items[middle:], failed, None)

    def _failed_alone(self, item: PendingMemory, exc: Exception) -> None:
        """Count a failure of ``item`` on its own; quarantine it at ``drain_max_attempts``."""
        limit = self.config.drain_max_attempts
        with self._lock:
            attempts = self._attempts.get(_key(item), 0) + 1
            self._attempts[_key(item)] = attempts
            if attempts >= limit:
                self._set_aside(item, exc, attempts)
        where = f"pending memory {item.id!r} of namespace {item.namespace!r}"
        if attempts < limit:
            what = (
                f"completing {where} failed while other memories were completed (attempt "
                f"{attempts} of {limit}); it stays queued and is retried at the next drain"
            )
            self._failed(item.namespace, exc, what, logging.ERROR)
            return
        what = (
            f"{where} failed on its own in {attempts} drain(s) while other memories were "
            f"completed; {_QUARANTINED}"
        )
        self._failed(item.namespace, exc, what, logging.WARNING)

    def _failed_lone(self, item: PendingMemory, exc: Exception) -> None:
        """Record a failure of ``item`` when it was the only memory to try: no attempt is
        counted (the models may be down); logged at WARNING the first time, then at DEBUG."""
        with self._lock:
            first = _key(item) not in self._lone_reported
            self._lone_reported.add(_key(item))
        what = (
            f"completing pending memory {item.id!r} of namespace {item.namespace!r} failed, and "
            "no other memory was pending to tell a refused memory from an outage; it stays "
            "queued and is retried at the next drain"
        )
        if first:
            what += " (its further failures of this kind are logged at DEBUG)"
        self._failed(item.namespace, exc, what, logging.WARNING if first else logging.DEBUG)

    # -- the quarantine ------------------------------------------------------------------------

    def _quarantined_ids(self) -> set[Key]:
        with self._lock:
            return set(self._quarantine)

    def quarantined(self) -> list[QuarantinedMemory]:
        """The memories set aside, oldest quarantine first."""
        with self._lock:
            return list(self._quarantine.values())

    def _chosen(self, ids: str | Sequence[str] | None, namespace: str | None) -> list[Key]:
        """The quarantined memories with these ids (all: ``None``) in this namespace (any:
        ``None``); under the lock."""
        if namespace is not None:
            namespace = self.stream.resolve_namespace(namespace)  # (refuses "" and non-strings)
        wanted = None if ids is None else set(id_list(ids))
        return [
            k
            for k in self._quarantine
            if (namespace is None or k[0] == namespace) and (wanted is None or k[1] in wanted)
        ]

    def release(self, ids: str | Sequence[str] | None, namespace: str | None = None) -> int:
        """Give quarantined memories (all, or these ids; of one namespace, or of any) a fresh
        attempt count; how many."""
        with self._lock:
            chosen = self._chosen(ids, namespace)
            return sum(self._quarantine.pop(k, None) is not None for k in chosen)

    def discard(self, ids: str | Sequence[str] | None, namespace: str | None = None) -> int:
        """Remove quarantined memories (all, or these ids; of one namespace, or of any) from the
        pending queue without storing them; how many were removed."""
        with self._lock:
            chosen = self._chosen(ids, namespace)
        removed = 0
        for namespace in dict.fromkeys(ns for ns, _ in chosen):
            mine = [i for ns, i in chosen if ns == namespace]
            removed += self.stream.discard_pending(mine, namespace=namespace)
            with self._lock:
                for i in mine:
                    self._quarantine.pop((namespace, i), None)
                    self._lone_reported.discard((namespace, i))
        return removed
