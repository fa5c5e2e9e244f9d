"""``gzip`` and ``igzip``: DEFLATE in a zlib container, through the standard library's zlib or
Intel ISA-L's (python-isal, an optional backend). One codec over two zlib modules."""

from __future__ import annotations

import zlib
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from chunkstore.codecs._base import LevelledCodec
from chunkstore.codecs._util import DecodeError, as_bytes, bounded_stream, buffer_view, deliver
from chunkstore.errors import MissingBackendError

__all__ = ["GzipCodec", "IGzipCodec"]


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
    #: whether level -1 means DEFAULT_LEVEL (zlib's sentinel)
    ZLIB_DEFAULT_SENTINEL: ClassVar[bool] = True

    def __init__(self, *, level: int | None = None):  # None: the class's DEFAULT_LEVEL
        if self.ZLIB_DEFAULT_SENTINEL and isinstance(level, int) and level == -1:
            level = self.DEFAULT_LEVEL
        super().__init__(level=level)
        self._zlib()  # a missing backend fails now, not at the first encode

    def _zlib(self) -> ModuleType:
        """The zlib-compatible module that does the work (``compress``, ``decompress``,
        ``decompressobj``, ``error``)."""
        return zlib

    def encode(self, arr: np.ndarray) -> bytes:
        return self._zlib().compress(as_bytes(arr).data, self.level)

    def decode(self, buf: Any, out: np.ndarray | None = None) -> np.ndarray:
        backend = self._zlib()
        try:
            if out is not None:  # bounded: never more than out holds
                return bounded_stream(self.name, backend.decompressobj(), buffer_view(buf), out)
            raw = backend.decompress(buffer_view(buf))
        except backend.error as e:
            raise DecodeError(f"{self.name}: {e}") from e
        return deliver(self.name, raw, out)


class IGzipCodec(GzipCodec):
    """ISA-L DEFLATE in a zlib container (levels 0..3, default 2 as in ISA-L).

    The output is ordinary zlib data: :class:`GzipCodec` and HDF5's deflate
    filter decode it too. Constructing it without python-isal raises
    :class:`~chunkstore.errors.MissingBackendError`.

    Examples
    --------
    >>> import numpy as np
    >>> c = IGzipCodec(level=3)
    >>> c.name
    'igzip/3'
    >>> bytes(c.decode(c.encode(np.zeros(1000, np.uint8)))) == bytes(1000)
    True
    """

    codec_id = "igzip"
    LEVELS: ClassVar[range] = range(0, 4)
    DEFAULT_LEVEL: ClassVar[int] = 2
    ZLIB_DEFAULT_SENTINEL: ClassVar[bool] = False

    def _zlib(self) -> ModuleType:
        try:
            from isal import isal_zlib
        except ImportError as e:
            raise MissingBackendError("the igzip codec needs python-isal: pip install 'chunkstore-rl[isal]'") from e
        return isal_zlib
