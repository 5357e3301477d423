"""The sync/async flow drivers of ``_llm`` (``run_sync``/``run_async``): a flow is written once,
and an op's error is raised inside the flow, which may handle it or let it reach the caller."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from langchain_reflective._llm import Flow, Op, run_async, run_sync


def _failing() -> int:
    raise ValueError("boom")


async def _afailing() -> int:
    raise ValueError("boom")


def _flow(op: Callable[[], Op[Any]], handle: bool) -> Flow[list[str]]:
    seen = [(yield Op(lambda: "a", None))]
    try:
        seen.append((yield op()))
    except ValueError as exc:
        if not handle:
            raise
        seen.append(f"handled {exc}")
    seen.append((yield Op(lambda: "c", None)))
    return seen


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_an_ops_error_is_raised_in_the_flow_which_may_handle_it(driver: str) -> None:
    def failing() -> Op[Any]:
        return Op(_failing, _afailing)

    def run(flow: Flow[list[str]]) -> list[str]:
        return run_sync(flow) if driver == "sync" else asyncio.run(run_async(flow))

    assert run(_flow(failing, handle=True)) == ["a", "handled boom", "c"]
    with pytest.raises(ValueError, match="boom"):
        run(_flow(failing, handle=False))


@pytest.mark.parametrize("driver", ["sync", "async", "async_without_twin"])
def test_a_guarded_op_returns_its_failure_but_lets_interrupts_through(driver: str) -> None:
    """The one guard the thinking and Reflexion flows share: an error is a value the step
    decides about; LangGraph's control flow (an interrupt) is never swallowed."""
    from langgraph.errors import GraphInterrupt

    from langchain_reflective._llm import Failure, guarded

    def raising(exc: BaseException) -> Callable[[], int]:
        def fn() -> int:
            raise exc

        return fn

    def op(fn: Callable[[], int]) -> Op[int]:
        async def afn() -> int:
            return fn()

        return Op(fn, None if driver == "async_without_twin" else afn)

    def flow(fn: Callable[[], int]) -> Flow[Any]:
        return (yield guarded(op(fn)))

    def run(fn: Callable[[], int]) -> Any:
        return run_sync(flow(fn)) if driver == "sync" else asyncio.run(run_async(flow(fn)))

    assert run(lambda: 7) == 7
    failure = run(raising(ValueError("boom")))
    assert isinstance(failure, Failure) and str(failure) == "ValueError: boom"
    with pytest.raises(GraphInterrupt):
        run(raising(GraphInterrupt()))
