"""What the thinking API and the thinking graph do with odd input: a missing turn, a string where
a list is expected, bad sizes, unreadable tool calls of the model, turns it asks for that are not
stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_reflective import ContextMemory, MemoryStream, RetryConfig

NO_RETRY = RetryConfig(attempts=1)


@pytest.fixture
def stream(tmp_path: Path) -> Iterator[MemoryStream]:
    from tests.fakes import WordEmbeddings

    with MemoryStream(WordEmbeddings(), path=tmp_path / "inputs.db") as s:
        yield s


@pytest.fixture
def memory(stream: MemoryStream) -> ContextMemory:
    mem = ContextMemory(stream)
    mem.record_turn(1, "alpha beta", "alpha", ["first insight"])
    mem.record_turn(2, "gamma delta", "gamma", [])
    return mem


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_a_missing_turn_reads_no_other_snapshot(
    memory: ContextMemory, monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    """A recall of a turn not stored read every snapshot of the namespace (a fallback for ids
    imports no longer give: 57 MB for 300 large turns); it is one read by id."""
    stream = memory.stream
    scans: list[Any] = []
    recent, arecent = stream.recent, stream.arecent

    def spy(n: Any = None, **kwargs: Any) -> Any:
        scans.append(n)
        return recent(n, **kwargs)

    async def aspy(n: Any = None, **kwargs: Any) -> Any:
        scans.append(n)
        return await arecent(n, **kwargs)

    monkeypatch.setattr(stream, "recent", spy)
    monkeypatch.setattr(stream, "arecent", aspy)
    if use_async:
        found = await memory.arecall(turn_numbers=[1, 350])
        assert await memory.asummary_by_turn(350) is None
        assert await memory.acontext_by_turn(350) is None
    else:
        found = memory.recall(turn_numbers=[1, 350])
        assert memory.summary_by_turn(350) is None and memory.context_by_turn(350) is None
    assert [s.turn for s in found.snapshots] == [1] and found.missing == ["turn 350"]
    assert None not in scans


def test_a_single_string_is_one_item_not_its_characters(memory: ContextMemory) -> None:
    """``recall(keywords="alpha")`` searched for "a l p h a", ``context_ids="ctx_1"`` asked for
    five one-letter ids and ``record_turn(insights="abc")`` stored the insights a, b and c."""
    assert [s.turn for s in memory.recall(keywords="alpha").snapshots] == [1]
    found = memory.recall(context_ids=memory.context_id(2))
    assert [s.turn for s in found.snapshots] == [2] and found.missing == []
    assert memory.recall(context_ids="nope").missing == ["id nope"]
    assert [s.turn for s in memory.recall(turn_numbers=2).snapshots] == [2]  # one number
    _, summ = memory.record_turn(3, "c", "s", "one insight", tool_calls="grep")
    assert summ.insights == ("one insight",)
    snap = memory.context_by_turn(3)
    assert snap is not None and snap.tool_calls == ("grep",)


def test_turn_numbers_given_as_a_string_are_refused_clearly(memory: ContextMemory) -> None:
    """``recall(turn_numbers="12")`` complained about the turn number '1'."""
    from langchain_reflective import InvalidMemoryError

    with pytest.raises(InvalidMemoryError, match=r"turn_numbers.*'12'"):
        memory.recall(turn_numbers="12")  # type: ignore[arg-type]


def test_the_model_may_give_one_keyword_id_or_turn_without_a_list(
    memory: ContextMemory,
) -> None:
    """``recall_context(keywords="alpha")`` was a failed recall (a validation error)."""
    from langchain_reflective import create_thinking_graph
    from tests.thinking_fakes import Rounds, decide, recall, round_

    thinker = Rounds(
        script=[
            round_(
                "t",
                recall("a", keywords="alpha", turn_numbers=2, context_ids="nope"),
                decide(False, "ok", "d"),
            )
        ]
    )
    graph = create_thinking_graph(thinker, memory.stream, retry=NO_RETRY)
    out = graph.invoke({"context": "what was alpha?", "record": False})
    assert out["fallback_counts"] == {}
    assert sorted(r["turn"] for r in out["recalled"]) == [1, 2]


@pytest.mark.parametrize("k", [0, -1, True, 2.5, "3"])
async def test_search_refuses_a_bad_k_as_it_says(memory: ContextMemory, k: Any) -> None:
    """``k=0`` and ``k=-1`` returned nothing and ``k=True`` was taken as 1, though the
    docstring says a bad ``k`` raises."""
    from langchain_reflective import InvalidMemoryError

    with pytest.raises(InvalidMemoryError, match="k must be a positive integer"):
        memory.search(["alpha"], k=k)
    with pytest.raises(InvalidMemoryError, match="k must be a positive integer"):
        await memory.asearch(["alpha"], k=k)


@pytest.mark.parametrize("budget", [-5, "x", True, 2.5])
def test_the_middleware_refuses_a_bad_conversation_budget(
    stream: MemoryStream, budget: Any
) -> None:
    from langchain_reflective.thinking.middleware import ThinkingMiddleware
    from tests.thinking_fakes import Rounds

    with pytest.raises(ValueError, match="conversation_token_budget"):
        ThinkingMiddleware(Rounds(), stream, conversation_token_budget=budget)
    ThinkingMiddleware(Rounds(), stream, conversation_token_budget=0)  # (no earlier messages)


@pytest.mark.parametrize("chars", [0, -1, True, "9"])
def test_prompts_refuse_a_bad_item_length(chars: Any) -> None:
    """``max_item_chars=0`` was accepted, and every line of data became "…"."""
    from langchain_reflective.thinking import ThinkingPrompts

    with pytest.raises(ValueError, match="max_item_chars"):
        ThinkingPrompts(max_item_chars=chars)


def test_an_unparsable_tool_call_of_the_model_takes_its_fallback(stream: MemoryStream) -> None:
    """A ``continue_thinking`` whose arguments are not JSON (LangChain puts it in
    ``invalid_tool_calls``) was read as "ready to act" with no fallback logged or counted; an
    unparsable ``recall_context`` went unnoticed too."""
    from langchain_core.messages import AIMessage

    from langchain_reflective import create_thinking_graph
    from tests.thinking_fakes import Rounds, decide, round_

    def bad(name: str) -> Any:
        return {"name": name, "args": "{not json", "id": name, "error": "bad json"}

    thinker = Rounds(
        script=[
            AIMessage("thinking", invalid_tool_calls=[bad("continue_thinking")]),
            AIMessage("recalling", invalid_tool_calls=[bad("recall_context")]),
            round_("done", decide(False, "ok", "d")),
        ]
    )
    graph = create_thinking_graph(thinker, stream, retry=NO_RETRY)
    first = graph.invoke({"context": "c", "record": False})
    assert first["fallback_counts"] == {"malformed_decision": 1}
    assert "unreadable continue_thinking" in first["fallbacks"][0]["detail"]
    assert not first["thoughts"][0]["continue_thinking"]
    second = graph.invoke({"context": "c", "record": False})
    assert second["fallback_counts"] == {"recall_failed": 1}
    assert [t["continue_thinking"] for t in second["thoughts"]] == [True, False]


def test_a_bad_turn_number_is_reported_missing_not_failing_the_recall(
    memory: ContextMemory,
) -> None:
    """``recall(turn_numbers=[0, 1])`` raised, so the model's recall of turn 1 failed whole."""
    found = memory.recall(turn_numbers=[0, 1, -3, 99])
    assert [s.turn for s in found.snapshots] == [1]
    assert found.missing == ["turn 0", "turn -3", "turn 99"]


