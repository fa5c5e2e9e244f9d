"""Stack descriptors to frame ids: where each frame of a stored stack is in the frame ring.

A stack is stored as its newest frame's global number (``slots``, mod 2**32; other kinds of
stack as a ``delta`` from it, the rare far ones kept aside) and its count of leading zero
frames (``pads``); frame ``g`` of env ``e`` is item ``e * F + g % F`` of the ring. One native
call computes a batch's ids (:mod:`sb3_integration.engine._native_frames`); numpy does the
rare stacks it hands back and all of them when numba is not there.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from chunkstore import native
from sb3_integration.engine.frame_state import FAR, WRAP

__all__ = ["FrameIndex", "stack_frame_ids"]


class FrameIndex(Protocol):
    """The descriptors and streams of a frame store (its :class:`~sb3_integration.engine.frame_ring.RingState`)."""

    @property
    def slots(self) -> np.ndarray: ...
    @property
    def deltas(self) -> np.ndarray: ...
    @property
    def pads(self) -> np.ndarray: ...
    @property
    def heads(self) -> np.ndarray: ...
    @property
    def far(self) -> dict[tuple[int, int, int], int]: ...


def stack_frame_ids(index: FrameIndex, which: Any, rows: np.ndarray, envs: np.ndarray, k: int, F: int) -> np.ndarray:
    """Item ids of stacks ``[which, rows, envs]`` in a ring of ``F`` frames per env: ``(n, k)``, -1 = zeros.

    ``which``, ``rows`` and ``envs`` broadcast together (int64, in range); ``k`` is the stack depth.
    """
    if native.available():
        if type(which) is np.ndarray and which.dtype == np.int64:
            w = which
        else:
            w = np.full(len(rows), which, np.int64) if np.isscalar(which) else np.asarray(which, np.int64)
        out = np.empty((len(rows), k), np.int64)
        stack_ids = _native_stack_ids()
        if not stack_ids(w, rows, envs, index.slots, index.deltas, index.pads, index.heads, k, F, out):
            return out
        far = out[:, 0] == -2  # rare: resolved by the numpy path below
        out[far] = _frame_ids_numpy(index, w[far], rows[far], envs[far], k, F)
        return out
    return _frame_ids_numpy(index, which, rows, envs, k, F)


_stack_ids: Any = None


def _native_stack_ids() -> Any:
    """The numba kernel (imported at the first native read: an import statement per call cost ~5 us)."""
    global _stack_ids
    if _stack_ids is None:
        from sb3_integration.engine._native_frames import stack_ids

        _stack_ids = stack_ids
    return _stack_ids


def _frame_ids_numpy(index: FrameIndex, which: Any, rows: np.ndarray, envs: np.ndarray, k: int, F: int) -> np.ndarray:
    heads = index.heads[envs]
    # the newest frame's global number, from its low 32 bits and the stream head
    ids = heads - ((heads - index.slots[rows, envs]) % WRAP)
    if len(index.pads) > 1 and np.any(which):  # (pads: one row of descriptors per kind of stack)
        w = np.broadcast_to(np.asarray(which, np.int64), ids.shape)
        delta = np.where(w > 0, index.deltas[np.maximum(w - 1, 0), rows, envs], 0)
        ids += delta
        for i in np.flatnonzero(delta == FAR).tolist():  # rare: kept aside
            key = (int(w[i]), int(rows[i]), int(envs[i]))
            if key in index.far:
                ids[i] = heads[i] - ((heads[i] - index.far[key]) % WRAP)
    ids += envs * F - ids // F * F  # its item: env region + position in the ring
    if k > 1:
        ids = ids[:, None] + np.arange(1 - k, 1)
        ids[ids < (envs * F)[:, None]] += F  # frames of a stack can wrap around the ring
    else:
        ids = ids[:, None]
    ids[np.arange(k) < index.pads[which, rows, envs][:, None]] = -1
    return ids
