"""Episodic memory of Reflexion loops, stored in a :class:`~langchain_reflective.MemoryStream`.

Every trial of a loop is one record: a ``reflexion`` record when a self-reflection was written
(its text is the reflection, its metadata the whole structure), else a ``reflexion_trial``
record (a success, or a failure under a strategy that does not reflect). Both carry the loop
id, task, iteration, reward and evaluator output, so a loop can be rebuilt from storage after a
restart. The actor sees a window of the last Ω reflections of its loop (older ones stay stored),
pruned to a token budget. Past reflections of other loops are found by
:func:`search_reflections` (cross-task lessons).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.messages import HumanMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_reflective._llm import fence_block, fence_items, fence_text
from langchain_reflective.errors import InvalidMemoryError
from langchain_reflective.reflexion.schema import EvaluatorOutput, SelfReflection

if TYPE_CHECKING:
    from langchain_reflective.records import MemoryRecord
    from langchain_reflective.stream import MemoryStream

__all__ = [
    "REFLEXION_KIND",
    "SCHEMA_VERSION",
    "TRIAL_KIND",
    "Episode",
    "LoopStatus",
    "ReflectionHit",
    "asearch_reflections",
    "fit_to_budget",
    "load_loop",
    "loop_status",
    "reflection_window",
    "render_window",
    "search_reflections",
]

REFLEXION_KIND = "reflexion"
"""Kind of the records holding a self-reflection."""
TRIAL_KIND = "reflexion_trial"
"""Kind of the records of trials without a reflection (successes, non-reflecting strategies)."""
SCHEMA_VERSION = 1
"""Version of the metadata layout of both kinds and of the export."""

Episode = dict[str, Any]
"""One stored trial as plain JSON: the record's metadata plus ``id``, ``kind``, ``created_at``."""
LoopStatus = Literal["passed", "failed", "error", "running"]
"""``running``: the last trial failed and the loop may go on (it was interrupted)."""


def episode(record: MemoryRecord) -> Episode:
    """A stored trial as an :data:`Episode`."""
    return {
        **dict(record.metadata),
        "id": record.id,
        "kind": record.kind,
        "created_at": record.created_at.isoformat(),
    }


def entries_of(records: Iterable[MemoryRecord]) -> list[Episode]:
    """The trials among ``records``, by iteration, each (loop, iteration) once.

    Before trial record ids were derived from (namespace, loop, iteration), two runs of one
    loop at once stored every iteration twice under random ids. Such a file keeps both
    copies (nothing rewrites it); reads count the first stored copy of each iteration (the
    oldest ``created_at``, then the smaller id), the one a derived id would have let through.
    """
    first: dict[tuple[str, int], MemoryRecord] = {}
    for r in records:
        loop_id = r.metadata.get("loop_id")
        if r.kind not in (REFLEXION_KIND, TRIAL_KIND) or not isinstance(loop_id, str):
            continue
        key = (loop_id, int(r.metadata.get("iteration", 0)))
        kept = first.get(key)
        if kept is None or (r.created_at, r.id) < (kept.created_at, kept.id):
            first[key] = r
    ordered = sorted(
        first.values(), key=lambda r: (int(r.metadata.get("iteration", 0)), r.created_at, r.id)
    )
    return [episode(r) for r in ordered]


def load_loop(stream: MemoryStream, loop_id: str, *, namespace: str | None = None) -> list[Episode]:
    """Every stored trial of ``loop_id`` in the namespace, by iteration (empty: a new loop).

    An iteration stored twice by an old version counts once (see :func:`entries_of`).
    """
    records = stream.recent(None, namespace=namespace, kinds=[REFLEXION_KIND, TRIAL_KIND])
    return [e for e in entries_of(records) if e["loop_id"] == loop_id]


def loop_status(entries: Sequence[Episode]) -> LoopStatus:
    """The status of a loop from its stored trials."""
    if not entries:
        return "running"
    last = entries[-1]
    if last.get("passed"):
        return "passed"
    outcome = last.get("outcome")
    if outcome == "error":
        return "error"
    if outcome == "max_trials":
        return "failed"
    return "running"


