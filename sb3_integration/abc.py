"""The seams of ``sb3_integration``: what a second implementation of a buffer's parts implements.

* :class:`FrameStoreAPI` -- everything a buffer asks of its frame store
  (:class:`~sb3_integration.engine.frames.FrameStore` implements it). Contract:
  :class:`sb3_integration.testing.FrameStoreTests`.

The storage seams below it (codec, tier, item array) are :mod:`chunkstore.abc`.
"""

from sb3_integration.engine.api import FrameStoreAPI

__all__ = ["FrameStoreAPI"]
