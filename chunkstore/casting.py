"""One lossless-cast policy for everything written into a store, and the zero item of any dtype."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

__all__ = ["lossless_cast", "zero_fill"]

def lossless_cast(arr: np.ndarray, dtype: Any, name: str, *, round_floats: bool = False) -> np.ndarray:
    """``arr`` in ``dtype``, refusing any cast that changes a value.

    Safe casts always pass; other casts pass when every value survives the round
    trip (int64 holding 0..255 into uint8, whole floats into ints).
    ``round_floats=True`` also lets float -> float casts round (float64 -> float32),
    as SB3 does when it stores a float space. Otherwise ValueError, naming ``name``.
    """
    dtype = np.dtype(dtype)
    if np.can_cast(arr.dtype, dtype, "safe") or (round_floats and arr.dtype.kind == dtype.kind == "f"):
        return arr.astype(dtype)
    cast: np.ndarray | None = None
    try:
        with np.errstate(invalid="ignore", over="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ComplexWarning: the round trip below sees what was lost
            cast = arr.astype(dtype)
            same = np.array_equal(cast.astype(arr.dtype), arr, equal_nan=arr.dtype.kind in "fc")
    except (TypeError, ValueError, OverflowError):  # "a" into ints, None into floats, bytes into void
        same = False
    if cast is None or not same or arr.dtype.kind not in "biufc":
        raise ValueError(
            f"{name}: expected dtype {dtype}, got dtype {arr.dtype} with values that do not fit "
            f"{dtype} without loss; cast them explicitly first"
        )
    return cast


def zero_fill(arr: np.ndarray, key: Any = Ellipsis) -> None:
    """``arr[key]`` set to all-zero bytes, for every dtype.

    ``arr[key] = 0`` is a TypeError for void dtypes (``V3``) and stores ``b"0"`` for byte and
    unicode strings (and string fields of structured dtypes); ``np.zeros((), dtype)`` is the
    all-zero item of any dtype, and assigning it copies its bytes.

    >>> a = np.frombuffer(b"abcdef", "S3").copy()
    >>> zero_fill(a, 0)
    >>> a.tobytes()
    b'\\x00\\x00\\x00def'
    """
    arr[key] = np.zeros((), arr.dtype)
