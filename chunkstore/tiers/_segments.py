"""The log-structured segment arena that every tier is built on.

Chunks are appended into fixed-size segments (``segment_bytes``). A chunk larger
than a segment opens a segment of its own, rounded up to a whole number of
segments so that equal-sized large chunks recycle each other's storage. Each
segment counts its live chunks; once the last one is released the segment goes
to a free list and its storage is reused by a later append. A ring buffer
releases in FIFO order, so segments empty oldest first: no fragmentation, no
compaction.

No Python object per chunk: a segment records its chunks in two growable numpy columns
(offset, length; -1 once released), appended in offset order, so a release finds its chunk
by binary search and a double release or a foreign ref is caught
(:class:`~chunkstore.errors.UnknownRefError`): 8 bytes a chunk (16 in 2 GiB segments).

Bytes are always *copied* into segment storage: compressor outputs keep their compress-bound
allocation alive (a 1.7 KB zstd result held 28 KB), so holding them would cost RAM as if
uncompressed.

Pins (:meth:`SegmentedTier.pin`): while a snapshot reads chunks it captured, a
segment that empties is neither reused nor rewound; it is recycled at the last
unpin. Released chunks stay readable with :meth:`SegmentedTier.peek` meanwhile.

Interrupts: the per-chunk columns are the truth and change first; the tallies
(live chunks per segment, used bytes) follow. An exception between the two can
only keep a segment from recycling, never recycle a live one, and
:meth:`SegmentedTier.live_refs` recounts them (owners call it to repair).

Thread safety: one writer calls ``put``/``release``/``trim``; any number of
threads may call ``get`` at the same time. One lock guards the bookkeeping
(segment table, chunk columns, storage handles); the data copy of ``put`` runs
outside it, so a large put never blocks readers. ``close`` must not race with
other calls. A view returned by ``get`` stays valid until its chunk is released
(after that its segment may be rewritten).
"""

from __future__ import annotations

import itertools
import threading
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from chunkstore.errors import TierFullError, UnknownRefError
from chunkstore.tiers._base import ChunkRef, Tier, checked_ref, checked_sizes, rebuild_tier

__all__ = ["DEFAULT_SEGMENT_BYTES", "MAX_SEGMENT_BYTES", "MIN_SEGMENT_BYTES", "AddressTable", "SegmentedTier"]

DEFAULT_SEGMENT_BYTES = 4 << 20
#: adaptive segments (``segment_bytes=None``): about this many of them, each a power of two
#: between the bounds below. What a ring holds beyond its live chunks is about one segment
#: (the oldest one's released prefix and the newest one's unfilled rest), so a segment of
#: ~1/256 of the tier keeps that slack near 0.5% of it at any size
SEGMENTS_TARGET = 256
MIN_SEGMENT_BYTES = 64 << 10
MAX_SEGMENT_BYTES = 4 << 20
CHUNKS_PER_SEGMENT = 16
_RELEASED = -1


