"""The twin rule, checked by introspection: every public sync method (or classmethod) of a class
that does I/O has an async ``a`` twin with its parameters, its kind (a classmethod's is one),
its return annotation and a docstring saying whose twin it is."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

__all__ = ["assert_twins"]


def _is_async(fn: Any) -> bool:
    """A coroutine function, or an async context manager's (``areflection_lock``)."""
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(
        getattr(fn, "__wrapped__", None)
    )


def _params(fn: Any) -> list[tuple[str, str, Any, Any]]:
    return [
        (p.name, p.kind.name, p.default, p.annotation)
        for p in inspect.signature(fn).parameters.values()
    ]


def assert_twins(cls: type, no_twin: Mapping[str, str]) -> set[str]:
    """Assert the rule for ``cls``, whose sync methods without a twin are exactly ``no_twin``
    (name: why none); returns the names of its sync methods that have one."""
    public = {
        name: getattr(cls, name)
        for name, value in inspect.getmembers(cls)
        if name[0] != "_" and (inspect.isfunction(value) or inspect.ismethod(value))
    }
    sync = {name for name, fn in public.items() if not _is_async(fn)}
    assert {name for name in sync if "a" + name not in public} == set(no_twin)
    assert {name for name in set(public) - sync if name[1:] not in sync} == set()
    twinned = sync - set(no_twin)
    for name in twinned:
        fn, twin = public[name], public["a" + name]
        assert _is_async(twin), name
        assert _params(twin) == _params(fn), name
        assert inspect.ismethod(twin) == inspect.ismethod(fn), name  # a classmethod's too
        assert (inspect.getdoc(twin) or "").startswith(f"Async twin of :meth:`{name}`"), name
        if inspect.iscoroutinefunction(twin):
            assert (
                inspect.signature(twin).return_annotation == inspect.signature(fn).return_annotation
            ), name
    return twinned
