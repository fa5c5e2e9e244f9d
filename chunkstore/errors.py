"""Every error chunkstore raises.

Each error also inherits the built-in it refines, so callers may catch either
(``except ValueError`` keeps working for ``CodecConfigError``, ``except KeyError``
for ``UnknownRefError``).
"""

from __future__ import annotations

__all__ = [
    "ChunkstoreError",
    "CodecConfigError",
    "CorruptChunkError",
    "CorruptFileError",
    "FileChangedError",
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
    """A saved file cannot be read as a chunkstore file.

    Not a regular file, not HDF5, another HDF5 file, a newer format version, or
    contents that this chunkstore refuses (sizes beyond what the file holds,
    buffer state out of range). The message names the file and what is wrong.
    """


class CorruptFileError(FormatError):
    """A chunkstore file whose metadata is damaged.

    A checksum mismatch (header, codec config and trained dictionary, chunk
    table, an extra's description) or metadata that cannot be parsed. Damaged
    chunk bytes raise :class:`CorruptChunkError` instead.
    """


class FileChangedError(CorruptChunkError):
    """A lazily loaded file was changed in place (overwritten, truncated) after loading.

    Replace saved files by rename (``save`` does), never by writing into them:
    a loaded store keeps reading the file it opened.
    """


class TierFullError(ChunkstoreError, MemoryError):
    """A tier with a hard byte limit cannot take another chunk."""


class UnknownRefError(ChunkstoreError, KeyError):
    """A ChunkRef that is not live in this tier: released twice, never put here, or stale."""
