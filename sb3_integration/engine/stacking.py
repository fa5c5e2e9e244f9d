"""How a stacked observation splits into frames, and how stacks are compared.

A frame stack (``VecFrameStack``) is ``depth`` frames of ``width`` channels laid
side by side along one axis: axis 0 for channel-first images, the last axis for
channel-last ones. :class:`StackLayout` describes such a split and
:func:`detect_layout` finds it from two consecutive stacks. Stacks are compared
by their bit patterns (``-0.0`` differs from ``0.0``, NaN payloads are kept), so
frame sharing never changes what is read back, for any dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MAX_DEPTH", "StackLayout", "bits", "bitwise_comparable", "detect_layout", "is_zero", "same",
           "stack_candidates"]

#: deepest stack considered (a stack's ``pad`` is a uint8)
MAX_DEPTH = 254


@dataclass(frozen=True)
class StackLayout:
    """How an observation of ``obs_shape`` splits into ``depth`` frames.

    ``axis`` is 0, the last axis, or None (the whole observation is one frame).
    """

    obs_shape: tuple[int, ...]
    axis: int | None
    width: int
    depth: int

    @classmethod
    def whole(cls, obs_shape: tuple[int, ...]) -> StackLayout:
        return cls(tuple(obs_shape), None, 0, 1)

    @property
    def frame_shape(self) -> tuple[int, ...]:
        shp = self.obs_shape
        if self.axis is None:
            return shp
        if self.axis == 0:
            return (self.width, *shp[1:])
        return (*shp[:-1], self.width)

    def split(self, x: np.ndarray) -> np.ndarray:
        """``x`` of shape ``(n, *obs_shape)`` as ``(n, depth, *frame_shape)`` (a view)."""
        n, shp = x.shape[0], self.obs_shape
        if self.axis is None:
            return x[:, None]
        if self.axis == 0:
            return x.reshape(n, self.depth, self.width, *shp[1:])
        return np.moveaxis(x.reshape(n, *shp[:-1], self.depth, self.width), -2, 1)

    @property
    def older(self) -> tuple[slice, ...]:
        """Index of a stack's frames but the newest, along the stack axis."""
        return self._along(slice(None, -self.width))

    @property
    def newer(self) -> tuple[slice, ...]:
        """Index of a stack's frames but the oldest, along the stack axis."""
        return self._along(slice(self.width, None))

    def _along(self, s: slice) -> tuple[slice, ...]:
        if self.axis is None:
            return (s,)
        return (s,) if self.axis == 0 else (Ellipsis, s)  # type: ignore[return-value]

    def frames(self, stack: np.ndarray, start: int) -> np.ndarray:
        """Frames ``start..depth-1`` of one stack as ``(m, *frame_shape)``."""
        return self.split(stack[None])[0, start:]

    def describe(self) -> str:
        if self.axis is None:
            return "whole observations (no stacking detected)"
        return f"{self.depth} frames of {self.frame_shape} stacked on axis {self.axis}"

    def to_dict(self) -> dict[str, Any]:
        return {"axis": self.axis, "width": self.width, "depth": self.depth}


def stack_candidates(obs_shape: tuple[int, ...], axis_order: Sequence[int]) -> list[StackLayout]:
    out = []
    ndim = len(obs_shape)
    for axis in dict.fromkeys(a % ndim for a in axis_order) if ndim else ():
        length = obs_shape[axis]
        for w in range(1, length):
            if length % w == 0 and length // w <= MAX_DEPTH:
                out.append(StackLayout(tuple(obs_shape), axis if axis == 0 else ndim - 1, w, length // w))
    return out


def bits(x: np.ndarray) -> np.ndarray:
    """``x`` viewed so that ``==`` compares bit patterns (-0.0 != 0.0, NaN == NaN)."""
    if x.dtype.kind in "fc":
        return x.view(f"u{x.dtype.itemsize}")
    return x


def bitwise_comparable(dtype: np.dtype) -> bool:
    return dtype.kind not in "fc" or dtype.itemsize in (1, 2, 4, 8)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """``a`` and ``b`` (same shape and dtype) bit-identical.

    Two ``tobytes`` copies and a compare: measured fastest from Python on a 28 KB
    stack (2.0 us, against 3.0 for a uint64 ``==``, 4.5 for memcmp through ctypes
    and 4.7 for ``np.array_equal``).
    """
    return bits(a).tobytes() == bits(b).tobytes()


def is_zero(frame: np.ndarray) -> bool:
    """All bits zero (a -0.0 is not zero: it would not read back as -0.0)."""
    return not bits(frame).any()


def detect_layout(prev: np.ndarray, x: np.ndarray, axis_order: Sequence[int]) -> StackLayout | None:
    """The first candidate layout under which ``x`` is ``prev`` shifted by one frame.

    ``prev`` and ``x`` are two consecutive stacks of one env (``obs_shape``).
    A candidate counts only if ``x``'s frames are not all identical (otherwise
    the shift proves nothing). Returns None when no candidate fits this pair.
    """
    pb, xb = bits(prev)[None], bits(x)[None]
    if np.array_equal(pb, xb):
        return None
    for lay in stack_candidates(x.shape, axis_order):
        xs, ps = lay.split(xb)[0], lay.split(pb)[0]
        if np.array_equal(xs[1:], xs[:-1]):
            continue  # constant along this axis: uninformative
        if np.array_equal(xs[:-1], ps[1:]):
            return lay
    return None
