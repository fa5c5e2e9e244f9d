"""MemoryTier: chunk bytes in RAM, in recycled numpy segments."""

from __future__ import annotations

import numpy as np

from chunkstore.tiers._segments import (
    SegmentedTier,
    _Segment,
    read_only,
)

__all__ = ["MemoryTier"]


class MemoryTier(SegmentedTier):
    """Encoded chunks in RAM, appended into numpy arrays (segments).

    Emptied segments are reused, never reallocated: writing into never-touched
    memory is page-fault bound (measured: 0.4 GB/s, against 19 GB/s into warm pages),
    writing into a recycled segment is a plain memcpy. ``get`` returns a read-only
    zero-copy view.

    Parameters
    ----------
    segment_bytes : int or None
        Size of one segment; None (the default): adaptive, a power of two from 64 KiB
        to 4 MiB that grows with the tier (about 1/256 of it), so the space reserved
        beyond the live chunks stays near one such segment at any size (a fixed 4 MiB
        segment was a third of a 100k-transition Atari buffer's chunks).
    max_bytes : int, optional
        Hard limit on reserved bytes; beyond it ``put`` raises ``TierFullError``.

    Examples
    --------
    >>> tier = MemoryTier(segment_bytes=1 << 16)
    >>> ref = tier.put(b"hello")
    >>> bytes(tier.get(ref))
    b'hello'
    >>> tier.release(ref)
    """

    kind = "memory"

    _reuse_keeps_storage = True  # a free segment keeps its array

    def __init__(self, *, segment_bytes: int | None = None,
                 max_bytes: int | None = None) -> None:
        super().__init__(segment_bytes=segment_bytes, max_bytes=max_bytes)

    def _allocate(self, seg: _Segment) -> None:
        seg.data = np.empty(seg.capacity, dtype=np.uint8)
        seg.ro = read_only(seg.data)

    def _free_storage(self, seg: _Segment) -> None:
        seg.data = seg.ro = None

    def _write(self, seg: _Segment, offset: int, src: np.ndarray) -> None:
        seg.data[offset:offset + src.size] = src

    def _address(self, seg: _Segment) -> tuple[int, int]:
        return (0 if seg.data is None else int(seg.data.ctypes.data)), -1

    def _view(self, seg: _Segment, offset: int, nbytes: int) -> np.ndarray:
        return seg.ro[offset:offset + nbytes]
