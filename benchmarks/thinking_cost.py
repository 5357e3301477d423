"""What reflective thinking costs per turn, and how fast recall is at 10k stored snapshots.

**Session** (``--turns``, default 50): the thinking graph runs a scripted session over one
memory file. Each turn's context is a synthetic workspace state of about ``--context-tokens``
tokens (file list, state, a tool-output excerpt with a unique function name). A scripted
tool-calling model thinks two rounds per turn (continue, then ready), recalls an earlier turn by
number every 5th turn and by keyword every 7th, and answers the summary call with two sentences
and three insights (``--summaries model``) or with text that is no JSON, so the extractive
fallback summary is stored (``--summaries extractive``).

Per turn it reports the model calls and the prompt tokens the model received (LangChain's
``count_tokens_approximately``), for two ways of carrying the past into the prompt:

* ``summaries``: what the graph does: the accumulated summaries (no budget, so the whole
  history is carried and the compression is measured alone), plus the summary call per turn;
* ``full``: the same prompts with every past turn's full context in place of its summary (no
  summary call), i.e. seed 004's "basic" alternative.

The compression is the ratio of the injected history's tokens (full contexts / summaries);
seed 004 claims ~10-20x.

**Recall** (``--recall-size``, default 10,000 turns = 20,000 records): a second file holds that
many stored turns; recall by turn number, by context id and by keyword (hybrid retrieval) is
timed over ``--queries`` lookups each, and keyword recall is checked: the unique function name of
turn t must bring turn t's snapshot first.

Run::

    python benchmarks/thinking_cost.py
    python benchmarks/thinking_cost.py --summaries extractive --output ''

Small sizes (``--turns 6 --recall-size 200 --queries 10``) finish in seconds.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reflection_cost import WordEmbeddings

from langchain_reflective import ContextMemory, MemoryStream, RetryConfig, create_thinking_graph
from langchain_reflective._llm import neutralise

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "thinking_cost.json"
WORDS = [
    "parse",
    "load",
    "cache",
    "index",
    "render",
    "query",
    "batch",
    "stream",
    "buffer",
    "token",
    "schema",
    "route",
    "handler",
    "session",
    "config",
    "module",
    "client",
    "server",
    "worker",
    "queue",
    "retry",
    "timeout",
    "metric",
    "trace",
    "span",
    "record",
    "table",
    "column",
    "filter",
    "join",
    "sort",
    "merge",
    "split",
    "encode",
    "decode",
    "compress",
    "hash",
]
SUMMARY_MARK = "Summarise one turn"


def function_name(turn: int) -> str:
    return f"fn{turn:05d}"


def workspace_context(turn: int, tokens: int, rng: random.Random) -> str:
    """A synthetic workspace state of about ``tokens`` tokens for ``turn``."""
    files = [f"src/{w}.ts" for w in WORDS[: 3 + turn % 20]]
    lines = [
        f"Files: [{', '.join(files)}]",
        f"State: {{ turn: {turn}, step: '{rng.choice(WORDS)}', tests: {rng.randint(10, 99)} }}",
        f"Tool output (read_file src/{rng.choice(WORDS)}.ts):",
        f"export function {function_name(turn)}(rows) {{",
    ]
    while count_tokens_approximately([HumanMessage("\n".join(lines))]) < tokens:
        a, b, c = rng.sample(WORDS, 3)
        lines.append(f"  const {a}_{b} = {c}({a}, rows.{b}); // {rng.choice(WORDS)} {c}")
    lines.append("}")
    return "\n".join(lines)


def summary_reply(turn: int, rng: random.Random) -> str:
    a, b, c = rng.sample(WORDS, 3)
    return json.dumps(
        {
            "summary": f"Reviewed {function_name(turn)} in src/{a}.ts and changed how it handles "
            f"{b}. The {c} step now passes its tests.",
            "insights": [f"{function_name(turn)} does {b}", f"{a}.ts touched", f"{c} fixed"],
        }
    )


class ScriptedThinker(BaseChatModel):
    """Two rounds per turn (recalls on some turns); a summary per turn. Counts prompt tokens."""

    extractive: bool = False
    turn: int = 0
    calls: list[dict[str, Any]] = Field(default_factory=list)
    rng: Any = None

    @property
    def _llm_type(self) -> str:
        return "scripted-thinker"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedThinker:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text = "\n".join(m.text for m in messages)
        prompt = int(count_tokens_approximately(messages))
        if SUMMARY_MARK in text:
            self.calls.append({"turn": self.turn, "kind": "summary", "prompt": prompt})
            reply = AIMessage(
                "Done, it went well." if self.extractive else summary_reply(self.turn, self.rng)
            )
            return ChatResult(generations=[ChatGeneration(message=reply)])
        first = "Your earlier rounds of this turn:\n<thoughts>\n(none)" in text
        self.calls.append(
            {"turn": self.turn, "kind": "round", "prompt": prompt, "history": history_tokens(text)}
        )
        calls: list[dict[str, Any]] = []
        if first and self.turn > 1 and self.turn % 5 == 0:
            calls.append(
                {"name": "recall_context", "args": {"turn_numbers": [self.turn - 4]}, "id": "r"}
            )
        if first and self.turn > 2 and self.turn % 7 == 0:
            words = [function_name(self.turn - 2)]
            calls.append({"name": "recall_context", "args": {"keywords": words}, "id": "k"})
        calls.append(
            {
                "name": "continue_thinking",
                "args": {"continue_thinking": first, "reason": "check the rows" if first else ""},
                "id": "c",
            }
        )
        thought = (
            f"Turn {self.turn}: the loop over rows is the next thing to check."
            if first
            else "The plan is clear: change the loop, then run the tests."
        )
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(thought, tool_calls=calls))]
        )


_SUMMARIES = re.compile(r"<summaries>\n(.*?)\n</summaries>", re.DOTALL)


def history_tokens(text: str) -> int:
    """Tokens of the injected summaries block of a thinking prompt."""
    m = _SUMMARIES.search(text)
    body = m.group(1) if m else ""
    return 0 if body == "(none)" else int(count_tokens_approximately([HumanMessage(body)]))


def full_block_tokens(contexts: Sequence[str]) -> int:
    """Tokens of the same block holding every past turn's full context instead."""
    if not contexts:
        return 0
    lines = [neutralise(f"[Turn {i}] {c}") for i, c in enumerate(contexts, 1)]
    return int(count_tokens_approximately([HumanMessage("\n".join(lines))]))


