"""The five independent facts the MemoryStream tests (tests/unit/test_stream_*.py) store."""

from __future__ import annotations

FACTS = [
    "Alice drinks green tea every morning",
    "Bob moved to Paris for a new job",
    "Carol adopted a dog named Rex",
    "Bob loves the bakeries in Paris",
    "The weather was rainy on Tuesday",
]
