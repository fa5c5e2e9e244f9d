"""Helpers shared by the codecs: byte views, ``out=`` handling, level checks."""

from __future__ import annotations

from typing import Any

import numpy as np

from chunkstore.errors import CodecConfigError, CorruptChunkError
from chunkstore.validate import is_int

__all__ = [
    "DecodeError",
    "as_bytes",
    "bounded_stream",
    "buffer_view",
    "check_level",
    "deliver",
    "out_bytes",
]


class DecodeError(CorruptChunkError):
    """Chunk bytes could not be decoded, or decode to a size other than ``out.nbytes``.

    A :class:`~chunkstore.errors.CorruptChunkError` without array and chunk; the
    chunk store re-raises it as one naming the array and chunk.
    """


def as_bytes(arr: Any) -> np.ndarray:
    """The raw bytes of ``arr`` as a 1-D uint8 array (a view when ``arr`` is C-contiguous)."""
    a = np.ascontiguousarray(arr)
    if a.dtype.hasobject:
        raise TypeError(
            f"cannot encode an array of dtype {a.dtype}: it holds Python object pointers"
        )
    # reshape first: a 0-d array cannot change its itemsize through .view().
    return a.reshape(-1).view(np.uint8)


def buffer_view(buf: Any) -> memoryview:
    """``buf`` (bytes, bytearray, memoryview, ndarray) as a flat memoryview of bytes."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def out_bytes(out: Any) -> np.ndarray:
    """A writable 1-D uint8 view of ``out``, which must be C-contiguous and writable."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    if not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous (got shape {out.shape}, strides {out.strides})")
    if not out.flags.writeable:
        raise ValueError("out must be writable")
    return out.reshape(-1).view(np.uint8)


def size_error(codec: str, got: int, out: np.ndarray) -> DecodeError:
    return DecodeError(
        f"{codec}: chunk decodes to {got} bytes, but out {out.shape} {out.dtype} "
        f"holds {out.nbytes} bytes"
    )


def deliver(codec: str, raw: Any, out: np.ndarray | None) -> np.ndarray:
    """Hand a decompressor's bytes-like result to the caller.

    With ``out``: check the size and copy into it. Without: a writable 1-D uint8
    array that does not alias ``raw`` unless ``raw`` is a private bytearray.
    """
    src = np.frombuffer(raw, dtype=np.uint8)
    if out is None:
        return src if isinstance(raw, bytearray) else src.copy()
    dst = out_bytes(out)
    if src.size != dst.size:
        raise size_error(codec, src.size, out)
    np.copyto(dst, src)
    return out


def bounded_stream(codec: str, dobj: Any, src: Any, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` from an incremental decompressor, never producing more than it holds.

    ``dobj`` is a zlib-style decompressor object (zlib, isal, lz4.frame) whose
    ``decompress(data, max_length)`` returns at most ``max_length`` bytes. After
    ``out.nbytes`` bytes, one byte more is asked for: if the stream has it, the
    chunk is too long and decoding stops there (a crafted chunk may expand to
    gigabytes). The stream must also be complete (its end and checksum read).
    """
    dst = out_bytes(out)
    want = dst.size
    raw = dobj.decompress(src, want or 1)  # max_length 0 would mean "unlimited" to zlib
    if len(raw) != want:
        raise DecodeError(f"{codec}: chunk decodes to {len(raw)} bytes or more, expected {want}")
    if not dobj.eof:  # the end of the stream is still to be read: it must add nothing
        # zlib and isal hand back the input they did not consume; lz4 keeps it internally
        if dobj.decompress(getattr(dobj, "unconsumed_tail", b""), 1):
            raise DecodeError(f"{codec}: chunk decodes to more than the expected {want} bytes")
        if not dobj.eof:
            raise DecodeError(f"{codec}: the compressed stream is truncated")
    np.copyto(dst, np.frombuffer(raw, np.uint8))
    return out


def check_level(codec: str, level: Any, lo: int, hi: int) -> int:
    """``level`` as an int in ``lo..hi``, else :class:`CodecConfigError`."""
    if not is_int(level):
        raise CodecConfigError(f"{codec} level must be an integer, got {level!r}")
    level = int(level)
    if not lo <= level <= hi:
        raise CodecConfigError(f"{codec} level {level} is outside {lo}..{hi}")
    return level
