"""HybridTier: the newest segments in RAM under a byte budget, older ones on disk.

Spill policy: appends always go to a RAM segment. When a new RAM segment is
needed and RAM (attached plus spare arrays) would exceed ``ram_budget_bytes``,
the oldest RAM segment, which in a ring buffer is the one closest to being
released, is written to a disk segment file with ``pwrite`` and its array is
reused for the new segment. A segment keeps its id across a spill; the tier
maps the id to wherever it lives now, so refs stay valid.

A spilled array is reused only when no reader still holds a view of it (checked
with its reference count, under the lock that hands out views); otherwise it is
left to those views and a fresh array is allocated. The disk write itself runs
outside the lock, so readers keep reading the RAM copy meanwhile.

Emptied segments give their storage to spare pools: RAM arrays are reused by
the next RAM segment, disk files by the next spill. Disk reads use the same
bounded-RSS mmap scheme as :class:`~chunkstore.tiers.DiskTier`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from chunkstore.tiers._base import ChunkRef
from chunkstore.tiers._segments import (
    DEFAULT_SEGMENT_BYTES,
    SegmentedTier,
    _Segment,
    read_only,
)
from chunkstore.tiers.disk import (
    DEFAULT_MAX_MAPPED_BYTES,
    PageBudget,
    SegmentDirectory,
    SegmentFile,
)

__all__ = ["HybridTier"]


def _local_refcount() -> int:
    arr = np.empty(0, dtype=np.uint8)
    return sys.getrefcount(arr)


#: getrefcount of an array held only by one local variable (interpreter-dependent)
_UNSHARED_REFS = _local_refcount()


class HybridTier(SegmentedTier):
    """Encoded chunks in RAM up to ``ram_budget_bytes``; older segments spill to disk.

    RAM holds at most ``ram_budget_bytes`` plus one segment (the append target
    is always in RAM, even when the budget is smaller than a segment).

    Parameters
    ----------
    ram_budget_bytes : int
        RAM for segments (live, being appended to, or spare).
    directory : path-like
        Where spill files go: a private subdirectory, removed at ``close()``, when
        the tier is garbage-collected, and at interpreter exit.
    segment_bytes : int
        Size of one segment (default 4 MiB).
    max_mapped_bytes : int
        As for :class:`~chunkstore.tiers.DiskTier`: mapped bytes handed out by
        ``get`` before touched disk pages are dropped from RSS.

    Examples
    --------
    >>> import tempfile
    >>> with HybridTier(1 << 16, tempfile.mkdtemp(), segment_bytes=1 << 14) as tier:
    ...     refs = [tier.put(bytes([i]) * 10_000) for i in range(20)]
    ...     bytes(tier.get(refs[0])[:3]), tier.info()["spills"] > 0
    (b'\\x00\\x00\\x00', True)
    """

    kind = "hybrid"

    def __init__(self, ram_budget_bytes: int, directory: str | os.PathLike[str], *,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 max_mapped_bytes: int = DEFAULT_MAX_MAPPED_BYTES) -> None:
        if ram_budget_bytes < 0:
            raise ValueError(f"ram_budget_bytes must be non-negative, got {ram_budget_bytes}")
        super().__init__(segment_bytes=segment_bytes)
        self.ram_budget_bytes = int(ram_budget_bytes)
        self._pages = PageBudget(max_mapped_bytes)
        self._dir = SegmentDirectory(directory, prefix="chunkstore-hybrid-")
        self._ram: dict[int, _Segment] = {}  # RAM-resident live segments, oldest first
        self._spare_ram: dict[int, list[np.ndarray]] = {}  # capacity -> arrays
        self._spare_files: dict[int, list[SegmentFile]] = {}  # capacity -> files
        self._ram_nbytes = 0
        self._disk_nbytes = 0
        self._nfiles = 0
        self.spills = 0
        self.ram_allocations = 0

    def _settings(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.ram_budget_bytes, self._dir.path.parent), {
            "segment_bytes": self.segment_bytes, "max_mapped_bytes": self._pages.max_mapped_bytes}

    @property
    def nbytes(self) -> int:
        """Bytes of storage held: RAM arrays plus disk files, in use or spare."""
        return self._ram_nbytes + self._disk_nbytes

    @property
    def ram_nbytes(self) -> int:
        return self._ram_nbytes

    @property
    def disk_nbytes(self) -> int:
        return self._disk_nbytes

    @property
    def path(self) -> os.PathLike[str]:
        """The private directory holding the spill files."""
        return self._dir.path

    def get(self, ref: ChunkRef) -> np.ndarray:
        view = super().get(ref)
        self._pages.maybe_drop()
        return view

    def drop_mapped_pages(self) -> int:
        """Make every disk page mapped by ``get`` non-resident now; views stay valid."""
        return self._pages.drop()


    def trim(self) -> int:
        """Drop free segments and every spare RAM array and disk file."""
        before = self.nbytes
        super().trim()
        arrays = [a for stack in self._spare_ram.values() for a in stack]
        files = [f for stack in self._spare_files.values() for f in stack]
        self._spare_ram.clear()
        self._spare_files.clear()
        for arr in arrays:
            self._ram_nbytes -= arr.size
        for file in files:
            self._close_file(file)
        return before - self.nbytes

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        self.trim()
        self._dir.remove()

    def info(self) -> dict[str, Any]:
        out = super().info()
        out.update(ram_nbytes=self._ram_nbytes, disk_nbytes=self._disk_nbytes,
                   ram_budget_bytes=self.ram_budget_bytes, spills=self.spills,
                   ram_allocations=self.ram_allocations,
                   ram_segments=len(self._ram), path=str(self.path),
                   mapped_nbytes=self._pages.mapped_nbytes, page_drops=self._pages.ndrops)
        return out

    # -- storage hooks -------------------------------------------------------------

    def _allocate(self, seg: _Segment) -> None:
        self._attach_ram(seg)

    def _reuse(self, seg: _Segment) -> None:
        self._attach_ram(seg)

    def _recycle(self, seg: _Segment) -> None:
        """An emptied segment hands its array or file to the spare pools."""
        if isinstance(seg.data, SegmentFile):
            self._pages.forget(seg.data)
            seg.data.drop_pages()
            self._spare_files.setdefault(seg.capacity, []).append(seg.data)
        else:
            self._ram.pop(seg.id, None)
            self._spare_ram.setdefault(seg.capacity, []).append(seg.data)
        seg.data = seg.ro = None

    def _free_storage(self, seg: _Segment) -> None:
        if isinstance(seg.data, SegmentFile):
            self._close_file(seg.data)
        elif seg.data is not None:
            self._ram.pop(seg.id, None)
            self._ram_nbytes -= seg.capacity
        seg.data = seg.ro = None

    def _write(self, seg: _Segment, offset: int, src: np.ndarray) -> None:
        seg.data[offset:offset + src.size] = src  # appends always go to RAM

    def _address(self, seg: _Segment) -> tuple[int, int]:
        if seg.ro is not None:
            return int(seg.ro.ctypes.data), -1
        # a spilled segment is pread by the native path: nothing mapped, RSS does not grow
        return 0, (seg.data.fd if isinstance(seg.data, SegmentFile) else -1)

    def _view(self, seg: _Segment, offset: int, nbytes: int) -> np.ndarray:
        if seg.ro is not None:
            return seg.ro[offset:offset + nbytes]
        self._pages.note(seg.data, offset, nbytes)
        return seg.data.view(offset, nbytes)

    # -- spilling ------------------------------------------------------------------

    def _attach_ram(self, seg: _Segment) -> None:
        arr = self._pop(self._spare_ram, seg.capacity)
        if arr is None:
            arr = self._make_ram(seg.capacity)
        seg.data, seg.ro = arr, read_only(arr)
        self._ram[seg.id] = seg

    def _make_ram(self, cap: int) -> np.ndarray:
        """An array of ``cap`` bytes, spilling the oldest RAM segments to stay in budget."""
        if self._ram_nbytes + cap > self.ram_budget_bytes:  # spares of other sizes go first
            for stack in self._spare_ram.values():
                self._ram_nbytes -= sum(a.size for a in stack)
            self._spare_ram.clear()
        while self._ram and self._ram_nbytes + cap > self.ram_budget_bytes:
            arr = self._spill(next(iter(self._ram.values())))
            if arr is not None and arr.size == cap:
                return arr
            if arr is not None:
                self._ram_nbytes -= arr.size
        self._ram_nbytes += cap
        self.ram_allocations += 1
        return np.empty(cap, dtype=np.uint8)

    def _spill(self, seg: _Segment) -> np.ndarray | None:
        """Move a live RAM segment to disk; return its array if nobody else holds it."""
        file = self._pop(self._spare_files, seg.capacity)
        if file is None:
            name = f"spill-{self._nfiles:06d}.bin"
            self._nfiles += 1  # spent first: an interrupted create never hands the name out again
            file = self._dir.create(name, seg.capacity)
            self._disk_nbytes += seg.capacity
        try:
            # released chunks at the head need not be written, unless a snapshot pinned them
            lo = 0 if self._pins else seg.lowest_live()
            file.write(seg.data[lo:seg.fill], lo)
        except BaseException:  # interrupted or a full disk: the segment stays in RAM, the file spare
            self._spare_files.setdefault(seg.capacity, []).append(file)
            raise
        arr = seg.data
        with self._lock:  # from here on readers get views of the file
            # no call between the two: a Ctrl-C cannot leave a filed segment among the RAM ones
            self._storage_moved()  # first: an interrupt after it leaves the table stale, never wrong
            del self._ram[seg.id]
            seg.data, seg.ro = file, None
            shared = sys.getrefcount(arr) > _UNSHARED_REFS
        self.spills += 1
        if shared:
            self._ram_nbytes -= seg.capacity
            return None
        return arr

    def _close_file(self, file: SegmentFile) -> None:
        self._pages.forget(file)
        file.close()
        self._disk_nbytes -= file.capacity

    @staticmethod
    def _pop(pools: dict[int, list[Any]], cap: int) -> Any:
        stack = pools.get(cap)
        if not stack:
            return None
        item = stack.pop()
        if not stack:
            del pools[cap]
        return item
