"""The Tier interface: where sealed (encoded) chunk bytes live.

A tier stores opaque byte strings and hands back a :class:`ChunkRef`. The chunk
store keeps the refs in its chunk table; it never looks inside them. Tiers are
log-structured: chunks are appended to fixed-size segments, and a segment is
recycled whole once every chunk in it has been released. A ring buffer releases
chunks in FIFO order, so segments empty in order, with no fragmentation and no
compaction.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

__all__ = ["ChunkRef", "ReadChecks", "Tier", "check_tier", "checked_ref", "checked_sizes", "rebuild_tier"]

_NO_LOCK = contextlib.nullcontext()


def _no_segments() -> None:
    return None


class ChunkRef(NamedTuple):
    """Where a chunk's bytes are: a segment id, a byte offset in it, a length."""

    segment: int
    offset: int
    nbytes: int


def checked_ref(ref: Any) -> ChunkRef:
    """``ref`` when it is a chunk reference (a :class:`ChunkRef`, or a tuple of its three ints);
    TypeError naming what it got otherwise (``tier.get(5)`` said "cannot unpack non-iterable int")."""
    if type(ref) is ChunkRef:
        return ref
    ints = (int, np.integer)
    if type(ref) is tuple and len(ref) == 3 and isinstance(ref[0], ints) and isinstance(ref[1], ints) \
            and isinstance(ref[2], ints):
        return ChunkRef(*ref)
    raise TypeError(f"a chunk reference is a ChunkRef(segment, offset, nbytes), got {type(ref).__name__} {ref!r}")


class ReadChecks(NamedTuple):
    """CRC32s a native read must check, from :meth:`Tier.check_reads`.

    ``crc``: per chunk passed to ``check_reads``, the CRC32 its stored bytes must have
    (int64), or -1 for none to check. After a read that checked them, ``passed()``;
    on a mismatch, ``failed(i, found)`` is the error to raise for entry ``i``.
    """

    crc: np.ndarray
    passed: Callable[[], None]
    failed: Callable[[int, int], Exception]


