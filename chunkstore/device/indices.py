"""Index arithmetic of a DeviceArray's write side: ChunkedArray's indexing rules (:mod:`chunkstore._indexing`)
and the ranks of runs."""

from __future__ import annotations

import numpy as np

from chunkstore._indexing import check_index, normalize_indices

__all__ = ["check_index", "normalize_indices", "ranks"]


def ranks(counts: np.ndarray) -> np.ndarray:
    """0..counts[i]-1 for every i, concatenated.

    Examples
    --------
    >>> ranks(np.array([2, 3])).tolist()
    [0, 1, 0, 1, 2]
    """
    counts = np.asarray(counts, np.int64)
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
