"""ChunkedArray: a fixed-capacity array stored as compressed chunks.

Items are grouped into chunks of ``chunk_len`` consecutive items. A chunk being
written stays uncompressed and writable ("open"); it is sealed (encoded and put
into a tier) as soon as its last item is written, when too many chunks are open,
or on :meth:`ChunkedArray.flush`. A sequential writer, such as a ring buffer,
therefore encodes every chunk exactly once per lap.

Reads group the requested indices by chunk and serve each distinct chunk once:
from the open chunk, from the decoded-chunk cache, or by decoding it. When the
codec runs natively (zstd, zstd with a dictionary, none) and no cache is set,
one GIL-free call (:mod:`chunkstore.native`) serves the whole read: chunk bytes
are read where the tier keeps them, each chunk is decoded once, and each item is
copied straight into the output. Otherwise misses are decoded from Python, in
worker threads for large chunks, each worker copying its rows into the output.

Thread safety: one writer and any number of readers may use an array at once.
Every public read and write holds the array's lock, so a read sees each chunk
either before or after a write, never halfway (measured cost: one uncontended
lock acquire per call).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from chunkstore import native
from chunkstore.cache import LRUChunkCache
from chunkstore.casting import lossless_cast
from chunkstore.codecs import Codec, TrainableCodec, get_codec
from chunkstore.errors import CorruptChunkError, FileChangedError
from chunkstore.tiers import ChunkRef, MemoryTier, Tier

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_CODEC",
    "DEFAULT_THREADS",
    "ChunkedArray",
    "lossless_cast",
]

#: items per chunk and codec, chosen by measurement (see the README, "Measured"): small
#: chunks with a dictionary trained on the data keep most of the ratio of large ones,
#: and a random read decodes only a few items
DEFAULT_CHUNK_LEN = 4
DEFAULT_CODEC = "zstd3+dict"
#: the decoded-chunk cache is off by default: uniform reads almost never hit it, and
#: the native read path (which a cache disables) decodes a small chunk faster than a
#: Python cache lookup serves one. Give a budget for skewed (prioritized, recent) reads.
DEFAULT_CACHE_BYTES = 0
#: threads that share the chunks of one large read (chunkstore.native splits only reads of
#: many items: a thread's dispatch costs more than a small read). Measured on a 2-core box,
#: real MsPacman sample(256), SB3's time = 1: 1 / 2 / 4 threads 1.02 / 0.80 / 0.87 in one run,
#: 0.88 / 0.74 / 0.81 in another
DEFAULT_THREADS = min(2, os.cpu_count() or 1)
#: chunks kept open (uncompressed) at once before the least recently written is sealed
MAX_OPEN_CHUNKS = 4
#: fewer missing chunks than this are decoded on the calling thread
_PARALLEL_MIN_CHUNKS = 4
#: smaller chunks are decoded on the calling thread: their per-chunk Python holds the GIL
#: and threads only trade it back and forth. Measured (2 cores, MsPacman sample(256)):
#: 112 KB chunks 9.9 ms on one thread vs 18.3 ms on two; 450 KB chunks 18.4 vs 18.2 ms.
_PARALLEL_MIN_CHUNK_BYTES = 256 << 10
#: a codec that learns from the data (``zstd3+dict``) is trained once this many raw
#: bytes are sealed; what was stored before is then re-encoded with the trained codec
TRAIN_AFTER_BYTES = 8 << 20
#: at most this many items are handed to the trainer
TRAIN_MAX_ITEMS = 4096

_ids = itertools.count()
_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _wants_training(codec: Codec) -> bool:
    return isinstance(codec, TrainableCodec) and codec.wants_training


def _decode_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=max(2, os.cpu_count() or 1), thread_name_prefix="chunkstore-decode"
            )
        return _pool


class ChunkedArray:
    """A fixed-capacity array of ``capacity`` items, stored as compressed chunks.

    Parameters
    ----------
    capacity
        Number of items (length of the first axis).
    item_shape, dtype
        Shape and dtype of one item; any numpy dtype is stored bit-exactly.
    chunk_len
        Items per chunk (default :data:`DEFAULT_CHUNK_LEN`).
    codec
        A codec name (``"zstd3"``, ``"lz4-block"``, ``"xor+lz4-block"``, ...) or a
        :class:`~chunkstore.codecs.Codec` (default :data:`DEFAULT_CODEC`).
    tier
        Where sealed chunk bytes live; a new :class:`~chunkstore.tiers.MemoryTier`
        by default.
    cache
        Decoded-chunk cache: ``None`` for :data:`DEFAULT_CACHE_BYTES` (none), ``0``
        for none, an int for a private cache of that many bytes, or a shared
        :class:`LRUChunkCache`. A cache serves reads through Python (the native
        path cannot consult it): it pays for skewed reads, not uniform ones.
    threads
        How many threads share the chunks one read needs (default :data:`DEFAULT_THREADS`).
    name
        A name shown in errors and by tools (``"observations"``).
    max_open
        Chunks kept open (uncompressed) at once; one per sequential writer
        (e.g. per environment writing its own region) avoids re-encoding.

    Examples
    --------
    >>> arr = ChunkedArray(1000, (4, 4), np.float32, chunk_len=16, codec="zstd3")
    >>> arr[10:20] = np.ones((10, 4, 4), np.float32)
    >>> float(arr[np.array([5, 15])].sum())
    16.0
    """

    def __init__(
        self,
        capacity: int,
        item_shape: tuple[int, ...] | int = (),
        dtype: Any = np.uint8,
        *,
        chunk_len: int = DEFAULT_CHUNK_LEN,
        codec: str | Codec = DEFAULT_CODEC,
        tier: Tier | None = None,
        cache: LRUChunkCache | int | None = None,
        threads: int | None = None,
        name: str | None = None,
        max_open: int = MAX_OPEN_CHUNKS,
    ) -> None:
        if int(capacity) < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if int(chunk_len) < 1:
            raise ValueError(f"chunk_len must be >= 1, got {chunk_len}")
        self.capacity = int(capacity)
        self.item_shape = (int(item_shape),) if np.isscalar(item_shape) else tuple(map(int, item_shape))  # type: ignore[arg-type]
        if any(d < 0 for d in self.item_shape):
            raise ValueError(f"item_shape must be non-negative, got {self.item_shape}")
        self.dtype = np.dtype(dtype)
        if self.dtype.hasobject:
            raise TypeError(f"object dtypes cannot be stored, got {self.dtype}")
        self.chunk_len = min(int(chunk_len), self.capacity)
        self.codec = get_codec(codec)
        self.tier = tier if tier is not None else MemoryTier()
        if cache is None:
            cache = DEFAULT_CACHE_BYTES
        self.cache: LRUChunkCache | None = (
            LRUChunkCache(cache, name=name or "") if isinstance(cache, int) else cache
        )
        if self.cache is not None and self.cache.max_bytes == 0:
            self.cache = None
        self.threads = max(1, int(threads if threads is not None else DEFAULT_THREADS))
        self.name = name or "array"
        if int(max_open) < 1:
            raise ValueError(f"max_open must be >= 1, got {max_open}")
        self.max_open = int(max_open)

        self._uid = next(_ids)
        self._item_nbytes = int(np.prod(self.item_shape, dtype=np.int64)) * self.dtype.itemsize
        n = self.nchunks_total
        # the chunk table: where each sealed chunk lives (-1 = not stored). Compact
        # dtypes (20 bytes a chunk): a ring sized for the worst case has many entries.
        self._seg = np.full(n, -1, dtype=np.int32)
        self._off = np.zeros(n, dtype=np.int64)  # file offsets of a lazily loaded store exceed 4 GB
        self._len = np.zeros(n, dtype=np.uint32)
        self._version = np.zeros(n, dtype=np.uint32)
        self._open: OrderedDict[int, np.ndarray] = OrderedDict()
        self._open_table: tuple[np.ndarray, np.ndarray] | None = None  # (chunks, addresses)
        self._spare: list[np.ndarray] = []  # buffers of sealed chunks, reused for the next open ones
        self._cbytes_sealed = 0
        self._raw_sealed = 0
        self._max_len = 0  # the largest encoded chunk stored so far
        self._scratch = threading.local()
        self._lock = threading.RLock()
        self._placements: dict[tuple[Any, ...], Any] = {}  # take_into's output layouts, by shape

    # -- geometry ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return (self.capacity, *self.item_shape)

    @property
    def ndim(self) -> int:
        return 1 + len(self.item_shape)

    @property
    def size(self) -> int:
        return self.capacity * int(np.prod(self.item_shape, dtype=np.int64))

    @property
    def nchunks_total(self) -> int:
        return -(-self.capacity // self.chunk_len)

    def __len__(self) -> int:
        return self.capacity

    def _rows(self, chunk: int) -> int:
        return min(self.chunk_len, self.capacity - chunk * self.chunk_len)

    # -- size words -------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Logical (uncompressed) size: ``capacity * item nbytes``."""
        return self.capacity * self._item_nbytes

    @property
    def cbytes(self) -> int:
        """Bytes held: encoded sealed chunks plus raw open chunks."""
        return self._cbytes_sealed + sum(b.nbytes for b in self._open.values())

    @property
    def cratio(self) -> float:
        """Compression ratio of the sealed chunks (raw bytes / encoded bytes)."""
        return self._raw_sealed / self._cbytes_sealed if self._cbytes_sealed else 1.0

    @property
    def table_nbytes(self) -> int:
        """Bytes of the chunk table (every chunk, stored or not)."""
        return self._seg.nbytes + self._off.nbytes + self._len.nbytes + self._version.nbytes

    @property
    def nchunks(self) -> int:
        """Number of sealed (stored) chunks."""
        return int(np.count_nonzero(self._seg >= 0))

    def cache_info(self) -> dict[str, Any]:
        if self.cache is None:
            return {"hits": 0, "misses": 0, "nbytes": 0, "max_bytes": 0, "nitems": 0}
        return self.cache.info()

    def info(self) -> dict[str, Any]:
        """Everything a tool shows about this array."""
        return {
            "name": self.name,
            "shape": self.shape,
            "dtype": str(self.dtype),
            "codec": self.codec.name,
            "chunk_len": self.chunk_len,
            "nchunks": self.nchunks,
            "nchunks_total": self.nchunks_total,
            "nopen": len(self._open),
            "nbytes": self.nbytes,
            "cbytes": self.cbytes,
            "cratio": self.cratio,
            "tier": self.tier.info(),
            "cache": self.cache_info(),
        }

    def __repr__(self) -> str:
        return (
            f"ChunkedArray(name={self.name!r}, shape={self.shape}, dtype={self.dtype}, "
            f"codec={self.codec.name!r}, chunk_len={self.chunk_len}, "
            f"nchunks={self.nchunks}, cratio={self.cratio:.1f})"
        )

    # -- writing ----------------------------------------------------------------------
    def __setitem__(self, key: Any, value: Any) -> None:
        with self._lock:
            self._setitem(key, value)

    def _setitem(self, key: Any, value: Any) -> None:
        if isinstance(key, (int, np.integer)):  # the appender's case: one item into an open chunk
            i = self._check_index(int(key))
            c, r = divmod(i, self.chunk_len)
            buf = self._open.get(c)
            v = np.asarray(value)
            if buf is not None and v.dtype == self.dtype and v.shape == self.item_shape:
                buf[r] = v
                self._open.move_to_end(c)
                self._after_write(c, r)
                return
            self._write_run(i, self._coerce(value, 1))
            return
        if isinstance(key, tuple):
            if len(key) == 1:
                key = key[0]
            else:
                self._setitem_partial(key, value)
                return
        if isinstance(key, (int, np.integer)):
            i = self._check_index(int(key))
            self._write_run(i, self._coerce(value, 1))
        elif isinstance(key, slice):
            start, stop, step = key.indices(self.capacity)
            if step == 1:
                if stop > start:
                    self._write_run(start, self._coerce(value, stop - start))
            else:
                idx = np.arange(start, stop, step)
                self.put(idx, value)
        else:
            self.put(key, value)

    def _setitem_partial(self, key: tuple[Any, ...], value: Any) -> None:
        # arr[i, j, ...] = v: read-modify-write of whole items (rare, correct)
        idx = self._normalize_indices(key[0])
        items = self.take(idx.reshape(-1))
        items.reshape(idx.shape + self.item_shape)[(slice(None),) * idx.ndim + key[1:]] = value
        self.put(idx.reshape(-1), items)

    def write(self, start: int, items: Any) -> None:
        """``items[k]`` goes to ``self[start + k]`` (no wrap-around)."""
        items = np.asarray(items)
        n = len(items) if items.ndim > len(self.item_shape) else 1
        if start < 0 or start + n > self.capacity:
            raise IndexError(f"write of {n} items at {start} exceeds capacity {self.capacity}")
        vals = self._coerce(items, n)
        with self._lock:
            self._write_run(start, vals)

    def put(self, indices: Any, values: Any) -> None:
        """``self[indices[k]] = values[k]`` for an integer index array."""
        idx = self._normalize_indices(indices).reshape(-1)
        vals = self._coerce(values, idx.size)
        if idx.size == 0:
            return
        with self._lock:
            self._put(idx, vals)

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
        pos, end = start, start + len(vals)
        while pos < end:
            c, r0 = divmod(pos, L)
            r1 = min(L, end - c * L, self._rows(c))
            part = vals[pos - start : pos - start + r1 - r0]
            if r0 == 0 and r1 == self._rows(c) and c not in self._open:
                self._seal_from(c, part)  # a whole chunk: encode straight from the input
            else:
                self._open_chunk(c)[r0:r1] = part
                self._after_write(c, r1 - 1)
            pos += r1 - r0

    def _coerce(self, value: Any, n: int) -> np.ndarray:
        """``value`` as an array of (n, *item_shape) in our dtype, refusing lossy casts."""
        arr = np.asarray(value)
        if arr.dtype != self.dtype:
            arr = lossless_cast(arr, self.dtype, self.name)
        shape = (n, *self.item_shape)
        if arr.shape != shape:
            if arr.shape == self.item_shape and n == 1:
                arr = arr.reshape(shape)
            else:
                try:
                    arr = np.broadcast_to(arr, shape)
                except ValueError:
                    raise ValueError(
                        f"{self.name}: cannot write values of shape {np.shape(value)} into "
                        f"{n} item(s) of shape {self.item_shape}"
                    ) from None
        return arr

    def _open_chunk(self, c: int) -> np.ndarray:
        """The writable raw buffer of chunk ``c``, decoding it if it was sealed."""
        buf = self._open.get(c)
        if buf is not None:
            self._open.move_to_end(c)
            return buf
        if self._seg[c] >= 0:  # decode fills every row: no zero fill first
            buf = self._decoded_copy(c)
            self._drop_sealed(c)
        elif self._spare and self._rows(c) == self.chunk_len:
            buf = self._spare.pop()  # a sealed chunk's buffer: no fresh pages to fault in
            buf.fill(0)
        else:
            buf = np.zeros((self._rows(c), *self.item_shape), dtype=self.dtype)
        self._open[c] = buf
        self._open_table = None
        while len(self._open) > self.max_open:
            self._seal(next(iter(self._open)))
        return buf

    def _after_write(self, c: int, last_row: int) -> None:
        if last_row == self._rows(c) - 1:
            self._seal(c)

    def _seal(self, c: int) -> None:
        # the chunk leaves the open set only once its bytes are safely in the tier:
        # if the put fails (tier full, disk full) its items stay readable and writable
        buf = self._open[c]
        self._seal_from(c, buf)
        del self._open[c]
        self._open_table = None
        if len(buf) == self.chunk_len and len(self._spare) < self.max_open:
            self._spare.append(buf)

    def _seal_from(self, c: int, raw: np.ndarray) -> None:
        ref = self.tier.put(self.codec.encode(np.ascontiguousarray(raw)))
        if self._seg[c] >= 0:
            self._drop_sealed(c)
        self._store(c, ref)

    def _store(self, c: int, ref: ChunkRef) -> None:
        self._seg[c], self._off[c], self._len[c] = ref
        self._max_len = max(self._max_len, ref.nbytes)  # what a native read of a file may need
        self._version[c] += 1
        self._cbytes_sealed += ref.nbytes
        self._raw_sealed += self._rows(c) * self._item_nbytes
        if self._raw_sealed >= TRAIN_AFTER_BYTES and _wants_training(self.codec):
            self.train_codec()

    def train_codec(self) -> None:
        """Train a learning codec (``zstd3+dict``) on the stored items, re-encode them.

        Called automatically once ``TRAIN_AFTER_BYTES`` are sealed; call it earlier
        to train on less data. The dictionary is trained on the even stored chunks
        and kept only if it beats the plain codec on the odd ones (held out): on
        some data (Breakout) a dictionary costs more than it saves. Decoded content
        is unchanged, so caches stay valid.
        """
        with self._lock:
            self._train_codec()

    def _train_codec(self) -> None:
        codec = self.codec
        if not isinstance(codec, TrainableCodec):
            return
        stored = self.stored_chunks().tolist()
        blocks = {c: self._decoded_copy(c) for c in stored}
        train = [c for c in stored if c % 2 == 0] or stored
        held_out = [c for c in stored if c % 2 == 1] or stored
        samples = [item for c in train for item in blocks[c]][:TRAIN_MAX_ITEMS]
        new = codec.trained(samples) if samples else codec
        if _wants_training(new) or new == codec:
            return
        plain = codec.untrained_equivalent()
        with_dict = sum(len(new.encode(blocks[c])) for c in held_out)
        without = sum(len(plain.encode(blocks[c])) for c in held_out)
        if with_dict >= without:
            new = plain  # what the untrained codec wrote is plain zstd: nothing to re-encode
        if new is plain:
            self.codec = new
            return
        refs: list[ChunkRef] = []
        try:  # every chunk re-encoded before any is replaced: a failed put changes nothing
            for c in stored:
                refs.append(self.tier.put(new.encode(blocks[c])))
        except BaseException:
            for ref in refs:
                self.tier.release(ref)
            raise
        self.codec = new
        for c, ref in zip(stored, refs, strict=True):
            self.tier.release(self._ref(c))
            self._cbytes_sealed += ref.nbytes - int(self._len[c])
            self._seg[c], self._off[c], self._len[c] = ref
            self._max_len = max(self._max_len, ref.nbytes)

    def _decoded_copy(self, c: int) -> np.ndarray:
        block = np.empty((self._rows(c), *self.item_shape), dtype=self.dtype)
        self._decode_into(c, block)
        return block

    def _drop_sealed(self, c: int) -> None:
        ref = self._ref(c)
        self.tier.release(ref)
        self._cbytes_sealed -= ref.nbytes
        self._raw_sealed -= self._rows(c) * self._item_nbytes
        self._seg[c] = -1
        self._version[c] += 1
        if self.cache is not None:
            self.cache.invalidate((self._uid, c, int(self._version[c]) - 1))

    def _ref(self, c: int) -> ChunkRef:
        return ChunkRef(int(self._seg[c]), int(self._off[c]), int(self._len[c]))

    def flush(self) -> None:
        """Seal every open chunk."""
        with self._lock:
            for c in list(self._open):
                self._seal(c)

    def remap(self, capacity: int, src: Any, dst: Any) -> None:
        """Change the capacity; stored or open chunk ``src[i]`` becomes chunk ``dst[i]``.

        Every other chunk is freed. Nothing is decoded or re-encoded: only the
        chunk table moves. A ring that outgrows its capacity uses this to grow
        while keeping its live chunks. Moved chunks must keep their row count.
        """
        src = np.asarray(src, np.int64).reshape(-1)
        dst = np.asarray(dst, np.int64).reshape(-1)
        capacity = int(capacity)
        if capacity < 1 or src.shape != dst.shape:
            raise ValueError(f"remap needs capacity >= 1 and src/dst of equal length, got "
                             f"{capacity}, {src.shape}, {dst.shape}")
        n_new = -(-capacity // self.chunk_len)
        if src.size and (src.min() < 0 or src.max() >= self.nchunks_total or dst.min() < 0
                         or dst.max() >= n_new or np.unique(dst).size != dst.size):
            raise IndexError(f"{self.name}: remap chunks out of range or duplicated")
        rows_new = np.minimum(self.chunk_len, capacity - dst * self.chunk_len)
        rows_old = np.minimum(self.chunk_len, self.capacity - src * self.chunk_len)
        if not np.array_equal(rows_new, rows_old):
            raise ValueError(f"{self.name}: remap would change the row count of a chunk")
        with self._lock:
            keep = np.zeros(self.nchunks_total, bool)
            keep[src] = True
            for c in np.flatnonzero((self._seg >= 0) & ~keep).tolist():
                self._drop_sealed(c)
            tables = []
            for old in (self._seg, self._off, self._len, self._version):
                new = np.full(n_new, -1, old.dtype) if old is self._seg else np.zeros(n_new, old.dtype)
                new[dst] = old[src]
                tables.append(new)
            moved = dict(zip(src.tolist(), dst.tolist(), strict=True))
            opened = OrderedDict((moved[c], b) for c, b in self._open.items() if c in moved)
            self._seg, self._off, self._len, self._version = tables
            self._open, self._open_table = opened, None
            self.capacity = capacity
            self._uid = next(_ids)  # cached chunks were keyed by the old numbering

    def discard(self, start: int, stop: int) -> None:
        """Items in ``[start, stop)`` are dead: free the chunks wholly inside the range.

        Those chunks read as zeros afterwards; partially covered chunks are kept.
        """
        start, stop = max(0, int(start)), min(self.capacity, int(stop))
        first = -(-start // self.chunk_len)
        last = stop // self.chunk_len if stop < self.capacity else self.nchunks_total
        with self._lock:
            for c in range(first, last):
                if self._open.pop(c, None) is not None:
                    self._open_table = None
                if self._seg[c] >= 0:
                    self._drop_sealed(c)

    def clear(self) -> None:
        """Every item back to zeros; tier space released."""
        self.discard(0, self.capacity)

    # -- reading -------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> np.ndarray:
        first, rest = (key[0], key[1:]) if isinstance(key, tuple) and key else (key, ())
        if isinstance(key, tuple) and not key:
            first = slice(None)
        if first is Ellipsis:
            return self.take(np.arange(self.capacity))[key]
        if isinstance(first, (int, np.integer)):
            item = self.take(np.array([self._check_index(int(first))]))[0]
            return item[rest] if rest else item
        if isinstance(first, slice):
            idx = np.arange(*first.indices(self.capacity))
        else:
            idx = self._normalize_indices(first)
        items = self.take(idx.reshape(-1)).reshape(idx.shape + self.item_shape)
        return items[(slice(None),) * idx.ndim + rest] if rest else items

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.take(np.arange(self.capacity))
        return out if dtype is None else out.astype(dtype, copy=False)

    def __iter__(self) -> Iterator[np.ndarray]:
        for c in range(self.nchunks_total):
            block = self.take(np.arange(c * self.chunk_len, c * self.chunk_len + self._rows(c)))
            yield from block

    def _check_index(self, i: int) -> int:
        if not -self.capacity <= i < self.capacity:
            raise IndexError(f"index {i} is out of bounds for {self.name} of capacity {self.capacity}")
        return i % self.capacity

    def _normalize_indices(self, indices: Any) -> np.ndarray:
        idx = np.asarray(indices)
        if idx.dtype == bool:
            if idx.shape != (self.capacity,):
                raise IndexError(f"boolean index of shape {idx.shape} does not match {self.capacity}")
            return np.flatnonzero(idx)
        if idx.size == 0:
            return idx.astype(np.int64)
        if idx.dtype.kind not in "iu":
            raise IndexError(f"{self.name}: indices must be integers, got dtype {idx.dtype}")
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -self.capacity or hi >= self.capacity:
            bad = lo if lo < -self.capacity else hi
            raise IndexError(f"index {bad} is out of bounds for {self.name} of capacity {self.capacity}")
        return idx + self.capacity * (idx < 0) if lo < 0 else idx

    def take(self, indices: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Items at ``indices`` (a 1-D integer array), copied into ``out`` if given."""
        idx = self._normalize_indices(indices).reshape(-1)
        n = idx.size
        if out is None:
            out = np.empty((n, *self.item_shape), dtype=self.dtype)
        else:
            if out.dtype != self.dtype or out.nbytes != n * self._item_nbytes:
                raise ValueError(
                    f"out has dtype {out.dtype} and {out.nbytes} bytes; need {self.dtype} "
                    f"and {n * self._item_nbytes} bytes for {n} items of {self.item_shape}"
                )
            out = out.reshape(n, *self.item_shape)
        if n == 0:
            return out
        with self._lock:
            if not self._native_take(idx.astype(np.int64, copy=False), out, None, None):
                self._python_take(idx, out)
        return out

    def take_into(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out[i] = self[ids[i]]``, or zeros where ``ids[i] == -1``, in place.

        ``out`` has shape ``(*ids.shape, *item_shape)`` and may be a strided view
        (frame ``j`` of a channel-last stack of frames, say): items are copied
        straight to their places, with no contiguous temporary when the read runs
        natively.
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
        if int(flat.min()) < -1 or int(flat.max()) >= self.capacity:
            raise IndexError(f"{self.name}: ids must lie in -1..{self.capacity - 1}")
        key = (out.shape, out.strides, ids.ndim)
        placed = self._placements.get(key)
        if placed is None:
            placed = native.item_placement(out, ids.ndim, self.dtype.itemsize)
            if len(self._placements) > 16:
                self._placements.clear()
            self._placements[key] = placed
        with self._lock:
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
        tier = self.tier
        with tier.host_segments() as segs:
            if segs is None:
                return False
            if tier.checks_reads:
                self._check_reads(ids)
            chunks, addrs = self._open_chunks()
            res = native.gather(
                ids, out, dst_off, pattern, chunk_len=self.chunk_len, capacity=self.capacity,
                item_bytes=self._item_nbytes, table=(self._seg, self._off, self._len), segs=segs,
                max_chunk_bytes=self._max_len, open_chunks=chunks, open_addr=addrs, spec=spec,
                threads=self.threads,
            )
        if res.code:
            raise CorruptChunkError(
                f"{self.name}: chunk {res.chunk} could not be decoded with {self.codec.name}: "
                f"it {res.message}", array=self.name, chunk=res.chunk)
        return True

    def _check_reads(self, ids: np.ndarray) -> None:
        chunks = ids[ids >= 0] // self.chunk_len
        chunks = chunks[self._seg[chunks] >= 0]  # repeats are fine: the tier checks each chunk once
        self.tier.check_reads(self._seg[chunks], self._off[chunks])

    def _open_chunks(self) -> tuple[np.ndarray, np.ndarray]:
        """(chunk index, buffer address) of every open chunk, for the native path."""
        if self._open_table is None:
            chunks = np.fromiter(self._open.keys(), np.int64, len(self._open))
            addrs = np.fromiter((b.ctypes.data for b in self._open.values()), np.int64, len(self._open))
            self._open_table = (chunks, addrs)
        return self._open_table

    def _python_take(self, idx: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """The read path in Python: the LRU cache, and codecs without a native decoder."""
        n = idx.size
        if out is None:
            out = np.empty((n, *self.item_shape), dtype=self.dtype)
        chunks, rows = np.divmod(idx, self.chunk_len)
        order = np.argsort(chunks, kind="stable")
        sorted_chunks, sorted_rows = chunks[order], rows[order]
        starts = np.flatnonzero(np.r_[True, sorted_chunks[1:] != sorted_chunks[:-1]])
        ends = np.r_[starts[1:], n]
        uniq = sorted_chunks[starts]
        stored = self._seg[uniq] >= 0
        cached: list[np.ndarray | None] = [None] * len(uniq)
        if self.cache is not None:
            keys: list[Hashable] = [(self._uid, c, v) for c, v in zip(uniq.tolist(), self._version[uniq].tolist(), strict=True)]
            cached = self.cache.get_many(keys, stored.tolist())
        misses = []
        for k, (c, s, e) in enumerate(zip(uniq.tolist(), starts.tolist(), ends.tolist(), strict=True)):
            pos = order[s:e]
            src = self._open.get(c) if self._open else None
            if src is None:
                if not stored[k]:
                    out[pos] = 0
                    continue
                src = cached[k]
                if src is None:
                    misses.append((c, pos, sorted_rows[s:e]))
                    continue
            out[pos] = src[sorted_rows[s:e]]
        if misses:
            self._serve_misses(misses, out)
        return out

    def _serve_misses(self, misses: list[tuple[int, np.ndarray, np.ndarray]], out: np.ndarray) -> None:
        nthreads = min(self.threads, len(misses))
        small = self.chunk_len * self._item_nbytes < _PARALLEL_MIN_CHUNK_BYTES
        if nthreads <= 1 or len(misses) < _PARALLEL_MIN_CHUNKS or small:
            self._decode_batch(misses, out)
            return
        # one batch per thread; the calling thread decodes the first one itself
        batches = [misses[i::nthreads] for i in range(nthreads)]
        futures = [_decode_pool().submit(self._decode_batch, b, out) for b in batches[1:]]
        self._decode_batch(batches[0], out)
        for f in futures:
            f.result()

    def _decode_batch(self, batch: list[tuple[int, np.ndarray, np.ndarray]], out: np.ndarray) -> None:
        # the hot loop of every read: attribute lookups hoisted, one scratch buffer
        get, decode, cache = self.tier.get, self.codec.decode, self.cache
        seg, off, length, version = self._seg, self._off, self._len, self._version
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
                cache.put((self._uid, c, int(version[c])), buf)
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
            self.codec.decode(self.tier.get(self._ref(c)), out=buf)
        except FileChangedError:
            raise
        except Exception as exc:
            raise self._corrupt(c, exc) from exc

    def chunk(self, c: int) -> np.ndarray:
        """The decoded items of chunk ``c`` (a copy)."""
        return self.take(np.arange(c * self.chunk_len, c * self.chunk_len + self._rows(c)))

    # -- chunk-level access (persistence, tools) ----------------------------------------
    def stored_chunks(self) -> np.ndarray:
        """Indices of the sealed chunks (``flush()`` first to include open ones)."""
        return np.flatnonzero(self._seg >= 0)

    def chunk_bytes(self, c: int) -> memoryview:
        """The encoded bytes of sealed chunk ``c`` (zero-copy, read-only)."""
        if self._seg[c] < 0:
            raise KeyError(f"{self.name}: chunk {c} is not stored (open or never written)")
        view = self.tier.get(self._ref(c))
        return memoryview(view).toreadonly()  # type: ignore[arg-type]

    def iter_chunk_bytes(self, chunks: np.ndarray) -> Iterator[memoryview]:
        """:meth:`chunk_bytes` of each of ``chunks`` (stored chunk indices), in order: the save path."""
        chunks = np.asarray(chunks, np.int64)
        seg, off, n = self._seg[chunks], self._off[chunks], self._len[chunks]
        missing = np.flatnonzero(seg < 0)
        if missing.size:
            raise KeyError(f"{self.name}: chunk {int(chunks[missing[0]])} is not stored (open or never written)")
        get = self.tier.get
        for s, o, k in zip(seg.tolist(), off.tolist(), n.tolist(), strict=True):
            yield memoryview(get(ChunkRef(s, o, k))).toreadonly()  # type: ignore[arg-type]

    def chunk_nbytes(self) -> np.ndarray:
        """Encoded size of every chunk (0 where not stored)."""
        return np.where(self._seg >= 0, self._len, 0)

    def put_chunk_bytes(self, c: int, data: Any) -> None:
        """Install already-encoded bytes as chunk ``c``, verbatim (the load path)."""
        if not 0 <= c < self.nchunks_total:
            raise IndexError(f"chunk {c} out of range for {self.name} ({self.nchunks_total} chunks)")
        with self._lock:
            ref = self.tier.put(data)
            if self._open.pop(c, None) is not None:
                self._open_table = None
            if self._seg[c] >= 0:
                self._drop_sealed(c)
            self._store(c, ref)

    def adopt_chunks(self, chunks: np.ndarray, refs: np.ndarray) -> None:
        """Install chunks that the tier already holds, in bulk (the lazy load path).

        ``chunks`` are increasing chunk indices, none stored or open yet; ``refs`` is
        the ``(3, len(chunks))`` table of their tier references (segment, offset,
        nbytes), as :meth:`put_chunk_bytes` would have stored them one by one.
        """
        chunks = np.asarray(chunks, np.int64)
        if len(chunks) == 0:
            return
        if chunks[0] < 0 or chunks[-1] >= self.nchunks_total or np.any(np.diff(chunks) <= 0):
            raise IndexError(f"{self.name}: chunk indices must increase within 0..{self.nchunks_total - 1}")
        with self._lock:
            if np.any(self._seg[chunks] >= 0) or any(c in self._open for c in chunks.tolist()):
                raise ValueError(f"{self.name}: adopt_chunks() installs chunks not stored or open yet")
            seg, off, n = refs
            self._seg[chunks], self._off[chunks], self._len[chunks] = seg, off, n
            self._version[chunks] += 1
            self._max_len = max(self._max_len, int(n.max()))
            self._cbytes_sealed += int(n.sum())
            rows = np.minimum(self.chunk_len, self.capacity - chunks * self.chunk_len)
            self._raw_sealed += int(rows.sum()) * self._item_nbytes
            if self._raw_sealed >= TRAIN_AFTER_BYTES and _wants_training(self.codec):
                self.train_codec()

    def chunk_rows(self, c: int) -> int:
        """Number of items in chunk ``c`` (the last chunk may be shorter)."""
        return self._rows(c)

    # -- pickling: compressed bytes, never decoded caches or threads ---------------------
    def __getstate__(self) -> dict[str, Any]:
        stored = self.stored_chunks()
        blobs = [bytes(view) for view in self.iter_chunk_bytes(stored)]
        opened = {c: self.codec.encode(np.ascontiguousarray(b)) for c, b in self._open.items()}
        return {
            "config": {
                "capacity": self.capacity,
                "item_shape": self.item_shape,
                "dtype": self.dtype,
                "chunk_len": self.chunk_len,
                "codec": self.codec,  # a trained codec carries its dictionary
                "threads": self.threads,
                "name": self.name,
                "cache": self.cache.max_bytes if self.cache is not None else 0,
                "max_open": self.max_open,
            },
            "stored": stored,
            "blobs": blobs,
            "open": {c: bytes(v) for c, v in opened.items()},
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        cfg = dict(state["config"])
        capacity, item_shape, dtype = cfg.pop("capacity"), cfg.pop("item_shape"), cfg.pop("dtype")
        self.__init__(capacity, item_shape, dtype, **cfg)  # type: ignore[misc]
        for c, blob in zip(state["stored"], state["blobs"], strict=True):
            self.put_chunk_bytes(int(c), blob)
        for c, blob in state["open"].items():
            buf = np.zeros((self._rows(c), *self.item_shape), dtype=self.dtype)
            self.codec.decode(blob, out=buf)
            self._open[int(c)] = buf
