"""What every role of a ChunkedArray reads and calls, declared once (for readers and mypy).

The roles (:mod:`._write`, :mod:`._read`, :mod:`._training`) are mixins of
:class:`~chunkstore.array.ChunkedArray`; this base names the state they share
and the few methods one role calls in another, so each module type-checks alone.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from chunkstore.array._table import ChunkTable
from chunkstore.array.frontend import ItemGeometry
from chunkstore.cache import LRUChunkCache
from chunkstore.codecs import Codec
from chunkstore.tiers import Tier

__all__ = ["ArrayFields"]


class ArrayFields(ItemGeometry):
    """The shared state of a ChunkedArray (set by its constructor)."""

    item_shape: tuple[int, ...]
    dtype: np.dtype
    chunk_len: int
    codec: Codec
    tier: Tier
    own_tier: bool
    cache: LRUChunkCache | None
    threads: int
    name: str
    max_open: int
    _item_nbytes: int
    _table: ChunkTable
    _spare: list[np.ndarray]
    _cbytes_sealed: int
    _raw_sealed: int
    _max_len: int
    _scratch: threading.local
    _lock: threading.RLock
    _placements: dict[tuple[Any, ...], Any]
    _dirty: bool

    @property
    def capacity(self) -> int:
        return self._table.capacity

    @property
    def nchunks_total(self) -> int:
        return self._table.nchunks_total

    # implemented by the other roles
    def _begin(self) -> None:
        raise NotImplementedError

    def _check_repaired(self) -> None:
        raise NotImplementedError

    def _normalize_indices(self, indices: Any) -> np.ndarray:
        raise NotImplementedError

    def _check_index(self, i: int) -> int:
        raise NotImplementedError

    def take(self, indices: Any, out: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError

    def _decode_into(self, c: int, buf: np.ndarray) -> None:
        raise NotImplementedError

    def _decoded_copy(self, c: int) -> np.ndarray:
        raise NotImplementedError
