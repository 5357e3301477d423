"""One conformance suite for every memory backend (``BaseMemoryBackend``).

A backend's test module subclasses :class:`BackendConformance` and provides a ``make_backend``
fixture: a callable returning a new, empty backend each time it is called (the suite closes
them). For example::

    class TestMyBackend(BackendConformance):
        @pytest.fixture
        def make_backend(self, tmp_path):
            return lambda: MyBackend(...)

Rankings are compared with a reference -- the SQLite backend in memory -- under exact scoring
(``candidates(..., exact=True)`` then :func:`langchain_reflective.scoring.score_candidates`), for
scorings without the lexical component (lexical rankers differ between databases). A backend
whose lexical scores are SQLite's sets ``lexical_matches_reference = True`` to compare the
default hybrid scoring too.

The tests are grouped by topic in mixins, one module each: records, errors, namespaces and
deletes (``conformance_records.py``), rankings and touches (``conformance_retrieval.py``), the
reflection counter and lock (``conformance_reflection.py``), the pending queue
(``conformance_pending.py``), export and import (``conformance_transfer.py``) and the async
twins (``conformance_async.py``); the sample memories and the fixtures they share are in
``conformance_base.py``.
"""

from __future__ import annotations

from tests.backends.conformance_async import AsyncConformance
from tests.backends.conformance_pending import PendingConformance
from tests.backends.conformance_records import RecordsConformance
from tests.backends.conformance_reflection import ReflectionConformance
from tests.backends.conformance_retrieval import RetrievalConformance
from tests.backends.conformance_transfer import TransferConformance


class BackendConformance(
    RecordsConformance,
    RetrievalConformance,
    ReflectionConformance,
    PendingConformance,
    TransferConformance,
    AsyncConformance,
):
    """The behaviour every :class:`BaseMemoryBackend` must show."""
