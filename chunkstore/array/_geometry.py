"""The shape words every item array answers the same way (numpy's names)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = ["ItemGeometry"]


class _Items(Protocol):
    @property
    def capacity(self) -> int: ...

    @property
    def item_shape(self) -> tuple[int, ...]: ...


class ItemGeometry:
    """``shape``, ``ndim``, ``size`` and ``len()`` of ``capacity`` items of ``item_shape``.

    A base of :class:`~chunkstore.array.ChunkedArray`, its snapshots and
    :class:`~chunkstore.device.DeviceArray`, which provide ``capacity`` and ``item_shape``
    (attributes or properties).
    """

    @property
    def shape(self: _Items) -> tuple[int, ...]:
        return (self.capacity, *self.item_shape)

    @property
    def ndim(self: _Items) -> int:
        return 1 + len(self.item_shape)

    @property
    def size(self: _Items) -> int:
        return self.capacity * int(np.prod(self.item_shape, dtype=np.int64))

    def __len__(self: _Items) -> int:
        return self.capacity
