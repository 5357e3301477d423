"""Snapshots of a BM25 index in one file, loaded in place, so a reopened memory file does not
re-tokenise every memory before its first lexical query.

The file is a magic line, a JSON header and raw little-endian arrays (postings in CSR form, the
sorted vocabulary as fixed-width UTF-8, document lengths): nothing in it is executed or
deserialised into objects beyond a dict. Removed rows are dropped and the live rows renumbered
``0 .. n-1`` in order, as the SQLite backend numbers a namespace's rows when it loads them.
Loading reads the arrays in place (:class:`_Base`); a term's postings are copied out only when
a new row adds to them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.sqlite._files import atomic_file
from langchain_reflective.backends.sqlite.lexical import BM25Index

__all__ = ["load_bm25", "save_bm25"]

_MAGIC = b"langchain-reflective/bm25 1\n"
_MAX_WIDTH = 64  # stems longer than this (in UTF-8 bytes) go to the header's "long" map


class _Base:
    """The postings and vocabulary of a loaded snapshot, read in place."""

    __slots__ = ("_by_stem", "_ids", "_long", "_offsets", "_rows", "_stems", "_tf", "_width")

    def __init__(
        self,
        stems: npt.NDArray[np.bytes_],
        ids: npt.NDArray[np.int32],
        long: dict[str, int],
        rows: npt.NDArray[np.int32],
        tf: npt.NDArray[np.uint16],
        offsets: npt.NDArray[np.int64],
    ) -> None:
        self._stems = stems
        self._ids = ids
        self._long = long
        self._rows = rows
        self._tf = tf
        self._offsets = offsets
        self._width = stems.dtype.itemsize
        self._by_stem: dict[bytes, int] | None = None

    def find(self, stem: str) -> int | None:
        """The term id of ``stem`` in the snapshot, or ``None``.

        The first call maps every stem to its id (~0.1 us per stem, once); a binary search
        over the fixed-width array cost ~5 us for every word a query used for the first time.
        """
        encoded = stem.encode("utf-8", "surrogatepass")
        if len(encoded) > self._width:
            return self._long.get(stem)
        by_stem = self._by_stem
        if by_stem is None:  # (fixed-width bytes come back without their NUL padding)
            by_stem = self._by_stem = dict(
                zip(self._stems.tolist(), self._ids.tolist(), strict=True)
            )
        return by_stem.get(encoded)

    def postings(self, tid: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint16]]:
        """A term's rows and term frequencies (views)."""
        lo, hi = int(self._offsets[tid]), int(self._offsets[tid + 1])
        return self._rows[lo:hi], self._tf[lo:hi]


def _stems_by_id(index: BM25Index) -> list[str]:
    stems: list[str] = [""] * index.vocabulary_size
    base = index._base
    if base is not None:
        for stem, tid in zip(base._stems.tolist(), base._ids.tolist(), strict=True):
            stems[tid] = stem.decode("utf-8", "surrogatepass")
        for text, tid in base._long.items():
            stems[tid] = text
    for text, tid in index._vocab.items():
        stems[tid] = text
    return stems


