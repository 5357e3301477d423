"""Scale-out backend: Postgres + pgvector (HNSW) + full-text search (extra ``postgres``).

Importing this package imports psycopg; the package root exposes :class:`PostgresBackend`
lazily, so ``import langchain_reflective`` works without the extra.
"""

from langchain_reflective.backends.postgres.backend import PostgresBackend

__all__ = ["PostgresBackend"]
