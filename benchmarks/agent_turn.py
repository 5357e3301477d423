"""What memory adds to one agent turn: ``create_agent`` + ``ReflectiveMemoryMiddleware``.

A ``create_agent`` agent with an instant fake chat model and the memory middleware runs turns
for one user whose stream already holds ``--size`` memories (bulk-loaded with given
importances, so loading costs no model call). The stream rates new memories with
``LLMImportanceScorer`` over a fake chat model that sleeps ``--rating-delay`` (500 ms) per call.

Measured per turn, for two ways of recording the turn:

* ``before``: the synchronous ``memory.add`` the middleware used to make in ``after_agent``
  (embedding and the importance rating happen on the turn's path);
* ``after``: today's middleware, ``memory.enqueue`` (one commit of the pending texts; the
  rating happens in the background drain).

Reported: the middleware's own time per turn (its hooks' time, excluding the agent model's
calls, which the middleware wraps), p50/p90; the whole turn's wall time; and the number of
rating-model calls made on the turn's thread (the calls the turn waits for). After the ``after``
turns the pending memories are flushed, and the background calls and batches are reported too.

Run (each size in its own process; the JSON file keeps one entry per size)::

    python benchmarks/agent_turn.py --size 10000
    python benchmarks/agent_turn.py --size 100000

Small sizes (``--size 500 --turns 5 --before-turns 2 --rating-delay 0``) finish in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, ModelResponse
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reflection_cost import SleepyChatModel, WordEmbeddings

from langchain_reflective import LLMImportanceScorer, MemoryStream
from langchain_reflective.integrations.middleware import ReflectiveMemoryMiddleware
from langchain_reflective.memory import ReflectiveMemory
from langchain_reflective.strategies import Observation, ReflectiveMemoryStrategy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "agent_turn.json"
USER = "user-1"

_SYLLABLES = ("ka", "lo", "mi", "ren", "tu", "sa", "vek", "do", "pi", "lan", "ro", "ge", "nu", "ta")
VOCABULARY = [a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES][:5_000]
"""5,000 made-up words. Texts draw them with Zipf-like frequencies (word ``r`` has weight
``1/r``), as words in conversations do. A corpus built from a handful of template words instead
makes every query match most of the stream lexically, which no real history does."""
_WEIGHTS = [1.0 / (r + 1) for r in range(len(VOCABULARY))]
STOP = ("I", "the", "a", "to", "and", "of", "with", "my", "was", "is")


def sentence(rng: random.Random, i: int) -> str:
    """A 10-16 word text: a few stop words and Zipf-distributed content words."""
    content = rng.choices(VOCABULARY, weights=_WEIGHTS, k=rng.randint(6, 10))
    words = [*content, *rng.choices(STOP, k=4)]
    rng.shuffle(words)
    return " ".join(words) + f" (note {i})"


class RatingModel(SleepyChatModel):
    """The sleepy rater; remembers which thread made each call."""

    threads: list[int] = Field(default_factory=list)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self.lock:
            self.threads.append(threading.get_ident())
        return super()._generate(messages, stop, run_manager, **kwargs)


class InstantAgentModel(BaseChatModel):
    """The agent's model: answers at once, never calls a tool."""

    @property
    def _llm_type(self) -> str:
        return "instant-fake"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("Noted, thank you."))])

    def bind_tools(self, tools: Any, **kwargs: Any) -> InstantAgentModel:  # type: ignore[override]
        return self


class Timed(ReflectiveMemoryMiddleware):
    """The middleware, timing its own work (the wrapped model call is subtracted)."""

    spent: float = 0.0

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> Any:
        start = time.perf_counter()
        inner = 0.0

        def timed(req: ModelRequest[Any]) -> ModelResponse[Any]:
            nonlocal inner
            t = time.perf_counter()
            try:
                return handler(req)
            finally:
                inner += time.perf_counter() - t

        try:
            return super().wrap_model_call(request, timed)
        finally:
            self.spent += time.perf_counter() - start - inner

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        start = time.perf_counter()
        try:
            return super().after_agent(state, runtime)
        finally:
            self.spent += time.perf_counter() - start


class TimedSyncAdd(Timed):
    """``before``: records the turn with the synchronous ``memory.add`` (the old recording)."""

    def commit_turn(self, observation: Observation) -> None:
        strategy = self.strategy
        assert isinstance(strategy, ReflectiveMemoryStrategy)
        args = strategy._add_args(observation)
        args.pop("ids", None)  # (the queue's ids, derived from the messages: add makes its own)
        strategy.memory.add(**args)


