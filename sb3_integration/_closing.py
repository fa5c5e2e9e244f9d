"""``close()`` and ``with`` for the compressed buffers: give their storage back now.

A buffer's chunks live in tiers: RAM segments, spill files of a ``DiskTier`` or
``HybridTier``, device memory, or the mapped file of a lazily loaded buffer.
Those are released when the buffer is garbage-collected or at interpreter exit
anyway; ``close()`` releases them at a known point, and ``with buffer:`` does it
on every way out of the block. After ``close()`` the buffer cannot be used.

The tiers are found by walking the buffer's own objects (those defined in
``sb3_integration``) down to each :class:`~chunkstore.ChunkedArray`, so the
mixin keeps working whatever the buffer's internal layout.
"""

from __future__ import annotations

from typing import Any, TypeVar

from chunkstore import ChunkedArray, Tier

__all__ = ["ClosableBuffer", "chunked_arrays"]

_B = TypeVar("_B", bound="ClosableBuffer")


def chunked_arrays(root: Any) -> list[ChunkedArray]:
    """Every ChunkedArray reachable from ``root`` through sb3_integration objects and containers."""
    found: list[ChunkedArray] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, ChunkedArray):
            found.append(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif type(obj).__module__.startswith("sb3_integration") and hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return found


class ClosableBuffer:
    """Mixin: ``close()`` releases the buffer's tiers; the buffer is a context manager.

    A tier passed to the buffer (``tier=``) is closed too: it holds this buffer's
    chunks.
    """

    def close(self) -> None:
        """Release every tier holding this buffer's chunks (files, mappings, memory)."""
        tiers: dict[int, Tier] = {}
        for arr in chunked_arrays(self):
            tiers[id(arr.tier)] = arr.tier
            if arr.cache is not None:
                arr.cache.clear()
        for tier in tiers.values():
            tier.close()

    def __enter__(self: _B) -> _B:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
