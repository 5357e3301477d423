"""Cost of one reflection and of importance scoring: langchain-reflective vs GenerativeAgentMemory.

Both systems get the same fake chat model (:class:`SleepyChatModel`: it sleeps ``--delay``
seconds per call, sync and async, answers every prompt kind in the format its caller parses, and
counts its calls), the same deterministic bag-of-words embeddings (:class:`WordEmbeddings`) and
the same seeded memories (:data:`SEED_MEMORIES`, added with given importances, so seeding costs
no model call).

Measured:

* one reflection (3 questions): ours ``create_reflection_graph(model, stream).invoke({"force":
  True})`` (and ``ainvoke``), the peer's ``GenerativeAgentMemory.pause_to_reflect()``;
* importance of 100 memories: ours ``MemoryStream.add(texts)`` with ``LLMImportanceScorer``
  (default batch of 10), the peer's ``add_memory`` per memory (its scoring path: one call per
  memory) and its ``add_memories("a; b; ...")`` (one call for all, ``;``-separated).

Run: ``python benchmarks/reflection_cost.py`` (about 30 s; writes
``benchmarks/results/reflection_cost.json``). ``--quick`` runs once with no delay and writes
nothing (used by the unit test, which asserts call counts only).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import platform
import re
import statistics
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field

from langchain_reflective import LLMImportanceScorer, MemoryStream
from langchain_reflective.reflection import create_reflection_graph

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "reflection_cost.json"
DELAY = 0.2
N_IMPORTANCE = 100
NOW = datetime(2024, 3, 1, 18, 0, tzinfo=UTC)
PEER_IMPORTANCE_WEIGHT = 0.15  # GenerativeAgentMemory's default
PEER_INSIGHTS_PER_QUESTION = 5  # its insight prompt asks for "5 high-level novel insights"
OUR_INSIGHTS_PER_QUESTION = 3

# -- shared inputs -------------------------------------------------------------------------------

SEED_MEMORIES: list[tuple[str, int]] = [
    ("Klaus Mueller is writing a research paper on gentrification in low-income communities", 7),
    ("Klaus Mueller reads a book about urban housing policy at the library", 4),
    ("Klaus Mueller discusses his research paper with Professor Wolfe", 6),
    ("Klaus Mueller has breakfast at Hobbs Cafe", 2),
    ("Klaus Mueller takes notes on rent prices in the Oak Hill neighbourhood", 4),
    ("Klaus Mueller interviews residents of Oak Hill about rising rents", 6),
    ("Klaus Mueller stays up late to finish a draft of his research paper", 5),
    ("Klaus Mueller feels anxious about the deadline of his research paper", 6),
    ("Maria Lopez studies for her physics exam at the library", 5),
    ("Maria Lopez streams a video game on Twitch in the evening", 3),
    ("Maria Lopez asks Klaus Mueller for help with her physics homework", 4),
    ("Maria Lopez has a crush on Klaus Mueller", 7),
    ("Maria Lopez eats lunch with Klaus Mueller at Hobbs Cafe", 4),
    ("Maria Lopez passes her physics exam with a high grade", 8),
    ("Maria Lopez plans to invite Klaus Mueller to the Valentine's Day party", 6),
    ("Isabella Rodriguez runs Hobbs Cafe and greets every customer", 3),
    ("Isabella Rodriguez plans a Valentine's Day party at Hobbs Cafe", 7),
    ("Isabella Rodriguez invites her regular customers to the Valentine's Day party", 5),
    ("Isabella Rodriguez asks Maria Lopez to help decorate Hobbs Cafe for the party", 4),
    ("Isabella Rodriguez orders flowers and candles for the Valentine's Day party", 3),
    ("Isabella Rodriguez worries that too few guests will come to the party", 5),
    ("Isabella Rodriguez bakes heart-shaped cookies for the party", 3),
    ("Sam Moore announces that he is running for mayor of the town", 8),
    ("Sam Moore talks to Isabella Rodriguez about his campaign for mayor", 5),
    ("Sam Moore hands out campaign flyers at the town square", 3),
    ("Sam Moore debates the other mayor candidate about housing policy", 6),
    ("Sam Moore asks Klaus Mueller about gentrification for his campaign", 5),
    ("Tom Moreno complains about Sam Moore's campaign at the grocery store", 4),
    ("Tom Moreno buys groceries and vegetables at the market", 2),
    ("Tom Moreno argues with Sam Moore about taxes", 5),
    ("Ayesha Khan writes a senior thesis on Shakespeare's sonnets", 6),
    ("Ayesha Khan reads her thesis draft to Maria Lopez at the library", 4),
    ("Ayesha Khan decides to attend the Valentine's Day party at Hobbs Cafe", 4),
    ("Ayesha Khan brushes her teeth and makes her bed", 1),
    ("Klaus Mueller agrees to go to the Valentine's Day party with Maria Lopez", 7),
    ("Klaus Mueller sends the final draft of his research paper to Professor Wolfe", 6),
    ("Maria Lopez buys a new dress for the Valentine's Day party", 3),
    ("Isabella Rodriguez decorates Hobbs Cafe with red and pink balloons", 3),
    ("Sam Moore plans to give a short speech at the Valentine's Day party", 5),
    ("Isabella Rodriguez is happy that many guests confirmed for the party", 5),
]
"""40 seeded memories (text, 1-10 rating), one every 10 minutes, the last 10 minutes before
:data:`NOW`."""

_SUBJECTS = ["Klaus Mueller", "Maria Lopez", "Isabella Rodriguez", "Sam Moore", "Ayesha Khan"]
_EVENTS = [
    "has coffee at Hobbs Cafe",
    "walks through the park",
    "reads the morning newspaper",
    "gets accepted into a graduate program",
    "waters the plants",
    "argues with a neighbour about parking",
    "learns that a close friend is moving away",
    "cleans the kitchen",
    "plans a trip to the coast",
    "finishes a long project",
]


def importance_texts(n: int = N_IMPORTANCE) -> list[str]:
    """``n`` distinct memories to importance-score (no ``;``: the peer's batch splits on it)."""
    return [
        f"{_SUBJECTS[i % len(_SUBJECTS)]} {_EVENTS[(i // len(_SUBJECTS)) % len(_EVENTS)]} "
        f"(day {i // (len(_SUBJECTS) * len(_EVENTS)) + 1}, memory {i + 1})"
        for i in range(n)
    ]


class WordEmbeddings(Embeddings):
    """Bag-of-words hashing embeddings (as ``tests/fakes.py``): texts sharing words are close."""

    def __init__(self, size: int = 64) -> None:
        self.size = size

    def _embed(self, text: str) -> list[float]:
        vec = np.zeros(self.size)
        for word in re.findall(r"\w+", text.lower()):
            h = int(hashlib.md5(word.encode()).hexdigest(), 16)
            vec[h % self.size] += 1.0 if (h >> 64) % 2 else -1.0
        vec[0] += 0.01  # never all-zero
        return [float(x) for x in vec / np.linalg.norm(vec)]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


# -- the fake model ------------------------------------------------------------------------------


def prompt_kind(text: str) -> str:
    """Which prompt this is: ours (``our_*``) or GenerativeAgentMemory's (``peer_*``)."""
    if "<memories>" in text:
        return "our_importance"
    if "<insights>" in text:
        return "our_condense"
    if "<statements>" in text and "salient high-level questions" in text:
        return "our_questions"
    if "<statements>" in text:
        return "our_insights"
    if "Respond with a single integer" in text:
        return "peer_importance"
    if "separated by semi colans" in text:
        return "peer_importance_batch"
    if "salient high-level questions" in text:
        return "peer_questions"
    if "high-level novel insights" in text:
        return "peer_insights"
    return "other"


def _fenced(text: str, tag: str) -> list[str]:
    """The items numbered ``1. ...`` inside ``<tag>...</tag>``."""
    m = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", text, re.DOTALL)
    lines = m.group(1).splitlines() if m else []
    return [re.sub(r"^\d+\.\s*", "", line) for line in lines if line.strip()]


def _rating(text: str) -> int:
    """A deterministic 1-10 rating of a memory text."""
    return 1 + int(hashlib.md5(text.encode()).hexdigest(), 16) % 10


_STAMP = re.compile(r"^\s*(?:\d+\.\s*)?\[[^\]]*\]\s*")


def answer(kind: str, text: str) -> str:
    """A well-formed answer in the format the caller parses."""
    if kind == "our_importance":
        items = _fenced(text, "memories")
        return "\n".join(f"{i}: {_rating(t)}" for i, t in enumerate(items, 1))
    if kind == "our_questions":
        items = _fenced(text, "statements")
        return "\n".join(f"{i}. {t.rstrip('.')}?" for i, t in enumerate(items[-3:], 1))
    if kind == "our_insights":
        items = _fenced(text, "statements")
        n = min(OUR_INSIGHTS_PER_QUESTION, len(items))
        cites = [
            ", ".join(str(j) for j in sorted({i, min(i + 1, len(items))})) for i in range(1, n + 1)
        ]
        return "\n".join(
            f"{i}. Insight about {items[i - 1].rstrip('.')} [{cites[i - 1]}]"
            for i in range(1, n + 1)
        )
    if kind == "our_condense":
        return "\n".join(f"{i}. {t}" for i, t in enumerate(_fenced(text, "insights")[:5], 1))
    if kind == "peer_questions":
        # "{observations}" = one "[date] text" line per memory, then the question
        observations = [
            _STAMP.sub("", line) for line in text.split("\n\n")[0].splitlines() if line.strip()
        ]
        return "\n".join(f"{i}. {t.rstrip('.')}?" for i, t in enumerate(observations[-3:], 1))
    if kind == "peer_insights":
        block = text.split("---\n")[1] if text.count("---\n") >= 2 else ""
        related = [_STAMP.sub("", line) for line in block.splitlines() if line.strip()]
        related = related or ["the question"]
        return "\n".join(
            f"{i}. Insight about {related[(i - 1) % len(related)].rstrip('.')} "
            f"(because of {(i - 1) % len(related) + 1})"
            for i in range(1, PEER_INSIGHTS_PER_QUESTION + 1)
        )
    if kind == "peer_importance":
        memory = text.split("Memory: ", 1)[-1].split("\nRating:", 1)[0]
        return str(_rating(memory))
    if kind == "peer_importance_batch":
        memories = text.split("Memories: ", 1)[-1].split("\nRating:", 1)[0].split(";")
        return ";".join(str(_rating(m.strip())) for m in memories)
    return "ok"


class SleepyChatModel(BaseChatModel):
    """Sleeps ``delay`` seconds per call (sync and async), answers by prompt kind, counts calls."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    delay: float = DELAY
    calls: list[str] = Field(default_factory=list)
    lock: Any = Field(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "sleepy-fake"

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()

    def by_kind(self) -> dict[str, int]:
        with self.lock:
            return dict(Counter(self.calls))

    def _respond(self, messages: list[BaseMessage]) -> ChatResult:
        text = "\n".join(str(m.content) for m in messages)
        kind = prompt_kind(text)
        with self.lock:
            self.calls.append(kind)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(answer(kind, text)))])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.delay:
            time.sleep(self.delay)
        return self._respond(messages)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._respond(messages)


# -- measurements --------------------------------------------------------------------------------


@dataclass
class Measure:
    """One measured operation (wall time: median over ``runs``)."""

    system: str
    operation: str
    calls: int
    wall_s: float
    runs: int
    calls_by_kind: dict[str, int] = field(default_factory=dict)
    detail: str = ""


def _seed_times() -> list[datetime]:
    n = len(SEED_MEMORIES)
    return [NOW - timedelta(minutes=10 * (n - i)) for i in range(n)]


def _measure(
    system: str,
    operation: str,
    model: SleepyChatModel,
    setup: Callable[[], Callable[[], Any]],
    runs: int,
    detail: str = "",
) -> tuple[Measure, Any]:
    """Run ``setup()`` (untimed) then the returned callable (timed) ``runs`` times."""
    walls: list[float] = []
    counts: set[int] = set()
    kinds: dict[str, int] = {}
    result: Any = None
    for _ in range(runs):
        op = setup()
        model.reset()
        start = time.perf_counter()
        result = op()
        walls.append(time.perf_counter() - start)
        kinds = model.by_kind()
        counts.add(sum(kinds.values()))
    if len(counts) != 1:
        raise RuntimeError(f"{system} {operation}: call counts differ between runs: {counts}")
    return Measure(
        system, operation, counts.pop(), statistics.median(walls), runs, kinds, detail
    ), result


def _our_stream(model: SleepyChatModel, opened: ExitStack) -> MemoryStream:
    stream = opened.enter_context(
        MemoryStream(WordEmbeddings(), importance_scorer=LLMImportanceScorer(model))
    )
    for (text, rating), at in zip(SEED_MEMORIES, _seed_times(), strict=True):
        stream.add(text, importances=rating / 10, now=at)
    return stream


def run_ours(delay: float, runs: int) -> list[Measure]:
    """Our reflection (sync and async) and importance of ``N_IMPORTANCE`` memories."""
    model = SleepyChatModel(delay=delay)
    with ExitStack() as opened:  # every stream a setup opens is closed at the end
        return _run_ours(model, runs, opened)


def _run_ours(model: SleepyChatModel, runs: int, opened: ExitStack) -> list[Measure]:
    out: list[Measure] = []

    def reflection() -> Callable[[], Any]:
        graph = create_reflection_graph(model, _our_stream(model, opened))
        return lambda: graph.invoke({"force": True, "now": NOW})

    def areflection() -> Callable[[], Any]:
        graph = create_reflection_graph(model, _our_stream(model, opened))
        return lambda: asyncio.run(graph.ainvoke({"force": True, "now": NOW}))

    for label, setup in (
        ("reflection (invoke)", reflection),
        ("reflection (ainvoke)", areflection),
    ):
        m, result = _measure("ours", label, model, setup, runs)
        stored = len(result["reflections"])
        if stored == 0:
            raise RuntimeError(f"ours {label}: no reflection stored ({result.get('skipped')})")
        m.detail = f"{len(result['questions'])} questions, {stored} insights stored"
        out.append(m)

    texts = importance_texts()

    def importance() -> Callable[[], Any]:
        stream = opened.enter_context(
            MemoryStream(WordEmbeddings(), importance_scorer=LLMImportanceScorer(model))
        )
        return lambda: stream.add(texts, now=NOW)

    m, records = _measure("ours", f"importance x{len(texts)}", model, importance, runs)
    rated = sum(1 for r in records if r.importance_source == "llm")
    m.detail = f"MemoryStream.add, LLMImportanceScorer batch 10; {rated}/{len(texts)} rated by LLM"
    out.append(m)
    return out


@contextmanager
def _quiet() -> Iterator[None]:
    """langchain-experimental and LLMChain warn that they are deprecated: silence that."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _peer_memory(model: SleepyChatModel, seed: bool) -> Any:
    import faiss
    from langchain_classic.retrievers import TimeWeightedVectorStoreRetriever
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS
    from langchain_core.documents import Document
    from langchain_experimental.generative_agents import GenerativeAgentMemory

    embeddings = WordEmbeddings()
    # as LangChain's generative agents example: L2 index over unit vectors, k=15
    vectorstore = FAISS(
        embeddings,
        faiss.IndexFlatL2(embeddings.size),
        InMemoryDocstore({}),
        {},
        relevance_score_fn=lambda score: 1.0 - score / np.sqrt(2),
    )
    retriever = TimeWeightedVectorStoreRetriever(
        vectorstore=vectorstore, other_score_keys=["importance"], k=15
    )
    if seed:
        naive = [t.replace(tzinfo=None) for t in _seed_times()]
        docs = [
            Document(
                text,
                metadata={
                    "importance": rating / 10 * PEER_IMPORTANCE_WEIGHT,  # as add_memory stores it
                    "created_at": at,
                    "last_accessed_at": at,
                },
            )
            for (text, rating), at in zip(SEED_MEMORIES, naive, strict=True)
        ]
        retriever.add_documents(docs, current_time=naive[-1])
    return GenerativeAgentMemory(
        llm=model, memory_retriever=retriever, importance_weight=PEER_IMPORTANCE_WEIGHT
    )


def run_peer(delay: float, runs: int, importance_runs: int = 1) -> list[Measure]:
    """GenerativeAgentMemory: pause_to_reflect, add_memory x N, add_memories (one string)."""
    model = SleepyChatModel(delay=delay)
    now = NOW.replace(tzinfo=None)
    out: list[Measure] = []
    with _quiet():

        def reflection() -> Callable[[], Any]:
            memory = _peer_memory(model, seed=True)
            return lambda: memory.pause_to_reflect(now=now)

        m, insights = _measure("langchain_experimental", "reflection", model, reflection, runs)
        m.detail = f"pause_to_reflect; {len(insights)} insights stored"
        out.append(m)

        texts = importance_texts()

        def one_by_one() -> Callable[[], Any]:
            memory = _peer_memory(model, seed=False)
            return lambda: [memory.add_memory(t, now=now) for t in texts]

        m, _ = _measure(
            "langchain_experimental",
            f"importance x{len(texts)}",
            model,
            one_by_one,
            importance_runs,
        )
        m.detail = "add_memory per memory (its scoring path)"
        out.append(m)

        def batched() -> Callable[[], Any]:
            memory = _peer_memory(model, seed=False)
            return lambda: memory.add_memories("; ".join(texts), now=now)

        m, ids = _measure(
            "langchain_experimental", f"importance x{len(texts)}", model, batched, runs
        )
        m.detail = f"add_memories('a; b; ...'), one prompt for all; {len(ids)} stored"
        out.append(m)
    return out


# -- report --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """nproc, load average, CPU model, RAM (Linux), Python and platform."""
    import os

    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gb: float | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gb = round(int(line.split()[1]) / 1024**2, 1)
                break
    except OSError:
        pass
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "nproc": os.cpu_count(),
        "load_avg_1_5_15": load,
        "cpu": cpu,
        "ram_gb": ram_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def targets(measures: Sequence[Measure]) -> dict[str, dict[str, Any]]:
    """The issue's targets, checked against the measurements (peer targets need the peer)."""
    find = {(m.system, m.operation): m for m in measures}
    ours = find[("ours", "reflection (invoke)")]
    imp = find[("ours", f"importance x{N_IMPORTANCE}")]
    out: dict[str, dict[str, Any]] = {
        "reflection_calls_le_6": {"value": ours.calls, "met": ours.calls <= 6},
        "importance_100_calls_le_10": {"value": imp.calls, "met": imp.calls <= 10},
    }
    peer = find.get(("langchain_experimental", "reflection"))
    if peer is not None and peer.wall_s > 0:
        ratio = ours.wall_s / peer.wall_s
        out["reflection_wall_le_quarter_of_peer"] = {"value": round(ratio, 3), "met": ratio <= 0.25}
    return out


def table(measures: Sequence[Measure]) -> str:
    """A Markdown table of the measurements."""
    rows = [
        "| system | operation | LLM calls | wall time (s) | runs | how |",
        "|---|---|---:|---:|---:|---|",
    ]
    for m in measures:
        rows.append(
            f"| {m.system} | {m.operation} | {m.calls} | {m.wall_s:.2f} | {m.runs} | {m.detail} |"
        )
    return "\n".join(rows)


def run(
    *, delay: float = DELAY, runs: int = 3, peer: bool = True, out: Path | None = None
) -> dict[str, Any]:
    """Measure everything; write the JSON report to ``out`` when given; return the report."""
    measures = run_ours(delay, runs)
    if peer:
        measures += run_peer(delay, runs)
    report = {
        "benchmark": "reflection_cost",
        "command": "python benchmarks/reflection_cost.py",
        "delay_s": delay,
        "runs": runs,
        "seed_memories": len(SEED_MEMORIES),
        "importance_memories": N_IMPORTANCE,
        "machine": machine(),
        "results": [asdict(m) for m in measures],
        "targets": targets(measures),
        "table": table(measures),
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one run, no delay, write nothing")
    parser.add_argument("--delay", type=float, default=DELAY, help="seconds per model call")
    parser.add_argument("--runs", type=int, default=3, help="runs per reflection (median)")
    parser.add_argument("--no-peer", action="store_true", help="skip langchain_experimental")
    parser.add_argument("--out", type=Path, default=None, help=f"JSON report (default {RESULTS})")
    args = parser.parse_args(argv)
    delay = 0.0 if args.quick else args.delay
    runs = 1 if args.quick else args.runs
    out = args.out if args.out is not None or args.quick else RESULTS
    report = run(delay=delay, runs=runs, peer=not args.no_peer, out=out)
    print(report["table"])
    print()
    for name, target in report["targets"].items():
        print(f"{name}: {target['value']} -> {'met' if target['met'] else 'NOT met'}")
    if out is not None:
        print(f"\nwrote {out}")
    return report


if __name__ == "__main__":
    main()
