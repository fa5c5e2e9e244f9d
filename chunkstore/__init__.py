"""chunkstore: compressed chunk storage for reinforcement-learning buffers.

Observations are stored in compressed chunks of many consecutive items, in a
tier (RAM, memory-mapped disk, or a torch device heap), read through an LRU
cache of decoded chunks. ``sb3_integration`` wraps it as drop-in
Stable-Baselines3 buffers; this package knows nothing about RL.
"""

from chunkstore.array import ChunkedArray
from chunkstore.cache import LRUChunkCache
from chunkstore.codecs import Codec, codec_names, get_codec
from chunkstore.errors import (
    ChunkstoreError,
    CodecConfigError,
    CorruptChunkError,
    CorruptFileError,
    FileChangedError,
    FormatError,
    MissingBackendError,
    TierFullError,
)
from chunkstore.tiers import ChunkRef, DeviceTier, DiskTier, HybridTier, MemoryTier, Tier

__all__ = [
    "ChunkRef",
    "ChunkedArray",
    "ChunkstoreError",
    "Codec",
    "CodecConfigError",
    "CorruptChunkError",
    "CorruptFileError",
    "DeviceTier",
    "DiskTier",
    "FileChangedError",
    "FormatError",
    "HybridTier",
    "LRUChunkCache",
    "MemoryTier",
    "MissingBackendError",
    "Tier",
    "TierFullError",
    "codec_names",
    "get_codec",
]

__version__ = "0.1.0"
