"""A query vector of another dimension than the stored memories' is a typed error in every
namespace, also one that holds no memory yet: the same misconfigured embeddings (an
``embed_query`` of another model than ``embed_documents``) must not answer "nothing found" to
a new user and fail for the others."""

from __future__ import annotations

from datetime import datetime

import pytest
from langchain_core.embeddings import Embeddings

from langchain_reflective import MemoryStream
from langchain_reflective.errors import DimensionMismatchError


class QueryOfAnotherModel(Embeddings):
    """Documents in 8 dimensions, queries in 4."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, *([0.5] * 7)] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.5, 0.5, 0.5]


@pytest.mark.parametrize("namespace", ["default", "new-user"])
def test_a_query_of_another_dimension_is_refused_in_every_namespace(
    db_path, now: datetime, namespace: str
) -> None:
    with MemoryStream(QueryOfAnotherModel(), path=db_path) as stream:
        stream.add("Alice drinks green tea", importances=0.5, now=now)
        with pytest.raises(DimensionMismatchError, match="4 dimensions"):
            stream.retrieve("tea", now=now, namespace=namespace)
        with pytest.raises(DimensionMismatchError):
            stream.retrieve("tea", now=now, namespaces=["new-user", "other"])
        given = [1.0, 0.5, 0.5]
        with pytest.raises(DimensionMismatchError):
            stream.retrieve("tea", now=now, namespace=namespace, query_embedding=given)
        assert (
            stream.retrieve("tea", now=now, namespace="new-user", query_embedding=[1.0] * 8) == []
        )


async def test_the_async_twin_refuses_it_too(db_path, now: datetime) -> None:
    with MemoryStream(QueryOfAnotherModel(), path=db_path) as stream:
        await stream.aadd("Alice drinks green tea", importances=0.5, now=now)
        with pytest.raises(DimensionMismatchError):
            await stream.aretrieve("tea", now=now, namespace="new-user")


def test_an_empty_file_takes_any_query(db_path, now: datetime) -> None:
    with MemoryStream(QueryOfAnotherModel(), path=db_path) as stream:
        assert stream.retrieve("tea", now=now) == []
