"""A growable numpy array with amortised O(1) appends (internal)."""

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

    def extend(self, values: npt.ArrayLike) -> None:
        """Append values."""
        arr = np.asarray(values, dtype=self._buf.dtype).reshape(-1)
        need = self._n + arr.shape[0]
        if need > self._buf.shape[0]:
            cap = max(need, self._buf.shape[0] * 2)
            grown = np.empty(cap, dtype=self._buf.dtype)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        self._buf[self._n : need] = arr
        self._n = need
