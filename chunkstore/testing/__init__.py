"""Contract tests that ship with chunkstore: a new tier or frame store proves itself by subclassing.

* :mod:`chunkstore.testing.tiers` -- :class:`~chunkstore.testing.tiers.TierTests`,
  :class:`~chunkstore.testing.tiers.SegmentedTierTests`, :func:`~chunkstore.testing.tiers.tier_machine`.

Needs pytest and hypothesis (the ``dev`` extra); nothing here is imported by chunkstore itself.
"""
