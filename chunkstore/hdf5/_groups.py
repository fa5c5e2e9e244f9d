"""How format 3 packs chunkstore chunks into HDF5 chunks.

An array's HDF5 dataset has chunks of ``G * chunk_len`` items: HDF5 chunk ``g`` holds
chunk slots ``g*G .. g*G+G-1``, and its bytes are the stored chunks among them,
verbatim, concatenated in index order. The chunk table lists each stored chunk's size,
so the byte offset of a chunk in the file is its HDF5 chunk's file offset plus the
sizes of the stored chunks before it in the same group. ``G`` is chosen per array so
that an HDF5 chunk holds about :data:`TARGET_GROUP_BYTES` of encoded bytes: a save
then makes one HDF5 call per group instead of one per chunk (250k chunks of ~750 B,
``results/bench_persistence_v3.md``: a whole save 0.67 s at G=332 against 1.64 s at G=1).

The writer and the reader both compute offsets here, so they cannot disagree.

Examples
--------
>>> import numpy as np
>>> chunks, nbytes = np.array([0, 1, 3, 4, 9]), np.array([5, 7, 2, 4, 6])
>>> group_bounds(chunks, 4).tolist()  # groups 0 (chunks 0, 1, 3), 1 (4), 2 (9)
[0, 3, 4, 5]
>>> offsets_in_groups(chunks, nbytes, 4).tolist()
[0, 5, 12, 0, 0]
>>> group_nbytes(chunks, nbytes, 4).tolist()
[14, 4, 6]
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_HDF5_CHUNK_BYTES", "TARGET_GROUP_BYTES", "choose_group", "group_bounds",
           "group_nbytes", "offsets_in_groups"]

#: encoded bytes one HDF5 chunk should hold: past ~100 KB the per-call cost no longer
#: shows (see the module docstring); reads never depend on it, they pread single chunks
TARGET_GROUP_BYTES = 256 << 10
#: HDF5 refuses chunks of 4 GiB or more, decoded (chunk shape x item size) or stored
MAX_HDF5_CHUNK_BYTES = (1 << 32) - 1
#: a group's decoded size stays far below HDF5's limit: a plain reader that tries to
#: read a grouped dataset may allocate one decoded HDF5 chunk before the filter fails
MAX_DECODED_GROUP_BYTES = 1 << 30


def choose_group(capacity: int, chunk_len: int, item_nbytes: int, nbytes: np.ndarray,
                 target: int = TARGET_GROUP_BYTES) -> int:
    """Chunks per HDF5 chunk for an array whose stored chunks have sizes ``nbytes``.

    About ``target`` encoded bytes per group, and within HDF5's limits: a chunk no
    longer than the dataset, decoded and stored sizes below 4 GiB.
    """
    if len(nbytes) == 0:
        return 1
    mean = max(1.0, float(np.mean(nbytes)))
    group = int(target // mean)
    group = min(group, capacity // chunk_len,
                MAX_DECODED_GROUP_BYTES // max(1, chunk_len * item_nbytes),
                MAX_HDF5_CHUNK_BYTES // max(1, int(np.max(nbytes))))
    return max(1, group)


def group_bounds(chunks: np.ndarray, group: int) -> np.ndarray:
    """Positions in ``chunks`` (increasing stored chunk indices) where each group starts, and
    ``len(chunks)`` at the end: group ``k`` is ``chunks[bounds[k]:bounds[k + 1]]``."""
    g = np.asarray(chunks, np.int64) // group
    starts = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1]))) if len(g) else np.zeros(0, np.int64)
    return np.concatenate((starts, [len(g)])).astype(np.int64)


def offsets_in_groups(chunks: np.ndarray, nbytes: np.ndarray, group: int) -> np.ndarray:
    """Byte offset of each stored chunk inside its HDF5 chunk."""
    nbytes = np.asarray(nbytes, np.int64)
    before = np.cumsum(nbytes) - nbytes  # bytes of all earlier chunks
    bounds = group_bounds(chunks, group)
    return before - np.repeat(before[bounds[:-1]], np.diff(bounds))


def group_nbytes(chunks: np.ndarray, nbytes: np.ndarray, group: int) -> np.ndarray:
    """Bytes of each HDF5 chunk that holds stored chunks (one entry per group, in order)."""
    bounds = group_bounds(chunks, group)
    if len(bounds) == 1:
        return np.zeros(0, np.int64)
    return np.add.reduceat(np.asarray(nbytes, np.int64), bounds[:-1])
