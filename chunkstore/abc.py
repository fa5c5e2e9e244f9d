"""The seams of chunkstore: what a new codec, tier or item array implements.

One import for an implementer, each with the contract tests it runs:

* :class:`Codec` -- bytes of one chunk in and out, bit-exactly; register it with
  :func:`chunkstore.codecs.register_codec`. Contract: :class:`chunkstore.testing.codecs.CodecTests`.
* :class:`Tier` -- where encoded chunks live (RAM, disk, a saved file, a device).
  Contract: :class:`chunkstore.testing.tiers.TierTests` (and ``SegmentedTierTests``).
* :class:`ItemArray` -- a fixed-capacity array of items in chunks (a protocol: any class with
  its members is one). Contract: :class:`chunkstore.testing.arrays.ArrayTests`.

The frame store a replay buffer asks for lives above chunkstore, which knows nothing about RL:
:class:`sb3_integration.abc.FrameStoreAPI`.
"""

from chunkstore.array.protocol import ItemArray
from chunkstore.codecs import Codec, TrainableCodec
from chunkstore.tiers import ChunkRef, Tier

__all__ = ["ChunkRef", "Codec", "ItemArray", "Tier", "TrainableCodec"]
