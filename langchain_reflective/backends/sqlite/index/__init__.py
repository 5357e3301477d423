"""Vector index backends behind one small protocol (FAISS is the default)."""

from langchain_reflective.backends.sqlite.index.base import BaseVectorIndex
from langchain_reflective.backends.sqlite.index.faiss_flat import FaissFlatIndex

__all__ = ["BaseVectorIndex", "FaissFlatIndex"]
