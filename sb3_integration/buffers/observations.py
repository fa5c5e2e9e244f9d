"""What ``add()`` accepts as an observation, and how a buffer's observation space is read.

* :func:`coerce_obs` -- the observation policy of ``add()``: what SB3's
  assignment accepts (with SB3's errors where it fails), minus what it would
  store changed (see its docstring).
* :func:`subspaces` -- a buffer's observation keys and their spaces.
* :func:`stack_axis_order` -- where SB3's ``VecFrameStack`` stacks, for layout detection.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from gymnasium import spaces

from chunkstore.casting import lossless_cast
from sb3_integration.errors import DataLossError, usage_error

__all__ = ["coerce_obs", "lossless_obs", "sb3_obs", "stack_axis_order", "subspaces"]


def subspaces(space: spaces.Space) -> dict[Any, spaces.Space]:
    """A buffer's observation keys and their spaces (``None`` for a non-Dict space)."""
    if isinstance(space, spaces.Dict):
        return dict(space.spaces)
    return {None: space}



def stack_axis_order(space: Any) -> tuple[int, ...]:
    """Axes to try for frame stacking, best first: where SB3's ``VecFrameStack`` stacks."""
    from stable_baselines3.common.preprocessing import is_image_space

    shape = space.shape or ()
    if is_image_space(space) and len(shape) == 3 and int(np.argmin(shape)) == 0:
        return (0, -1)  # channel-first image
    return (-1, 0)  # channel-last image, or not an image: VecFrameStack stacks on the last axis


# -- add() input policy --------------------------------------------------------------------
#: numpy's warning for a complex -> real cast (moved to numpy.exceptions in numpy 1.25)
_COMPLEX_WARNING = getattr(getattr(np, "exceptions", np), "ComplexWarning", Warning)


def coerce_obs(x: Any, shape: tuple[int, ...], dtype: np.dtype, name: str, *, reshape: bool = False) -> np.ndarray:
    """One observation argument of ``add()`` as the buffer stores it: ``shape``, in ``dtype``.

    :func:`sb3_obs` (SB3's assignment and its errors), then :func:`lossless_obs`
    (what SB3 would store changed is refused). ``reshape=True`` first reshapes an
    input of the right size (SB3 does this for Discrete spaces). Never copies an
    input that already fits.
    """
    return lossless_obs(sb3_obs(x, shape, dtype, name, reshape=reshape), shape, dtype, name)


def _obs_hint(name: str, shape: tuple[int, ...], dtype: np.dtype, arr: np.ndarray) -> str:
    return f"{name}: expected shape {shape} and dtype {dtype}, got shape {arr.shape} and dtype {arr.dtype}"


def sb3_obs(x: Any, shape: tuple[int, ...], dtype: np.dtype, name: str, *, reshape: bool = False) -> np.ndarray:
    """``x`` as an array that SB3's ``row[...] = np.array(x)`` accepts for a row of ``shape``/``dtype``.

    Where that numpy assignment fails, raises its exception type with numpy's
    message (:class:`~sb3_integration.errors.ArgumentError` and kin); the assignment
    runs on a scratch row only when ``x`` is not already a numeric array of ``shape``.
    The result may still differ from ``shape`` and ``dtype``: :func:`lossless_obs` next.
    """
    if type(x) is np.ndarray and x.shape == shape and x.dtype == dtype:  # the common case: as SB3 makes it
        return x
    try:
        arr = np.asarray(x)  # SB3's np.array(x): the same errors (a ragged list), without the copy
    except Exception as e:
        raise usage_error(e, f"{name}: cannot store {type(x).__name__} {x!r:.60}", argument=True) from None
    if reshape and arr.shape != shape and arr.size == math.prod(shape):
        arr = arr.reshape(shape)
    if arr.shape != shape or arr.dtype.kind not in "biufc":
        try:  # SB3's assignment, on a scratch row: numpy's broadcasting and conversion errors
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                np.empty((1, *shape), dtype)[0] = arr
        except Exception as e:
            raise usage_error(e, _obs_hint(name, shape, dtype, arr), argument=True) from None
    return arr


def lossless_obs(arr: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, name: str) -> np.ndarray:
    """An array :func:`sb3_obs` accepted, as stored: exactly ``shape``, in ``dtype``, values unchanged.

    Raises :class:`~sb3_integration.errors.DataLossError` where SB3 would store
    something else: a broadcast that repeats values (one env's observation for
    several envs), or a cast that changes values (:func:`chunkstore.casting.lossless_cast`; float ->
    float casts round, as SB3 stores a float space, so samples stay bit-identical to SB3's).
    Leading axes of length 1 may be added or dropped, as numpy's assignment does
    (one env, no env axis).
    """
    if arr.shape != shape:
        if arr.size != math.prod(shape):
            raise DataLossError(f"{_obs_hint(name, shape, dtype, arr)}: SB3 would broadcast it, storing the "
                                "same values for several envs or elements; pass one observation per env")
        arr = arr.reshape(shape)  # equal sizes and broadcastable: only leading axes of length 1 differ
    if arr.dtype != dtype:
        try:
            if arr.dtype.kind == "c":  # the cast to a real dtype warns; lossless_cast refuses what it drops
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", _COMPLEX_WARNING)
                    arr = lossless_cast(arr, dtype, name, round_floats=True)
            else:
                arr = lossless_cast(arr, dtype, name, round_floats=True)
        except ValueError as e:
            raise DataLossError(f"{e} (SB3 would store them changed)") from None
    return arr
