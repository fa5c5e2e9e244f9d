"""chunkstore: compressed chunk storage for reinforcement-learning buffers.

Items (observation frames) are stored in compressed chunks of a few consecutive
items (:class:`ChunkedArray`), whose bytes live in a tier (RAM, disk, RAM with
spills to disk, a lazily read saved file); a batch is read with one native call
that decodes each chunk it needs once. :mod:`chunkstore.device` keeps items on a
torch device in an encoding decoded there. An LRU cache of decoded chunks
(:class:`LRUChunkCache`) is off by default: uniform reads rarely hit it.
:mod:`chunkstore.hdf5` saves and loads stores; :mod:`chunkstore.testing` holds the
contract tests a new tier runs. ``sb3_integration`` wraps it all as drop-in
Stable-Baselines3 buffers; this package knows nothing about RL.
"""

from chunkstore.array import ChunkedArray, ItemArray
from chunkstore.cache import LRUChunkCache
from chunkstore.codecs import Codec, codec_names, get_codec, register_codec
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
    "ItemArray",
    "LRUChunkCache",
    "MemoryTier",
    "MissingBackendError",
    "Tier",
    "TierFullError",
    "codec_names",
    "get_codec",
    "register_codec",
]

__version__ = "0.2.0"  # pyproject.toml reads it (dynamic version)
