"""Index arithmetic of a DeviceArray's write side: ChunkedArray's indexing rules (:mod:`chunkstore._indexing`),
the ranks of runs, and the table of its items (:class:`ItemTable`)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from chunkstore._indexing import check_index, normalize_indices

__all__ = ["ItemTable", "check_index", "normalize_indices", "ranks"]


@dataclass(frozen=True)
class ItemTable:
    """A DeviceArray's capacity and the tables sized by it, replaced whole by a remap (one
    assignment: all-or-nothing under Ctrl-C). Rows, flags and open chunks change in place."""

    capacity: int
    items: np.ndarray  # per item, one row: reference row, record address (virtual, -1: none), runs, value bytes
    stored: np.ndarray  # per chunk: sealed since its last discard
    open: OrderedDict[int, tuple[np.ndarray, np.ndarray]]  # chunks being written: raw rows, which were written


def ranks(counts: np.ndarray) -> np.ndarray:
    """0..counts[i]-1 for every i, concatenated.

    Examples
    --------
    >>> ranks(np.array([2, 3])).tolist()
    [0, 1, 0, 1, 2]
    """
    counts = np.asarray(counts, np.int64)
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
