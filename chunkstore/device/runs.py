"""The encoding: an item is a reference item plus the runs of bytes where it differs.

An item's bytes ``x`` are stored against a reference ``r`` (another item's bytes,
kept raw on the device) as *runs*: maximal stretches of ``x`` that differ from
``r``, merged across short gaps (a gap of fewer than ``word_bytes`` equal bytes
costs less as values than as a new run) and cut to at most ``max_len`` bytes.
A run is one little-endian word ``skip | (len - 1) << pos_bits`` plus its ``len``
value bytes, where ``skip`` counts the bytes before the run that no earlier run
covers (its start minus the value bytes before it): value byte ``v`` of an item
goes to byte ``v + skip`` of its run, so the decoder needs no prefix sum. An item's
*record* is its words, then its values, padded to a multiple of ``word_bytes`` so
that the next record's words stay aligned::

    record = [word_0 .. word_{nw-1}] [values (nv bytes)] [0..word_bytes-1 pad bytes]

Decoding (:mod:`chunkstore.device.decode`) copies the reference and overwrites
the runs; nothing depends on the previous item, so any item decodes alone.

Measured on 20,000 real 84x84 Atari frames per game (``tools/bench_device_encodings.py``),
against one reference per game: 2-byte words (13 bits of start, runs of up to 8
bytes) store a MsPacman / Pong / Breakout frame in 365 / 195 / 153 bytes, against
735 / 365 / 319 for changed pixels (2-byte position + value), 605 / 261 / 233 for
changed 2x2 tiles, and 407 / 230 / 163 and 457 / 265 / 181 for 3- and 4-byte words.

Host side only (numpy and numba); the encoder runs as numba kernels, or as
vectorised numpy when the native layer is off (same bytes, slower).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["RunFormat", "copy_ranges", "cost_matrix", "encode_items", "record_runs"]

#: items of up to 2**13 bytes get 2-byte words (runs of up to 8 bytes); larger ones 4-byte words
_SHORT_POS_BITS = 13
#: a 4-byte word keeps at least 4 bits of length (runs of up to 16 bytes)
_MAX_POS_BITS = 28


@dataclass(frozen=True)
class RunFormat:
    """How runs of one item size are written.

    Parameters
    ----------
    item_nbytes
        Bytes per item.
    word_bytes
        2 or 4: bytes of one run word.
    pos_bits
        Low bits of a word holding the run's start; the rest hold ``len - 1``.

    Examples
    --------
    >>> fmt = RunFormat.for_item(84 * 84)
    >>> fmt.word_bytes, fmt.pos_bits, fmt.max_len
    (2, 13, 8)
    """

    item_nbytes: int
    word_bytes: int
    pos_bits: int

    @classmethod
    def for_item(cls, item_nbytes: int) -> RunFormat:
        """The format for items of ``item_nbytes`` bytes (2-byte words up to 8 KiB)."""
        pos_bits = max(1, (int(item_nbytes) - 1).bit_length())
        if pos_bits > _MAX_POS_BITS:
            raise ValueError(f"items of {item_nbytes} bytes are too large for run words "
                             f"(at most {1 << _MAX_POS_BITS} bytes)")
        return cls(int(item_nbytes), 2 if pos_bits <= _SHORT_POS_BITS else 4, pos_bits)

    @property
    def len_bits(self) -> int:
        return 8 * self.word_bytes - self.pos_bits

    @property
    def max_len(self) -> int:
        """Longest run: longer stretches are cut into several runs."""
        return 1 << self.len_bits

    @property
    def record_bound(self) -> int:
        """Most bytes one record can take (every byte changed, cut into maximal runs)."""
        h = self.word_bytes
        raw = self.item_nbytes + h * (self.item_nbytes // self.max_len + 2)
        return -(-raw // h) * h


# -- numpy implementation (the reference; used when numba is off) ---------------------------


def record_runs(x: np.ndarray, r: np.ndarray, fmt: RunFormat) -> tuple[np.ndarray, np.ndarray]:
    """Starts and lengths of the runs of ``x`` (1-D uint8) against ``r``, in numpy."""
    changed = np.flatnonzero(x != r)
    if changed.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    h, ml = fmt.word_bytes, fmt.max_len
    cut = np.flatnonzero(np.diff(changed) > h)  # a gap of h or more equal bytes ends a run
    gs = changed[np.r_[0, cut + 1]]
    ge = changed[np.r_[cut, changed.size - 1]] + 1
    pieces = -(-(ge - gs) // ml)
    group = np.repeat(np.arange(gs.size), pieces)
    k = np.arange(group.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    starts = gs[group] + k * ml
    return starts, np.minimum(ml, ge[group] - starts)


def _encode_numpy(items: np.ndarray, refs: np.ndarray, fmt: RunFormat, out: np.ndarray,
                  meta: np.ndarray) -> int:
    h, wdt = fmt.word_bytes, np.dtype(f"<u{fmt.word_bytes}")
    off = 0
    for a in range(items.shape[0]):
        starts, lens = record_runs(items[a], refs[a], fmt)
        nw, nv = starts.size, int(lens.sum())
        skips = starts - (np.cumsum(lens) - lens)
        words = (skips | ((lens - 1) << fmt.pos_bits)).astype(wdt)
        out[off:off + h * nw] = words.view(np.uint8)
        cover = np.zeros(fmt.item_nbytes + 1, np.int64)
        np.add.at(cover, starts, 1)
        np.add.at(cover, starts + lens, -1)
        out[off + h * nw:off + h * nw + nv] = items[a][np.cumsum(cover[:-1]) > 0]
        size = -(-(h * nw + nv) // h) * h
        out[off + h * nw + nv:off + size] = 0
        meta[a] = nw, nv, size
        off += size
    return off


def _cost_numpy(items: np.ndarray, cands: np.ndarray, fmt: RunFormat) -> np.ndarray:
    h = fmt.word_bytes
    out = np.empty((items.shape[0], cands.shape[0]), np.int64)
    for a in range(items.shape[0]):
        for b in range(cands.shape[0]):
            starts, lens = record_runs(items[a], cands[b], fmt)
            out[a, b] = -(-(h * starts.size + int(lens.sum())) // h) * h
    return out


# -- numba kernels (same bytes) ------------------------------------------------------------

_kernels: Any = None


def _numba_kernels() -> Any:
    """The compiled kernels, or None when the native layer is off or numba is missing."""
    global _kernels
    if _kernels is None:
        from chunkstore import native

        if not native.available():
            return None
        from chunkstore.device import _run_kernels

        _kernels = _run_kernels
    return _kernels


def encode_items(items: np.ndarray, refs: np.ndarray, fmt: RunFormat,
                 out: np.ndarray) -> np.ndarray:
    """Write the records of ``items[a]`` against ``refs[a]`` back to back into ``out``.

    ``items`` and ``refs`` are ``(m, item_nbytes)`` uint8; ``out`` a uint8 buffer of at
    least ``m * fmt.record_bound`` bytes. Returns ``(m, 3)`` int64: words, value
    bytes and record bytes of each item.
    """
    meta = np.empty((items.shape[0], 3), np.int64)
    if items.shape[0] == 0:
        return meta
    k = _numba_kernels()
    if k is None:
        _encode_numpy(items, refs, fmt, out, meta)
    else:
        items, refs = np.ascontiguousarray(items), np.ascontiguousarray(refs)
        k.encode(items, refs, _words(items), _words(refs), fmt.word_bytes, fmt.pos_bits, fmt.max_len,
                 out, meta)
    return meta


def cost_matrix(items: np.ndarray, cands: np.ndarray, fmt: RunFormat, *,
                bounded: bool = False) -> np.ndarray:
    """Record bytes of each of ``items`` (``(m, n)``) against each of ``cands`` (``(k, n)``).

    ``bounded``: only each row's minimum (and its first position) must be exact; the
    count against a candidate stops once it exceeds the best so far (then the entry
    is some value above that best). Choosing among candidates needs no more.
    """
    if items.shape[0] == 0 or cands.shape[0] == 0:
        return np.zeros((items.shape[0], cands.shape[0]), np.int64)
    k = _numba_kernels()
    if k is None:
        return _cost_numpy(items, cands, fmt)
    items, cands = np.ascontiguousarray(items), np.ascontiguousarray(cands)
    return k.cost_matrix(items, cands, _words(items), _words(cands), fmt.word_bytes, fmt.max_len,
                         bounded)


def _words(rows: np.ndarray) -> np.ndarray:
    """``rows`` (C-contiguous uint8) as uint64 words, or an empty (m, 0) array if they do not divide."""
    if rows.shape[1] % 8 == 0 and rows.ctypes.data % 8 == 0:
        return rows.view(np.uint64)
    return np.zeros((rows.shape[0], 0), np.uint64)


def copy_ranges(src: np.ndarray, start: np.ndarray, length: np.ndarray, dst: np.ndarray,
                dst_start: np.ndarray) -> None:
    """``dst[dst_start[i]:][:length[i]] = src[start[i]:][:length[i]]`` for every ``i``."""
    k = _numba_kernels()
    if k is not None:
        k.copy_ranges(src, start, length, dst, dst_start)
        return
    for a, n, b in zip(start.tolist(), length.tolist(), dst_start.tolist(), strict=True):
        dst[b:b + n] = src[a:a + n]
