"""Every error chunkstore raises.

Each error also inherits the built-in it refines, so callers may catch either
(``except ValueError`` keeps working for ``UnknownCodecError``).
"""

from __future__ import annotations

__all__ = [
    "ChunkstoreError",
    "CodecConfigError",
    "CorruptChunkError",
    "FormatError",
    "MissingBackendError",
    "TierFullError",
    "UnknownRefError",
]


class ChunkstoreError(Exception):
    """Base class of every chunkstore error."""


class CodecConfigError(ChunkstoreError, ValueError):
    """An unknown codec name, or a level outside the codec's range."""


class MissingBackendError(ChunkstoreError, ImportError):
    """An optional compression backend is not installed; the message names the extra."""


class CorruptChunkError(ChunkstoreError, ValueError):
    """Stored chunk bytes failed their checksum or could not be decoded.

    ``array`` and ``chunk`` name the damaged chunk.
    """

    def __init__(self, message: str, *, array: str | None = None, chunk: int | None = None):
        super().__init__(message)
        self.array = array
        self.chunk = chunk


class FormatError(ChunkstoreError, ValueError):
    """A saved file is not a chunkstore file, or has an unsupported version."""


class TierFullError(ChunkstoreError, MemoryError):
    """A tier with a hard byte limit cannot take another chunk."""


class UnknownRefError(ChunkstoreError, KeyError):
    """A ChunkRef that is not live in this tier: released twice, never put here, or stale."""
