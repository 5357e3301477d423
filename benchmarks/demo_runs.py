"""Does the offline demo show reflection working? Runs ``reflective demo`` N times and counts.

Each run is the real command (``reflective demo --fresh --prefer local``: the embedded MiniLM
embeddings and the tiny Gemma 3 270M base model on a local llama.cpp server, prompted
completion-style) on the shipped sample conversation, in its own process and memory file.
Per run, from the memory file (not from the printed wording):

* importance ratings of the observations from the model vs the heuristic fallback;
* reflections stored, and whether every one cites evidence that is a stored observation;

and from the output, the questions the model asked itself (well-formed: What/How/Why ... ?).
A run meets the issue's targets when >= 90% of ratings come from the model, 3 well-formed
questions were asked, and >= 1 stored insight cites valid evidence.

Run::

    python benchmarks/demo_runs.py --runs 5

Writes ``benchmarks/results/demo_runs.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "demo_runs.json"
QUESTION = re.compile(r"^(What|How|Why) [^?]+\?$")


def reflective_command() -> list[str]:
    script = Path(sys.executable).with_name("reflective")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from langchain_reflective.cli import main; main()"]


def questions_from(output: str) -> list[str]:
    """The bullets under 'Questions the model asked itself:' (one line each, folded back)."""
    if "Questions the model asked itself:" not in output:
        return []
    block = output.split("Questions the model asked itself:", 1)[1].splitlines()[1:]
    questions: list[str] = []
    for line in block:
        if line.startswith("  • "):
            questions.append(line[4:].strip())
        elif line.startswith("    ") and questions:  # a wrapped question
            questions[-1] += " " + line.strip()
        else:
            break
    return questions


def facts_from(db: Path) -> dict[str, Any]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT id, kind, importance_source, evidence FROM memories").fetchall()
    observations = {r[0] for r in rows if r[1] == "observation"}
    sources = [r[2] for r in rows if r[1] == "observation"]
    reflections = [json.loads(r[3]) for r in rows if r[1] == "reflection"]
    return {
        "observations": len(observations),
        "rated_by_model": sources.count("llm"),
        "rated_by_fallback": sources.count("heuristic"),
        "reflections": len(reflections),
        "reflections_with_valid_evidence": sum(
            1 for ev in reflections if ev and set(ev) <= observations
        ),
    }


def one_run(index: int, workdir: Path) -> dict[str, Any]:
    db = workdir / f"demo-{index}.db"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200"}
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        env.pop(key, None)
    started = time.perf_counter()
    done = subprocess.run(
        [*reflective_command(), "demo", "--fresh", "--prefer", "local", "--db", str(db)],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
        timeout=900,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        return {"run": index, "ok": False, "seconds": seconds, "error": done.stderr[-500:]}
    questions = questions_from(done.stdout)
    facts = facts_from(db)
    well_formed = sum(1 for q in questions if QUESTION.match(q))
    model_share = facts["rated_by_model"] / max(1, facts["observations"])
    return {
        "run": index,
        "ok": True,
        "seconds": round(seconds, 1),
        **facts,
        "model_share": round(model_share, 3),
        "questions": questions,
        "well_formed_questions": well_formed,
        "meets_targets": model_share >= 0.9
        and well_formed == 3
        and facts["reflections_with_valid_evidence"] >= 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(1, args.runs + 1):
            run = one_run(i, Path(tmp))
            runs.append(run)
            print(json.dumps({k: v for k, v in run.items() if k != "questions"}), flush=True)
    print()
    print(
        "| run | ratings model/fallback | questions well-formed | insights (valid evidence) "
        "| time | meets targets |"
    )
    print("|---|---|---|---|---|---|")
    for r in runs:
        if not r["ok"]:
            print(f"| {r['run']} | failed | | | {r['seconds']:.0f} s | no |")
            continue
        print(
            f"| {r['run']} | {r['rated_by_model']}/{r['rated_by_fallback']} "
            f"| {r['well_formed_questions']}/{len(r['questions'])} "
            f"| {r['reflections']} ({r['reflections_with_valid_evidence']}) "
            f"| {r['seconds']:.0f} s | {'yes' if r['meets_targets'] else 'no'} |"
        )
    met = sum(1 for r in runs if r.get("meets_targets"))
    print(f"\n{met} of {len(runs)} runs meet the targets (>= 4 of 5 required).")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "command": f"python benchmarks/demo_runs.py --runs {args.runs}",
                "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                "load_average_at_end": os.getloadavg(),
                "runs": runs,
                "runs_meeting_targets": met,
            },
            indent=2,
            ensure_ascii=False,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
