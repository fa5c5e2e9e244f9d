"""A frame store's live state as one object: the frame ring, its descriptors and its streams.

:class:`RingState` holds what must agree with itself (see :mod:`sb3_integration.engine.frames`):
the layout, the frame array, the descriptors of every stored stack, the per-env streams and
last stacks, the stacks awaiting layout detection, and the owner's current try. A
:class:`~sb3_integration.engine.frames.FrameStore` keeps it in one attribute, ``_ring``, and
replaces it whole with one assignment (``self._ring = new``) once the new one is fully built:
a KeyboardInterrupt lands between bytecodes, so the store holds the old state or the new one,
never a mix. The fields are never reassigned; the arrays, ``far``, ``used``, ``pending`` and
``undo`` are written in place, as the write paths (the native one included) always did.

:class:`RingView` gives the fields as read-only properties, for the buffers, the tools and the
tests that read them (``store.layout``, ``store.frames``, ``store.heads``, ...); the engine's
hot paths read ``self._ring`` once into a local instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore import ChunkedArray
from chunkstore.device import DeviceArray
from sb3_integration.engine.frame_state import UNWRITTEN
from sb3_integration.engine.stacking import StackLayout

__all__ = ["RingState", "RingView", "UndoRecord"]

#: where the owner's current try began (``FrameWrites._begin_attempt``): its attempt, its row, the heads then
UndoRecord = tuple[Any, int, np.ndarray]


@dataclass(frozen=True, slots=True)
class RingState:
    """The state of a frame store that changes together (installed whole: see the module docstring)."""

    layout: StackLayout | None  # None until detected
    frames: ChunkedArray | DeviceArray | None  # the ring of frames (None until the layout is known)
    slots: np.ndarray  # (n_rows, n_envs) uint32: the newest frame of a row's first stack, mod 2**32
    deltas: np.ndarray  # (stacks_per_row - 1, n_rows, n_envs) uint8: the other stacks, relative to it
    far: dict[tuple[int, int, int], int]  # deltas of FAR: (which, row, env) -> frame number mod 2**32
    pads: np.ndarray  # (stacks_per_row, n_rows, n_envs) uint8: zero frames at a stack's start
    used: list[bool]  # which kinds of stack were ever written
    heads: np.ndarray  # per env: global number of the next frame
    released: np.ndarray  # per env: frames below this (chunk-aligned) are freed
    last_slot: np.ndarray  # per env: global number of the last stack's newest frame
    last_pad: np.ndarray  # per env: the last stack's padding
    has_last: np.ndarray  # per env: the stream, its last stack and its descriptors agree
    last: np.ndarray | None  # per env: the last stack stored (None until the layout is known)
    pending: list[tuple[int, int, np.ndarray]]  # stacks put before the layout was known
    # one cell, written in place (one step): a new state starts with none, so installing one forgets it
    undo: list[UndoRecord | None]

    @classmethod
    def blank(cls, n_rows: int, n_envs: int, stacks_per_row: int, obs_shape: tuple[int, ...], dtype: np.dtype,
              layout: StackLayout | None = None, frames: ChunkedArray | DeviceArray | None = None,
              used: list[bool] | None = None) -> RingState:
        """Nothing written: every stack unwritten (all padding: it reads as zeros), fresh streams."""
        n, spr = n_envs, stacks_per_row
        return cls(
            layout=layout, frames=frames,
            slots=np.zeros((n_rows, n), np.uint32),
            deltas=np.zeros((spr - 1, n_rows, n), np.uint8),
            far={},
            pads=np.full((spr, n_rows, n), UNWRITTEN, np.uint8),
            used=[False] * spr if used is None else used,
            heads=np.zeros(n, np.int64),
            released=np.zeros(n, np.int64),
            last_slot=np.full(n, -1, np.int64),
            last_pad=np.zeros(n, np.int64),
            has_last=np.zeros(n, bool),
            last=None if layout is None else np.zeros((n, *obs_shape), dtype),
            pending=[],
            undo=[None],
        )


class RingView:
    """The fields of a store's :class:`RingState`, read-only (the state is replaced whole, never field by field)."""

    _ring: RingState

    @property
    def layout(self) -> StackLayout | None:
        return self._ring.layout

    @property
    def frames(self) -> ChunkedArray | DeviceArray | None:
        return self._ring.frames

    @property
    def slots(self) -> np.ndarray:
        return self._ring.slots

    @property
    def deltas(self) -> np.ndarray:
        return self._ring.deltas

    @property
    def far(self) -> dict[tuple[int, int, int], int]:
        return self._ring.far

    @property
    def pads(self) -> np.ndarray:
        return self._ring.pads

    @property
    def used(self) -> list[bool]:
        return self._ring.used

    @property
    def heads(self) -> np.ndarray:
        return self._ring.heads

    @property
    def released(self) -> np.ndarray:
        return self._ring.released

    @property
    def last_slot(self) -> np.ndarray:
        return self._ring.last_slot

    @property
    def last_pad(self) -> np.ndarray:
        return self._ring.last_pad

    @property
    def has_last(self) -> np.ndarray:
        return self._ring.has_last

    @property
    def last(self) -> np.ndarray | None:
        return self._ring.last
