"""Reflective thinking survives a restart: a new process on the same SQLite file resumes with
the same accumulated summaries and the next turn number; export -> import reproduces them.

The first process plays seed 004's three turns (scripted tool-calling model) on a real memory
file and exits; this process reopens the file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from langchain_reflective import ContextMemory, MemoryStream, create_thinking_graph
from langchain_reflective.thinking import format_summaries
from tests.fakes import WordEmbeddings
from tests.thinking_fakes import Rounds, decide, round_

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import json, sys
    from langchain_reflective import ContextMemory, MemoryStream, RetryConfig, create_thinking_graph
    from tests.fakes import WordEmbeddings
    from tests.thinking_fakes import seed_script
    from tests.unit.test_middleware import FakeChat

    db, export = sys.argv[1], sys.argv[2]
    stream = MemoryStream(WordEmbeddings(), path=db, namespace="project-x")
    graph = create_thinking_graph(
        FakeChat(script=seed_script()), stream, retry=RetryConfig(attempts=1)
    )
    contexts = ["Files: [main.ts, utils.ts, config.ts]", "benchmarkRun: true", "optimized: true"]
    outs = [graph.invoke({"context": c}) for c in contexts]
    ContextMemory(stream).export_jsonl(export)
    stream.close()
    print(json.dumps({
        "accumulated": outs[-1]["accumulated_summaries"],
        "recalled": [[r["turn"] for r in o["recalled"]] for o in outs],
    }))
    """
)


def test_a_new_process_resumes_with_the_same_summaries(tmp_path: Path) -> None:
    db, export = tmp_path / "thinking.db", tmp_path / "thinking.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), str(export)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    child = json.loads(done.stdout.strip().splitlines()[-1])
    assert child["recalled"] == [[], [1], [2]]
    assert child["accumulated"].count("[Turn ") == 3

    with MemoryStream(WordEmbeddings(), path=db, namespace="project-x") as stream:
        memory = ContextMemory(stream)
        resumed = "\n".join(format_summaries([s.to_dict() for s in memory.accumulated_summaries()]))
        assert resumed == child["accumulated"]
        assert memory.next_turn() == 4
        # turn 4 in this process: its prompt carries the three summaries; it is stored as turn 4
        model = Rounds(script=[round_("Resuming.", decide(False, "ready", "r"))])
        out = create_thinking_graph(model, stream).invoke(
            {"context": "State: resumed", "messages": [HumanMessage("Go on.")]}
        )
        prompt = "\n".join(m.text for m in model.thinking_calls[0])
        for line in child["accumulated"].splitlines():
            assert line in prompt
        assert out["turn"] == 4 and [s["turn"] for s in out["summaries"]] == [1, 2, 3, 4]

    with MemoryStream(WordEmbeddings(), path=tmp_path / "copy.db", namespace="project-x") as copy:
        memory = ContextMemory(copy)
        assert memory.import_jsonl(export) == 6
        imported = "\n".join(
            format_summaries([s.to_dict() for s in memory.accumulated_summaries()])
        )
        assert imported == child["accumulated"]
        # both turns 2 and 3 mention parseData; turn 2 (also "bottleneck") ranks first
        assert [s.turn for s in memory.search(["bottleneck", "parseData"])] == [2, 3]
