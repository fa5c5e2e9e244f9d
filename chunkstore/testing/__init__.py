"""Contract tests that ship with chunkstore: a new codec, tier or item array proves itself by subclassing.

* :mod:`chunkstore.testing.codecs` -- :class:`~chunkstore.testing.codecs.CodecTests`, run on every
  registered codec by ``tests/chunkstore/test_codec_contract.py``.
* :mod:`chunkstore.testing.arrays` -- :class:`~chunkstore.testing.arrays.ArrayTests`,
  :func:`~chunkstore.testing.arrays.array_machine`.
* :mod:`chunkstore.testing.tiers` -- :class:`~chunkstore.testing.tiers.TierTests`,
  :class:`~chunkstore.testing.tiers.SegmentedTierTests`, :func:`~chunkstore.testing.tiers.tier_machine`.

Needs pytest and hypothesis (the ``dev`` extra); nothing here is imported by chunkstore itself.
"""
