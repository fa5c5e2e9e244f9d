"""Building blocks of numba kernels, shared with other packages (the public face of :mod:`._kernels`).

Kernels elsewhere (``sb3_integration.engine._native_put``'s row writer) work on raw
addresses as the read path's do; they take these intrinsics from here, never from
the private module:

* ``memcpy(dst, src, n)`` -- copy ``n`` bytes between two int64 addresses (inside ``@njit``).
* ``u8ptr(addr)`` -- an int64 address as a ``uint8*``, for ``numba.carray(u8ptr(a), n)``.
* ``copy_runs(dst, dst_stride, src, src_stride, nruns, run)`` -- ``nruns`` runs of ``run`` bytes,
  run ``r`` at ``r * stride`` on each side (items into strided stacks, frames out of them).

They are numba intrinsics: callable from compiled code only.
"""

from __future__ import annotations

from chunkstore.native._kernels import _copy_runs as copy_runs
from chunkstore.native._kernels import _memcpy as memcpy
from chunkstore.native._kernels import _u8ptr as u8ptr

__all__ = ["copy_runs", "memcpy", "u8ptr"]
