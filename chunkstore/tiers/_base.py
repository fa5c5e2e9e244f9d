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
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

__all__ = ["ChunkRef", "Tier"]


class ChunkRef(NamedTuple):
    """Where a chunk's bytes are: a segment id, a byte offset in it, a length."""

    segment: int
    offset: int
    nbytes: int


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
    def supports_persistence(self) -> bool:
        """Whether the bytes outlive the process (a disk tier)."""
        return False

    # -- the native read path (chunkstore.native) -------------------------------------
    @contextlib.contextmanager
    def host_segments(self) -> Iterator[np.ndarray | None]:
        """Where each segment's bytes are, for the native read path: ``(2, nsegments)`` int64.

        Row 0 is the host address of the segment (0: not in memory), row 1 a file
        descriptor to ``pread`` it from (-1: none), both indexed by
        ``ChunkRef.segment``. They stay valid, and the chunks unchanged by this
        tier, until the block ends. A tier whose bytes are neither in host memory
        nor in a file (a CUDA device) yields None, and reads take the Python path.
        """
        yield None

    #: whether :meth:`check_reads` must see the chunks before a native read
    checks_reads: bool = False

    def check_reads(self, segments: np.ndarray, offsets: np.ndarray) -> None:  # noqa: B027
        """Validate chunks about to be read natively (a file tier checks their CRC32 once)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (files, mappings, device memory)."""

    def info(self) -> dict[str, Any]:
        return {"kind": self.kind, "nbytes": self.nbytes, "used_nbytes": self.used_nbytes}

    def __enter__(self) -> Tier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
