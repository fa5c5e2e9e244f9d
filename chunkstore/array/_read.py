"""The read path of a ChunkedArray: batches of items, each distinct chunk decoded once.

Reads group the requested indices by chunk and serve each distinct chunk once:
from the open chunk, from the decoded-chunk cache, or by decoding it. When the
codec runs natively (zstd, zstd with a dictionary, none) and no cache is set,
one GIL-free call (:mod:`chunkstore.native`) serves the whole read: chunk bytes
are read where the tier keeps them, each chunk is decoded once, and each item is
copied straight into the output. Otherwise misses are decoded from Python, in
worker threads for large chunks, each worker copying its rows into the output.

A read whose caller is interrupted (Ctrl-C) waits for the work it handed to
other threads before it returns: no thread ever writes into an output its
caller no longer holds (:func:`chunkstore._threads.wait_all`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

import numpy as np

from chunkstore import _threads, native
from chunkstore._indexing import check_index, normalize_indices
from chunkstore.array._fields import ArrayFields
from chunkstore.array.frontend import check_chunk, check_chunks
from chunkstore.casting import zero_fill
from chunkstore.errors import CorruptChunkError, FileChangedError
from chunkstore.tiers import ChunkRef, ReadChecks

__all__ = ["ReadPath"]

#: fewer missing chunks than this are decoded on the calling thread
_PARALLEL_MIN_CHUNKS = 4
#: smaller chunks are decoded on the calling thread: their per-chunk Python holds the GIL
#: and threads only trade it back and forth (measured: see results/bench_sampling.md)
_PARALLEL_MIN_CHUNK_BYTES = 256 << 10


class ReadPath(ArrayFields):
    """ChunkedArray's reads (a mixin: ``ChunkedArray`` supplies the state)."""

    def take(self, indices: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Items at ``indices``: ``np.take(self, indices, axis=0)``, copied into ``out`` if given.

        ``indices`` is an integer array (negative ones count from the end) or a boolean
        mask; the result has shape ``(*indices.shape, *item_shape)``. ``out`` needs the
        dtype and the bytes of that many items. ``-1`` as "no item" is :meth:`take_padded`.
        """
        idx = self._normalize_indices(indices)
        n = idx.size
        shape = (*idx.shape, *self.item_shape)
        if out is None:
            out = np.empty(shape, dtype=self.dtype)
        else:
            if out.dtype != self.dtype or out.nbytes != n * self._item_nbytes:
                raise ValueError(
                    f"out has dtype {out.dtype} and {out.nbytes} bytes; need {self.dtype} "
                    f"and {n * self._item_nbytes} bytes for {n} items of {self.item_shape}"
                )
            out = out.reshape(shape)
        if n == 0:
            return out
        flat = out.reshape(n, *self.item_shape)  # a view: ``out`` is C-contiguous or reshape fails
        with self._lock:
            self._check_repaired()
            idx = idx.reshape(-1)
            if not self._native_take(idx.astype(np.int64, copy=False), flat, None, None):
                self._python_take(idx, flat)
        return out

    def take_padded(self, ids: Any) -> np.ndarray:
        """Items at ``ids``, where ``-1`` is an all-zero item: ``(*ids.shape, *item_shape)``.

        Negative ids other than ``-1`` are refused; see :meth:`take_into` to read into
        an existing (strided) output.
        """
        ids = np.asarray(ids)
        if ids.size and ids.dtype.kind not in "iu":
            raise IndexError(f"{self.name}: ids must be integers, got dtype {ids.dtype}")
        return self.take_into(ids, np.empty(ids.shape + self.item_shape, self.dtype))

    def take_into(self, ids: np.ndarray, out: np.ndarray, *, checked: bool = True) -> np.ndarray:
        """``out[i] = self[ids[i]]``, or zeros where ``ids[i] == -1``, in place.

        ``out`` has shape ``(*ids.shape, *item_shape)`` and may be a strided view
        (frame ``j`` of a channel-last stack of frames, say): items are copied
        straight to their places, with no contiguous temporary when the read runs
        natively. ``checked=False``: the caller made ``ids`` in range (a frame store's ids of its own
        stacks), so the bounds are not checked again.
        """
        ids = np.asarray(ids)
        if out.shape != ids.shape + self.item_shape or out.dtype != self.dtype:
            raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}; need "
                             f"{ids.shape + self.item_shape} and {self.dtype}")
        if not out.flags.writeable:
            raise ValueError("out is read-only")
        flat = ids.reshape(-1).astype(np.int64, copy=False)
        if flat.size == 0:
            return out
        if checked and (int(flat.min()) < -1 or int(flat.max()) >= self.capacity):
            raise IndexError(f"{self.name}: ids must lie in -1..{self.capacity - 1}")
        key = (out.shape, out.strides, ids.ndim)
        placed = self._placements.get(key)
        if placed is None:
            placed = native.item_placement(out, ids.ndim, self.dtype.itemsize)
            if len(self._placements) > 16:
                self._placements = {}
            self._placements[key] = placed
        with self._lock:
            self._check_repaired()
            if placed is not None and self._native_take(flat, out, *placed):
                return out
            valid = flat >= 0
            items = np.zeros((flat.size, *self.item_shape), self.dtype)
            if valid.any():
                items[valid] = self._python_take(flat[valid], None)
        out[...] = items.reshape(out.shape)
        return out

    def _native_take(self, ids: np.ndarray, out: np.ndarray, dst_off: np.ndarray | None,
                     pattern: tuple[int, int, int] | None) -> bool:
        """Serve a read with one native call; False when this array cannot (caller falls back).

        ``dst_off``/``pattern``: where each item goes in ``out`` and how its bytes
        are laid out there (None: ``out`` is C-contiguous, item after item).
        """
        if self.cache is not None or self._item_nbytes == 0 or not native.available():
            return False
        spec = self.codec.native_spec()
        if spec is None:
            return False
        if dst_off is None or pattern is None:
            dst_off = np.arange(ids.size, dtype=np.int64) * self._item_nbytes
            pattern = (1, self._item_nbytes, 0)
        tier, table = self.tier, self._table
        lock, segments = tier.read_lock()
        with lock:  # no put, release, spill or trim moves a segment during the read
            segs = segments()
            if segs is None:
                return False
            checks = self._check_reads(ids) if tier.checks_reads else None
            crc_chunks, crc_want, entries = checks[0] if checks is not None else (None, None, None)
            chunks, addrs = table.open_index()
            res = native.gather(
                ids, out, dst_off, pattern, chunk_len=self.chunk_len, capacity=self.capacity,
                item_bytes=self._item_nbytes, table=(table.seg, table.off, table.len), segs=segs,
                max_chunk_bytes=self._max_len, open_chunks=chunks, open_addr=addrs, spec=spec,
                threads=self.threads, keep=list(table.open.values()) if self.threads > 1 else None,
                crc_chunks=crc_chunks, crc_want=crc_want,
            )
        if checks is not None and crc_chunks is not None and entries is not None:
            if res.code == native.CRC_ERROR:  # the tier's error: it names the chunk and the file
                raise checks[1].failed(int(entries[np.searchsorted(crc_chunks, res.chunk)]), res.found)
            if not res.code:
                checks[1].passed()
        if res.code:
            raise CorruptChunkError(
                f"{self.name}: chunk {res.chunk} could not be decoded with {self.codec.name}: "
                f"it {res.message}", array=self.name, chunk=res.chunk)
        return True

    def _check_reads(self, ids: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ReadChecks] | None:
        """The tier's checks before a native read of ``ids``, and the CRC32s the read must check:
        ``((sorted chunks, their CRC32s, their entries in what the tier saw), checks)``."""
        table = self._table
        chunks = ids[ids >= 0] // self.chunk_len
        chunks = chunks[table.seg[chunks] >= 0]  # repeats are fine: the tier checks each chunk once
        checks = self.tier.check_reads(table.seg[chunks], table.off[chunks])
        if checks is None:
            return None
        sel = np.flatnonzero(checks.crc >= 0)
        uniq, first = np.unique(chunks[sel], return_index=True)
        entries = sel[first]
        return (uniq, checks.crc[entries], entries), checks

    def _python_take(self, idx: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """The read path in Python: the LRU cache, and codecs without a native decoder."""
        n = idx.size
        if out is None:
            out = np.empty((n, *self.item_shape), dtype=self.dtype)
        table = self._table
        chunks, rows = np.divmod(idx, self.chunk_len)
        order = np.argsort(chunks, kind="stable")
        sorted_chunks, sorted_rows = chunks[order], rows[order]
        starts = np.flatnonzero(np.r_[True, sorted_chunks[1:] != sorted_chunks[:-1]])
        ends = np.r_[starts[1:], n]
        uniq = sorted_chunks[starts]
        stored = table.seg[uniq] >= 0
        cached: list[np.ndarray | None] = [None] * len(uniq)
        if self.cache is not None:
            keys: list[Hashable] = [(table.uid, c, v) for c, v in
                                    zip(uniq.tolist(), table.version[uniq].tolist(), strict=True)]
            cached = self.cache.get_many(keys, stored.tolist())
        misses = []
        for k, (c, s, e) in enumerate(zip(uniq.tolist(), starts.tolist(), ends.tolist(), strict=True)):
            pos = order[s:e]
            src = table.open.get(c) if table.open else None
            if src is None:
                if not stored[k]:
                    zero_fill(out, pos)
                    continue
                src = cached[k]
                if src is None:
                    misses.append((c, pos, sorted_rows[s:e]))
                    continue
            out[pos] = src[sorted_rows[s:e]]
        if misses:
            self._serve_misses(misses, out)
        return out

    def _serve_misses(self, misses: list[tuple[int, np.ndarray, np.ndarray]],
                      out: np.ndarray) -> None:
        nthreads = min(self.threads, len(misses))
        small = self.chunk_len * self._item_nbytes < _PARALLEL_MIN_CHUNK_BYTES
        if nthreads <= 1 or len(misses) < _PARALLEL_MIN_CHUNKS or small:
            self._decode_batch(misses, out)
            return
        # one batch per thread; the calling thread decodes the first one itself
        batches = [misses[i::nthreads] for i in range(nthreads)]
        pool = _threads.pool("chunkstore-decode")
        futures: list[_threads.Task] = []
        try:
            for b in batches[1:]:
                _threads.submit(pool, futures, self._decode_batch, b, out)
            self._decode_batch(batches[0], out)
        finally:  # also when interrupted: the workers write into out, which must outlive them
            _threads.wait_all(futures)
        for f in futures:
            f.result()

    def _decode_batch(self, batch: list[tuple[int, np.ndarray, np.ndarray]],
                      out: np.ndarray) -> None:
        # the hot loop of every Python-path read: attribute lookups hoisted, one scratch buffer
        table = self._table
        get, decode, cache = self.tier.get, self.codec.decode, self.cache
        seg, off, length, version = table.seg, table.off, table.len, table.version
        L, cap, item_shape, dtype = self.chunk_len, self.capacity, self.item_shape, self.dtype
        scratch = self._scratch_buffer() if cache is None else None
        for c, pos, rows in batch:
            nrows = min(L, cap - c * L)
            if scratch is None:
                buf = np.empty((nrows, *item_shape), dtype=dtype)
            else:
                buf = scratch if nrows == L else scratch[:nrows]
            try:
                decode(get(ChunkRef(int(seg[c]), int(off[c]), int(length[c]))), out=buf)
            except FileChangedError:
                raise  # names the file: nothing to add
            except Exception as exc:
                raise self._corrupt(c, exc) from exc
            if cache is not None:
                cache.put((table.uid, c, int(version[c])), buf)
            out[pos] = buf[rows]

    def _scratch_buffer(self) -> np.ndarray:
        """This thread's reusable buffer of one full chunk (cache off)."""
        buf = getattr(self._scratch, "buf", None)
        if buf is None:
            buf = self._scratch.buf = np.empty((self.chunk_len, *self.item_shape), self.dtype)
        return buf

    def _corrupt(self, c: int, exc: Exception) -> CorruptChunkError:
        return CorruptChunkError(
            f"{self.name}: chunk {c} could not be decoded with {self.codec.name}: {exc}",
            array=self.name,
            chunk=c,
        )

    def _decode_into(self, c: int, buf: np.ndarray) -> None:
        try:
            self.codec.decode(self.tier.get(self._table.ref(c)), out=buf)
        except FileChangedError:
            raise
        except Exception as exc:
            raise self._corrupt(c, exc) from exc

    def chunk(self, c: int) -> np.ndarray:
        """The decoded items of chunk ``c`` (a copy)."""
        c = check_chunk(self.name, c, self.nchunks_total)
        return self.take(np.arange(c * self.chunk_len, c * self.chunk_len + self._table.rows(c)))

    # -- numpy-style access --------------------------------------------------------------
    def __getitem__(self, key: Any) -> np.ndarray:
        first, rest = (key[0], key[1:]) if isinstance(key, tuple) and key else (key, ())
        if isinstance(key, tuple) and not key:
            first = slice(None)
        if first is Ellipsis:
            return self.take(np.arange(self.capacity))[key]
        if isinstance(first, (int, np.integer)):
            item = self.take(np.array([self._check_index(int(first))]))[0]
            return item[rest] if rest else item
        idx = np.arange(*first.indices(self.capacity)) if isinstance(first, slice) else self._normalize_indices(first)
        items = self.take(idx.reshape(-1)).reshape(idx.shape + self.item_shape)
        return items[(slice(None),) * idx.ndim + rest] if rest else items

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.take(np.arange(self.capacity))
        return out if dtype is None else out.astype(dtype, copy=False)

    def __iter__(self) -> Iterator[np.ndarray]:
        for c in range(self.nchunks_total):
            yield from self.chunk(c)

    def _check_index(self, i: int) -> int:
        return check_index(i, self.capacity, self.name)

    def _normalize_indices(self, indices: Any) -> np.ndarray:
        return normalize_indices(indices, self.capacity, self.name)

    # -- chunk-level access (persistence, tools) ----------------------------------------
    def stored_chunks(self) -> np.ndarray:
        """Indices of the sealed chunks (``flush()`` first to include open ones)."""
        return self._table.stored()

    def chunk_bytes(self, c: int) -> memoryview:
        """The encoded bytes of sealed chunk ``c`` (zero-copy, read-only)."""
        c = check_chunk(self.name, c, self.nchunks_total)
        table = self._table
        if not table.is_stored(c):
            raise KeyError(f"{self.name}: chunk {c} is not stored (open or never written)")
        return memoryview(self.tier.get(table.ref(c))).toreadonly()  # type: ignore[arg-type]

    def iter_chunk_bytes(self, chunks: np.ndarray) -> Iterator[memoryview]:
        """:meth:`chunk_bytes` of each of ``chunks`` (stored chunk indices), in order: the save path."""
        chunks = check_chunks(self.name, chunks, self.nchunks_total)
        table = self._table
        seg, off, n = table.seg[chunks], table.off[chunks], table.len[chunks]
        missing = np.flatnonzero(seg < 0)
        if missing.size:
            raise KeyError(f"{self.name}: chunk {int(chunks[missing[0]])} is not stored (open or never written)")
        get = self.tier.get
        for s, o, k in zip(seg.tolist(), off.tolist(), n.tolist(), strict=True):
            yield memoryview(get(ChunkRef(s, o, k))).toreadonly()  # type: ignore[arg-type]

    def chunk_nbytes(self) -> np.ndarray:
        """Encoded size of every chunk (0 where not stored)."""
        table = self._table
        return np.where(table.seg >= 0, table.len, 0)

    def chunk_rows(self, c: int) -> int:
        """Number of items in chunk ``c`` (the last chunk may be shorter)."""
        return self._table.rows(check_chunk(self.name, c, self.nchunks_total))