class _Segment:
    """One segment: capacity, append cursor, its chunks' columns, and storage handles."""

    __slots__ = ("capacity", "data", "fill", "hint", "id", "lens", "n", "nlive", "offs", "ro")

    def __init__(self, seg_id: int, capacity: int) -> None:
        self.id = seg_id
        self.capacity = capacity
        self.fill = 0  # append cursor; only the writer moves it
        dtype = np.int32 if capacity < (1 << 31) else np.int64
        self.offs = np.empty(8, dtype)  # offsets of the chunks put since the last reuse, increasing
        self.lens = np.empty(8, dtype)  # their lengths; _RELEASED once released
        self.n = 0  # chunks recorded
        self.nlive = 0  # of which live
        self.hint = 0  # where the next find looks first: a ring releases in the order it put
        self.data: Any = None  # writable storage, tier-specific
        self.ro: Any = None  # read handle, tier-specific

    def record_many(self, offsets: np.ndarray, nbytes: np.ndarray) -> None:
        """Chunks put at ``offsets`` (increasing, after every recorded one), in one step."""
        k = len(offsets)
        if self.n + k > len(self.offs):  # both columns grow in one step, as in record()
            size = max(2 * len(self.offs), self.n + k)
            offs, lens = np.empty(size, self.offs.dtype), np.empty(size, self.lens.dtype)
            offs[:self.n], lens[:self.n] = self.offs[:self.n], self.lens[:self.n]
            self.offs, self.lens = offs, lens
        self.offs[self.n:self.n + k] = offsets  # invisible until n counts them
        self.lens[self.n:self.n + k] = nbytes
        self.n += k
        self.nlive += k

    def record(self, offset: int, nbytes: int) -> None:
        """A chunk put at ``offset`` (after every recorded one)."""
        if self.n == len(self.offs):  # both columns grow in one step (a Ctrl-C between two
            self.offs, self.lens = (  # assignments left them of different lengths)
                np.concatenate([self.offs, np.empty_like(self.offs)]),
                np.concatenate([self.lens, np.empty_like(self.lens)]))
        self.offs[self.n], self.lens[self.n] = offset, nbytes  # invisible until n counts it
        self.n += 1
        self.nlive += 1

    def find(self, offset: int) -> int:
        """The column index of the chunk recorded at ``offset``, or -1."""
        i = self.hint
        if not (i < self.n and self.offs[i] == offset):  # FIFO releases hit the hint: no search
            i = int(np.searchsorted(self.offs[:self.n], offset))
            if not (i < self.n and self.offs[i] == offset):
                return -1
        self.hint = i + 1
        return i

    def live_length(self, offset: int) -> int:
        i = self.find(offset)
        return -1 if i < 0 else int(self.lens[i])

    def reset(self) -> None:
        """Every chunk is dead and the storage is about to be reused from its start."""
        self.fill = 0
        self.n = self.nlive = self.hint = 0

    def lowest_live(self) -> int:
        live = np.flatnonzero(self.lens[:self.n] != _RELEASED)
        return int(self.offs[live[0]]) if live.size else self.fill

    @property
    def nbytes(self) -> int:
        """Bytes of the chunk columns."""
        return self.offs.nbytes + self.lens.nbytes