def test_the_model_is_told_which_turns_and_ids_it_asked_for_are_not_stored(
    memory: ContextMemory,
) -> None:
    """``RecallResult.missing`` was dropped: the next round showed the recalled contexts only,
    so the model could not tell a turn that does not exist from one it failed to ask for."""
    from langchain_reflective import create_thinking_graph
    from tests.thinking_fakes import Rounds, decide, recall, round_

    thinker = Rounds(
        script=[
            round_(
                "t",
                recall("a", turn_numbers=[0, 1, 99], context_ids=["nope"]),
                decide(True, "look", "d"),
            ),
            round_("u", recall("b", turn_numbers=list(range(100, 130)))),
            round_("v", decide(False, "ok", "e")),
        ]
    )
    graph = create_thinking_graph(thinker, memory.stream, retry=NO_RETRY)
    out = graph.invoke({"context": "what happened?", "record": False})
    assert out["fallback_counts"] == {} and [r["turn"] for r in out["recalled"]] == [1]
    first, second, _ = out["thoughts"]
    assert first["recall_missing"] == ["turn 0", "turn 99", "id nope"]
    assert len(second["recall_missing"]) == 11 and second["recall_missing"][-1] == "20 more"
    prompt = thinker.thinking_calls[1][-1].text
    assert "not stored: turn 0, turn 99, id nope" in prompt
    assert "not stored: turn 0" in out["action_context"]