def run_session(turns: int, context_tokens: int, extractive: bool, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    model = ScriptedThinker(extractive=extractive, rng=rng)
    rows = []
    contexts: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        stream = MemoryStream(WordEmbeddings(size=384), path=Path(tmp) / "session.db")
        graph = create_thinking_graph(
            model,
            stream,
            summary_token_budget=None,
            thinking_token_budget=10**9,
            retry=RetryConfig(attempts=1),
        )
        for turn in range(1, turns + 1):
            model.turn = turn
            context = workspace_context(turn, context_tokens, rng)
            out = graph.invoke({"context": context})
            snapshot = ContextMemory(stream).context_by_turn(turn)
            assert snapshot is not None
            calls = [c for c in model.calls if c["turn"] == turn]
            rounds = [c for c in calls if c["kind"] == "round"]
            summ = sum(c["prompt"] for c in calls if c["kind"] == "summary")
            hist = sum(c["history"] for c in rounds)
            full_hist = full_block_tokens(contexts) * len(rounds)
            round_prompt = sum(c["prompt"] for c in rounds)
            rows.append(
                {
                    "turn": turn,
                    "llm_calls_summaries": len(calls),
                    "llm_calls_full": len(rounds),
                    "prompt_tokens_summaries": round_prompt + summ,
                    "prompt_tokens_full": round_prompt - hist + full_hist,
                    "history_tokens_summaries": hist,
                    "history_tokens_full": full_hist,
                    "recalled": len(out["recalled"]),
                    "fallbacks": out["fallback_counts"],
                    "context_tokens": snapshot.token_count,
                    "summary_tokens": out["summary"]["token_count"],
                }
            )
            contexts.append(context)
        stream.close()
    mean_ctx = statistics.fmean(r["context_tokens"] for r in rows)
    mean_sum = statistics.fmean(r["summary_tokens"] for r in rows)
    last = rows[-1]
    return {
        "summaries": "extractive" if extractive else "model",
        "turns": turns,
        "rows": rows,
        "mean_context_tokens": round(mean_ctx, 1),
        "mean_summary_tokens": round(mean_sum, 1),
        "compression": round(mean_ctx / mean_sum, 1),
        "history_compression_last_turn": round(
            last["history_tokens_full"] / max(1, last["history_tokens_summaries"]), 1
        ),
        "total_prompt_tokens_summaries": sum(r["prompt_tokens_summaries"] for r in rows),
        "total_prompt_tokens_full": sum(r["prompt_tokens_full"] for r in rows),
        "total_llm_calls_summaries": sum(r["llm_calls_summaries"] for r in rows),
        "total_llm_calls_full": sum(r["llm_calls_full"] for r in rows),
        "fallbacks": sum(sum(r["fallbacks"].values()) for r in rows),
    }


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_recall(size: int, queries: int, context_tokens: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        stream = MemoryStream(WordEmbeddings(size=384), path=Path(tmp) / "recall.db")
        memory = ContextMemory(stream)
        start = time.perf_counter()
        for turn in range(1, size + 1):
            summary = json.loads(summary_reply(turn, rng))
            memory.record_turn(
                turn,
                workspace_context(turn, context_tokens, rng),
                summary["summary"],
                summary["insights"],
            )
        load_s = time.perf_counter() - start
        turns = [rng.randint(1, size) for _ in range(queries)]
        timings: dict[str, list[float]] = {"turn_number": [], "context_id": [], "keywords": []}
        hits = 0
        memory.recall(keywords=["warm up"], limit=3)  # first retrieval loads the caches
        for t in turns:
            for kind, kwargs in (
                ("turn_number", {"turn_numbers": [t]}),
                ("context_id", {"context_ids": [memory.context_id(t)]}),
                ("keywords", {"keywords": [function_name(t)]}),
            ):
                t0 = time.perf_counter()
                got = memory.recall(limit=3, **kwargs)  # type: ignore[arg-type]
                timings[kind].append((time.perf_counter() - t0) * 1000)
                if kind == "keywords":
                    hits += bool(got.snapshots) and got.snapshots[0].turn == t
        records = stream.count()
        stream.close()
    return {
        "stored_turns": size,
        "records": records,
        "load_seconds": round(load_s, 1),
        "queries": queries,
        "keyword_hit_at_1": round(hits / queries, 3),
        **{
            f"{kind}_ms": {
                "p50": round(statistics.median(v), 3),
                "p95": round(percentile(v, 0.95), 3),
            }
            for kind, v in timings.items()
        },
    }


def print_tables(session: dict[str, Any], recall: dict[str, Any]) -> None:
    print(f"\nSession: {session['turns']} turns, summaries from the {session['summaries']}")
    print("turn | calls (summ/full) | prompt tokens (summ/full) | history tokens (summ/full)")
    for r in session["rows"]:
        if r["turn"] in (1, 2, 5, 10, 25, 50) or r["turn"] == session["turns"]:
            print(
                f"{r['turn']:>4} | {r['llm_calls_summaries']:>3} / {r['llm_calls_full']:<3}"
                f"        | {r['prompt_tokens_summaries']:>7} / {r['prompt_tokens_full']:<8}"
                f"       | {r['history_tokens_summaries']:>6} / {r['history_tokens_full']}"
            )
    print(
        f"total: calls {session['total_llm_calls_summaries']} / {session['total_llm_calls_full']},"
        f" prompt tokens {session['total_prompt_tokens_summaries']:,} / "
        f"{session['total_prompt_tokens_full']:,}"
    )
    print(
        f"context {session['mean_context_tokens']} tokens, summary "
        f"{session['mean_summary_tokens']} tokens: compression {session['compression']}x "
        f"(history at the last turn {session['history_compression_last_turn']}x)"
    )
    print(f"\nRecall at {recall['stored_turns']:,} stored turns ({recall['records']:,} records)")
    for kind in ("turn_number", "context_id", "keywords"):
        t = recall[f"{kind}_ms"]
        print(f"  by {kind:<12} p50 {t['p50']:.3f} ms  p95 {t['p95']:.3f} ms")
    print(f"  keyword hit@1 {recall['keyword_hit_at_1']}")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--context-tokens", type=int, default=800)
    parser.add_argument("--summaries", choices=["model", "extractive"], default="model")
    parser.add_argument("--recall-size", type=int, default=10_000, help="stored turns")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--output", default=str(RESULTS), help="JSON file ('' writes none)")
    args = parser.parse_args(argv)
    session = run_session(
        args.turns, args.context_tokens, args.summaries == "extractive", args.seed
    )
    recall = run_recall(args.recall_size, args.queries, args.context_tokens, args.seed)
    print_tables(session, recall)
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.python_version()}",
        "args": vars(args),
        "session": session,
        "recall": recall,
    }
    if args.output:
        output = Path(args.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        existing = json.loads(output.read_text(encoding="utf-8")) if output.exists() else {}
        existing[args.summaries] = result
        output.write_text(json.dumps(existing, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