class AddressTable(np.ndarray):
    """Segment addresses for the native read path that also hold the storage they point into.

    A read that outlives its caller (a worker thread of an interrupted read) keeps the
    table, hence the storage, alive until it ends: it can read stale bytes, never freed memory.
    """

    owners: Any = None


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

    #: whether :meth:`_reuse` leaves a free segment's storage where it was (its address holds)
    _reuse_keeps_storage = False

    def __init__(self, *, segment_bytes: int | None = DEFAULT_SEGMENT_BYTES,
                 max_bytes: int | None = None) -> None:
        if segment_bytes is not None and segment_bytes < 1:
            raise ValueError(f"segment_bytes must be positive, got {segment_bytes}")
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"max_bytes must be non-negative or None, got {max_bytes}")
        #: None: adaptive (:data:`SEGMENTS_TARGET`); the size of a regular segment otherwise
        self.adaptive = segment_bytes is None
        self.segment_bytes = MAX_SEGMENT_BYTES if segment_bytes is None else int(segment_bytes)
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
        self._pins: set[int] = set()  # tokens of the snapshots alive now
        self._pin_ids = itertools.count()
        self._deferred: list[_Segment] = []  # emptied while pinned: recycled at the last unpin
        # host addresses of the segments for the native read path, rebuilt when
        # storage moves (a new or reused segment, a spill, a trim)
        self._addr: np.ndarray = np.zeros((2, 0), np.int64)
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
        """A read handle on a chunk. Called under the lock: keep it cheap."""

    def _reuse(self, seg: _Segment) -> None:
        """A free segment becomes the append target again (its old chunks are dead)."""

    def _address(self, seg: _Segment) -> tuple[int, int]:
        """(host address, file descriptor) of a segment's bytes (0 / -1: none). Under the lock."""
        return 0, -1

    def _storage_moved(self) -> None:
        """Some segment's storage changed: rebuild the address table on the next native read."""
        self._addr_stale = True

    def read_lock(self) -> tuple[Any, Callable[[], np.ndarray | None]]:
        # the lock is held for the whole native read: no put, release, spill or trim can
        # move or recycle a segment under it
        return self._lock, self._addresses

    def _addresses(self) -> np.ndarray:
        """The address table, rebuilt if storage moved; the caller holds the lock."""
        if self._addr_stale:
            n = max(self._segments, default=-1) + 1
            table = np.zeros((2, n), np.int64).view(AddressTable)
            table[1] = -1
            for sid, seg in self._segments.items():
                table[:, sid] = self._address(seg)
            table.owners = [seg.data for seg in self._segments.values()]
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
            seg.record(offset, n)
            self._used += n
            self._nchunks += 1
        return ChunkRef(seg.id, offset, n)

    def put_many(self, data: Any, sizes: Any) -> np.ndarray:
        """:meth:`put` of many chunks, a segment at a time: each run of chunks that fits the
        append target is copied in one ``_write`` and recorded in one locked step. The chunks
        land exactly where one :meth:`put` after another would have put them."""
        src = as_uint8(data)
        sizes = checked_sizes(sizes, src.size)
        if self._closed:
            raise ValueError(f"put on a closed {self.kind} tier")
        if sizes.size and not sizes.all():  # a zero-byte chunk still takes one byte: one by one
            return super().put_many(src, sizes)
        ends = np.cumsum(sizes)
        refs = np.empty((3, sizes.size), np.int64)
        i, n = 0, sizes.size
        while i < n:
            base = int(ends[i] - sizes[i])  # where chunk i starts in src
            cur = self._current
            room = 0 if cur is None else cur.capacity - cur.fill
            # chunks i..j-1 fit the append target; none fits: open another for chunk i, as put would
            j = i + int(np.searchsorted(ends[i:], base + room, side="right"))
            if j == i:
                seg, offset = self._reserve(int(sizes[i]))  # opens a segment; takes chunk i's bytes
                j = i + 1 + int(np.searchsorted(ends[i + 1:], base + seg.capacity - offset, side="right"))
                seg.fill = offset + int(ends[j - 1]) - base
            else:
                assert cur is not None
                seg, offset = cur, cur.fill
                cur.fill += int(ends[j - 1]) - base
            hi = int(ends[j - 1])
            self._write(seg, offset, src[base:hi])
            offs = offset + (ends[i:j] - sizes[i:j] - base)
            with self._lock:
                seg.record_many(offs, sizes[i:j])
                self._used += hi - base
                self._nchunks += j - i
            refs[0, i:j], refs[1, i:j], refs[2, i:j] = seg.id, offs, sizes[i:j]
            i = j
        return refs

    def get(self, ref: ChunkRef) -> Any:
        with self._lock:
            seg = self._live_segment(ref)
            return self._view(seg, ref[1], ref[2])

    def peek(self, ref: ChunkRef) -> Any:
        seg_id, offset, n = checked_ref(ref)
        with self._lock:
            seg = self._segments.get(seg_id)
            i = -1 if seg is None or n < 0 or offset + n > seg.fill else seg.find(offset)
            # a ref of another length than its chunk's (n = -1: neighbours' bytes too) is not ours
            if seg is None or i < 0 or seg.lens[i] not in (n, _RELEASED):
                raise UnknownRefError(f"{ref!r} is not a chunk of this {self.kind} tier, live or pinned")
            return self._view(seg, offset, n)

    def release(self, ref: ChunkRef) -> None:
        seg_id, offset, n = checked_ref(ref)
        with self._lock:
            seg = self._segments.get(seg_id)
            i = -1 if seg is None else seg.find(offset)
            if seg is None or i < 0 or n < 0 or seg.lens[i] != n:
                self._live_segment(ref)  # raises UnknownRefError, saying why
                raise AssertionError(f"{ref!r} passed the check it failed")  # pragma: no cover
            seg.lens[i] = _RELEASED  # the truth first: then the tallies
            seg.nlive -= 1
            self._used -= n
            self._nchunks -= 1
            if seg.nlive:
                return
            recycled = self._emptied(seg)
        if recycled:
            self._recycle(seg)

    def _emptied(self, seg: _Segment) -> bool:
        """``seg`` has no live chunk left (lock held): rewind, free, or defer it; True if freed."""
        if self._pins:
            if seg not in self._deferred:
                self._deferred.append(seg)
            return False
        if seg is self._current:
            seg.reset()  # empty append target: rewind in place
            return False
        if self._segments.get(seg.id) is not seg:
            return False  # trimmed or closed meanwhile
        self._free.setdefault(seg.capacity, []).append(seg)
        return True

    def pin(self) -> Callable[[], None]:
        token = next(self._pin_ids)
        self._pins.add(token)  # one step: a set of tokens, so an unpin is idempotent and atomic

        def unpin() -> None:
            self._pins.discard(token)
            self._recycle_deferred()

        return unpin

    def _recycle_deferred(self) -> None:
        """Recycle the segments emptied while pinned, once nothing is pinned (also called by appends,
        so an unpin interrupted before it got here leaves nothing waiting for good)."""
        if self._pins or not self._deferred:
            return
        with self._lock:
            deferred, self._deferred = self._deferred, []
            freed = [seg for seg in deferred if seg.nlive == 0 and self._emptied(seg)]
        for seg in freed:
            self._recycle(seg)

    def live_refs(self) -> np.ndarray:
        with self._lock:
            cols = []
            used = nchunks = 0
            for seg in self._segments.values():
                live = np.flatnonzero(seg.lens[:seg.n] != _RELEASED)
                seg.nlive = int(live.size)  # recount: an interrupted release may have left it high
                used += int(seg.lens[live].sum())
                nchunks += seg.nlive
                cols.append(np.stack([np.full(live.size, seg.id, np.int64),
                                      seg.offs[live].astype(np.int64), seg.lens[live].astype(np.int64)]))
            self._used, self._nchunks = used, nchunks
            empty = [seg for seg in self._segments.values()
                     if seg.nlive == 0 and seg is not self._current and seg not in self._deferred
                     and not any(seg in stack for stack in self._free.values())]
            freed = [seg for seg in empty if self._emptied(seg)]
        for seg in freed:
            self._recycle(seg)
        return np.concatenate(cols, axis=1) if cols else np.zeros((3, 0), np.int64)

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

    @property
    def table_nbytes(self) -> int:
        """Bytes of the per-chunk columns of every segment."""
        with self._lock:
            return sum(seg.nbytes for seg in self._segments.values())

    @property
    def ram_nbytes(self) -> int:
        """Bytes of segment storage in this process's memory (every segment, for a RAM tier)."""
        return self._reserved

    @property
    def held_nbytes(self) -> int:
        """Segment storage in memory (live chunks, the slack around them, free segments kept
        for reuse) plus the per-chunk columns."""
        return self.ram_nbytes + self.table_nbytes

    def trim(self) -> int:
        """Drop the storage of every free segment; return the bytes given back."""
        with self._lock:
            self._storage_moved()  # first: see _open_segment
            free = [seg for stack in self._free.values() for seg in stack]
            self._free.clear()
            for seg in free:
                del self._segments[seg.id]
                self._reserved -= seg.capacity
        for seg in free:
            self._free_storage(seg)
        with self._lock:  # again: a read in between rebuilt it from storage about to be freed
            self._storage_moved()
        return sum(seg.capacity for seg in free)

    def close(self) -> None:
        """Drop all storage. Views already handed out stay readable until dropped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._storage_moved()  # first: see _open_segment
            segments = list(self._segments.values())
            self._segments.clear()
            self._free.clear()
            self._deferred.clear()
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
                "adaptive_segments": self.adaptive,
                "max_bytes": self.max_bytes,
                "nsegments": len(self._segments),
                "nfree_segments": nfree,
                "free_nbytes": free_nbytes,
                "table_nbytes": sum(seg.nbytes for seg in self._segments.values()),
                "pins": len(self._pins),
            }

    def _settings(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The constructor arguments ``(args, kwargs)`` that build an empty tier like this one."""
        return (), {"segment_bytes": None if self.adaptive else self.segment_bytes, "max_bytes": self.max_bytes}

    def __reduce__(self) -> tuple[Any, ...]:
        """A tier pickles (and copies) as its settings, never its chunks (:func:`rebuild_tier`)."""
        args, kwargs = self._settings()
        return rebuild_tier, (type(self), args, kwargs)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(nbytes={self.nbytes}, used_nbytes={self._used}, "
                f"nchunks={self._nchunks}, nsegments={len(self._segments)})")

    # -- internals -----------------------------------------------------------------

    def _live_segment(self, ref: ChunkRef) -> _Segment:
        """The segment holding live chunk ``ref``; the caller holds the lock."""
        seg_id, offset, n = checked_ref(ref)
        seg = self._segments.get(seg_id)
        if seg is None or seg.live_length(offset) != n or n < 0:
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

    def _capacity_for(self, need: int) -> int:
        """The capacity of a new segment that must hold a ``need``-byte chunk.

        Fixed segments: ``segment_bytes``, or a whole number of them for a larger chunk.
        Adaptive ones: the power of two at or below ``reserved / SEGMENTS_TARGET``, but at
        least one that holds :data:`CHUNKS_PER_SEGMENT` chunks of this size (the end of a
        segment too short for the next chunk is lost: half a chunk per segment), within the
        bounds (a larger chunk gets a whole number of the largest).
        """
        step = self.segment_bytes
        if self.adaptive and need <= MAX_SEGMENT_BYTES // CHUNKS_PER_SEGMENT:
            want = max(1 << max(self._reserved // SEGMENTS_TARGET, 1).bit_length() - 1,
                       1 << (CHUNKS_PER_SEGMENT * need - 1).bit_length(), MIN_SEGMENT_BYTES)
            return min(want, MAX_SEGMENT_BYTES)
        return step if need <= step else -(-need // step) * step

    def _open_segment(self, need: int) -> _Segment:
        """Seal the append target and open another: a free one if any fits, else new."""
        self._recycle_deferred()
        self._seal_current()
        cap = self._capacity_for(need)
        with self._lock:
            # an adaptive tier reuses any free segment the chunk fits in (earlier ones were smaller)
            seg = self._pop_free(max(need, 1) if self.adaptive else cap)
        # The native read path's address table goes stale *before* a segment is published or its
        # storage moves, in the same locked step: a Ctrl-C anywhere after leaves it stale (rebuilt
        # by the next read), never a table that lacks a segment chunks are then put into. (Marked
        # after instead, an interrupt in between left a published segment the table did not know;
        # a repair handed it to the free list, and a reuse, which keeps a RAM segment's storage
        # and so does not mark, put chunks into it: "no host address".)
        if seg is not None:
            moved = not self._reuse_keeps_storage
            try:
                if moved:
                    with self._lock:
                        self._storage_moved()
                self._reuse(seg)
            except BaseException:
                with self._lock:
                    self._free.setdefault(seg.capacity, []).append(seg)
                raise
            seg.reset()
            if moved:  # again: a read between the first mark and the move may have rebuilt it
                with self._lock:
                    self._storage_moved()
        else:
            self._make_room(cap, need)
            with self._lock:  # the id is spent first: an allocation interrupted after it made
                seg = _Segment(self._next_id, cap)  # a file never hands that name out again
                self._next_id += 1
            self._allocate(seg)
            with self._lock:
                self._storage_moved()
                self._segments[seg.id] = seg
                self._reserved += cap
        # only now the append target: a Ctrl-C before this line leaves a segment nothing was put in,
        # never one whose chunks the native read path's address table does not know
        self._current = seg
        return seg

    def _seal_current(self) -> None:
        """No more appends to the current segment; free it if nothing in it is live.

        (An interrupt between the two steps leaves no append target, which the next
        put opens, and at worst an empty segment out of the free list, which
        :meth:`live_refs` finds again.)
        """
        cur, self._current = self._current, None
        if cur is None:
            return
        with self._lock:
            recycled = cur.nlive == 0 and self._emptied(cur)
        if recycled:
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
