"""Where 0.1 and 0.2 pickles look for ``IGzipCodec`` (``chunkstore.codecs._igzip.IGzipCodec``);
the codec is :class:`chunkstore.codecs._gzip.IGzipCodec` now, one codec with ``gzip``."""

from chunkstore.codecs._gzip import IGzipCodec

__all__ = ["IGzipCodec"]
