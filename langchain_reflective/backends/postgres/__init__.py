"""Scale-out backend: Postgres + pgvector (IVFFlat by default, or HNSW) + BM25 terms in SQL,
optionally ranked in each process from a local index (extra ``postgres``).

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