def build(path: Path, size: int, dim: int, seed: int) -> float:
    """Bulk-load ``size`` memories with given importances; returns seconds."""
    rng = random.Random(seed)
    start = time.perf_counter()
    with MemoryStream(WordEmbeddings(dim), path=path, namespace=USER) as stream:
        batch = 5_000
        for lo in range(0, size, batch):
            n = min(batch, size - lo)
            stream.add(
                [sentence(rng, lo + i) for i in range(n)],
                importances=[rng.randint(1, 10) / 10 for _ in range(n)],
            )
        for _ in range(3):  # train the ANN index (if any) so close() caches it
            stream.retrieve(sentence(rng, -1), k=5)
    return time.perf_counter() - start


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run_mode(
    path: Path, mode: str, turns: int, dim: int, delay: float, seed: int
) -> dict[str, Any]:
    rater = RatingModel(delay=delay)
    stream = MemoryStream(
        WordEmbeddings(dim),
        path=path,
        namespace=USER,
        importance_scorer=LLMImportanceScorer(rater),
    )
    memory = ReflectiveMemory(None, stream)
    middleware = (TimedSyncAdd if mode == "before" else Timed)(memory)
    agent = create_agent(InstantAgentModel(), middleware=[middleware])
    rng = random.Random(seed)
    me = threading.get_ident()
    overhead: list[float] = []
    wall: list[float] = []
    on_path: list[int] = []
    try:
        for i in range(turns + 2):  # two warm-up turns, not counted
            text = f"Today I {sentence(rng, 10_000_000 + i)}"
            before_calls = sum(1 for t in rater.threads if t == me)
            middleware.spent = 0.0
            start = time.perf_counter()
            agent.invoke({"messages": [HumanMessage(text)]}, context={"user_id": USER})
            elapsed = time.perf_counter() - start
            if i >= 2:
                wall.append(elapsed * 1000)
                overhead.append(middleware.spent * 1000)
                on_path.append(sum(1 for t in rater.threads if t == me) - before_calls)
        start = time.perf_counter()
        flushed = memory.flush(timeout=600)
        flush_s = time.perf_counter() - start
        background = sum(1 for t in rater.threads if t != me)
    finally:
        memory.close()
    return {
        "mode": mode,
        "turns": turns,
        "overhead_ms_p50": statistics.median(overhead),
        "overhead_ms_p90": percentile(overhead, 0.9),
        "turn_ms_p50": statistics.median(wall),
        "turn_ms_p90": percentile(wall, 0.9),
        "memory_llm_calls_on_path_per_turn": statistics.mean(on_path),
        "memory_llm_calls_on_path_max": max(on_path),
        "background_llm_calls": background,
        "flush_after_turns_s": flush_s,
        "flushed": flushed,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=10_000, help="memories in the stream")
    parser.add_argument("--turns", type=int, default=100, help="measured turns (after)")
    parser.add_argument("--before-turns", type=int, default=20, help="measured turns (before)")
    parser.add_argument("--rating-delay", type=float, default=0.5, help="seconds per rating call")
    parser.add_argument("--dim", type=int, default=384, help="embedding dimension")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--output", default=str(RESULTS), help="JSON file ('' writes none)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="agent-turn-") as tmp:
        path = Path(tmp) / "memory.db"
        build_s = build(path, args.size, args.dim, args.seed)
        rows = []
        for mode, turns in (("before", args.before_turns), ("after", args.turns)):
            if turns > 0:
                rows.append(run_mode(path, mode, turns, args.dim, args.rating_delay, args.seed))

    print(f"\nN = {args.size:,} memories (loaded in {build_s:.1f} s), rater {args.rating_delay}s")
    print(
        "| mode | turns | middleware p50 ms | p90 ms | turn p50 ms | p90 ms "
        "| memory LLM calls on the turn's path |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['turns']} | {r['overhead_ms_p50']:.2f} | "
            f"{r['overhead_ms_p90']:.2f} | {r['turn_ms_p50']:.2f} | {r['turn_ms_p90']:.2f} | "
            f"{r['memory_llm_calls_on_path_per_turn']:g} |"
        )
    result = {
        "size": args.size,
        "dim": args.dim,
        "rating_delay_s": args.rating_delay,
        "build_s": build_s,
        "modes": rows,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "note": "CPU shared with other jobs",
        },
        "command": "python benchmarks/agent_turn.py " + " ".join(argv or sys.argv[1:]),
    }
    if args.output:
        output = Path(args.output)
        existing: dict[str, Any] = {}
        if output.exists():
            existing = json.loads(output.read_text(encoding="utf-8"))
        existing[str(args.size)] = result
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(existing, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
