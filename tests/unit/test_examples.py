"""Every file in ``examples/`` runs here, with a fake chat model and bag-of-words embeddings.

Convention: each example defines ``main(model=None, embeddings=None)``; ``None`` means the
embedded local (or OpenAI) defaults when run as a script. The suite passes fakes, so nothing
leaves the machine.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain_core._api import LangChainDeprecationWarning
from langchain_core.messages import HumanMessage

from langchain_reflective.memory import MEMORY_PREAMBLE
from tests.fakes import WordEmbeddings
from tests.thinking_fakes import decide, recall, round_, seed_script, summary
from tests.unit.reflexion_fakes import BUGGY_CODE, FIXED_CODE, good_reflection
from tests.unit.test_middleware import FakeChat, fenced, system_text, tool_call

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.py"))


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LangSmith key or tracing: examples must run locally."""
    for var in (
        "LANGSMITH_API_KEY",
        "LANGCHAIN_API_KEY",
        "LANGSMITH_TRACING",
        "LANGCHAIN_TRACING_V2",
    ):
        monkeypatch.delenv(var, raising=False)


def load(path: Path) -> Iterator[ModuleType]:
    name = f"_example_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pydantic resolve annotations through it
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


def last_user_text(call: list[Any]) -> str:
    return next((m.text for m in reversed(call) if isinstance(m, HumanMessage)), "")


# -- what each example must show (examples without an entry just have to run) -----------------


def check_lcel_chain(result: dict[str, Any], model: FakeChat) -> None:
    assert len(result["answers"]) == 2
    assert (
        "Alice is training for the Lisbon half marathon in May"
        in result["retrieved"]["What is Alice training for?"]
    )
    assert all(MEMORY_PREAMBLE in system_text(call) for call in model.calls)


def check_chat_with_history(result: dict[str, Any], model: FakeChat) -> None:
    assert result["history"] == {"monday": 6, "tuesday": 2}  # a new thread has a new history
    assert result["insights"]
    tuesday = next(c for c in model.agent_calls if last_user_text(c) == "What's my cat's name?")
    assert "Miso" in fenced(system_text(tuesday))  # ... but the same long-term memory


def check_agent_with_memory(result: dict[str, Any], model: FakeChat) -> None:
    assert result["errors"] == []
    alice, bob = result["alice"], result["bob"]
    assert "User: I'm vegetarian and I love spicy food." in alice["observations"]
    assert "Alice is vegetarian" in alice["observations"]  # saved by the save_memory tool
    assert alice["insights"] and bob["insights"]
    everything_bob = " ".join(bob["observations"] + bob["insights"])
    assert "vegetarian" not in everything_bob and "Jo" not in everything_bob
    bob_calls = [c for c in model.agent_calls if "cello" in last_user_text(c)]
    assert bob_calls and all("vegetarian" not in system_text(c) for c in bob_calls)


def check_legacy_chain(result: dict[str, Any], model: FakeChat) -> None:
    assert len(result["answers"]) == 3 and result["memories"] >= 6
    assert result["insights"]


def check_langsmith_experiment(result: dict[str, Any], model: FakeChat) -> None:
    assert result["mode"] == "local"
    assert len(result["results"]) == 5
    assert result["summary"]["memory_recall"] >= 0.6


def check_custom_memory(result: dict[str, Any], model: FakeChat) -> None:
    # the two longest answers (most important to this memory) are the ones kept ...
    assert result["kept"] == [
        "I'm allergic to peanuts.",
        "My daughter Lina starts school in September.",
    ]
    # ... and the last question was asked with exactly those two turns, fenced as data
    last = fenced(system_text(model.agent_calls[-1]))
    assert "allergic to peanuts" in last and "Lina starts school" in last
    assert "Nice weather" not in last
    assert MEMORY_PREAMBLE in system_text(model.agent_calls[-1])


def check_reflective_thinking(result: dict[str, Any], model: FakeChat) -> None:
    t1, t2, t3 = result["outputs"]
    assert [t["continue_thinking"] for t in t1["thoughts"]] == [True, False]
    assert [r["turn"] for r in t2["recalled"]] == [1]  # recalled by number
    assert [r["turn"] for r in t3["recalled"]] == [2]  # by "bottleneck", "parseData"
    prompts = [
        "\n".join(m.text for m in c) for c in model.calls if "Think." in "".join(m.text for m in c)
    ]
    assert "[Turn 1] Analyzed codebase structure" in prompts[2]  # turn 2's first round
    assert "[Turn 2] Identified performance bottleneck" in prompts[4]  # turn 3's
    assert all(not o["fallbacks"] for o in result["outputs"])
    assert result["resumed"] == result["accumulated"] and result["next_turn"] == 4
    assert result["exported"] == result["imported"] == 6
    assert len(result["summaries_from_copy"]) == 3


def check_agent_with_thinking(result: dict[str, Any], model: FakeChat) -> None:
    assert len(result["summaries"]["alice"]) == 2 and len(result["summaries"]["bob"]) == 1
    first = result["snapshots"]["alice"][0]
    assert "Tool call: read_file" in first and "Tool result (read_file)" in first
    agent_calls = [c for c in model.calls if system_text(c).startswith("You are a coding")]
    second_turn = next(c for c in agent_calls if "bottleneck?" in last_user_text(c))
    assert "Recalled: [Turn 1 |" in fenced(system_text(second_turn))
    bob = [c for c in model.calls if "files does the project" in "".join(m.text for m in c)]
    assert bob and all("parseData" not in "".join(m.text for m in c) for c in bob)