class Tier(ABC):
    """Storage for encoded chunk bytes.

    ``get`` returns a read-only zero-copy view where the tier allows (RAM, disk);
    the view stays valid until that ref is released. All methods are thread-safe
    for concurrent ``get`` calls; ``put``/``release`` are called by one writer.
    """

    #: a short name shown by tools ("memory", "disk", "device", "hybrid", ...)
    kind: str = "tier"

    @abstractmethod
    def put(self, data: Any) -> ChunkRef:
        """Copy ``data`` (bytes-like) into the tier and return where it went."""

    def put_many(self, data: Any, sizes: Any) -> np.ndarray:
        """Copy many chunks into the tier: ``data`` holds them one after another, ``sizes``
        their lengths. Returns their refs as a ``(3, n)`` int64 table (segment, offset,
        nbytes), row ``i`` where :meth:`put` would have put chunk ``i``. This default puts
        them one by one; a segmented tier copies and records them a segment at a time.
        An interrupt can leave some of them put and not returned (an owner's repair
        releases them, as for an interrupted :meth:`put`).
        """
        src = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
        sizes = checked_sizes(sizes, src.size)
        ends = np.cumsum(sizes)
        refs = np.empty((3, len(sizes)), np.int64)
        for i, (lo, hi) in enumerate(zip((ends - sizes).tolist(), ends.tolist(), strict=True)):
            refs[:, i] = self.put(src[lo:hi])
        return refs

    @abstractmethod
    def get(self, ref: ChunkRef) -> memoryview | np.ndarray:
        """The bytes of ``ref`` as a 1-D uint8 buffer on the host."""

    @abstractmethod
    def release(self, ref: ChunkRef) -> None:
        """The chunk at ``ref`` is dead; its segment may be recycled once empty."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes reserved by the tier (all segments, live or free)."""

    @property
    @abstractmethod
    def used_nbytes(self) -> int:
        """Bytes of live chunks."""

    @property
    def held_nbytes(self) -> int:
        """Bytes of this process's memory the tier holds (reserved RAM and its bookkeeping;
        bytes in files are not memory). By default :attr:`nbytes`: a tier that keeps its
        bytes elsewhere says so."""
        return self.nbytes

    @property
    def supports_persistence(self) -> bool:
        """Whether the bytes outlive the process (a disk tier)."""
        return False

    # -- the native read path (chunkstore.native) -------------------------------------
    def read_lock(self) -> tuple[Any, Callable[[], np.ndarray | None]]:
        """``(lock, segments)`` for a native read: ``with lock: table = segments()``.

        ``segments()`` returns where each segment's bytes are, ``(2, nsegments)``
        int64: row 0 the host address of the segment (0: not in memory), row 1 a
        file descriptor to ``pread`` it from (-1: none), both indexed by
        ``ChunkRef.segment``. While ``lock`` is held they stay valid and this tier
        changes no chunk. A tier whose bytes are neither in host memory nor in a
        file (a CUDA device) returns None, and reads take the Python path.

        A plain lock, not a context manager of Python code: an interrupt can then
        never leave it held (see :mod:`chunkstore._threads`).
        """
        return _NO_LOCK, _no_segments

    @contextlib.contextmanager
    def host_segments(self) -> Iterator[np.ndarray | None]:
        """:meth:`read_lock` as one context manager (tests, tools)."""
        lock, segments = self.read_lock()
        with lock:
            yield segments()

    # -- snapshots: bytes that stay put while a save reads them -------------------------
    def pin(self) -> Callable[[], None] | None:
        """Keep the bytes of every chunk live now intact until the returned function is called.

        Released chunks stay readable with :meth:`peek` meanwhile; their space is
        reused only after the last unpin. None: this tier cannot pin (callers copy
        the bytes they need instead).
        """
        return None

    def peek(self, ref: ChunkRef) -> memoryview | np.ndarray:
        """The bytes of ``ref``, live or released while a :meth:`pin` holds them."""
        return self.get(ref)

    def live_refs(self) -> np.ndarray | None:
        """``(3, n)`` int64 (segment, offset, nbytes) of every live chunk; None if not tracked.

        Also recounts the tier's own tallies (an owner calls it to repair after an
        interrupted call).
        """
        return None

    #: whether :meth:`check_reads` must see the chunks before a native read
    checks_reads: bool = False

    def check_reads(self, segments: np.ndarray, offsets: np.ndarray) -> ReadChecks | None:
        """Validate chunks about to be read natively; the CRC32s the read must check, if any.

        A file tier checks here that its file is unchanged, and hands the expected CRC32
        of each chunk not checked yet to the native read, which checks them on the bytes
        it reads (:class:`ReadChecks`). None: nothing to check.
        """
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (files, mappings, device memory)."""

    def info(self) -> dict[str, Any]:
        return {"kind": self.kind, "nbytes": self.nbytes, "used_nbytes": self.used_nbytes}

    def __enter__(self) -> Tier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def checked_sizes(sizes: Any, nbytes: int) -> np.ndarray:
    """:meth:`Tier.put_many`'s ``sizes`` as a 1-D int64 array: whole numbers >= 0 summing to ``nbytes``.

    TypeError for anything but a 1-D sequence of integers (``[2.5]``, a 2-D table); ValueError for
    a negative size or a sum other than the data's bytes.
    """
    arr = np.asarray(sizes)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(f"put_many: sizes must be a 1-D sequence of integers, got {arr.dtype} with shape {arr.shape}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise ValueError(f"put_many: sizes must be >= 0, got {int(arr.min())}")
    total = int(arr.sum())
    if total != nbytes:
        raise ValueError(f"put_many: sizes sum to {total}, data holds {nbytes} bytes")
    return arr


def rebuild_tier(cls: type[Tier], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tier:
    """An empty tier built from the settings a pickled tier kept (what a pickled tier becomes).

    A tier pickles as its settings, never its chunks: what a pickle of SB3's
    ``replay_buffer_kwargs`` (``model.save``) needs to rebuild a buffer's storage; a buffer's
    or an array's own pickle carries the chunks and leaves the tier out. A tier that cannot be
    built here (its directory cannot be made on this machine, its CUDA device is missing) is a
    RuntimeError, which SB3's ``Algo.load`` reports as a warning before it goes on without
    ``replay_buffer_kwargs`` (give them again with ``custom_objects``).
    """
    try:
        return cls(*args, **kwargs)
    except (OSError, ValueError) as e:  # the settings were a working tier's: it is this machine
        raise RuntimeError(f"cannot rebuild a pickled {cls.__name__} here: {e}") from e


def check_tier(tier: Any) -> None:
    """TypeError unless ``tier`` is a :class:`Tier` or None (what an array, a load, a buffer's load take)."""
    if tier is not None and not isinstance(tier, Tier):
        raise TypeError(f"tier must be a chunkstore Tier (MemoryTier, DiskTier, HybridTier, ...) or None, "
                        f"got {type(tier).__name__} {tier!r}")
