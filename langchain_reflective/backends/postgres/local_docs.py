"""The local index's BM25 documents, kept per row so that one can be replaced.

With the lexical context, an observation's document holds the terms of the observation before
it (``reflective_terms.ctx_*``), and a delete on the server rewrites the documents of the
observations whose previous one it deleted (``queries.RECONTEXT``, in the delete's
transaction). A local index learns of the delete from its removals (``LOCAL_CHANGES``), finds
those observations itself (the rows after the removed ones: ``Partition.delete_rows``), reads
their new documents from the server (:data:`NEW_DOCUMENTS`, one statement) and replaces them in
its BM25 index (:meth:`DocumentIndex.replace_document`). Replacing a row's postings needs the
terms the row holds now, which BM25 postings do not give by row: :class:`DocumentIndex` keeps
them (the term ids of each row's document, ~4 bytes per distinct term: ~100 bytes a memory,
against ~2 KB for the rest of it).

Why read the new documents rather than compute them from the terms held: the local index holds
the documents the server stores, with the context; the server's rewrite is the one source, so
the index cannot drift from it, whatever wrote the rows (a document written by a version that
left a deleted memory's terms in it stays as the server has it, in both).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from langchain_reflective.backends.sqlite._arrays import GrowArray
from langchain_reflective.backends.sqlite.lexical import BM25Index
from langchain_reflective.backends.sqlite.lexical_rows import revise_row, term_delta

__all__ = ["NEW_DOCUMENTS", "DocumentIndex", "read_documents"]

NEW_DOCUMENTS = (
    "SELECT t.seq, array_to_string(t.ctx_terms, ' '), array_to_string(t.ctx_tfs, ' ') "
    "FROM reflective_terms t WHERE t.seq = ANY(%s)"
)
"""The documents (with the lexical context) of some memories: key, terms, counts."""


class DocumentIndex(BM25Index):
    """A :class:`BM25Index` filled with :meth:`add_flat_terms` that keeps each row's term ids,
    so :meth:`replace_document` can change a row's document in place."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._doc_ids = GrowArray(np.int32)
        self._doc_starts = GrowArray(np.int64)
        self._doc_starts.append(0)
        self._replaced: dict[int, npt.NDArray[np.int32]] = {}

    def add(self, texts: Sequence[str]) -> None:
        raise TypeError("a DocumentIndex is filled with add_flat_terms")

    def add_flat_terms(
        self,
        stems: Sequence[str],
        sizes: npt.NDArray[np.integer],
        counts: npt.NDArray[np.integer],
    ) -> npt.NDArray[np.int64]:
        ids = super().add_flat_terms(stems, sizes, counts)
        if sizes.shape[0]:
            self._doc_ids.extend(ids.astype(np.int32))
            last = int(self._doc_starts.view[-1])
            self._doc_starts.extend(last + np.cumsum(sizes, dtype=np.int64))
        return ids

    def terms_of(self, row: int) -> npt.NDArray[np.int32]:
        """The term ids of ``row``'s document."""
        replaced = self._replaced.get(row)
        if replaced is not None:
            return replaced
        starts = self._doc_starts.view
        out: npt.NDArray[np.int32] = self._doc_ids.view[int(starts[row]) : int(starts[row + 1])]
        return out

    def replace_document(self, row: int, stems: Sequence[str], counts: Sequence[int]) -> bool:
        """Make ``row``'s document the terms ``stems`` (distinct), ``counts[i]`` times each;
        ``False`` (nothing changed) when the row's postings do not hold its document's terms
        as kept (then the index must be loaded again)."""
        if not self.is_live(row):
            return True
        old: dict[int, int] = {}
        for tid in self.terms_of(row).tolist():
            rows, tfs = self._postings(tid)
            at = bisect_left(rows, row)
            if at >= len(rows) or int(rows[at]) != row:
                return False
            old[tid] = int(tfs[at])
        new = {self._stem_id(stem): int(n) for stem, n in zip(stems, counts, strict=True)}
        if not revise_row(self, row, term_delta(old, new)):
            return False
        self._replaced[row] = np.fromiter(new, dtype=np.int32, count=len(new))
        return True


def read_documents(
    conn: Any, index: DocumentIndex, rows: npt.NDArray[np.int64], seqs: npt.NDArray[np.int64]
) -> bool:
    """Replace the documents of ``rows`` (the memories ``seqs``) with those the server stores
    now (:data:`NEW_DOCUMENTS`); one that is gone is left (its removal comes in a later
    catch-up). ``False`` when one cannot be replaced (see :meth:`replace_document`)."""
    row_of = dict(zip(seqs.tolist(), rows.tolist(), strict=True))
    for seq, terms, counts in conn.execute(NEW_DOCUMENTS, (sorted(row_of),)).fetchall():
        stems = terms.split() if terms else []
        tfs = [int(c) for c in counts.split()] if counts else []
        if not index.replace_document(row_of[int(seq)], stems, tfs):
            return False
    return True
