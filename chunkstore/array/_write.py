"""The write path of a ChunkedArray: open chunks, sealing, renumbering, discarding.

Items are written into *open* chunks: raw numpy buffers, one per chunk being
written. A chunk is sealed (encoded and put into the tier) as soon as its last
item is written, when more than ``max_open`` chunks are open (the least recently
written goes), or on ``flush()``; a sequential writer therefore encodes every
chunk once per lap. Writing into a sealed chunk decodes it into an open buffer
first (rare, correct).

Every step keeps each chunk readable with its contents before or after the
write, whatever exception interrupts it (see :mod:`chunkstore.array._table`):
a sealed chunk becomes open before its stored copy is dropped, and a chunk
leaves the open set only once its encoded bytes are in the table. A failed seal
(tier full, disk full) keeps the open chunk and its data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chunkstore.array import _training
from chunkstore.array._fields import ArrayFields
from chunkstore.array.frontend import WriteFrontEnd, check_chunk
from chunkstore.casting import zero_fill
from chunkstore.tiers import ChunkRef

__all__ = ["BULK_MIN_CHUNKS", "MAX_SPARE", "WritePath"]

#: buffers of sealed chunks kept for the next open ones (an appender opens a chunk right after it
#: seals one; more would only be held memory)
MAX_SPARE = 2
#: a write covering at least this many whole chunks takes the bulk path (one encode_many, one
#: put_many, one table step for them all); fewer go chunk by chunk
BULK_MIN_CHUNKS = 2
#: raw bytes of the chunks one bulk step encodes at most: a longer run takes several steps, so a
#: broadcast or strided value (``arr[:] = 0``) is never made contiguous all at once
BULK_MAX_BYTES = 64 << 20


class WritePath(WriteFrontEnd, ArrayFields):
    """ChunkedArray's writes (a mixin: ``ChunkedArray`` supplies the state).

    The public writes and their checks are :class:`~chunkstore.array.frontend.WriteFrontEnd`'s;
    this class is the storage behind its hooks, and the writes only a ChunkedArray has.
    """

    # -- writes the front-end does not have -----------------------------------------------
    def put_chunk_bytes(self, c: int, data: Any, *, train: bool = True) -> None:
        """Install already-encoded bytes as chunk ``c``, verbatim (the load path).

        ``train=False``: the codec is not trained here even if it is due; a loader installs
        every chunk first and then decides once (:func:`chunkstore.array._training.settle_loaded`).
        """
        c = check_chunk(self.name, c, self.nchunks_total)
        with self._lock:
            self._begin()
            ref = self.tier.put(data)
            self._install(c, ref, train=train)
            self._table.pop_open(c)  # after: until here the chunk read as its open copy
            self._dirty = False

    def adopt_chunks(self, chunks: np.ndarray, refs: np.ndarray, *, train: bool = True) -> None:
        """Install chunks that the tier already holds, in bulk (the lazy load path).

        ``chunks`` are increasing chunk indices, none stored or open yet; ``refs`` is
        the ``(3, len(chunks))`` table of their tier references (segment, offset,
        nbytes), as :meth:`put_chunk_bytes` would have stored them one by one
        (``train`` too).
        """
        chunks = np.asarray(chunks, np.int64)
        if len(chunks) == 0:
            return
        if chunks[0] < 0 or chunks[-1] >= self.nchunks_total or np.any(np.diff(chunks) <= 0):
            raise IndexError(f"{self.name}: chunk indices must increase within 0..{self.nchunks_total - 1}")
        with self._lock:
            self._begin()
            table = self._table
            if np.any(table.seg[chunks] >= 0) or (table.open and np.isin(chunks, list(table.open)).any()):
                raise ValueError(f"{self.name}: adopt_chunks() installs chunks not stored or open yet")
            n = refs[2]
            self._max_len = max(self._max_len, int(n.max()))  # before the entries point at them
            table.adopt(chunks, refs)
            self._cbytes_sealed += int(n.sum())
            rows = np.minimum(self.chunk_len, self.capacity - chunks * self.chunk_len)
            self._raw_sealed += int(rows.sum()) * self._item_nbytes
            if train:
                self._maybe_train()
            self._dirty = False

    # -- what the write path holds ---------------------------------------------------------
    def held_info(self) -> dict[str, int]:
        """Every byte of this process's memory the array holds, by kind (``nbytes_held`` sums them).

        ``tier``: when the array owns its tier, what the tier holds (segment storage in
        RAM, live or slack or free, and its per-chunk columns); for a tier given to the
        array (shared), only this array's encoded bytes, the tier's owner counts the rest.
        ``open_chunks``: raw open chunks. ``spare_buffers``: buffers of sealed chunks kept
        for the next open ones. ``chunk_table``: the per-chunk entries.
        """
        tier = self.tier
        return {
            "tier": int(tier.held_nbytes) if self.own_tier else self._cbytes_sealed,
            "open_chunks": self._table.open_nbytes,
            "spare_buffers": sum(b.nbytes for b in self._spare),
            "chunk_table": self._table.nbytes,
        }

    @property
    def nbytes_held(self) -> int:
        """The sum of :meth:`held_info`: what the array costs this process, slack included."""
        return sum(self.held_info().values())

    # -- in-place appends (a native writer fills open chunks itself) ---------------------
    def open_chunks(self) -> tuple[np.ndarray, np.ndarray]:
        """``(chunk index, buffer address)`` of every open chunk (int64 arrays).

        An appender writes items straight into these buffers (C-contiguous,
        ``chunk_rows(c)`` items each) while it holds the lock it shares with every
        reader of this array, then calls :meth:`seal_full` for the chunks it filled.
        The arrays are valid until the next call that opens, seals or frees a chunk.
        """
        return self._table.open_index()

    def writable_chunk(self, c: int) -> np.ndarray:
        """Chunk ``c`` open for writing in place (decoded first if it was stored); its buffer.

        Opening it may seal the least recently written open chunk (``max_open``).
        """
        c = check_chunk(self.name, c, self.nchunks_total)
        with self._lock:
            self._begin()
            buf = self._open_chunk(c)
            self._dirty = False
        return buf

    def seal_full(self, chunks: Any) -> None:
        """Seal each of ``chunks`` that is still open: an appender filled them in place."""
        with self._lock:
            self._begin()
            open_now = self._table.open
            for c in np.asarray(chunks, np.int64).tolist():
                if c in open_now:
                    self._seal(c)
            self._dirty = False

    def open_empty(self, chunks: Any) -> None:
        """Open each of ``chunks`` that holds nothing (neither open nor stored; others, and indices
        out of range, are left as they are): where an appender writes next, so its next call finds
        the chunk open instead of stopping to ask for it (:meth:`writable_chunk`)."""
        with self._lock:
            self._begin()
            table = self._table
            for c in np.asarray(chunks, np.int64).reshape(-1).tolist():
                if 0 <= c < self.nchunks_total and c not in table.open and table.seg[c] < 0:
                    self._open_chunk(c)
            self._dirty = False

    def flush(self) -> None:
        """Seal every open chunk."""
        with self._lock:
            self._begin()
            for c in list(self._table.open):
                self._seal(c)
            self._dirty = False

    def train_codec(self) -> None:
        """Train a learning codec (``zstd3+dict``) on the stored items, re-encode them.

        Called automatically once ``TRAIN_AFTER_BYTES`` are sealed; call it earlier
        to train on less data. See :func:`chunkstore.array._training.train`.
        """
        with self._lock:
            self._begin()
            _training.train(self)
            self._dirty = False

    # -- internals ---------------------------------------------------------------------
    def _end(self) -> None:
        self._dirty = False

    def _set_one(self, i: int, value: Any) -> None:
        # the appender's case: one item into an open chunk, without the coercion's copies
        c, r = divmod(i, self.chunk_len)
        buf = self._table.open.get(c)
        v = np.asarray(value)
        if buf is not None and v.dtype == self.dtype and v.shape == self.item_shape:
            buf[r] = v
            self._table.touch(c)
            self._after_write(c, r)
            return
        self._write_run(i, self._coerce(value, 1))

    def _free_chunks(self, first: int, last: int) -> None:
        for c in range(first, last):
            self._free_chunk(c)

    def _remap(self, capacity: int, src: np.ndarray, dst: np.ndarray) -> None:
        keep = np.zeros(self.nchunks_total, bool)
        keep[src] = True
        for c in np.flatnonzero(~keep).tolist():  # dead chunks: freeing them early is harmless
            self._free_chunk(c)
        self._table = self._table.remapped(capacity, src, dst)  # the one step

    def _set_partial(self, key: tuple[Any, ...], value: Any) -> None:
        # arr[i, j, ...] = v: read-modify-write of whole items (rare, correct)
        idx = self._normalize_indices(key[0])
        items = self.take(idx.reshape(-1))
        items.reshape(idx.shape + self.item_shape)[(slice(None),) * idx.ndim + key[1:]] = value
        self._put(idx.reshape(-1), items)

    def _put(self, idx: np.ndarray, vals: np.ndarray) -> None:
        if idx.size > 1 and np.all(np.diff(idx) == 1):
            self._write_run(int(idx[0]), vals)
            return
        # the last write to an index wins, as in numpy
        order = np.argsort(idx, kind="stable")
        chunks = idx[order] // self.chunk_len
        bounds = np.flatnonzero(np.diff(chunks)) + 1
        for part in np.split(order, bounds):
            c = int(idx[part[0]]) // self.chunk_len
            buf = self._open_chunk(c)
            buf[idx[part] - c * self.chunk_len] = vals[part]
            self._after_write(c, int(idx[part].max()) - c * self.chunk_len)

    def _write_run(self, start: int, vals: np.ndarray) -> None:
        L = self.chunk_len
        first, last = -(-start // L), (start + len(vals)) // L  # whole chunks of the run: [first, last)
        if last - first < BULK_MIN_CHUNKS:
            self._write_pieces(start, vals)
            return
        head, tail = first * L - start, last * L - start
        if head:
            self._write_pieces(start, vals[:head])
        self._write_whole(first, vals[head:tail])
        if tail < len(vals):
            self._write_pieces(last * L, vals[tail:])

    def _write_whole(self, c0: int, vals: np.ndarray) -> None:
        """Whole chunks ``c0, c0 + 1, ...`` (``vals``: their rows, full-length chunks only).

        Runs of chunks that are not open are encoded in one :meth:`Codec.encode_many` call
        and put into the tier in one :meth:`Tier.put_many`, then installed in one step of the
        chunk table (:meth:`_install_many`); an open chunk is written through its buffer as
        one row at a time would be. The result, chunk for chunk, is what writing the rows one
        by one gives: a codec that still wants training is trained after the same chunk.
        """
        L = self.chunk_len
        n = len(vals) // L
        is_open = np.zeros(n, bool)
        for c in self._table.open:
            if c0 <= c < c0 + n:
                is_open[c - c0] = True
        i = 0
        while i < n:
            if is_open[i]:
                self._write_pieces((c0 + i) * L, vals[i * L:(i + 1) * L])
                i += 1
                continue
            j = i + 1 + int(np.argmax(is_open[i + 1:])) if is_open[i + 1:].any() else n
            j = min(j, i + max(1, BULK_MAX_BYTES // max(1, L * self._item_nbytes)))
            if _training.wants_training(self.codec):
                # only as many chunks as one by one would seal before training: the rest waits
                # for the trained codec (an overwrite adds no raw bytes, so this is a lower bound)
                want = -(-(_training.TRAIN_AFTER_BYTES - self._raw_sealed) // (L * self._item_nbytes or 1))
                j = min(j, i + max(1, want))
            self._seal_many(c0 + i, vals[i * L:j * L].reshape(j - i, L, *self.item_shape))
            i = j

    def _seal_many(self, c0: int, chunks: np.ndarray) -> None:
        """Chunks ``c0 .. c0 + len(chunks) - 1`` (none open) encoded from ``chunks`` and stored."""
        if len(chunks) == 1:
            self._seal_from(c0, chunks[0])
            return
        data, sizes = self.codec.encode_many(np.ascontiguousarray(chunks), threads=self.threads)
        refs = self.tier.put_many(data, sizes)
        self._install_many(np.arange(c0, c0 + len(chunks), dtype=np.int64), refs)

    def _write_pieces(self, start: int, vals: np.ndarray) -> None:
        table = self._table
        for c, r0, r1, k in self._pieces(start, len(vals)):
            part = vals[k : k + r1 - r0]
            if r0 == 0 and r1 == table.rows(c) and c not in table.open:
                self._seal_from(c, part)  # a whole chunk: encode straight from the input
            else:
                self._open_chunk(c)[r0:r1] = part
                self._after_write(c, r1 - 1)

    def _open_chunk(self, c: int) -> np.ndarray:
        """The writable raw buffer of chunk ``c``, decoding it if it was sealed."""
        table = self._table
        buf = table.open.get(c)
        if buf is not None:
            table.touch(c)
            return buf
        if table.is_stored(c):  # decode fills every row: no zero fill first
            buf = self._decoded_copy(c)
            table.set_open(c, buf)  # open first: the chunk reads the same from either copy
            self._drop_sealed(c)
        else:
            if self._spare and table.rows(c) == self.chunk_len:
                buf = self._spare.pop()  # a sealed chunk's buffer: no fresh pages to fault in
                zero_fill(buf)
            else:
                buf = np.zeros((table.rows(c), *self.item_shape), dtype=self.dtype)
            table.set_open(c, buf)
        while len(table.open) > self.max_open:
            self._seal(next(iter(table.open)))
        return buf

    def _after_write(self, c: int, last_row: int) -> None:
        if last_row == self._table.rows(c) - 1:
            self._seal(c)

    def _seal(self, c: int) -> None:
        # the chunk leaves the open set only once its bytes are in the table: if the put
        # fails (tier full, disk full) or is interrupted, its items stay readable and writable
        buf = self._table.open[c]
        self._seal_from(c, buf)
        self._table.pop_open(c)
        if len(buf) == self.chunk_len and len(self._spare) < MAX_SPARE:  # the next open chunk takes it
            self._spare.append(buf)

    def _seal_from(self, c: int, raw: np.ndarray) -> None:
        ref = self.tier.put(self.codec.encode(np.ascontiguousarray(raw)))
        self._install(c, ref)

    def _install(self, c: int, ref: ChunkRef, train: bool = True) -> None:
        """Chunk ``c`` now lives at ``ref`` (its old bytes, if any, are released)."""
        table = self._table
        old = table.ref(c) if table.is_stored(c) else None
        self._max_len = max(self._max_len, ref.nbytes)  # what a native read of a file may need
        table.store(c, ref)  # one step: the entry points at the new bytes
        if old is not None:
            self._cbytes_sealed -= old.nbytes
            self._raw_sealed -= table.rows(c) * self._item_nbytes
            self._release(old)
        self._cbytes_sealed += ref.nbytes
        self._raw_sealed += table.rows(c) * self._item_nbytes
        if self.cache is not None:
            self.cache.invalidate((table.uid, c, int(table.version[c]) - 1))
        if train:
            self._maybe_train()

    def _install_many(self, chunks: np.ndarray, refs: np.ndarray) -> None:
        """:meth:`_install` of many chunks (increasing, none open): the table's entries change in
        one step, then the bytes they replaced are released."""
        table = self._table
        self._max_len = max(self._max_len, int(refs[2].max()))  # before the entries point at them
        was = table.seg[chunks] >= 0
        old = table.entries[chunks[was]]  # (a copy: fancy indexing)
        table.adopt(chunks, refs)  # one step: every entry points at its new bytes
        rows = len(chunks) - len(old)  # overwritten chunks keep their raw size
        self._cbytes_sealed += int(refs[2].sum()) - int(old["len"].sum(dtype=np.int64))
        self._raw_sealed += rows * table.chunk_len * self._item_nbytes
        for seg, off, n in zip(old["seg"].tolist(), old["off"].tolist(), old["len"].tolist(), strict=True):
            self._release(ChunkRef(seg, off, n))
        if self.cache is not None:
            version = table.version[chunks].tolist()
            for c, v in zip(chunks.tolist(), version, strict=True):
                self.cache.invalidate((table.uid, c, v - 1))
        self._maybe_train()

    def _maybe_train(self) -> None:
        if _training.should_train(self.codec, self._raw_sealed):
            _training.train(self)

    def _decoded_copy(self, c: int) -> np.ndarray:
        block = np.empty((self._table.rows(c), *self.item_shape), dtype=self.dtype)
        self._decode_into(c, block)
        return block

    def _drop_sealed(self, c: int) -> None:
        table = self._table
        ref = table.unstore(c)  # first: the entry stops pointing at the bytes
        self._cbytes_sealed -= ref.nbytes
        self._raw_sealed -= table.rows(c) * self._item_nbytes
        self._release(ref)
        if self.cache is not None:
            self.cache.invalidate((table.uid, c, int(table.version[c]) - 1))

    def _free_chunk(self, c: int) -> None:
        """Chunk ``c`` is dead: neither open nor stored afterwards."""
        table = self._table
        if c in table.open:  # (a pop of a chunk not open would still invalidate the open index)
            table.pop_open(c)
        if table.seg[c] >= 0:
            self._drop_sealed(c)

    def _release(self, ref: ChunkRef) -> None:
        self.tier.release(ref)
