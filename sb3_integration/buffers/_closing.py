"""``close()`` and ``with`` for the compressed buffers: give their storage back now.

A buffer's chunks live in tiers: RAM segments, spill files of a ``DiskTier`` or
``HybridTier``, device memory, or the mapped file of a lazily loaded buffer.
Those are released when the buffer is garbage-collected or at interpreter exit
anyway; ``close()`` releases them at a known point, and ``with buffer:`` does it
on every way out of the block. After ``close()`` the buffer cannot be used.

Ownership is explicit: each object closes what it created. A buffer closes its
frame stores and small-array columns (and a tier instance it was given); a frame
store closes its frame array; an array closes the tier it made or was handed to own.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["ClosableBuffer"]

_B = TypeVar("_B", bound="ClosableBuffer")


class ClosableBuffer:
    """Mixin: the buffer is a context manager whose exit calls its ``close()``."""

    def close(self) -> None:
        """Release the buffer's storage (files, mappings, memory)."""
        raise NotImplementedError

    def __enter__(self: _B) -> _B:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