def reflection_window(entries: Sequence[Episode], omega: int) -> list[Episode]:
    """The last ``omega`` reflections of a loop, oldest first (seed 003's sliding window)."""
    if omega <= 0:
        return []
    return [e for e in entries if e["kind"] == REFLEXION_KIND][-omega:]


def _window_line(entry: Episode) -> str:
    sr = entry["self_reflection"]
    parts = [f"Attempt {entry['iteration']} (reward {float(entry['reward']):.2f}): "]
    parts.append(sr["reflection_text"])
    if sr.get("actionable_insights"):
        parts.append(" Next time: " + "; ".join(sr["actionable_insights"]))
    return "".join(parts)


def fit_to_budget(
    window: Sequence[Episode],
    max_tokens: int | None,
    *,
    token_counter: Callable[[str], int] | None = None,
) -> list[Episode]:
    """The newest reflections of ``window`` that fit in ``max_tokens``, in chronological order.

    Seed 003's pruning: walk from the newest, stop at the first that does not fit.
    """
    if max_tokens is None:
        return list(window)
    count = token_counter or (lambda text: count_tokens_approximately([HumanMessage(text)]))
    kept: list[Episode] = []
    used = 0
    for entry in reversed(window):
        cost = count(_window_line(entry))
        if used + cost > max_tokens:
            break
        kept.append(entry)
        used += cost
    return kept[::-1]


def render_window(
    window: Sequence[Episode],
    *,
    last_attempt: Episode | None,
    lessons: Sequence[str],
    max_chars: int,
) -> list[str]:
    """The fenced sections of the actor's context: reflections, last attempt, past lessons."""
    sections: list[str] = []
    if lessons:
        sections.append(
            "Lessons from similar earlier tasks:\n"
            + fence_block(lessons, "lessons", max_chars=max_chars)
        )
    if last_attempt is not None:
        feedback = EvaluatorOutput.model_validate(last_attempt["evaluator_output"]).feedback()
        sections.append(
            f"Your last attempt (attempt {last_attempt['iteration']}) and what the checks said:\n"
            + fence_text(
                last_attempt.get("attempt") or "(empty)", "last_attempt", max_chars=max_chars
            )
            + "\n"
            + fence_items(  # (a traceback keeps its lines, as in the reflection prompt)
                feedback or ["(no details)"], "verification", max_chars=max_chars
            )
        )
    if window:
        sections.append(
            "Reflections on your previous attempts (oldest first):\n"
            + fence_block([_window_line(e) for e in window], "reflections", max_chars=max_chars)
        )
    return sections


# -- search ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReflectionHit:
    """A stored reflection found by :func:`search_reflections`."""

    record: MemoryRecord
    """The memory record (text: the reflection; metadata: the whole trial)."""
    score: float
    """The stream's retrieval score."""
    loop_id: str
    """The loop it belongs to."""
    task: str
    """That loop's task."""
    iteration: int
    """The failed trial it reflects on."""
    reflection: SelfReflection
    """The structured reflection."""
    low_quality: bool
    """Flagged low quality when it was written."""

    @property
    def lessons(self) -> list[str]:
        """Its lessons learned, then its actionable insights."""
        return [*self.reflection.lessons_learned, *self.reflection.actionable_insights]


def _search_args(
    failure_category: str | Sequence[str] | None, task_keywords: str | Sequence[str] | None
) -> tuple[set[str] | None, list[str]]:
    cats = None
    if failure_category is not None:
        cats = {failure_category} if isinstance(failure_category, str) else set(failure_category)
    words = [task_keywords] if isinstance(task_keywords, str) else list(task_keywords or [])
    return cats, [w.lower() for w in words if w.strip()]


