"""The log-structured segment arena that every tier is built on.

Chunks are appended into fixed-size segments (``segment_bytes``). A chunk larger
than a segment opens a segment of its own, rounded up to a whole number of
segments so that equal-sized large chunks recycle each other's storage. Each
segment counts its live chunks; once the last one is released the segment goes
to a free list and its storage is reused by a later append. A ring buffer
releases in FIFO order, so segments empty oldest first: no fragmentation, no
compaction, and no per-chunk Python objects besides one small dict entry.

Bytes are always *copied* into segment storage: compressor outputs keep their
compress-bound allocation alive (measured: a 1.7 KB zstd result held 28 KB), so holding them would cost RAM as if
uncompressed.

Thread safety: one writer calls ``put``/``release``/``trim``; any number of
threads may call ``get`` at the same time. One lock guards the bookkeeping
(segment table, live chunks, storage handles); the data copy of ``put`` runs
outside it, so a large put never blocks readers. ``close`` must not race with
other calls. A view returned by ``get`` stays valid until its chunk is released
(after that its segment may be rewritten).
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from typing import Any

import numpy as np

from chunkstore.errors import TierFullError, UnknownRefError
from chunkstore.tiers._base import ChunkRef, Tier

__all__ = ["DEFAULT_SEGMENT_BYTES", "SegmentedTier"]

DEFAULT_SEGMENT_BYTES = 4 << 20


class _Segment:
    """One segment: its capacity, append cursor, live chunks and storage handles."""

    __slots__ = ("capacity", "data", "fill", "id", "live", "ro")

    def __init__(self, seg_id: int, capacity: int) -> None:
        self.id = seg_id
        self.capacity = capacity
        self.fill = 0  # append cursor; only the writer moves it
        self.live: dict[int, int] = {}  # offset -> nbytes of live chunks
        self.data: Any = None  # writable storage, tier-specific
        self.ro: Any = None  # read handle, tier-specific


def as_uint8(data: Any) -> np.ndarray:
    """A flat uint8 view of any C-contiguous bytes-like object (no copy)."""
    if (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1
            and data.flags.c_contiguous):
        return data
    return np.frombuffer(data, dtype=np.uint8)


def read_only(arr: np.ndarray) -> np.ndarray:
    ro = arr.view()
    ro.flags.writeable = False
    return ro


class SegmentedTier(Tier):
    """A tier whose chunks live in recyclable segments; subclasses supply storage.

    Parameters
    ----------
    segment_bytes : int
        Size of a regular segment. Chunks larger than this get a dedicated
        segment rounded up to a multiple of it.
    max_bytes : int, optional
        Hard limit on :attr:`nbytes`; a put that needs more raises
        :class:`~chunkstore.errors.TierFullError` (free segments are dropped first).
    """

    def __init__(self, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 max_bytes: int | None = None) -> None:
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be positive, got {segment_bytes}")
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"max_bytes must be non-negative or None, got {max_bytes}")
        self.segment_bytes = int(segment_bytes)
        self.max_bytes = None if max_bytes is None else int(max_bytes)
        self._lock = threading.Lock()
        self._segments: dict[int, _Segment] = {}
        self._free: dict[int, list[_Segment]] = {}  # capacity -> stack of empty segments
        self._current: _Segment | None = None
        self._next_id = 0
        self._reserved = 0
        self._used = 0
        self._nchunks = 0
        self._closed = False
        # host addresses of the segments for the native read path, rebuilt when
        # storage moves (a new or reused segment, a spill, a trim)
        self._addr = np.zeros((2, 0), np.int64)
        self._addr_stale = True

    # -- storage hooks -------------------------------------------------------------

    @abstractmethod
    def _allocate(self, seg: _Segment) -> None:
        """Give a brand-new segment its storage (``seg.data``/``seg.ro``)."""

    @abstractmethod
    def _free_storage(self, seg: _Segment) -> None:
        """Drop a segment's storage for good (trim, limit pressure, close)."""

    @abstractmethod
    def _write(self, seg: _Segment, offset: int, src: np.ndarray) -> None:
        """Copy ``src`` into the segment at ``offset``. Called without the lock."""

    @abstractmethod
    def _view(self, seg: _Segment, offset: int, nbytes: int) -> Any:
        """A read handle on a live chunk. Called under the lock: keep it cheap."""

    def _reuse(self, seg: _Segment) -> None:
        """A free segment becomes the append target again (its old chunks are dead)."""

    def _address(self, seg: _Segment) -> tuple[int, int]:
        """(host address, file descriptor) of a segment's bytes (0 / -1: none). Under the lock."""
        return 0, -1

    def _storage_moved(self) -> None:
        """Some segment's storage changed: rebuild the address table on the next native read."""
        self._addr_stale = True

    def host_segments(self) -> Any:
        # the lock is held for the whole native read: no put, release, spill or
        # trim can move or recycle a segment under it (a small object, not a
        # generator: this runs once per sample)
        return _HostSegments(self)

    def _addresses(self) -> np.ndarray:
        """The address table, rebuilt if storage moved; the caller holds the lock."""
        if self._addr_stale:
            n = max(self._segments, default=-1) + 1
            table = np.zeros((2, n), np.int64)
            table[1] = -1
            for sid, seg in self._segments.items():
                table[:, sid] = self._address(seg)
            self._addr, self._addr_stale = table, False
        return self._addr

    def _recycle(self, seg: _Segment) -> None:
        """``seg`` just lost its last live chunk and went to the free list."""

    # -- Tier API ------------------------------------------------------------------

    def put(self, data: Any) -> ChunkRef:
        src = as_uint8(data)
        n = src.size
        if self._closed:
            raise ValueError(f"put on a closed {self.kind} tier")
        seg, offset = self._reserve(n)
        if n:
            self._write(seg, offset, src)
        with self._lock:
            seg.live[offset] = n
            self._used += n
            self._nchunks += 1
        return ChunkRef(seg.id, offset, n)

    def get(self, ref: ChunkRef) -> Any:
        with self._lock:
            seg = self._live_segment(ref)
            return self._view(seg, ref[1], ref[2])

    def release(self, ref: ChunkRef) -> None:
        _, offset, n = ref
        with self._lock:
            seg = self._live_segment(ref)
            del seg.live[offset]
            self._used -= n
            self._nchunks -= 1
            if seg.live:
                return
            if seg is self._current:
                seg.fill = 0  # empty append target: rewind in place
                return
            self._free.setdefault(seg.capacity, []).append(seg)
        self._recycle(seg)

    @property
    def nbytes(self) -> int:
        return self._reserved

    @property
    def used_nbytes(self) -> int:
        return self._used

    @property
    def nchunks(self) -> int:
        """Number of live chunks."""
        return self._nchunks

    def trim(self) -> int:
        """Drop the storage of every free segment; return the bytes given back."""
        with self._lock:
            free = [seg for stack in self._free.values() for seg in stack]
            self._free.clear()
            for seg in free:
                del self._segments[seg.id]
                self._reserved -= seg.capacity
        for seg in free:
            self._free_storage(seg)
        self._storage_moved()
        return sum(seg.capacity for seg in free)

    def close(self) -> None:
        """Drop all storage. Views already handed out stay readable until dropped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            segments = list(self._segments.values())
            self._segments.clear()
            self._free.clear()
            self._current = None
            self._reserved = self._used = self._nchunks = 0
        for seg in segments:
            self._free_storage(seg)
        self._storage_moved()

    @property
    def closed(self) -> bool:
        return self._closed

    def info(self) -> dict[str, Any]:
        with self._lock:
            nfree = sum(len(stack) for stack in self._free.values())
            free_nbytes = sum(cap * len(stack) for cap, stack in self._free.items())
            return {
                "kind": self.kind,
                "nbytes": self.nbytes,
                "used_nbytes": self._used,
                "nchunks": self._nchunks,
                "segment_bytes": self.segment_bytes,
                "max_bytes": self.max_bytes,
                "nsegments": len(self._segments),
                "nfree_segments": nfree,
                "free_nbytes": free_nbytes,
            }

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(nbytes={self.nbytes}, used_nbytes={self._used}, "
                f"nchunks={self._nchunks}, nsegments={len(self._segments)})")

    # -- internals -----------------------------------------------------------------

    def _live_segment(self, ref: ChunkRef) -> _Segment:
        """The segment holding live chunk ``ref``; the caller holds the lock."""
        seg_id, offset, n = ref
        seg = self._segments.get(seg_id)
        if seg is None or seg.live.get(offset, -1) != n:
            raise UnknownRefError(
                f"{ref!r} is not a live chunk of this {self.kind} tier "
                "(released already, put into another tier, or the tier is closed)")
        return seg

    def _reserve(self, n: int) -> tuple[_Segment, int]:
        need = max(n, 1)  # a zero-byte chunk still takes a unique offset
        cur = self._current
        if cur is not None and cur.fill + need <= cur.capacity:
            offset = cur.fill
            cur.fill += need
            return cur, offset
        seg = self._open_segment(need)
        seg.fill = need
        return seg, 0

    def _open_segment(self, need: int) -> _Segment:
        """Seal the append target and open another: a free one if any fits, else new."""
        self._seal()
        cap = self.segment_bytes if need <= self.segment_bytes else (
            -(-need // self.segment_bytes) * self.segment_bytes)
        with self._lock:
            seg = self._pop_free(cap)
        if seg is not None:
            try:
                self._reuse(seg)
            except BaseException:
                with self._lock:
                    self._free.setdefault(seg.capacity, []).append(seg)
                raise
        else:
            self._make_room(cap, need)
            seg = _Segment(self._next_id, cap)
            self._next_id += 1
            self._allocate(seg)
            with self._lock:
                self._segments[seg.id] = seg
                self._reserved += cap
        seg.fill = 0
        self._current = seg
        with self._lock:
            self._storage_moved()
        return seg

    def _seal(self) -> None:
        cur, self._current = self._current, None
        if cur is None or cur.live:
            return
        with self._lock:
            self._free.setdefault(cur.capacity, []).append(cur)
        self._recycle(cur)

    def _pop_free(self, cap: int) -> _Segment | None:
        """The most recently freed segment of the smallest capacity >= ``cap``."""
        fits = [c for c, stack in self._free.items() if c >= cap and stack]
        if not fits:
            return None
        best = min(fits)
        stack = self._free[best]
        seg = stack.pop()
        if not stack:
            del self._free[best]
        return seg

    def _make_room(self, cap: int, need: int) -> None:
        """Enforce ``max_bytes`` before reserving ``cap`` more bytes."""
        if self.max_bytes is None or self._reserved + cap <= self.max_bytes:
            return
        if self.trim() and self._reserved + cap <= self.max_bytes:
            return
        raise TierFullError(
            f"{self.kind} tier is full: a {need}-byte chunk needs a new {cap}-byte segment, "
            f"but {self._reserved} of max_bytes={self.max_bytes} are reserved "
            f"({self._used} bytes in {self._nchunks} live chunks). Release chunks, "
            "raise max_bytes, or use a disk/hybrid tier.")


class _HostSegments:
    """``with tier.host_segments() as addr``: the tier's lock, and its address table."""

    __slots__ = ("tier",)

    def __init__(self, tier: SegmentedTier) -> None:
        self.tier = tier

    def __enter__(self) -> np.ndarray:
        self.tier._lock.acquire()
        try:
            return self.tier._addresses()
        except BaseException:
            self.tier._lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        self.tier._lock.release()
