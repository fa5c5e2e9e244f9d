"""Small arrays (actions, rewards, stack descriptors) compressed for a pickle, and back."""

from __future__ import annotations

from typing import Any

import numpy as np

from chunkstore import get_codec

__all__ = ["pack_array", "unpack_array"]

_PACK_CODEC = "zstd3"


def pack_array(a: np.ndarray) -> dict[str, Any]:
    """``a`` compressed, for a pickle (actions, rewards, descriptors)."""
    a = np.ascontiguousarray(a)
    data = bytes(get_codec(_PACK_CODEC).encode(a)) if a.size else b""
    return {"shape": a.shape, "dtype": a.dtype.str, "codec": _PACK_CODEC, "data": data}


def unpack_array(packed: dict[str, Any]) -> np.ndarray:
    out = np.zeros(packed["shape"], np.dtype(packed["dtype"]))
    if out.size:
        get_codec(packed["codec"]).decode(packed["data"], out=out)
    return out
