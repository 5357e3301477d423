"""Growable numpy arrays with amortised O(1) appends, and a cached top-rows set (internal)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


class GrowArray:
    """A 1-D numpy array that grows by doubling; :attr:`view` is the filled part."""

    __slots__ = ("_buf", "_n")

    def __init__(self, dtype: npt.DTypeLike, capacity: int = 64) -> None:
        self._buf: npt.NDArray[Any] = np.empty(max(capacity, 1), dtype=dtype)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def view(self) -> npt.NDArray[Any]:
        """The filled part (a view: do not keep it across appends)."""
        return self._buf[: self._n]

    def reserve(self, capacity: int) -> None:
        """Make room for ``capacity`` elements in total (no-op when there is room)."""
        if capacity > self._buf.shape[0]:
            grown = np.empty(capacity, dtype=self._buf.dtype)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown

    def _grow(self, need: int) -> None:
        self.reserve(max(need, self._buf.shape[0] * 2))

    def append(self, value: Any) -> None:
        """Append one value (cheaper than :meth:`extend` for a single element)."""
        if self._n == self._buf.shape[0]:
            self._grow(self._n + 1)
        self._buf[self._n] = value
        self._n += 1

    def extend(self, values: npt.ArrayLike) -> None:
        """Append values."""
        arr = np.asarray(values, dtype=self._buf.dtype).reshape(-1)
        need = self._n + arr.shape[0]
        if need > self._buf.shape[0]:
            self._grow(need)
        self._buf[self._n : need] = arr
        self._n = need


class GrowMatrix:
    """A 2-D float32 matrix that grows by whole rows, doubling its capacity.

    Rows are stored contiguously, so :attr:`view` is a plain ``(n, dim)`` array usable by BLAS.
    Large buffers come from ``mmap``: unused capacity costs address space, not resident memory.
    """

    __slots__ = ("_buf", "_n", "dimension")

    def __init__(self, dimension: int, capacity: int = 64) -> None:
        self.dimension = int(dimension)
        self._buf: npt.NDArray[np.float32] = np.empty(
            (max(capacity, 1), self.dimension), dtype=np.float32
        )
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def view(self) -> npt.NDArray[np.float32]:
        """The filled rows (a view: do not keep it across appends)."""
        return self._buf[: self._n]

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows in total (no-op when there is room)."""
        if rows > self._buf.shape[0]:
            grown = np.empty((rows, self.dimension), dtype=np.float32)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown

    def extend(self, rows: npt.NDArray[np.float32]) -> None:
        """Append rows (shape ``(m, dimension)``)."""
        m = rows.shape[0]
        need = self._n + m
        if need > self._buf.shape[0]:
            self.reserve(max(need, self._buf.shape[0] * 2))
        self._buf[self._n : need] = rows
        self._n = need


class TopRows:
    """The rows with the largest values of a changing array, kept without full scans.

    Invariant: every row whose value is greater than :attr:`floor` is in the set. Rows enter the
    set when a new value above the floor is offered; rows whose value drops simply stay (the
    caller rescores candidates exactly). The set is rebuilt from the full array (one
    ``argpartition``) when it grows past ``4 * size`` or has fewer than ``size`` usable rows.
    """

    __slots__ = ("_rows", "floor", "size", "valid")

    def __init__(self, size: int) -> None:
        self.size = int(size)
        self._rows: set[int] = set()
        self.floor = np.inf
        self.valid = False

    def rebuild(self, values: npt.NDArray[Any], usable: npt.NDArray[np.bool_] | None) -> None:
        """Recompute the set from the full ``values`` (rows not ``usable`` are skipped)."""
        vals = np.asarray(values, dtype=np.float64)
        if usable is not None:
            vals = np.where(usable, vals, -np.inf)
        n = vals.shape[0]
        if n <= self.size:
            self._rows = set(np.flatnonzero(vals > -np.inf).tolist())
            self.floor = -np.inf
        else:
            top = np.argpartition(-vals, self.size - 1)[: self.size]
            self.floor = float(vals[top].min())
            self._rows = set(top[vals[top] > -np.inf].tolist())
        self.valid = True

    def offer(self, rows: npt.NDArray[np.int64], values: npt.NDArray[Any]) -> None:
        """Rows whose value changed (or were appended) to ``values``."""
        if not self.valid:
            return
        vals = np.asarray(values, dtype=np.float64)
        above = np.asarray(rows)[vals >= self.floor]
        if above.size:
            self._rows.update(above.tolist())
            if len(self._rows) > 4 * self.size:
                self.valid = False

    def rows(self) -> npt.NDArray[np.int64]:
        """The current set (a superset of the ``size`` best usable rows, when valid)."""
        return np.fromiter(self._rows, dtype=np.int64, count=len(self._rows))
