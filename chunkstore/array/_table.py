"""The chunk table: where each chunk of a :class:`~chunkstore.ChunkedArray` is.

A chunk is *stored* (sealed: its encoded bytes live in a tier, at the
:class:`~chunkstore.tiers.ChunkRef` kept here), *open* (raw and writable: a numpy
buffer kept here), both for a moment, or neither (never written: it reads as
zeros). The table is a handful of numpy columns, one entry per chunk: no Python
object per chunk (20 bytes per chunk in all).

Crash safety. Each chunk's entry (segment, offset, length, version) is one
record of a structured numpy array, and every change to an entry is one numpy
assignment: an exception raised at any point (a KeyboardInterrupt from a signal
handler included) leaves each entry as it was before or after, never a mix.
A chunk being replaced is always open meanwhile (it reads from its open buffer),
bytes leave the tier only after their entry stopped pointing at them (an
interrupt in between can leak one chunk in the tier, which the array's repair
releases, but never frees a live one), and a renumbered table
(:meth:`ChunkTable.remapped`) is a new object the array swaps in with one
assignment.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

import numpy as np

from chunkstore.tiers import ChunkRef

__all__ = ["ChunkTable"]


#: one entry per chunk, packed (20 bytes): where its encoded bytes are, and a version that
#: changes with every change of the chunk (keys of decoded-chunk caches)
ENTRY = np.dtype([("seg", "<i4"), ("len", "<u4"), ("off", "<i8"), ("version", "<u4")], align=False)
_ids = itertools.count()


class ChunkTable:
    """Per-chunk entries of one array (see the module docstring).

    Parameters
    ----------
    capacity, chunk_len
        The array's items and items per chunk.

    Attributes
    ----------
    seg, off, len, version
        Views of the entries' fields (``seg`` -1: not stored); read them, change
        entries only through the methods.
    open
        Open chunks: chunk index -> raw buffer, least recently written first.
    uid
        A number no other table has: decoded-chunk caches key on it.

    Examples
    --------
    >>> t = ChunkTable(10, 4)
    >>> t.nchunks_total, t.rows(2)
    (3, 2)
    >>> t.store(1, ChunkRef(0, 128, 40)); t.ref(1), t.stored().tolist()
    (ChunkRef(segment=0, offset=128, nbytes=40), [1])
    """

    __slots__ = ("_addr", "_index", "capacity", "chunk_len", "entries", "len", "off", "open", "seg", "uid", "version")

    def __init__(self, capacity: int, chunk_len: int) -> None:
        self.capacity = int(capacity)
        self.chunk_len = int(chunk_len)
        self.uid = next(_ids)
        self.entries = np.zeros(self.nchunks_total, dtype=ENTRY)
        self.entries["seg"] = -1
        # field views, made once: the native read path takes them as they are
        self.seg, self.off = self.entries["seg"], self.entries["off"]
        self.len, self.version = self.entries["len"], self.entries["version"]
        self.open: OrderedDict[int, np.ndarray] = OrderedDict()
        self._addr: dict[int, int] = {}  # open chunk -> its buffer's address (a ctypes lookup costs ~1 us)
        self._index: tuple[np.ndarray, np.ndarray] | None = None

    # -- geometry --------------------------------------------------------------------
    @property
    def nchunks_total(self) -> int:
        return -(-self.capacity // self.chunk_len)

    def rows(self, c: int) -> int:
        """Items in chunk ``c`` (the last chunk may be shorter)."""
        return min(self.chunk_len, self.capacity - c * self.chunk_len)

    @property
    def nbytes(self) -> int:
        """Bytes of the entries (every chunk, stored or not)."""
        return self.entries.nbytes

    # -- stored chunks -----------------------------------------------------------------
    def is_stored(self, c: int) -> bool:
        return bool(self.seg[c] >= 0)

    def ref(self, c: int) -> ChunkRef:
        return ChunkRef(int(self.seg[c]), int(self.off[c]), int(self.len[c]))

    def stored(self) -> np.ndarray:
        """Indices of the stored chunks, increasing."""
        return np.flatnonzero(self.seg >= 0)

    def store(self, c: int, ref: ChunkRef) -> None:
        """Chunk ``c`` lives at ``ref`` from now on (one assignment; any earlier ref is the caller's)."""
        self.entries[c] = (ref.segment, ref.nbytes, ref.offset, self.version[c] + 1)

    def unstore(self, c: int) -> ChunkRef:
        """Chunk ``c`` (stored) is no longer; returns where it was, for the caller to release."""
        ref = self.ref(c)
        self.entries[c] = (-1, 0, 0, self.version[c] + 1)
        return ref

    def adopt(self, chunks: np.ndarray, refs: np.ndarray) -> None:
        """Store many chunks at once: ``refs`` is ``(3, n)`` (segment, offset, nbytes)."""
        new = np.empty(len(chunks), ENTRY)
        new["seg"], new["off"], new["len"] = refs
        new["version"] = self.version[chunks] + 1
        self.entries[chunks] = new

    def sealed_nbytes(self) -> tuple[int, int]:
        """(encoded bytes, raw items) of the stored chunks, counted from the entries."""
        stored = self.seg >= 0
        chunks = np.flatnonzero(stored)
        rows = np.minimum(self.chunk_len, self.capacity - chunks * self.chunk_len)
        return int(self.len[stored].sum(dtype=np.int64)), int(rows.sum())

    # -- open chunks -------------------------------------------------------------------
    def set_open(self, c: int, buf: np.ndarray) -> None:
        self._index = None  # first: a read never sees an index older than the open set
        self._addr[c] = buf.ctypes.data  # before the buffer is listed: an entry of open has its address
        self.open[c] = buf
        self._index = None

    def pop_open(self, c: int) -> np.ndarray | None:
        self._index = None
        buf = self.open.pop(c, None)
        self._addr.pop(c, None)  # after: a listed chunk always has its address
        self._index = None
        return buf

    def touch(self, c: int) -> None:
        """Chunk ``c`` (open) was just written: it is sealed last when too many are open."""
        self.open.move_to_end(c)

    def open_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(chunk index, buffer address) of every open chunk, for the native read path."""
        index = self._index
        if index is None:
            chunks = np.fromiter(self.open.keys(), np.int64, len(self.open))
            addrs = np.fromiter(map(self._addr.__getitem__, self.open), np.int64, len(self.open))
            index = self._index = (chunks, addrs)
        return index

    def forget_index(self) -> None:
        self._index = None

    @property
    def open_nbytes(self) -> int:
        return sum(b.nbytes for b in self.open.values())

    # -- renumbering -------------------------------------------------------------------
    def remapped(self, capacity: int, src: np.ndarray, dst: np.ndarray) -> ChunkTable:
        """A new table of ``capacity`` items where chunk ``src[i]`` is chunk ``dst[i]`` (others empty).

        This table is left as it is; the caller swaps the new one in (a new ``uid``:
        cached chunks were keyed by the old numbering).
        """
        new = ChunkTable(capacity, self.chunk_len)
        new.entries[dst] = self.entries[src]
        moved = dict(zip(src.tolist(), dst.tolist(), strict=True))
        new.open = OrderedDict((moved[c], b) for c, b in self.open.items() if c in moved)
        new._addr = {moved[c]: self._addr[c] for c in self.open if c in moved}
        return new

    def copy(self) -> ChunkTable:
        """An independent copy of the entries (open buffers shared), same numbering and uid."""
        new = ChunkTable.__new__(ChunkTable)
        new.capacity, new.chunk_len, new.uid = self.capacity, self.chunk_len, self.uid
        new.entries = self.entries.copy()
        new.seg, new.off = new.entries["seg"], new.entries["off"]
        new.len, new.version = new.entries["len"], new.entries["version"]
        new.open, new._index = OrderedDict(self.open), None
        new._addr = dict(self._addr)
        return new