def _keep(
    hit: Any,
    *,
    cats: set[str] | None,
    words: list[str],
    min_confidence: float | None,
    exclude_loops: set[str],
    include_low_quality: bool,
) -> ReflectionHit | None:
    meta = hit.record.metadata
    try:
        reflection = SelfReflection.model_validate(meta["self_reflection"])
    except (KeyError, ValueError):
        return None
    if meta.get("loop_id") in exclude_loops:
        return None
    if cats is not None and reflection.credit_assignment.failure_category not in cats:
        return None
    if min_confidence is not None and reflection.confidence < min_confidence:
        return None
    if not include_low_quality and meta.get("low_quality"):
        return None
    task = str(meta.get("task", ""))
    if words and not any(w in task.lower() for w in words):
        return None
    return ReflectionHit(
        record=hit.record,
        score=float(hit.score),
        loop_id=str(meta.get("loop_id")),
        task=task,
        iteration=int(meta.get("iteration", 0)),
        reflection=reflection,
        low_quality=bool(meta.get("low_quality")),
    )


def _check_search(query: str, limit: int) -> None:
    if not isinstance(query, str) or not query.strip():
        raise InvalidMemoryError("search_reflections needs a non-empty query")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidMemoryError(f"limit must be a positive integer, got {limit!r}")


def search_reflections(
    stream: MemoryStream,
    query: str,
    *,
    failure_category: str | Sequence[str] | None = None,
    min_confidence: float | None = None,
    task_keywords: str | Sequence[str] | None = None,
    limit: int = 5,
    namespace: str | None = None,
    exclude_loops: Iterable[str] = (),
    include_low_quality: bool = True,
) -> list[ReflectionHit]:
    """Past reflections similar to ``query`` (cross-task lessons), best first.

    Runs the stream's hybrid retrieval (dense + lexical + recency + importance) over
    ``reflexion`` records of one namespace, then keeps those matching every filter; it widens
    the retrieval until ``limit`` hits pass or the namespace is exhausted. Retrieval does not
    touch the records' access times.

    Example:
        .. code-block:: python

            hits = search_reflections(
                stream, "API returned an empty list", failure_category="edge_case_miss",
                min_confidence=0.7, task_keywords=["API", "webhook"],
            )
            lessons = [lesson for hit in hits for lesson in hit.reflection.lessons_learned]

    Args:
        stream: the memory stream holding the loops.
        query: what the failure looks like (error text, task description...).
        failure_category: one category or several (see ``FailureCategory``).
        min_confidence: keep reflections with at least this self-assessed confidence.
        task_keywords: keep reflections whose loop's task contains any of these (any case).
        limit: at most this many hits.
        namespace: whose reflections (default: the stream's); never another namespace's.
        exclude_loops: loop ids to leave out (e.g. the current loop).
        include_low_quality: keep reflections flagged low quality.

    Raises:
        InvalidMemoryError: an empty query or a bad limit.
    """
    _check_search(query, limit)
    cats, words = _search_args(failure_category, task_keywords)
    excluded = set(exclude_loops)
    total = stream.count(namespace=namespace)
    k = min(max(limit * 4, 16), max(total, 1))
    while True:
        raw = stream.retrieve(
            query, k=k, filter={"kinds": [REFLEXION_KIND]}, touch=False, namespace=namespace
        )
        hits = [
            h
            for h in (
                _keep(
                    r,
                    cats=cats,
                    words=words,
                    min_confidence=min_confidence,
                    exclude_loops=excluded,
                    include_low_quality=include_low_quality,
                )
                for r in raw
            )
            if h is not None
        ]
        if len(hits) >= limit or len(raw) < k or k >= total:
            return hits[:limit]
        k = min(k * 4, total)


async def asearch_reflections(
    stream: MemoryStream,
    query: str,
    *,
    failure_category: str | Sequence[str] | None = None,
    min_confidence: float | None = None,
    task_keywords: str | Sequence[str] | None = None,
    limit: int = 5,
    namespace: str | None = None,
    exclude_loops: Iterable[str] = (),
    include_low_quality: bool = True,
) -> list[ReflectionHit]:
    """Async twin of :func:`search_reflections`."""
    import asyncio

    return await asyncio.to_thread(
        search_reflections,
        stream,
        query,
        failure_category=failure_category,
        min_confidence=min_confidence,
        task_keywords=task_keywords,
        limit=limit,
        namespace=namespace,
        exclude_loops=exclude_loops,
        include_low_quality=include_low_quality,
    )
