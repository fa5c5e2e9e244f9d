"""numpy dtypes and their torch counterparts (for viewing decoded bytes)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["carrier_dtype", "torch_dtype"]

_NAMES = {
    "b1": "bool", "u1": "uint8", "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64",
    "u2": "uint16", "u4": "uint32", "u8": "uint64", "f2": "float16", "f4": "float32",
    "f8": "float64", "c8": "complex64", "c16": "complex128",
}


def torch_dtype(dtype: Any) -> Any:
    """The torch dtype with the same bytes as ``dtype``, or None (structured, strings, ...).

    Examples
    --------
    >>> torch_dtype(np.float32)
    torch.float32
    >>> torch_dtype(np.dtype(">f4")) is None  # torch has only native byte order
    True
    """
    import torch

    dtype = np.dtype(dtype)
    if dtype.fields is not None or dtype.subdtype is not None or not dtype.isnative:
        return None
    name = _NAMES.get(f"{dtype.kind}{dtype.itemsize}")
    return getattr(torch, name, None) if name else None


def carrier_dtype(tdtype: Any) -> Any:
    """The torch dtype a gather of ``tdtype`` items runs in: the signed type of the same width for
    torch's unsigned 16/32/64-bit types (which lack ``index_select``), else ``tdtype`` itself."""
    import torch

    for bits in (16, 32, 64):
        if tdtype is not None and tdtype == getattr(torch, f"uint{bits}", None):
            return getattr(torch, f"int{bits}")
    return tdtype
