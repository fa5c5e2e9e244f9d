"""ChunkedArray: a fixed-capacity array stored as compressed chunks.

Items are grouped into chunks of ``chunk_len`` consecutive items. The roles live
in their own modules: the chunk table (:mod:`._table`), the write path
(:mod:`._write`), the read path (:mod:`._read`), codec training
(:mod:`._training`) and snapshots (:mod:`._snapshot`); this module ties them
into one class and holds what is the array's own: geometry, sizes, the lock,
repair after an interrupted call, ownership, and state in and out.

Thread safety: one writer and any number of readers may use an array at once.
Every public read and write holds the array's lock, so a read sees each chunk
either before or after a write, never halfway (one uncontended lock acquire per
call).

Interrupts. An exception raised inside a call (a KeyboardInterrupt from a signal
handler, at any point) leaves every chunk readable with its contents from before
or after the call (see :mod:`._table` and :mod:`._write`). What an interrupt can
leave behind is bookkeeping: a byte count, or one chunk's bytes put into the tier
and not yet in the table. A call that does not finish leaves a mark; the next
call repairs the bookkeeping first (:meth:`ChunkedArray._repair`).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from chunkstore.array._read import ReadPath
from chunkstore.array._snapshot import STATE_VERSION, ArraySnapshot
from chunkstore.array._table import ChunkTable
from chunkstore.array._write import WritePath
from chunkstore.array.frontend import check_geometry
from chunkstore.cache import LRUChunkCache
from chunkstore.codecs import Codec, get_codec
from chunkstore.tiers import ChunkRef, MemoryTier, Tier, check_tier
from chunkstore.validate import check_count

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "DEFAULT_CHUNK_LEN",
    "DEFAULT_CODEC",
    "DEFAULT_THREADS",
    "MAX_OPEN_CHUNKS",
    "ChunkedArray",
]

#: items per chunk and codec, chosen by measurement (results/bench_sampling.md): small
#: chunks with a dictionary trained on the data keep most of the ratio of large ones,
#: and a random read decodes only a few items
DEFAULT_CHUNK_LEN = 4
DEFAULT_CODEC = "zstd3+dict"
#: the decoded-chunk cache is off by default: uniform reads almost never hit it, and
#: the native read path (which a cache disables) decodes a small chunk faster than a
#: Python cache lookup serves one. Give a budget for skewed (prioritized, recent) reads.
DEFAULT_CACHE_BYTES = 0
#: threads that share the chunks of one large read (chunkstore.native splits only reads of
#: many items: a thread's dispatch costs more than a small read); measured in
#: results/bench_sampling.md ("Threads")
DEFAULT_THREADS = min(2, os.cpu_count() or 1)
#: chunks kept open (uncompressed) at once before the least recently written is sealed
MAX_OPEN_CHUNKS = 4


class ChunkedArray(WritePath, ReadPath):
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
    own_tier
        Whether :meth:`close` closes the tier (default: True when the array
        created it, i.e. ``tier`` is None).

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
        own_tier: bool | None = None,
    ) -> None:
        capacity, self.item_shape, self.dtype, self.chunk_len, self.max_open = check_geometry(
            capacity, item_shape, dtype, chunk_len, max_open)
        self.codec = get_codec(codec)
        check_tier(tier)
        if cache is not None and not isinstance(cache, LRUChunkCache):
            cache = check_count("cache", cache, 0)
        threads = DEFAULT_THREADS if threads is None else check_count("threads", threads)
        self.tier = tier if tier is not None else MemoryTier()
        self.own_tier = tier is None if own_tier is None else bool(own_tier)
        if cache is None:
            cache = DEFAULT_CACHE_BYTES
        self.cache: LRUChunkCache | None = (
            LRUChunkCache(cache, name=name or "") if isinstance(cache, int) else cache
        )
        if self.cache is not None and self.cache.max_bytes == 0:
            self.cache = None
        self.threads = max(1, int(threads))
        self.name = name or "array"

        self._item_nbytes = int(np.prod(self.item_shape, dtype=np.int64)) * self.dtype.itemsize
        self._table = ChunkTable(int(capacity), self.chunk_len)
        self._spare: list[np.ndarray] = []  # buffers of sealed chunks, reused for the next open ones
        self._cbytes_sealed = 0
        self._raw_sealed = 0
        self._max_len = 0  # the largest encoded chunk stored so far
        self._scratch = threading.local()
        self._lock = threading.RLock()
        self._placements: dict[tuple[Any, ...], Any] = {}  # take_into's output layouts, by shape
        self._dirty = False  # a mutating call did not finish: repair before the next one
        self._closed = False

    # -- capabilities (:class:`~chunkstore.array.protocol.ItemArray`) -------------------
    #: open_chunks / writable_chunk / seal_full: a native writer fills open chunks in place
    supports_native_writes = True

    @property
    def device(self) -> None:
        """None: items live in host memory and reads are numpy arrays."""
        return None

    # -- size words -------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Logical (uncompressed) size: ``capacity * item nbytes``."""
        return self.capacity * self._item_nbytes

    @property
    def cbytes(self) -> int:
        """Bytes held: encoded sealed chunks plus raw open chunks."""
        return self._cbytes_sealed + self._table.open_nbytes

    @property
    def open_nbytes(self) -> int:
        """Bytes of the open (raw) chunks."""
        return self._table.open_nbytes

    @property
    def nopen(self) -> int:
        """Number of open chunks."""
        return len(self._table.open)

    @property
    def cratio(self) -> float:
        """Compression ratio of the sealed chunks (raw bytes / encoded bytes)."""
        return self._raw_sealed / self._cbytes_sealed if self._cbytes_sealed else 1.0

    @property
    def table_nbytes(self) -> int:
        """Bytes of the chunk table (every chunk, stored or not)."""
        return self._table.nbytes

    @property
    def nbytes_stored(self) -> int:
        """What the items cost stored: encoded and open chunks, and the chunk table."""
        return self.cbytes + self.table_nbytes

    @property
    def device_nbytes(self) -> int:
        """Device memory held: none (see :class:`~chunkstore.device.DeviceArray`)."""
        return 0

    @property
    def nchunks(self) -> int:
        """Number of sealed (stored) chunks."""
        return int(np.count_nonzero(self._table.seg >= 0))

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
            "nopen": self.nopen,
            "nbytes": self.nbytes,
            "cbytes": self.cbytes,
            "cratio": self.cratio,
            "table_nbytes": self.table_nbytes,
            "tier": self.tier.info(),
            "cache": self.cache_info(),
        }

    def __repr__(self) -> str:
        return (
            f"ChunkedArray(name={self.name!r}, shape={self.shape}, dtype={self.dtype}, "
            f"codec={self.codec.name!r}, chunk_len={self.chunk_len}, "
            f"nchunks={self.nchunks}, cratio={self.cratio:.1f})"
        )

    # -- interrupted calls ---------------------------------------------------------------
    def _begin(self) -> None:
        """Start a mutating call (the caller holds the lock): repair first if one was interrupted."""
        if self._closed:
            raise ValueError(f"{self.name} is closed")
        if self._dirty:
            self._repair()
        self._dirty = True  # cleared by the call's last statement

    def _check_repaired(self) -> None:
        if self._dirty:
            self._repair()
            self._dirty = False

    def _repair(self) -> None:
        """Recount what an interrupted call may have left stale; release chunks it orphaned."""
        table = self._table
        table.forget_index()
        self._cbytes_sealed, rows = table.sealed_nbytes()
        self._raw_sealed = rows * self._item_nbytes
        stored = table.seg >= 0
        if stored.any():
            self._max_len = max(self._max_len, int(table.len[stored].max()))
        if self.own_tier:  # a chunk put into our tier whose entry was never written is garbage
            live = self.tier.live_refs()
            if live is not None:
                ours = set(zip(table.seg[stored].tolist(), table.off[stored].tolist(), strict=True))
                for s, o, n in zip(*(col.tolist() for col in live), strict=True):
                    if (s, o) not in ours:
                        self.tier.release(ChunkRef(s, o, n))

    # -- ownership -------------------------------------------------------------------------
    def close(self) -> None:
        """Give the storage back: the tier if this array owns it, and the decoded-chunk cache.

        The array cannot be used afterwards.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.cache is not None:
                self.cache.clear()
            if self.own_tier:
                self.tier.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> ChunkedArray:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state in, state out ---------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "item_shape": self.item_shape,
            "dtype": self.dtype,
            "chunk_len": self.chunk_len,
            "threads": self.threads,
            "name": self.name,
            "cache": self.cache.max_bytes if self.cache is not None else 0,
            "max_open": self.max_open,
        }

    def snapshot(self, codec: str | Codec | None = None) -> ArraySnapshot:
        """This array's contents at this moment; it may keep changing meanwhile (see :mod:`._snapshot`).

        Close the snapshot (or use it in a ``with`` block) when done. ``codec`` is the
        protocol's host codec for items not yet encoded on the host (a DeviceArray's);
        a ChunkedArray's chunks keep the codec they are stored with, so it is not used.
        """
        with self._lock:
            self._check_repaired()
            table = self._table
            opened = dict(table.open)  # open chunks are encoded now: a few, small
            encoded = {c: bytes(self.codec.encode(np.ascontiguousarray(b))) for c, b in opened.items()}
            stored = table.stored()
            if opened:  # a chunk both open and stored (an interrupted seal) reads as its open copy
                stored = stored[~np.isin(stored, list(opened))]
            chunks = np.concatenate([stored, np.fromiter(encoded, np.int64, len(encoded))])
            refs = np.empty((3, len(chunks)), np.int64)
            refs[:, :len(stored)] = table.seg[stored], table.off[stored], table.len[stored]
            refs[0, len(stored):], refs[1, len(stored):] = -1, 0
            refs[2, len(stored):] = [len(b) for b in encoded.values()]
            order = np.argsort(chunks, kind="stable")
            chunks, refs = chunks[order], refs[:, order]
            unpin = self.tier.pin()
            snap = ArraySnapshot(self._config(), self.codec, chunks, refs, encoded, self.tier, unpin)
            if unpin is None:  # this tier cannot hold bytes still: copy them now
                blobs = {c: bytes(b) for c, b in zip(chunks.tolist(), snap.iter_chunk_bytes(), strict=True)}
                refs[0] = -1
                snap = ArraySnapshot(self._config(), self.codec, chunks, refs, blobs, None, None)
            return snap

    def state_dict(self) -> dict[str, Any]:
        """This array as plain data (versioned; chunk bytes copied): what a pickle holds."""
        with self.snapshot() as snap:
            return snap.materialize()

    @classmethod
    def from_state(cls, state: dict[str, Any] | ArraySnapshot, *, tier: Tier | None = None,
                   cache: LRUChunkCache | int | None = None) -> ChunkedArray:
        """A new array holding ``state`` (from :meth:`state_dict`, a pickle, or a snapshot)."""
        if isinstance(state, ArraySnapshot):
            cfg = {**state.config, "codec": state.codec}
            if cache is not None:
                cfg["cache"] = cache
            arr = cls(**_init_args(cfg), tier=tier)
            for c, blob in zip(state.stored_chunks().tolist(), state.iter_chunk_bytes(), strict=True):
                arr.put_chunk_bytes(c, blob)
            return arr
        if tier is not None or cache is not None:
            raise ValueError("tier and cache apply when building from a snapshot")
        arr = cls.__new__(cls)
        arr.__setstate__(state)
        return arr

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Become the array in ``state`` (this array's chunks are released first)."""
        with self._lock:
            self.clear()
            if self.own_tier:
                self.tier.close()
        self.__setstate__(state)

    # -- pickling: compressed bytes, never decoded caches or threads ---------------------
    def __getstate__(self) -> dict[str, Any]:
        return self.state_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        version = state.get("version", 1)  # 0.1.0 pickles carry no version: same layout
        if version > STATE_VERSION:
            raise ValueError(f"this ChunkedArray state has version {version}; this chunkstore reads "
                             f"versions up to {STATE_VERSION} (upgrade chunkstore)")
        cfg = _init_args(dict(state["config"]))
        self.__init__(**cfg)  # type: ignore[misc]
        for c, blob in zip(state["stored"], state["blobs"], strict=True):
            self.put_chunk_bytes(int(c), blob)
        for c, blob in state["open"].items():  # 0.1.0 pickles kept open chunks encoded apart
            buf = np.zeros((self._table.rows(int(c)), *self.item_shape), dtype=self.dtype)
            self.codec.decode(blob, out=buf)
            self._table.set_open(int(c), buf)


def _init_args(cfg: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments from a state's config."""
    return {"capacity": cfg.pop("capacity"), "item_shape": cfg.pop("item_shape"), "dtype": cfg.pop("dtype"),
            **cfg}
