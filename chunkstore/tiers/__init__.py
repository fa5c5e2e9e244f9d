"""Where sealed (encoded) chunk bytes live.

Every tier shares one log-structured layout (``_segments.py``): chunks are
appended into fixed-size segments, and a segment is recycled whole once all its
chunks are released.

* :class:`MemoryTier` -- numpy segments in RAM.
* :class:`DiskTier` -- segment files, ``pwrite`` in, zero-copy ``mmap`` out, bounded RSS.
* :class:`DeviceTier` -- torch uint8 segments on ``cpu`` or ``cuda`` (storage only: chunks
  are copied back and decoded on the host; GPU sampling is :mod:`chunkstore.device`).
* :class:`HybridTier` -- newest segments in RAM under a budget, older ones spilled to disk.

For tiers built elsewhere (``chunkstore.hdf5.filetier``): :class:`AddressTable`, the
segment address table the native read path takes (it keeps the storage alive).
"""

from __future__ import annotations

from chunkstore.tiers._base import ChunkRef, ReadChecks, Tier, check_tier
from chunkstore.tiers._segments import AddressTable
from chunkstore.tiers.device import DeviceTier
from chunkstore.tiers.disk import DiskTier
from chunkstore.tiers.hybrid import HybridTier
from chunkstore.tiers.memory import MemoryTier

__all__ = ["AddressTable", "ChunkRef", "DeviceTier", "DiskTier", "HybridTier", "MemoryTier", "ReadChecks", "Tier",
           "check_tier"]