def save_bm25(index: BM25Index, path: str | os.PathLike[str]) -> tuple[str, int]:
    """Write a snapshot of ``index`` (live rows only, renumbered) atomically.

    Returns:
        The file's SHA-256 and the number of rows in it.
    """
    n = len(index)
    live = index._live[:n]
    newpos = np.cumsum(live, dtype=np.int64) - 1
    terms = index.vocabulary_size
    pairs = [index._postings(tid) for tid in range(terms)]
    lengths = np.fromiter((len(r) for r, _ in pairs), dtype=np.int64, count=terms)
    rows = np.frombuffer(b"".join([r for r, _ in pairs]), dtype=np.int32)
    tfs = np.frombuffer(b"".join([t for _, t in pairs]), dtype=np.uint16)
    del pairs
    keep = live[rows]
    term_of = np.repeat(np.arange(terms, dtype=np.int64), lengths)[keep]
    rows = newpos[rows[keep]].astype("<i4")
    tfs = tfs[keep].astype("<u2")
    offsets = np.zeros(terms + 1, dtype="<i8")
    np.cumsum(np.bincount(term_of, minlength=terms), out=offsets[1:])
    stems = _stems_by_id(index)
    encoded = [s.encode("utf-8", "surrogatepass") for s in stems]
    short = [i for i, e in enumerate(encoded) if len(e) <= _MAX_WIDTH]
    long = {stems[i]: i for i, e in enumerate(encoded) if len(e) > _MAX_WIDTH}
    width = max([len(encoded[i]) for i in short] or [1])
    sorted_stems = np.array([encoded[i] for i in short], dtype=f"S{width}")
    ids = np.asarray(short, dtype="<i4")
    order = np.argsort(sorted_stems, kind="stable")
    arrays: dict[str, npt.NDArray[Any]] = {
        "stems": sorted_stems[order],
        "ids": ids[order],
        "offsets": offsets,
        "rows": rows,
        "tf": tfs,
        "doclen": index._doclen[:n][live].astype("<i4"),
    }
    header = {
        "k1": index.k1,
        "b": index.b,
        "language": index.language,
        "stopwords": bool(index._stopwords),
        "rows": int(live.sum()),
        "total_len": int(index._total_len),
        "long": long,
        "arrays": [[name, arr.dtype.str, int(arr.shape[0])] for name, arr in arrays.items()],
    }
    head = json.dumps(header, ensure_ascii=True).encode()
    digest = hashlib.sha256()
    with atomic_file(Path(path)) as fh:
        for chunk in (_MAGIC, len(head).to_bytes(8, "little"), head):
            fh.write(chunk)
            digest.update(chunk)
        for arr in arrays.values():
            data = np.ascontiguousarray(arr).tobytes()
            pad = b"\0" * (-len(data) % 8)
            for chunk in (data, pad):
                fh.write(chunk)
                digest.update(chunk)
    return digest.hexdigest(), int(header["rows"])  # type: ignore[call-overload]


def load_bm25(
    path: str | os.PathLike[str], *, expected_sha256: str, template: BM25Index
) -> BM25Index | None:
    """Load a snapshot written by :func:`save_bm25`; ``None`` when missing, tampered, or made
    with other BM25 settings than ``template``'s (an empty index configured as wanted).

    The file is parsed only after its SHA-256 matches the digest recorded when it was written.
    """
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != expected_sha256 or not data.startswith(_MAGIC):
        return None
    try:
        at = len(_MAGIC)
        size = int.from_bytes(data[at : at + 8], "little")
        header = json.loads(data[at + 8 : at + 8 + size])
        at += 8 + size
        arrays: dict[str, npt.NDArray[Any]] = {}
        for name, dtype, count in header["arrays"]:
            arr = np.frombuffer(data, dtype=np.dtype(dtype), count=int(count), offset=at)
            arrays[name] = arr
            at += arr.nbytes + (-arr.nbytes % 8)
        settings = (header["k1"], header["b"], header["language"], header["stopwords"])
        wanted = (template.k1, template.b, template.language, bool(template._stopwords))
        rows = int(header["rows"])
        terms = int(arrays["offsets"].shape[0]) - 1
        if settings != wanted or len(template) or arrays["doclen"].shape[0] != rows:
            return None
        long = {str(k): int(v) for k, v in dict(header["long"]).items()}
    except (ValueError, KeyError, TypeError):
        return None
    index = template
    index._base = _Base(
        arrays["stems"], arrays["ids"], long, arrays["rows"], arrays["tf"], arrays["offsets"]
    )
    index._post_rows = [None] * terms
    index._post_tf = [None] * terms
    index._ensure_capacity(rows)
    index._doclen[:rows] = arrays["doclen"]
    index._live[:rows] = True
    index._n_rows = index._n_live = rows
    index._total_len = int(header["total_len"])
    return index
