"""A deleted observation's words stop matching the observation stored after it.

With the default scoring an observation's BM25 document holds the previous observation's text
(``ScoringConfig.hybrid``: the lexical context). A memory stored after the newest observation
was deleted (or replaced in place) must take its context from the newest observation still
stored -- as a rebuilt index, a reopened file and the Postgres backend do -- never from the
deleted text.
"""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import pytest

from langchain_reflective import MemoryStream
from tests.fakes import WordEmbeddings


def _lexical(stream: MemoryStream, query: str, now: datetime) -> dict[str, float]:
    return {h.record.text: h.lexical for h in stream.retrieve(query, k=10, now=now, touch=False)}


@pytest.mark.parametrize("how", ["delete", "replace"])
def test_a_deleted_newest_observation_is_not_the_context_of_the_next(
    db_path: Path, now: datetime, how: str
) -> None:
    with MemoryStream(WordEmbeddings(), path=db_path) as stream:
        first, secret = stream.add(
            ["we had lunch at noon", "my locker code is swordfish"], importances=0.5, now=now
        )
        assert _lexical(stream, "swordfish", now)["my locker code is swordfish"] == 1.0
        if how == "delete":
            stream.delete([secret.id])
            stream.add("the weather is nice", importances=0.5, now=now)
        else:  # an update in place of the newest observation
            stream.add(
                "my locker code changed",
                importances=0.5,
                now=now,
                ids=[secret.id],
                replacing=[secret.id],
            )
        live = _lexical(stream, "swordfish", now)
        assert set(live.values()) == {0.0}, live  # nothing stored holds the word
        # the new observation's context is the newest one still stored
        assert _lexical(stream, "lunch noon", now)[first.text] > 0
        assert len([v for v in _lexical(stream, "lunch noon", now).values() if v > 0]) == 2
    shutil.rmtree(db_path.parent / f"{db_path.name}.index")  # rebuilt from the file: the same
    with MemoryStream(WordEmbeddings(), path=db_path) as reopened:
        assert _lexical(reopened, "swordfish", now) == live
