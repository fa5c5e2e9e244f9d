"""``gzip``: DEFLATE through the standard library's zlib."""

from __future__ import annotations

import zlib
from typing import Any, ClassVar

import numpy as np

from chunkstore.codecs._base import LevelledCodec
from chunkstore.codecs._util import DecodeError, as_bytes, bounded_stream, buffer_view, deliver

__all__ = ["GzipCodec"]


class GzipCodec(LevelledCodec):
    """DEFLATE in a zlib container (levels 0..9, default 6 as in zlib).

    The zlib container (not the gzip one) is what HDF5's deflate filter stores,
    so these chunks are valid HDF5 ``gzip`` chunks too. Level ``-1`` (zlib's
    "default" sentinel, which sb3-extra-buffers' ``gzip-1`` passes through) is
    accepted and stored as 6.

    Examples
    --------
    >>> import numpy as np
    >>> c = GzipCodec(level=1)
    >>> c.name
    'gzip/1'
    >>> bytes(c.decode(c.encode(np.zeros(1000, np.uint8)))) == bytes(1000)
    True
    """

    codec_id = "gzip"
    hdf5_filter = "deflate"
    LEVELS: ClassVar[range] = range(0, 10)
    DEFAULT_LEVEL: ClassVar[int] = 6

    def __init__(self, *, level: int = DEFAULT_LEVEL):
        if isinstance(level, int) and level == -1:
            level = self.DEFAULT_LEVEL
        super().__init__(level=level)

    def encode(self, arr: np.ndarray) -> bytes:
        return zlib.compress(as_bytes(arr).data, self.level)

    def decode(self, buf: Any, out: np.ndarray | None = None) -> np.ndarray:
        try:
            if out is not None:  # bounded: never more than out holds
                return bounded_stream(self.name, zlib.decompressobj(), buffer_view(buf), out)
            raw = zlib.decompress(buffer_view(buf))
        except zlib.error as e:
            raise DecodeError(f"{self.name}: {e}") from e
        return deliver(self.name, raw, out)
