"""``MemoryConfig`` refuses settings that mean nothing, with a ValueError naming the field."""

from __future__ import annotations

import math
from typing import Any

import pytest

from langchain_reflective import MemoryConfig


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("token_budget", math.nan),
        ("token_budget", 2.5),
        ("token_budget", True),
        ("token_budget", "1000"),
        ("token_budget", 0),
        ("eviction_threshold", 7.0),
        ("eviction_threshold", -0.1),
        ("eviction_threshold", math.nan),
        ("eviction_threshold", "0.3"),
        ("reflect_threshold", math.nan),
        ("reflect_threshold", math.inf),
        ("reflect_threshold", -1),
        ("reflect_threshold", True),
        ("shutdown_timeout", -5.0),
        ("shutdown_timeout", math.nan),
        ("shutdown_timeout", math.inf),
        ("shutdown_timeout", None),
        ("background", "false"),
        ("reflect_every", -1),
        ("retrieve_k", 1.0),
        ("drain_batch", 0),
    ],
)
def test_nonsense_is_a_value_error_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        MemoryConfig(**{field: value})


def test_sensible_settings_are_kept() -> None:
    config = MemoryConfig(
        token_budget=1,
        eviction_threshold=1,
        reflect_threshold=0,
        shutdown_timeout=0,
        background=False,
        recent_capacity=0,
    )
    assert config.eviction_threshold == 1 and config.reflect_threshold == 0
    assert MemoryConfig(reflect_threshold=3, eviction_threshold=0.0, shutdown_timeout=2.5)
