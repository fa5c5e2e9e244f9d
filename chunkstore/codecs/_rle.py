"""``rle``: vectorised run-length encoding of the raw items."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from chunkstore.codecs._base import Codec
from chunkstore.codecs._util import (
    DecodeError,
    as_bytes,
    buffer_view,
    out_bytes,
    size_error,
)

__all__ = ["RLECodec"]

# version, word width, run-length width, pad, words per item, run count
_HEADER = struct.Struct("<BBBxIQ")
_VERSION = 1
_WIDTHS = (8, 4, 2, 1)


def _uint(width: int) -> np.dtype:
    return np.dtype(f"<u{width}")


def _run_dtype(width: int) -> np.dtype:
    # np.repeat refuses uint64 counts; a run never reaches 2**63 items.
    return np.dtype("<i8") if width == 8 else _uint(width)


def _run_width(longest: int) -> int:
    for width in (1, 2, 4):
        if longest < 1 << (8 * width):
            return width
    return 8


class RLECodec(Codec):
    """Run-length encoding of whole items, compared as raw unsigned ints.

    An item is viewed as words of the widest unsigned int (8, 4, 2 or 1 bytes)
    that divides its itemsize (one ``uint64`` for float64, two for complex128,
    three ``uint8`` for a 3-byte struct), so every dtype, NaN payloads and
    ``-0.0`` included, round-trips bit-exactly. Run lengths are stored in the
    narrowest integer that fits the longest run, so runs of any length work.
    Encode and decode are vectorised (``np.repeat``), no per-element Python.

    Encoded layout (little-endian): a 16-byte header (version, word width,
    run-length width, words per item, run count), the run values, the run lengths.

    Examples
    --------
    >>> import numpy as np
    >>> c = RLECodec()
    >>> a = np.repeat(np.array([3, 7], np.uint8), 100_000)
    >>> len(c.encode(a))
    26
    >>> np.array_equal(c.decode(c.encode(a)), a)
    True
    """

    codec_id = "rle"

    @property
    def name(self) -> str:
        return "rle"

    def encode(self, arr: np.ndarray) -> bytes:
        a = np.asarray(arr)
        raw = as_bytes(a)
        width = next(w for w in _WIDTHS if a.dtype.itemsize % w == 0)
        words = max(1, a.dtype.itemsize // width)
        items = raw.view(_uint(width)).reshape(-1, words)
        if items.shape[0] == 0:
            return _HEADER.pack(_VERSION, width, 1, words, 0)
        change = items[1:] != items[:-1]
        if words > 1:  # items wider than 8 bytes (complex128, structs): compare whole items
            change = change.any(axis=1)
        starts = np.flatnonzero(change.reshape(-1))
        starts += 1
        starts = np.concatenate(([0], starts))
        lengths = np.diff(starts, append=items.shape[0])
        rwidth = _run_width(int(lengths.max()))
        return b"".join(
            (
                _HEADER.pack(_VERSION, width, rwidth, words, starts.size),
                items[starts].tobytes(),
                lengths.astype(_run_dtype(rwidth)).tobytes(),
            )
        )

    def decode(self, buf: Any, out: np.ndarray | None = None) -> np.ndarray:
        values, lengths = self._parse(buffer_view(buf))
        item = values.itemsize * values.shape[1]
        if out is not None:
            dst = out_bytes(out)
            # bounded before anything is allocated. A float sum cannot wrap around as
            # an integer one can (crafted lengths near 2**63): it screens them first.
            if float(lengths.sum(dtype=np.float64)) * item > 2.0 * dst.size + 1:
                raise DecodeError(f"rle: runs add up to far more than the {dst.size} bytes expected")
            total = int(lengths.sum(dtype=np.uint64)) * item
            if total != dst.size:
                raise size_error(self.name, total, out)
            target = dst.view(values.dtype).reshape(-1, values.shape[1])
            np.copyto(target, np.repeat(values, lengths, axis=0))
            return out
        return np.repeat(values, lengths, axis=0).reshape(-1).view(np.uint8)  # trusts the header

    def _parse(self, mv: memoryview) -> tuple[np.ndarray, np.ndarray]:
        if len(mv) < _HEADER.size:
            raise DecodeError(
                f"rle: {len(mv)} bytes is shorter than the {_HEADER.size}-byte header"
            )
        version, width, rwidth, words, nruns = _HEADER.unpack_from(mv)
        if version != _VERSION or width not in _WIDTHS or rwidth not in _WIDTHS or not words:
            raise DecodeError(
                f"rle: bad header (version {version}, widths {width}/{rwidth}/{words})"
            )
        split = _HEADER.size + nruns * width * words
        end = split + nruns * rwidth
        if len(mv) != end:
            raise DecodeError(f"rle: {nruns} runs need {end} bytes, got {len(mv)}")
        values = np.frombuffer(mv[_HEADER.size : split], dtype=_uint(width)).reshape(nruns, words)
        lengths = np.frombuffer(mv[split:end], dtype=_run_dtype(rwidth))
        if rwidth == 8 and nruns and lengths.min() < 0:
            raise DecodeError("rle: negative run length")
        return values, lengths
