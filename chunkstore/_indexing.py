"""Item indexing rules every array of items follows (ChunkedArray, DeviceArray): one place."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_index", "normalize_indices"]


def check_index(i: int, capacity: int, name: str) -> int:
    """One item index (negative counts from the end, as ``arr[i] = item`` does), in range.

    Examples
    --------
    >>> check_index(-1, 10, "a")
    9
    """
    if not -capacity <= i < capacity:
        raise IndexError(f"index {i} is out of bounds for {name} of capacity {capacity}")
    return i % capacity


def normalize_indices(indices: Any, capacity: int, name: str) -> np.ndarray:
    """An integer or boolean index array as int64 item indices in ``0..capacity - 1``."""
    idx = np.asarray(indices)
    if idx.dtype == bool:
        if idx.shape != (capacity,):
            raise IndexError(f"boolean index of shape {idx.shape} does not match {capacity}")
        return np.flatnonzero(idx)
    if idx.size == 0:
        return idx.astype(np.int64)
    if idx.dtype.kind not in "iu":
        raise IndexError(f"{name}: indices must be integers, got dtype {idx.dtype}")
    lo, hi = int(idx.min()), int(idx.max())
    if lo < -capacity or hi >= capacity:
        bad = lo if lo < -capacity else hi
        raise IndexError(f"index {bad} is out of bounds for {name} of capacity {capacity}")
    idx = idx.astype(np.int64, copy=False)
    return idx + capacity * (idx < 0) if lo < 0 else idx
