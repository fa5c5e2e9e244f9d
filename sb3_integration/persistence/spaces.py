"""Gymnasium spaces as JSON-able data, so saved buffers never pickle code.

``space_to_dict`` turns Box, Discrete, MultiDiscrete, MultiBinary, Dict and
Tuple spaces into plain dicts of str/int/float/list; ``space_from_dict`` builds
the same space back (bounds bit-exact, Dict key order kept). Non-finite float
bounds are written as the strings ``"inf"``, ``"-inf"``, ``"nan"`` so the result
is strict JSON; a bound that is the same everywhere is written once (``fill``).

Examples
--------
>>> import json, numpy as np
>>> from gymnasium import spaces
>>> box = spaces.Box(0, 255, (4, 84, 84), np.uint8)
>>> d = space_to_dict(box)
>>> d["low"], d["high"]
({'fill': 0}, {'fill': 255})
>>> space_from_dict(json.loads(json.dumps(d))) == box
True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["space_from_dict", "space_to_dict"]

_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def space_to_dict(space: spaces.Space) -> dict[str, Any]:
    """A JSON-able description of ``space`` (see the module docstring)."""
    if isinstance(space, spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "dtype": np.dtype(space.dtype).str,
                "low": _array_to_json(space.low), "high": _array_to_json(space.high)}
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start),
                "dtype": np.dtype(space.dtype).str}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(),
                "start": space.start.tolist(), "dtype": np.dtype(space.dtype).str}
    if isinstance(space, spaces.MultiBinary):
        n = space.n
        return {"type": "MultiBinary", "n": int(n) if isinstance(n, (int, np.integer)) else [int(k) for k in n]}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": [[k, space_to_dict(s)] for k, s in space.spaces.items()]}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_dict(s) for s in space.spaces]}
    raise TypeError(
        f"cannot store a {type(space).__name__} space as data; supported: Box, Discrete, "
        "MultiDiscrete, MultiBinary, Dict, Tuple"
    )


def space_from_dict(d: dict[str, Any]) -> spaces.Space:
    """The space that :func:`space_to_dict` described."""
    kind = d.get("type")
    if kind == "Box":
        dtype, shape = np.dtype(d["dtype"]), tuple(d["shape"])
        low, high = _array_from_json(d["low"], shape, dtype), _array_from_json(d["high"], shape, dtype)
        return spaces.Box(low, high, shape, dtype)
    if kind == "Discrete":
        return spaces.Discrete(d["n"], start=d["start"], dtype=np.dtype(d["dtype"]).type)
    if kind == "MultiDiscrete":
        dtype = np.dtype(d["dtype"])
        return spaces.MultiDiscrete(np.array(d["nvec"], dtype), dtype=dtype.type,
                                    start=np.array(d["start"], dtype))
    if kind == "MultiBinary":
        return spaces.MultiBinary(d["n"])
    if kind == "Dict":
        # a list of pairs keeps the saved key order (a mapping would be re-sorted)
        return spaces.Dict([(k, space_from_dict(s)) for k, s in d["spaces"]])
    if kind == "Tuple":
        return spaces.Tuple([space_from_dict(s) for s in d["spaces"]])
    raise ValueError(f"unknown space description type {kind!r}")


def _array_to_json(a: np.ndarray) -> dict[str, Any]:
    flat = a.reshape(-1)
    if flat.size and np.array_equal(flat, np.full_like(flat, flat[0]), equal_nan=a.dtype.kind == "f"):
        return {"fill": _scalar_to_json(flat[0].item())}
    return {"data": _nested(a.tolist())}


def _nested(x: Any) -> Any:
    return [_nested(v) for v in x] if isinstance(x, list) else _scalar_to_json(x)


def _scalar_to_json(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _array_from_json(d: dict[str, Any], shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    def value(v: Any) -> Any:
        if isinstance(v, list):
            return [value(x) for x in v]
        return _NONFINITE[v] if isinstance(v, str) else v

    if "fill" in d:
        return np.full(shape, value(d["fill"]), dtype=dtype)
    return np.array(value(d["data"]), dtype=dtype).reshape(shape)
