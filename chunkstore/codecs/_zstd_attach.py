"""Zstandard compression with the dictionary *attached*: libzstd called directly.

python-zstandard compresses with a dictionary by first copying the dictionary's
digested tables into the compression context: zstd's own choice for an input over
16 KB at level 3. For a chunk of 4 Atari frames (28 KB) that copy costs about a
third of the whole call: 600 chunks of real MsPacman frames with a 110 KB trained
dictionary took 20.8 µs a chunk through python-zstandard and 13.6 µs with the
dictionary attached (``ZSTD_c_forceAttachDict``), at the same ratio (23.1x; same
process, libzstd 1.5.7). python-zstandard offers no way to ask for it, so this
module calls the libzstd inside the python-zstandard wheel (the one the native
read path loads, :mod:`chunkstore.native._lib`) through ctypes, with that parameter.

The frames are standard zstd frames with what python-zstandard writes in the
header (content size, dictionary ID, no checksum): any zstd decoder with the
dictionary reads them, the native read path included. Their bytes can differ from
python-zstandard's (zstd searches an attached dictionary differently). One
compression context per thread; one digested dictionary per dictionary and level,
shared by the threads (libzstd allows it) and freed with the dictionary.
:func:`encoder` returns None when no libzstd loads or it refuses the parameter;
the codec then compresses through python-zstandard.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["AttachedEncoder", "encoder"]

# ZSTD_cParameter values (zstd.h; the last is experimental, stable since libzstd 1.4.0)
_C_LEVEL, _C_CONTENT_SIZE, _C_CHECKSUM, _C_DICT_ID, _C_FORCE_ATTACH = 100, 200, 201, 202, 1001
_DICT_FORCE_ATTACH = 1
_MIN_VERSION = 10400

_lock = threading.Lock()
_lib: Any = None
_tried = False


def _load() -> Any:
    """The first libzstd that loads and has the entry points, or None."""
    global _lib, _tried
    with _lock:
        if _tried:
            return _lib
        _tried = True
        from chunkstore.native import libzstd_paths

        for path in libzstd_paths():
            try:
                _lib = _Lib(path)
                break
            except (OSError, AttributeError):
                continue
        return _lib


class _Lib:
    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        vp, size = ctypes.c_void_p, ctypes.c_size_t
        lib.ZSTD_versionNumber.restype = ctypes.c_uint
        if lib.ZSTD_versionNumber() < _MIN_VERSION:
            raise OSError(f"{path}: libzstd older than 1.4.0")
        lib.ZSTD_createCCtx.restype = vp
        lib.ZSTD_freeCCtx.argtypes = [vp]
        lib.ZSTD_createCDict.restype = vp
        lib.ZSTD_createCDict.argtypes = [ctypes.c_char_p, size, ctypes.c_int]
        lib.ZSTD_freeCDict.argtypes = [vp]
        lib.ZSTD_CCtx_setParameter.restype = size
        lib.ZSTD_CCtx_setParameter.argtypes = [vp, ctypes.c_int, ctypes.c_int]
        lib.ZSTD_CCtx_refCDict.restype = size
        lib.ZSTD_CCtx_refCDict.argtypes = [vp, vp]
        lib.ZSTD_compress2.restype = size
        lib.ZSTD_compress2.argtypes = [vp, vp, size, vp, size]
        lib.ZSTD_compressBound.restype = size
        lib.ZSTD_compressBound.argtypes = [size]
        lib.ZSTD_isError.restype = ctypes.c_uint
        lib.ZSTD_isError.argtypes = [size]
        lib.ZSTD_getErrorName.restype = ctypes.c_char_p
        lib.ZSTD_getErrorName.argtypes = [size]
        self.lib = lib


class _Context:
    """One thread's compression context and output buffer; freed with the thread."""

    def __init__(self, lib: Any) -> None:
        self.ptr = lib.ZSTD_createCCtx()
        if not self.ptr:
            raise MemoryError("ZSTD_createCCtx failed")
        weakref.finalize(self, lib.ZSTD_freeCCtx, self.ptr)
        self.out = ctypes.create_string_buffer(0)


class AttachedEncoder:
    """Compresses with one dictionary at one level, the dictionary attached (module docstring)."""

    def __init__(self, lib: _Lib, dictionary: bytes, level: int) -> None:
        self._lib = lib.lib
        self.level = level
        self.cdict = self._lib.ZSTD_createCDict(dictionary, len(dictionary), level)
        if not self.cdict:
            raise MemoryError("ZSTD_createCDict failed")
        weakref.finalize(self, self._lib.ZSTD_freeCDict, self.cdict)
        self._local = threading.local()
        self._context()  # refuses a libzstd without the parameter now, not at the first chunk

    def _context(self) -> _Context:
        ctx: _Context | None = getattr(self._local, "ctx", None)
        if ctx is None:
            ctx = _Context(self._lib)
            for param, value in ((_C_LEVEL, self.level), (_C_CONTENT_SIZE, 1), (_C_CHECKSUM, 0), (_C_DICT_ID, 1),
                                 (_C_FORCE_ATTACH, _DICT_FORCE_ATTACH)):
                self._check(self._lib.ZSTD_CCtx_setParameter(ctx.ptr, param, value), "ZSTD_CCtx_setParameter")
            self._check(self._lib.ZSTD_CCtx_refCDict(ctx.ptr, self.cdict), "ZSTD_CCtx_refCDict")
            self._local.ctx = ctx
        return ctx

    def _check(self, ret: int, what: str) -> int:
        if self._lib.ZSTD_isError(ret):
            raise OSError(f"{what}: {self._lib.ZSTD_getErrorName(ret).decode()}")
        return ret

    def compress(self, raw: np.ndarray) -> bytes:
        """One zstd frame of ``raw`` (a C-contiguous 1-D uint8 array)."""
        ctx = self._context()
        n = raw.size
        bound = self._lib.ZSTD_compressBound(n)
        if len(ctx.out) < bound:
            ctx.out = ctypes.create_string_buffer(bound)
        size = self._check(self._lib.ZSTD_compress2(ctx.ptr, ctx.out, bound, raw.ctypes.data, n), "ZSTD_compress2")
        return ctypes.string_at(ctx.out, size)


def encoder(dictionary: bytes, level: int) -> AttachedEncoder | None:
    """An :class:`AttachedEncoder` for ``dictionary`` at ``level``, or None (no libzstd will do it)."""
    lib = _load()
    if lib is None:
        return None
    try:
        return AttachedEncoder(lib, dictionary, level)
    except OSError:
        return None
