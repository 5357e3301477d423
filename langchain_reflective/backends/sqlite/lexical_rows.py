"""Changing the document of one row of a :class:`~.lexical.BM25Index` in place.

An observation's BM25 document holds the previous observation's words (the lexical context),
so deleting an observation changes the document of the one after it: that row keeps its
number (rows are the partition's, in key order) and gets the document it would have had if the
deleted memory had never been written. A row's document is not stored, only its postings, so
the change is given as the term counts it gains or loses (the old and the new document, whose
common words cancel): each term's postings are edited in place, in row order, and the row's
length and the index's total length follow. Document frequencies are counted at query time,
so nothing else changes. The callers: the SQLite backend's delete (old and new document from
the texts), the Postgres local index's catch-up (old document from the terms it holds per row,
new one from the server: ``backends/postgres/local_docs.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.sqlite.lexical import BM25Index
from langchain_reflective.backends.sqlite.partition import context_document

if TYPE_CHECKING:
    from langchain_reflective.backends.sqlite.partition import Partition
    from langchain_reflective.backends.sqlite.record_store import BaseRecordStore

__all__ = ["counts_of", "relink_context", "revise_row", "revise_text", "term_delta"]

_TF_MAX = 65535  # (lexical._TF_MAX: a count stored capped cannot be changed exactly)


def counts_of(term_ids: Iterable[int]) -> dict[int, int]:
    """How often each term id occurs."""
    counts: dict[int, int] = {}
    for tid in term_ids:
        counts[tid] = counts.get(tid, 0) + 1
    return counts


def term_delta(old: Mapping[int, int], new: Mapping[int, int]) -> dict[int, int]:
    """Per term id, ``new``'s count minus ``old``'s (terms whose count does not change are
    left out)."""
    delta = {tid: n - old.get(tid, 0) for tid, n in new.items() if n != old.get(tid, 0)}
    for tid, n in old.items():
        if tid not in new:
            delta[tid] = -n
    return delta


def revise_row(index: BM25Index, row: int, delta: Mapping[int, int]) -> bool:
    """Change the document of ``row`` by ``delta`` (term id -> count gained, negative: lost).

    Nothing is changed, and ``False`` returned, when the row's postings do not hold what the
    delta takes away (the document was not the one the caller assumed; or a count stored
    capped): the caller rebuilds the index. A removed row is left as it is (``True``).
    """
    if not delta or not index.is_live(row):
        return True
    changes: list[tuple[int, int]] = []
    for tid, gained in delta.items():
        if gained == 0:
            continue
        if not 0 <= tid < index.vocabulary_size:
            return False
        rows, tfs = index._postings(tid)
        at = bisect_left(rows, row)
        tf = int(tfs[at]) if at < len(rows) and int(rows[at]) == row else 0
        if tf >= _TF_MAX or tf + gained < 0:
            return False
        changes.append((tid, tf + gained))
    length = sum(delta.values())
    if int(index._doclen[row]) + length < 0:
        return False
    for tid, count in changes:
        rows_of, tfs_of = index._writable(tid)
        at = bisect_left(rows_of, row)
        held = at < len(rows_of) and rows_of[at] == row
        if count == 0:
            del rows_of[at]
            del tfs_of[at]
        elif held:
            tfs_of[at] = min(count, _TF_MAX)
        else:
            rows_of.insert(at, row)
            tfs_of.insert(at, min(count, _TF_MAX))
    index._doclen[row] += length
    index._total_len += length
    return True


def revise_text(index: BM25Index, row: int, old: str, new: str) -> bool:
    """:func:`revise_row` from the row's old document to ``new`` (texts, tokenized as
    :meth:`BM25Index.add` tokenizes them)."""
    if old == new:
        return True
    return revise_row(
        index, row, term_delta(counts_of(index._term_ids(old)), counts_of(index._term_ids(new)))
    )


def relink_context(
    part: Partition, store: BaseRecordStore, newest: int, moved: npt.NDArray[np.int64]
) -> None:
    """After ``part.delete_rows`` (rows just deleted from ``store``): the lexical context of
    the next observation stored (``newest``: the row of the newest observation left) and the
    documents of the observations whose previous one was deleted (``moved``), each as a
    rebuild from the file computes it. The deleted texts come from the store
    (``BaseRecordStore.deleted_texts``), the others are read; when one is missing (a store
    that does not keep them, or a memory deleted meanwhile by another process) the index is
    dropped, to be rebuilt from the file on next use."""
    lexical = part.lexical
    if lexical is None:
        return
    seqs = part.seqs.view
    wanted = {int(seqs[r]) for r in moved[:, [0, 2]].ravel().tolist() if r >= 0}
    if newest >= 0:
        wanted.add(int(seqs[newest]))
    found = store.get_by_seq(sorted(wanted)) if wanted else {}
    gone = store.deleted_texts or {}
    texts = {seq: r.text for seq, r in found.items()}
    if len(texts) < len(wanted):
        part.lexical = None  # deleted meanwhile by another process: rebuilt from the file
        return
    if newest >= 0:
        part.last_observation = texts[int(seqs[newest])]
    for row, old, new in moved.tolist():
        text = texts[int(seqs[row])]
        old_text = gone.get(int(seqs[old]))
        if old_text is None or not revise_text(
            lexical,
            row,
            context_document(old_text, text),
            context_document(None if new < 0 else texts[int(seqs[new])], text),
        ):
            part.lexical = None  # not the document assumed: rebuilt from the file
            return
