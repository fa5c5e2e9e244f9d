"""``lz4-frame`` and ``lz4-block``: LZ4 through python-lz4."""

from __future__ import annotations

from typing import Any, ClassVar

import lz4.block
import lz4.frame
import numpy as np

from chunkstore.codecs._base import LevelledCodec
from chunkstore.codecs._util import (
    DecodeError,
    as_bytes,
    bounded_stream,
    buffer_view,
    deliver,
    out_bytes,
    size_error,
)

__all__ = ["LZ4BlockCodec", "LZ4FrameCodec"]

# LZ4_ACCELERATION_MAX: lz4 clamps larger accelerations to this.
_MAX_ACCELERATION = 65537


class LZ4FrameCodec(LevelledCodec):
    """LZ4 frame format (levels -65537..16, default 0).

    As in ``lz4.frame``: 0..2 is the fast compressor, 3..16 high compression,
    and a negative level is the fast compressor with acceleration ``-level``.

    Examples
    --------
    >>> import numpy as np
    >>> c = LZ4FrameCodec(level=5)
    >>> c.name
    'lz4-frame/5'
    >>> bytes(c.decode(c.encode(np.zeros(1000, np.uint8)))) == bytes(1000)
    True
    """

    codec_id = "lz4-frame"
    LEVELS: ClassVar[range] = range(-_MAX_ACCELERATION, 17)
    DEFAULT_LEVEL: ClassVar[int] = 0

    def encode(self, arr: np.ndarray) -> bytes:
        return lz4.frame.compress(as_bytes(arr).data, compression_level=self.level, store_size=True)

    def decode(self, buf: Any, out: np.ndarray | None = None) -> np.ndarray:
        src = buffer_view(buf)
        try:
            if out is not None:  # bounded: never more than out holds
                self._check_declared_size(src, out)
                return bounded_stream(self.name, lz4.frame.LZ4FrameDecompressor(), src, out)
            raw = lz4.frame.decompress(src, return_bytearray=True)
        except RuntimeError as e:
            raise DecodeError(f"{self.name}: {e}") from e
        return deliver(self.name, raw, out)

    def _check_declared_size(self, src: memoryview, out: np.ndarray) -> None:
        """A frame that declares its content size must declare ``out``'s."""
        try:
            size = lz4.frame.get_frame_info(src)["content_size"]
        except (RuntimeError, KeyError) as e:
            raise DecodeError(f"{self.name}: not an lz4 frame ({e})") from e
        if size and size != out.nbytes:  # 0: the writer did not store the size
            raise size_error(self.name, size, out)


class LZ4BlockCodec(LevelledCodec):
    """One LZ4 block, prefixed with its uncompressed size (4 bytes, little-endian).

    ``level`` picks the mode as sb3-extra-buffers does: 1..16 high compression
    at that level (lz4 compresses 13..16 as 12; they are accepted because
    sb3-extra-buffers names like ``lz4-block/16`` use them), 0 the default
    mode, -1..-65537 the fast mode with acceleration ``-level``. Default 0.

    Examples
    --------
    >>> import numpy as np
    >>> c = LZ4BlockCodec(level=-3)
    >>> c.name
    'lz4-block/-3'
    >>> bytes(c.decode(c.encode(np.zeros(1000, np.uint8)))) == bytes(1000)
    True
    """

    codec_id = "lz4-block"
    LEVELS: ClassVar[range] = range(-_MAX_ACCELERATION, 17)
    DEFAULT_LEVEL: ClassVar[int] = 0

    def __init__(self, *, level: int = DEFAULT_LEVEL):
        super().__init__(level=level)
        if self.level > 0:
            self._kwargs: dict[str, Any] = {"mode": "high_compression", "compression": self.level}
        elif self.level < 0:
            self._kwargs = {"mode": "fast", "acceleration": -self.level}
        else:
            self._kwargs = {"mode": "default"}

    def encode(self, arr: np.ndarray) -> bytes:
        return lz4.block.compress(as_bytes(arr).data, store_size=True, **self._kwargs)

    def decode(self, buf: Any, out: np.ndarray | None = None) -> np.ndarray:
        src = buffer_view(buf)
        if len(src) < 4:
            raise DecodeError(f"{self.name}: {len(src)} bytes cannot hold the size prefix")
        size = int.from_bytes(src[:4], "little")
        if out is not None and size != out_bytes(out).size:
            raise size_error(self.name, size, out)
        try:
            raw = lz4.block.decompress(src, return_bytearray=True)
        except (lz4.block.LZ4BlockError, ValueError) as e:  # ValueError: a size prefix lz4 refuses
            raise DecodeError(f"{self.name}: {e}") from e
        return deliver(self.name, raw, out)
