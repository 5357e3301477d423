"""Seeded differential test: random batches on ReflectiveStore and LangGraph's InMemoryStore.

Values, keys, nested namespace labels with ``/``, ``%`` and non-ASCII text, overwrites and
deletes: after every batch both stores hold the same items and list the same namespaces, and
every read of the batch agrees (search without a query as a set, as the orders differ by design;
a query search as a set of keys when it returns everything that matches). Equality filters and
the operators on numbers are compared; ordering non-numbers (``InMemoryStore`` calls
``float()``) is left out on purpose.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langgraph.store.base import GetOp, Op, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from langchain_reflective import MemoryStream, ReflectiveStore

LABELS = ["a", "b", "%", "/", "%2F", "a/b", "é", "日本", "😀", " ", "*"]
KEYS = ["k", "", " ", "/", "%", "é", "😀", "a.b", "kv", "\n"]


def _value(r: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {}
    if r.random() < 0.8:
        value["n"] = r.choice([0, 1, 2, 2.5, -1, 10**20, -0.0])
    if r.random() < 0.5:
        value["m"] = r.choice([True, False, None, "2", [1, True], {"x": None}, {"y": [1.5]}])
    return value


def _filter(r: random.Random) -> dict[str, Any] | None:
    return r.choice(
        [
            None,
            {"n": r.choice([0, 1, 2.5])},
            {"m": r.choice([True, None, "2", [1, True], {"x": None}])},
            {"n": {r.choice(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]): r.choice([0, 1, 2.5])}},
        ]
    )


def _ns(r: random.Random, seen: list[tuple[str, ...]]) -> tuple[str, ...]:
    if seen and r.random() < 0.6:
        base = r.choice(seen)
        return base[: r.randint(1, len(base))] if r.random() < 0.5 else base
    return tuple(r.choice(LABELS) for _ in range(r.randint(1, 4)))


def _state(store: Any) -> tuple[list[Any], Any]:
    items = store.search((), limit=10_000)
    namespaces = [tuple(ns) for ns in store.list_namespaces(limit=10_000)]
    return sorted((tuple(i.namespace), i.key, repr(i.value)) for i in items), namespaces


@pytest.mark.parametrize("seed", range(8))
def test_reflective_store_agrees_with_in_memory_store(seed: int, tmp_path: Path) -> None:
    r = random.Random(seed)
    reference = InMemoryStore()
    with MemoryStream(DeterministicFakeEmbedding(size=16), path=tmp_path / "s.db") as stream:
        store = ReflectiveStore(stream)
        seen: list[tuple[str, ...]] = []
        for _ in range(25):
            ops: list[Op] = []
            for _ in range(r.choice([1, 2, 4])):
                ns = _ns(r, seen)
                kind = r.random()
                if kind < 0.5:
                    seen.append(ns)
                    ops.append(PutOp(ns, r.choice(KEYS), _value(r) if kind < 0.4 else None))
                elif kind < 0.7:
                    ops.append(GetOp(ns, r.choice(KEYS)))
                else:
                    query = r.choice([None, "hello"])
                    ops.append(SearchOp(ns[: r.randint(0, 2)], _filter(r), 10_000, 0, query))
            try:
                expected = reference.batch(ops)
            except (TypeError, ValueError):  # InMemoryStore's float() of a missing field
                reference.batch([op for op in ops if isinstance(op, PutOp)])
                store.batch([op for op in ops if isinstance(op, PutOp)])
                continue
            for op, want, got in zip(ops, expected, store.batch(ops), strict=True):
                if isinstance(op, GetOp):
                    assert (want is None) == (got is None), op
                    if want is not None and got is not None:
                        assert (got.key, repr(got.value)) == (want.key, repr(want.value))
                        assert got.created_at <= got.updated_at
                elif isinstance(op, SearchOp):
                    keys = {(tuple(i.namespace), i.key) for i in want}
                    assert {(tuple(i.namespace), i.key) for i in got} == keys, op
            for namespace in [ns for ns, items in reference._data.items() if not items]:
                del reference._data[namespace]  # the empty namespaces a read leaves behind
            assert _state(store) == _state(reference)
        stream.close()
        with MemoryStream(DeterministicFakeEmbedding(size=16), path=tmp_path / "s.db") as again:
            assert _state(ReflectiveStore(again)) == _state(reference)
