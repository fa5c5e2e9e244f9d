"""The device heap: records in fixed-size segments of one device tensor, under a byte budget.

Records are appended to the *current* segment, whose bytes wait in a host staging
buffer (pinned on CUDA) and go to the device in one copy when it is full (or on
:meth:`DeviceHeap.flush`): uploads in batches, never per record. Every segment
counts its live bytes; once they reach zero it is recycled whole. A ring buffer
frees its records in the order it wrote them, so segments empty oldest first.

All segments live in *one* device tensor, the arena (``slots * segment_bytes``
bytes, then the *inbox*), so a record's device address is one integer and a batch
reads every record with one gather, whatever segment it is in. The arena grows
by a quarter at a time (a device copy, rare: the copies add up to about four times
the final size, and a quarter is the most room left idle) up to its budget; past it, the oldest segment is
copied to host RAM ("spilled") and its slot reused. A budget is a byte count, or a
:class:`DeviceBudget` that several heaps share (one buffer's observation keys): a heap
grows while the shared budget has room and spills its own oldest segment when it has none. A read still finds spilled
records: :meth:`DeviceHeap.pack` copies them (and any record of the current
segment not uploaded yet) after the batch's header, and the whole block goes to
the inbox in one upload, so the decoder sees one address space.

Addresses handed out are *virtual*: ``segment id * segment_bytes + offset``; a
spill moves a segment without changing them.

Interrupts. State that must agree lives in small frozen objects installed by one assignment
(``_Arena``: the arena and its views; ``_Segments``: the per-segment tables; ``_Cursor``: the
current segment and what of it was uploaded), so an exception at any line leaves every record
readable; the worst it leaves is bytes nobody can free (a leak).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from chunkstore.device.runs import copy_ranges
from chunkstore.device.staging import StagingBuffer

__all__ = ["DEFAULT_SEGMENT_BYTES", "DeviceBudget", "DeviceHeap", "default_budget"]

#: 1 MiB: about 3,000 MsPacman frames; a spill moves this much at a time
DEFAULT_SEGMENT_BYTES = 1 << 20
#: the inbox starts here and doubles when a batch needs more
_INBOX_START = 256 << 10
#: arena sizes are multiples of this, so its int64 and word views cover it
_ALIGN = 8


@dataclass(frozen=True)
class _Arena:
    """The arena, its views and its sizes, replaced whole (one assignment: all-or-nothing under Ctrl-C)."""

    tensor: Any  # uint8: ``nslots * segment_bytes`` bytes of slots, then the inbox; None once closed
    words: Any  # the same bytes as run words
    int64: Any  # the same bytes as int64
    nslots: int  # the budget counts these
    inbox: int  # bytes of the inbox


@dataclass(frozen=True)
class _Segments:
    """Per segment id, every table, replaced whole when ids are added (one assignment).

    Entries change in place (one numpy call or list store each); the tables themselves and
    their length change together, only by a new ``_Segments``."""

    slot: np.ndarray  # device slot (-1: in host RAM)
    fill: np.ndarray  # append cursor
    live: np.ndarray  # live bytes
    born: np.ndarray  # age (the clock when it opened)
    used: np.ndarray  # published; free segment ids and free slots are read from these tables
    host: list[np.ndarray | None]  # host bytes of spilled (and host-only) segments


@dataclass(frozen=True)
class _Cursor:
    """The segment being appended to and what of it is on the device, replaced whole (one assignment)."""

    seg: int  # -1: none
    uploaded: int  # bytes of it already on the device
    mirror: StagingBuffer | None  # its host bytes (None: a host-only segment, or none)
    mirrors: tuple[StagingBuffer, StagingBuffer]  # taken in turn: the second is the next segment's


class DeviceBudget:
    """Bytes of device memory that several heaps may hold together.

    Parameters
    ----------
    limit
        The most bytes of segments all heaps drawing on it keep on the device
        (None: no limit; 0: none, every segment lives in host RAM).

    A pickled budget keeps its limit only: the heaps rebuilt with it count again.

    Examples
    --------
    >>> budget = DeviceBudget(3 << 20)
    >>> budget.take(1 << 20); budget.room()
    2097152
    """

    def __init__(self, limit: int | None) -> None:
        if limit is not None and (isinstance(limit, bool) or int(limit) != limit or limit < 0):
            raise ValueError(f"a device budget must be an integer >= 0 or None, got {limit!r}")
        self.limit = None if limit is None else int(limit)
        self._taken = 0  # bytes taken by hand (take/give)
        # the heaps drawing on it: their slots are counted from the heaps themselves, so an
        # interrupted allocation can never leave the count out of step with the memory
        self._heaps: weakref.WeakSet[DeviceHeap] = weakref.WeakSet()
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        """Bytes in use: every heap's slots, plus what was taken by hand."""
        return self._taken + sum(h.slot_nbytes for h in list(self._heaps))

    def room(self) -> int | None:
        """Bytes still free under the limit (None: unlimited)."""
        return None if self.limit is None else max(self.limit - self.used, 0)

    def attach(self, heap: DeviceHeap) -> None:
        """``heap`` draws on this budget (its slots count until it is closed or collected)."""
        self._heaps.add(heap)

    def take(self, nbytes: int) -> None:
        """Count ``nbytes`` more, held by something that is not a heap of this budget."""
        with self._lock:
            self._taken += int(nbytes)

    def give(self, nbytes: int) -> None:
        with self._lock:
            self._taken = max(self._taken - int(nbytes), 0)

    def __getstate__(self) -> dict[str, Any]:
        return {"limit": self.limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["limit"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"DeviceBudget(limit={self.limit}, used={self.used})"


def default_budget(torch: Any, device: Any) -> int | None:
    """The budget used when none is given: half the free memory of a CUDA device, else no limit.

    On CUDA the device's free memory is asked once, here (``torch.cuda.mem_get_info``),
    never in a read. Other devices (cpu, meta, mps) report no free memory: no limit.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return int(free) // 2


class DeviceHeap:
    """Append-only segments in one device tensor, spilling the oldest to host RAM.

    Parameters
    ----------
    torch
        The torch module.
    device
        A ``torch.device``.
    word_dtype
        The torch dtype run words are read as (``torch.int16`` or ``torch.int32``).
    segment_bytes
        Bytes per segment (a multiple of 8); no record may be larger.
    budget_bytes
        Most bytes of segments kept on the device: an int (None: no limit; 0 keeps
        every segment in host RAM) or a :class:`DeviceBudget` shared with other
        heaps. The inbox comes on top.

    Examples
    --------
    >>> import torch
    >>> heap = DeviceHeap(torch, torch.device("cpu"), torch.int16, segment_bytes=64)
    >>> addr = heap.put(np.arange(8, dtype=np.uint8), np.array([4, 4]))
    >>> addr.tolist()
    [0, 4]
    """

    def __init__(self, torch: Any, device: Any, word_dtype: Any, *,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 budget_bytes: int | DeviceBudget | None = None) -> None:
        if segment_bytes < _ALIGN or segment_bytes % _ALIGN:
            raise ValueError(f"segment_bytes must be a positive multiple of {_ALIGN}, got {segment_bytes}")
        if not isinstance(budget_bytes, DeviceBudget):
            if budget_bytes is not None and budget_bytes < 0:
                raise ValueError(f"budget_bytes must be >= 0 or None, got {budget_bytes}")
            budget_bytes = DeviceBudget(budget_bytes)
        self.budget = budget_bytes
        self._torch, self.device, self._word_dtype = torch, device, word_dtype
        self.segment_bytes = int(segment_bytes)
        ids = np.zeros(0, np.int64)  # no segment ids yet: _new_id adds them
        self._segs = _Segments(ids, ids.copy(), ids.copy(), ids.copy(), np.zeros(0, bool), [])
        self._clock = 0
        self._cursor = _Cursor(-1, 0, None, (StagingBuffer(torch, device), StagingBuffer(torch, device)))
        self.closed = False
        self.spills = 0  # segments moved to host RAM so far
        self._arena = _Arena(None, None, None, 0, 0)
        self._allocate(0, _INBOX_START)
        self.budget.attach(self)

    # Interrupts (a KeyboardInterrupt between any two bytecodes): nothing here is kept in two
    # places. Free segment ids, free slots and the budget's count are read from the segment
    # tables (``used``, ``slot``) and the arena's ``nslots``; the tables grow in one step (a
    # new ``_Segments``); a segment is published (``used``) only once its fields are set, and
    # unpublished first when freed; a segment left dead and unfreed by an interrupted release
    # is reclaimed when the next segment opens. At worst an interrupt leaves a record counted
    # live that no item holds (its segment is then kept): memory, never a wrong read.

    @property
    def slot_nbytes(self) -> int:
        """Device bytes of the slots (what the budget counts; 0 once closed)."""
        return 0 if self.closed else self._arena.nslots * self.segment_bytes

    # the arena and its views: what a read hands the decoder (chunkstore.device.batch, .array)
    @property
    def arena(self) -> Any:
        """The arena: a uint8 device tensor (None once closed)."""
        return self._arena.tensor

    @property
    def bytes(self) -> Any:
        """The arena as bytes (:attr:`arena`)."""
        return self._arena.tensor

    @property
    def words(self) -> Any:
        """The arena as run words."""
        return self._arena.words

    @property
    def int64(self) -> Any:
        """The arena as int64."""
        return self._arena.int64

    # -- the arena ---------------------------------------------------------------------------
    @property
    def max_slots(self) -> int | None:
        """The most slots this heap could have now (None: no limit)."""
        room = self.budget.room()
        return None if room is None else self._arena.nslots + room // self.segment_bytes

    def _allocate(self, nslots: int, inbox: int) -> None:
        """A new arena of ``nslots`` slots and an inbox of ``inbox`` bytes; slots are copied over."""
        torch, old = self._torch, self._arena
        inbox = -(-int(inbox) // _ALIGN) * _ALIGN
        arena = torch.empty(nslots * self.segment_bytes + inbox, dtype=torch.uint8, device=self.device)
        if old.tensor is not None and old.nslots:
            keep = old.nslots * self.segment_bytes
            arena[:keep].copy_(old.tensor[:keep])
        # one step: the views and the sizes always describe one arena (the budget counts nslots)
        self._arena = _Arena(arena, arena.view(self._word_dtype), arena.view(torch.int64), nslots, inbox)

    @property
    def inbox_offset(self) -> int:
        """Byte offset of the inbox in the arena."""
        return self._arena.nslots * self.segment_bytes

    def _slot_view(self, slot: int, start: int, stop: int) -> Any:
        base = slot * self.segment_bytes
        return self._arena.tensor[base + start:base + stop]

    # -- appending -----------------------------------------------------------------------------
    def put(self, data: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Append records (``data`` holds them back to back); their virtual addresses.

        A record of size 0 stores nothing and gets address -1.
        """
        sizes = np.asarray(sizes, np.int64)
        addrs = np.full(sizes.size, -1, np.int64)
        if sizes.size and int(sizes.max()) > self.segment_bytes:
            raise ValueError(f"a record of {int(sizes.max())} bytes exceeds the segment size "
                             f"{self.segment_bytes}")
        ends = np.cumsum(sizes)
        i = 0
        while i < sizes.size:
            if self._cursor.seg < 0:
                self._open_segment()
            cur, segs = self._cursor, self._segs  # read after the open: it may add segment ids
            seg = cur.seg
            fill = int(segs.fill[seg])
            base = int(ends[i - 1]) if i else 0
            j = int(np.searchsorted(ends, base + self.segment_bytes - fill, side="right"))  # records [i, j) fit
            if j == i:
                self._close_segment()
                continue
            n = int(ends[j - 1]) - base
            self._store(cur, segs, fill, data[base:base + n])
            addrs[i:j] = seg * self.segment_bytes + fill + (ends[i:j] - sizes[i:j] - base)
            segs.fill[seg] += n
            segs.live[seg] += n
            i = j
        addrs[sizes == 0] = -1
        return addrs

    @staticmethod
    def _store(cur: _Cursor, segs: _Segments, offset: int, data: np.ndarray) -> None:
        if cur.mirror is not None:
            cur.mirror.array[offset:offset + data.size] = data
        else:
            host = segs.host[cur.seg]
            assert host is not None
            host[offset:offset + data.size] = data

    def _open_segment(self) -> None:
        segs, cur = self._segs, self._cursor
        for seg in np.flatnonzero(segs.used & (segs.live == 0)).tolist():  # left dead by an interrupt
            if seg != cur.seg:
                self._free_segment(seg)
        free = np.flatnonzero(~segs.used)
        seg = int(free[0]) if free.size else self._new_id()
        slot = self._take_slot()  # free until the segment is published below
        segs = self._segs  # _new_id installs longer tables
        mirror: StagingBuffer | None = None
        if slot >= 0:  # two mirrors in turn: one may still be uploading the last segment
            mirror = cur.mirrors[1]
            mirror.host(self.segment_bytes)
            segs.host[seg] = None
        else:  # no device room at all (a zero budget): the segment lives in host RAM
            segs.host[seg] = np.empty(self.segment_bytes, np.uint8)
        segs.fill[seg] = segs.live[seg] = 0
        segs.born[seg] = self._clock
        self._clock += 1
        segs.slot[seg] = slot
        segs.used[seg] = True  # published: its id and slot are taken from here on
        mirrors = cur.mirrors if mirror is None else (cur.mirrors[1], cur.mirrors[0])
        # one step: a reader sees either no current segment or this one with nothing uploaded
        self._cursor = _Cursor(seg, 0, mirror, mirrors)

    def _new_id(self) -> int:
        """Room for more segment ids in every table, in one step; the first new id."""
        segs = self._segs
        seg = segs.slot.size
        n = max(4, seg)  # doubling: ids are few
        self._segs = _Segments(np.append(segs.slot, np.full(n, -1, np.int64)),
                               np.append(segs.fill, np.zeros(n, np.int64)),
                               np.append(segs.live, np.zeros(n, np.int64)),
                               np.append(segs.born, np.zeros(n, np.int64)),
                               np.append(segs.used, np.zeros(n, bool)),
                               segs.host + [None] * n)
        return seg

    def _free_slot(self) -> int:
        """The lowest device slot no segment holds, or -1."""
        segs = self._segs
        held = np.zeros(self._arena.nslots, bool)
        held[segs.slot[segs.used & (segs.slot >= 0)]] = True
        free = np.flatnonzero(~held)
        return int(free[0]) if free.size else -1

    def _take_slot(self) -> int:
        """A free device slot: an unused one, a new one (growing the arena), or a spilled one."""
        slot = self._free_slot()
        if slot >= 0:
            return slot
        arena = self._arena
        grow = max(arena.nslots + 1, arena.nslots * 5 // 4)  # a quarter more: little idle room
        room = self.budget.room()
        if room is not None:
            grow = min(grow, arena.nslots + room // self.segment_bytes)
        if grow > arena.nslots:
            self._allocate(grow, arena.inbox)
            return self._free_slot()
        if not self._device_segments().size:  # no device room at all: host RAM only
            return -1
        return self._spill_oldest()

    def _device_segments(self) -> np.ndarray:
        segs = self._segs
        on_device = np.flatnonzero(segs.used & (segs.slot >= 0))
        return on_device[on_device != self._cursor.seg]

    def _spill_oldest(self) -> int:
        segs = self._segs
        on_device = self._device_segments()
        seg = int(on_device[np.argmin(segs.born[on_device])])
        slot, fill = int(segs.slot[seg]), int(segs.fill[seg])
        # a device-to-host copy in the write path (never in a read): the writer waits for it
        host = np.empty(self.segment_bytes, np.uint8)
        host[:fill] = self._slot_view(slot, 0, fill).to("cpu", copy=True).numpy()
        segs.host[seg] = host  # first: until the next line, reads still find it on the device
        segs.slot[seg] = -1
        self.spills += 1
        return slot

    def _close_segment(self) -> None:
        """The current segment is full: upload what is left of it; recycle it if already dead."""
        self.flush()
        cur = self._cursor
        self._cursor = _Cursor(-1, 0, None, cur.mirrors)  # one step: no current segment
        if self._segs.live[cur.seg] == 0:
            self._free_segment(cur.seg)

    def flush(self) -> None:
        """Upload the current segment's bytes that are not on the device yet."""
        cur = self._cursor
        if cur.seg < 0 or cur.mirror is None:
            return
        fill = int(self._segs.fill[cur.seg])
        if fill > cur.uploaded:
            slot = int(self._segs.slot[cur.seg])
            cur.mirror.upload(self._slot_view(slot, cur.uploaded, fill), fill - cur.uploaded, start=cur.uploaded)
            self._cursor = replace(cur, uploaded=fill)

    # -- freeing -------------------------------------------------------------------------------
    def release(self, addrs: np.ndarray, sizes: np.ndarray) -> None:
        """Records at ``addrs`` (``-1``: none) of ``sizes`` bytes are dead."""
        addrs = np.asarray(addrs, np.int64)
        keep = addrs >= 0
        if not keep.any():
            return
        live, cur = self._segs.live, self._cursor.seg
        dead = np.bincount(addrs[keep] // self.segment_bytes, weights=np.asarray(sizes, np.int64)[keep],
                           minlength=live.size)
        np.subtract(live, dead.astype(np.int64), out=live)  # one call
        for seg in np.flatnonzero((dead > 0) & (live == 0)).tolist():
            if seg != cur:
                self._free_segment(seg)

    def _free_segment(self, seg: int) -> None:
        segs = self._segs
        segs.used[seg] = False  # first: its id and slot are free from here on
        segs.slot[seg] = -1
        segs.host[seg] = None

    # -- reading -------------------------------------------------------------------------------
    def device_addresses(self, addrs: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Arena byte addresses of records, and which of them are not on the device.

        Those (spilled, or in the current segment past what was uploaded) must be
        packed with :meth:`pack`; their address in the result is meaningless.
        Records of size 0 count as on the device.
        """
        addrs = np.asarray(addrs, np.int64)
        slots, cur = self._segs.slot, self._cursor
        seg, off = np.divmod(np.maximum(addrs, 0), self.segment_bytes)
        slot = slots[seg] if slots.size else np.full(seg.shape, -1, np.int64)
        away = (slot < 0) | ((seg == cur.seg) & (off + sizes > cur.uploaded))
        away &= (addrs >= 0) & (np.asarray(sizes) > 0)
        return slot * self.segment_bytes + off, away

    def pack(self, addrs: np.ndarray, sizes: np.ndarray, dst: np.ndarray, dst_start: np.ndarray) -> None:
        """Copy host-side records (from :meth:`device_addresses`) into ``dst`` at ``dst_start``."""
        host, cur = self._segs.host, self._cursor
        seg, off = np.divmod(addrs, self.segment_bytes)
        for s in np.unique(seg).tolist():
            sel = np.flatnonzero(seg == s)
            src = cur.mirror.array if s == cur.seg and cur.mirror is not None else host[s]
            assert src is not None
            copy_ranges(src, off[sel], sizes[sel], dst, dst_start[sel])

    def ensure_inbox(self, nbytes: int) -> None:
        """Make the inbox hold ``nbytes`` (growing the arena, by a copy, when it cannot)."""
        arena = self._arena
        if nbytes > arena.inbox:
            self._allocate(arena.nslots, max(nbytes, 2 * arena.inbox))

    # -- sizes and lifetime -------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Device bytes held: every slot and the inbox."""
        arena = self._arena.tensor
        return 0 if arena is None else int(arena.numel())

    @property
    def host_nbytes(self) -> int:
        """Host bytes held: spilled segments and the staging buffers."""
        spilled = sum(h.nbytes for h in self._segs.host if h is not None)
        return spilled + sum(m.nbytes for m in self._cursor.mirrors)

    @property
    def live_nbytes(self) -> int:
        """Bytes of live records."""
        return int(self._segs.live.sum())

    def info(self) -> dict[str, Any]:
        segs, arena = self._segs, self._arena
        return {
            "segment_bytes": self.segment_bytes,
            "slots": arena.nslots,
            "max_slots": self.max_slots,
            "budget_bytes": self.budget.limit,
            "segments_on_device": int(np.count_nonzero(segs.used & (segs.slot >= 0))),
            "segments_in_host_ram": int(np.count_nonzero(segs.used & (segs.slot < 0))),
            "spills": self.spills,
            "live_nbytes": self.live_nbytes,
            "inbox_nbytes": arena.inbox,
        }

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True  # the budget stops counting its slots
        for m in self._cursor.mirrors:
            m.release()
        arena, segs = self._arena, self._segs
        self._arena = _Arena(None, None, None, arena.nslots, arena.inbox)
        self._segs = replace(segs, host=[None] * len(segs.host))
