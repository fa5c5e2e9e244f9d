"""The one check of whole-number arguments (counts, indices, levels, byte sizes): an int, not a bool.

Python's ``True`` is an ``int`` (``isinstance(True, int)``), numpy's integers are not, and a
count or an index that arrives as a bool is a caller's slip to refuse, never 1. Each caller
keeps its own words for the error (tests and users match them); what "a whole number" is lives
here once.

>>> is_int(3), is_int(np.int64(3)), is_int(True), is_int(3.0), is_int(3, minimum=4)
(True, True, False, False, False)
>>> check_count("chunk_len", np.int64(4)), check_count("chunk_len", 4.0)
(4, 4)
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

import numpy as np

__all__ = ["check_count", "is_int"]


def is_int(value: Any, minimum: int | None = None, maximum: int | None = None) -> TypeGuard[int | np.integer]:
    """Whether ``value`` is a Python or numpy integer (not a bool) within ``minimum..maximum``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return False
    return bool((minimum is None or value >= minimum) and (maximum is None or value <= maximum))


def check_count(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int ``>= minimum``; ``2.5``, ``"3"``, ``None`` and ``True`` are refused
    (TypeError, or ValueError for a fraction or a value below ``minimum``; ``4.0`` is 4)."""
    if isinstance(value, (float, np.floating)):
        if not (math.isfinite(value) and float(value).is_integer()):
            raise ValueError(f"{name} must be a whole number, got {value!r}")
    elif not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)
