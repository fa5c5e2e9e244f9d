"""Checks of the service's options at the call: one-line ValueError / TypeError naming the argument."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from chunkstore.validate import check_count

__all__ = ["count", "number", "seconds"]

#: ``value`` as an int ``>= minimum``; ``2.5``, ``"3"`` and ``True`` are refused (``4.0`` is 4):
#: the arrays' own check, so the service words a bad count as a ChunkedArray does
count = check_count


def number(name: str, value: Any, *, positive: bool = False, minimum: float = -math.inf) -> float:
    """``value`` as a finite float (``> 0`` with ``positive``, ``>= minimum``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v) or (positive and v <= 0) or v < minimum:
        want = "> 0" if positive else f">= {minimum}"
        raise ValueError(f"{name} must be a finite number {want}, got {value!r}")
    return v


def seconds(name: str, value: Any) -> float | None:
    """A timeout: None (wait forever) or a number of seconds ``>= 0``."""
    return None if value is None else number(name, value, minimum=0.0)
