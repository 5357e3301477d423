"""Scale-out backend: Postgres + pgvector (HNSW) + BM25 in SQL (extra ``postgres``).

Importing this package imports psycopg; the package root exposes :class:`PostgresBackend`
lazily, so ``import langchain_reflective`` works without the extra.
"""

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "PostgresBackend needs the 'postgres' extra (psycopg[binary] and psycopg-pool): "
        'pip install "langchain-reflective[postgres]"'
    ) from exc

from langchain_reflective.backends.postgres.backend import PostgresBackend

__all__ = ["PostgresBackend"]
