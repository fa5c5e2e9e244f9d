"""Building blocks of numba kernels, shared with other packages (the public face of :mod:`._kernels`).

Kernels elsewhere (``sb3_integration.engine._native_put``'s row writer) work on raw
addresses as the read path's do; they take these intrinsics from here, never from
the private module:

* ``memcpy(dst, src, n)`` -- copy ``n`` bytes between two int64 addresses (inside ``@njit``).
* ``u8ptr(addr)`` -- an int64 address as a ``uint8*``, for ``numba.carray(u8ptr(a), n)``.

They are numba intrinsics: callable from compiled code only.
"""

from __future__ import annotations

from chunkstore.native._kernels import _memcpy as memcpy
from chunkstore.native._kernels import _u8ptr as u8ptr

__all__ = ["memcpy", "u8ptr"]
