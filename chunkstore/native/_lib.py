"""libzstd, found where it already is: inside the python-zstandard wheel.

python-zstandard ships its cffi backend as a shared object with libzstd linked in
statically, and that object exports the ``ZSTD_*`` symbols. Loading it with
ctypes gives the native read path the decompression functions without a
compiler or a system libzstd. A system libzstd is the fallback.

Only function *addresses* leave this module: the numba kernels call them through
an address passed at run time, which keeps the kernels cacheable on disk (a
ctypes function object held as a global would make numba refuse to cache).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
import weakref
from typing import Any

__all__ = ["ZstdLib", "candidates", "crc32_address", "load_zstd"]

#: oldest libzstd whose one-shot and dictionary decompression the kernels rely on
_MIN_VERSION = 10400


def candidates() -> list[str]:
    """Paths of the libzstd builds to try, best first: python-zstandard's, then the system's."""
    paths = []
    try:
        import zstandard

        paths += sorted(glob.glob(os.path.join(os.path.dirname(zstandard.__file__), "_cffi*.so")))
    except ImportError:  # pragma: no cover - zstandard is a dependency
        pass
    system = ctypes.util.find_library("zstd")
    if system:
        paths.append(system)
    return paths


class ZstdLib:
    """The decompression entry points of one loaded libzstd, and per-thread contexts."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        lib.ZSTD_versionNumber.restype = ctypes.c_uint
        lib.ZSTD_createDCtx.restype = ctypes.c_void_p
        lib.ZSTD_freeDCtx.argtypes = [ctypes.c_void_p]
        lib.ZSTD_createDDict.restype = ctypes.c_void_p
        lib.ZSTD_createDDict.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.ZSTD_freeDDict.argtypes = [ctypes.c_void_p]
        self.path = path
        self.version = int(lib.ZSTD_versionNumber())
        if self.version < _MIN_VERSION:
            raise OSError(f"{path} has libzstd {self.version}; need >= {_MIN_VERSION}")
        self._lib = lib
        #: ZSTD_decompress_usingDDict(dctx, dst, cap, src, n, ddict); a NULL ddict means none
        self.decompress = _address(lib.ZSTD_decompress_usingDDict)
        #: libc's pread(fd, buf, count, offset), for chunk bytes that live in files
        self.pread = _address(ctypes.CDLL(None).pread)
        self._local = threading.local()

    def dctx(self) -> int:
        """This thread's decompression context (freed when the thread ends)."""
        holder = getattr(self._local, "holder", None)
        if holder is None:
            holder = self._local.holder = _DCtx(self._lib)
        return holder.ptr

    def ddict(self, dictionary: bytes) -> tuple[int, Any]:
        """A digested dictionary: its address, and an owner that frees it when collected."""
        ptr = self._lib.ZSTD_createDDict(dictionary, len(dictionary))
        if not ptr:
            raise MemoryError("ZSTD_createDDict failed")
        owner = _Owner()
        weakref.finalize(owner, self._lib.ZSTD_freeDDict, ptr)
        return int(ptr), owner


class _Owner:
    """Holds a native resource alive; its finalizer frees it."""


class _DCtx:
    def __init__(self, lib: Any) -> None:
        ptr = lib.ZSTD_createDCtx()
        if not ptr:
            raise MemoryError("ZSTD_createDCtx failed")
        self.ptr = int(ptr)
        weakref.finalize(self, lib.ZSTD_freeDCtx, ptr)


def _address(fn: Any) -> int:
    return int(ctypes.cast(fn, ctypes.c_void_p).value or 0)


def crc32_address() -> int:
    """Address of zlib's ``crc32`` in the libz that Python's zlib module links, or 0 if none loads.

    zlib's CRC32 runs 1.8-2.9x faster than the kernels' own table CRC (``crc32_table``;
    ``tools/bench_crc.py``); 0 makes the kernels use the table.
    """
    names = [ctypes.util.find_library("z"), "libz.so.1", "libz.dylib"]
    for name in names:
        if not name:
            continue
        try:
            return _address(ctypes.CDLL(name).crc32)
        except (OSError, AttributeError):
            continue
    return 0


def load_zstd() -> ZstdLib:
    """The first usable libzstd; OSError naming every candidate tried."""
    tried = []
    for path in candidates():
        try:
            return ZstdLib(path)
        except (OSError, AttributeError) as e:
            tried.append(f"{path}: {e}")
    raise OSError("no usable libzstd found (" + ("; ".join(tried) or "no candidates") + ")")