def check_reflexion_coding(result: dict[str, Any], model: FakeChat) -> None:
    assert result["status"] == "passed" and result["trials"] == 2  # real pytest, twice
    assert result["reflections"][0][:40] in system_text(model.calls[2])  # fenced into try 2


def check_reflexion_agent(result: dict[str, Any], model: FakeChat) -> None:
    assert result["status"] == "passed" and "395" in result["output"]


CHECKS: dict[str, Callable[[dict[str, Any], FakeChat], None]] = {
    "lcel_chain": check_lcel_chain,
    "chat_with_history": check_chat_with_history,
    "agent_with_memory": check_agent_with_memory,
    "legacy_chain": check_legacy_chain,
    "langsmith_experiment": check_langsmith_experiment,
    "custom_memory": check_custom_memory,
    "reflective_thinking": check_reflective_thinking,
    "agent_with_thinking": check_agent_with_thinking,
    "reflexion_coding": check_reflexion_coding,
    "reflexion_agent": check_reflexion_agent,
}

SCRIPTS: dict[str, list[Any]] = {
    "custom_memory": [
        "Noted: you are allergic to peanuts. I will avoid peanuts, peanut oil and satay sauce, "
        "and check recipes for hidden nuts.",
        "Indeed!",
        "How exciting! I will remember that Lina starts school in September and can help "
        "with lunch ideas, packing lists and routines.",
        "A peanut-free pasta salad.",
    ],
    "agent_with_memory": [
        tool_call("save_memory", {"text": "Alice is vegetarian", "importance": 0.8}),
        "Noted: vegetarian, spicy food.",
    ],
    "reflexion_coding": [BUGGY_CODE, good_reflection(1), FIXED_CODE],
    "reflexion_agent": [
        "The answer is 400.",
        good_reflection(1),
        tool_call("calculate", {"expression": "17 * 23 + 4"}),
        "The answer is 395.",
    ],
}

SCRIPTS["reflective_thinking"] = seed_script()
SCRIPTS["agent_with_thinking"] = [
    round_("Look at utils.ts first.", decide(False, "Read the file", "a1")),
    tool_call("read_file", {"path": "utils.ts"}),
    "parseData loops over the rows twice: quadratic.",
    summary("parseData in utils.ts is quadratic and is the bottleneck", ["parseData O(n²)"]),
    round_(
        "What did we find?",
        recall("a2", keywords=["bottleneck", "parseData"]),
        decide(False, "I remember", "a2"),
    ),
    "parseData was the bottleneck.",
    summary("Reminded the user that parseData was the bottleneck", []),
    round_("A new user with no history.", decide(False, "Answer", "b1")),
    "main.ts and utils.ts.",
    summary("Listed the project files", []),
]

DEPRECATED = {"legacy_chain"}  # examples that use deprecated classic APIs on purpose


def test_examples_exist() -> None:
    assert {p.stem for p in EXAMPLES} >= set(CHECKS)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path: Path) -> None:
    for module in load(path):
        main = getattr(module, "main", None)
        assert callable(main), f"{path.name} must define main(model=None, embeddings=None)"
        params = inspect.signature(main).parameters
        assert list(params)[:2] == ["model", "embeddings"], f"{path.name}: main's signature"
        assert params["model"].default is None and params["embeddings"].default is None

        model = FakeChat(script=list(SCRIPTS.get(path.stem, [])))
        if path.stem in DEPRECATED:
            with pytest.warns(LangChainDeprecationWarning):
                result = main(model=model, embeddings=WordEmbeddings())
        else:
            result = main(model=model, embeddings=WordEmbeddings())
        if path.stem in CHECKS:
            CHECKS[path.stem](result, model)


def test_langsmith_experiment_uses_langsmith_evaluate_with_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a key, the example creates the dataset once and calls ``langsmith.evaluate``.

    LangSmith itself is replaced by an in-process fake that runs the target and evaluators the
    way ``evaluate`` does, so the wiring is tested without any network.
    """
    import langsmith

    calls: dict[str, Any] = {}

    class FakeClient:
        def has_dataset(self, *, dataset_name: str) -> bool:
            calls["has_dataset"] = dataset_name
            return False

        def create_dataset(self, name: str, **kwargs: Any) -> Any:
            calls["dataset"] = name
            return type("Dataset", (), {"id": "ds-1"})()

        def create_examples(self, *, dataset_id: str, examples: list[dict[str, Any]]) -> None:
            calls["examples"] = examples

    def fake_evaluate(target: Any, /, *, data: str, evaluators: list[Any], **kwargs: Any) -> Any:
        calls["evaluate"] = {"data": data, **kwargs}
        scores = []
        for example in calls["examples"]:
            outputs = target.invoke(example["inputs"])
            scores += [e(outputs=outputs, reference_outputs=example["outputs"]) for e in evaluators]
        calls["scores"] = scores
        return type("Results", (), {"experiment_name": "reflective-memory-qa-1"})()

    monkeypatch.setenv("LANGSMITH_API_KEY", "test-key-not-used")
    monkeypatch.setattr(langsmith, "Client", FakeClient)
    monkeypatch.setattr(langsmith, "evaluate", fake_evaluate)
    for module in load(EXAMPLES_DIR / "langsmith_experiment.py"):
        result = module.main(model=FakeChat(), embeddings=WordEmbeddings())
        assert result == {"mode": "langsmith", "experiment": "reflective-memory-qa-1"}
        assert calls["evaluate"]["data"] == calls["dataset"] == module.DATASET_NAME
        assert calls["evaluate"]["metadata"]["namespace"] == module.NAMESPACE
        assert {s["key"] for s in calls["scores"]} == {"memory_recall", "answer_mentions"}
