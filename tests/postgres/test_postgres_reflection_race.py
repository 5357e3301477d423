"""Two reflection graph runs on one namespace of one Postgres database at once (two backends,
as two machines would have), without the reflection lock: only the first to store reflects,
the other ends ``skipped="superseded"`` having written nothing (see ``test_reflection_race``)."""

from __future__ import annotations

from datetime import datetime

import pytest

from langchain_reflective import MemoryStream
from langchain_reflective.backends.postgres import PostgresBackend
from langchain_reflective.importance import LLMImportanceScorer
from tests.fakes import WordEmbeddings
from tests.unit.test_reflection_race import OpenStream, race

pytestmark = [pytest.mark.postgres, pytest.mark.integration]


def postgres_streams(url: str) -> OpenStream:
    with PostgresBackend.from_conn_string(url) as backend:
        backend.setup()

    def open_stream(scorer: LLMImportanceScorer) -> MemoryStream:
        backend = PostgresBackend.from_conn_string(url)
        return MemoryStream(WordEmbeddings(), backend=backend, importance_scorer=scorer)

    return open_stream


@pytest.mark.parametrize("force", [False, True], ids=["due", "forced"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_of_two_runs_at_once_only_the_first_to_store_reflects(
    postgres_url: str, now: datetime, mode: str, force: bool
) -> None:
    race(postgres_streams(postgres_url), now, mode=mode, force=force)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_superseded_run_that_found_nothing_does_not_reset_the_counter_again(
    postgres_url: str, now: datetime, mode: str
) -> None:
    race(postgres_streams(postgres_url), now, mode=mode, empty=True)
