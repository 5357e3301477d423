"""``retrieve(namespaces=[...])`` ranks the namespaces as one: the order of the list changes
nothing, and equal scores rank the older memory first, as within one namespace."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from langchain_reflective import MemoryStream, ScoringConfig
from tests.fakes import WordEmbeddings


@pytest.mark.parametrize("scoring", [ScoringConfig.hybrid(), ScoringConfig.paper()])
def test_equal_scores_rank_the_older_memory_first_whatever_the_list_order(
    now: datetime, scoring: ScoringConfig
) -> None:
    with MemoryStream(WordEmbeddings(), scoring=scoring) as stream:
        for ns in ("zed", "amy", "kim"):  # the same fact, stored by each in turn
            stream.add(["Bob moved to Paris"], importances=0.5, namespace=ns, now=now)
        seen = set()
        for names in (["amy", "kim", "zed"], ["zed", "kim", "amy"], ["kim", "zed", "amy", "kim"]):
            hits = stream.retrieve(
                "Where did Bob move?", k=3, now=now + timedelta(hours=1), namespaces=names
            )
            assert [h.record.namespace for h in hits] == ["zed", "amy", "kim"]  # oldest first
            assert len({h.score for h in hits}) == 1
            (first,) = stream.retrieve("Bob Paris", k=1, now=now, namespaces=names, touch=False)
            seen.add((first.record.namespace, first.record.id))
        assert len(seen) == 1
