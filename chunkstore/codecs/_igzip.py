"""``igzip``: DEFLATE through Intel ISA-L (python-isal), an optional backend."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from chunkstore.codecs._base import LevelledCodec
from chunkstore.codecs._util import DecodeError, as_bytes, bounded_stream, buffer_view, deliver
from chunkstore.errors import MissingBackendError

__all__ = ["IGzipCodec"]


def _isal_zlib() -> Any:
    try:
        from isal import isal_zlib
    except ImportError as e:
        raise MissingBackendError(
            "the igzip codec needs python-isal: pip install 'chunkstore-rl[isal]'"
        ) from e
    return isal_zlib


class IGzipCodec(LevelledCodec):
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
    hdf5_filter = "deflate"
    LEVELS: ClassVar[range] = range(0, 4)
    DEFAULT_LEVEL: ClassVar[int] = 2

    def __init__(self, *, level: int = DEFAULT_LEVEL):
        super().__init__(level=level)
        _isal_zlib()  # fail now, not at the first encode

    def encode(self, arr: np.ndarray) -> bytes:
        return _isal_zlib().compress(as_bytes(arr).data, self.level)

    def decode(self, buf: Any, out: np.ndarray | None = None) -> np.ndarray:
        isal_zlib = _isal_zlib()
        try:
            if out is not None:  # bounded: never more than out holds
                return bounded_stream(self.name, isal_zlib.decompressobj(), buffer_view(buf), out)
            raw = isal_zlib.decompress(buffer_view(buf))
        except isal_zlib.error as e:
            raise DecodeError(f"{self.name}: {e}") from e
        return deliver(self.name, raw, out)
