"""What a replay buffer's storage holds, in bytes: the observations' stores and SB3's small arrays."""

from __future__ import annotations

import math
from typing import Any

from sb3_integration.buffers.columns import SMALL_ARRAYS

__all__ = ["BufferSizes"]


class BufferSizes:
    """The replay buffers' byte counts and ``storage_info`` (mixed in; reads ``_stores`` and ``_columns``)."""

    _stores: dict[Any, Any]
    _columns: Any
    buffer_size: int
    n_envs: int
    optimize_memory_usage: bool

    @property
    def nbytes_stored(self) -> int:
        """Bytes holding the observations: compressed frames, open chunks, chunk tables, descriptors."""
        return sum(s.nbytes_stored for s in self._stores.values())

    @property
    def device_nbytes(self) -> int:
        """Bytes of ``buffer_device`` memory holding observation frames (0 with host frames)."""
        return sum(s.device_nbytes for s in self._stores.values())

    @property
    def nbytes_raw(self) -> int:
        """Bytes SB3's buffer with the same arguments holds for observations (and next observations)."""
        per_row = sum(math.prod(s.obs_shape) * s.dtype.itemsize for s in self._stores.values())
        return per_row * self.buffer_size * self.n_envs * (1 if self.optimize_memory_usage else 2)

    @property
    def small_nbytes(self) -> int:
        """Bytes holding SB3's small arrays (actions, rewards, dones, timeouts)."""
        if self._columns is not None:
            return self._columns.nbytes
        return sum(getattr(self, n).nbytes for n in SMALL_ARRAYS)

    @property
    def nbytes_held(self) -> int:
        """Every byte of memory the buffer's storage holds: the observations' (each frame store's
        :meth:`~sb3_integration.engine.frames.FrameStore.held_info`: tiers with their slack, open and
        spare chunks, tables, index, output blocks) and the small arrays' (with their slack)."""
        small = self._columns.nbytes_held if self._columns is not None else self.small_nbytes
        return sum(s.nbytes_held for s in self._stores.values()) + small

    def storage_info(self) -> dict[str, Any]:
        """Per observation key (``"observations"`` for a non-Dict space): layout, bytes, codec.

        ``_totals`` adds ``nbytes_held``: what the buffer's storage costs the process (see
        :attr:`nbytes_held`); ``nbytes_stored`` counts encoded chunks, open chunks, tables and
        index only.
        """
        info = {("observations" if k is None else k): s.info() for k, s in self._stores.items()}
        info["_totals"] = {
            "nbytes_stored": self.nbytes_stored,
            "device_nbytes": self.device_nbytes,
            "nbytes_held": self.nbytes_held,
            "nbytes_raw": self.nbytes_raw,
            "other_arrays_nbytes": self.small_nbytes,
            "transitions": self.size() * self.n_envs,  # type: ignore[attr-defined]
        }
        return info
