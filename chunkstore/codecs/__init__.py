"""Lossless codecs for ndarray chunks, and the one parser for their names.

A new codec is one :func:`register_codec` call (its config id, its names, its line in
the list of valid names); the built-ins register the same way.

>>> import numpy as np
>>> from chunkstore.codecs import get_codec
>>> codec = get_codec("zstd-3")  # sb3-extra-buffers' grammar: level -3
>>> a = np.arange(12, dtype=np.float32).reshape(3, 4)
>>> np.array_equal(codec.decode(codec.encode(a), out=np.empty_like(a)), a)
True
"""

from __future__ import annotations

from chunkstore.codecs._base import Codec, TrainableCodec
from chunkstore.codecs._blosc2 import Blosc2Codec
from chunkstore.codecs._delta import XorDelta
from chunkstore.codecs._gzip import GzipCodec, IGzipCodec
from chunkstore.codecs._lz4 import LZ4BlockCodec, LZ4FrameCodec
from chunkstore.codecs._none import NoneCodec
from chunkstore.codecs._registry import codec_from_config, codec_names, get_codec, register_codec
from chunkstore.codecs._rle import RLECodec
from chunkstore.codecs._util import DecodeError
from chunkstore.codecs._zstd import ZstdCodec, ZstdDictCodec

__all__ = [
    "Blosc2Codec",
    "Codec",
    "DecodeError",
    "GzipCodec",
    "IGzipCodec",
    "LZ4BlockCodec",
    "LZ4FrameCodec",
    "NoneCodec",
    "RLECodec",
    "TrainableCodec",
    "XorDelta",
    "ZstdCodec",
    "ZstdDictCodec",
    "codec_from_config",
    "codec_names",
    "get_codec",
    "register_codec",
]
