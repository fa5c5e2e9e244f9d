"""numba kernels of :mod:`chunkstore.device.runs` (the same bytes as its numpy code)."""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True)
def _runs(x, r, h, max_len, starts, lens):  # pragma: no cover - compiled
    """Fill ``starts``/``lens`` with the runs of ``x`` against ``r``; returns their count."""
    n = x.size
    nr = 0
    i = 0
    while i < n:
        if x[i] == r[i]:
            i += 1
            continue
        s = i
        last = i
        j = i + 1
        while j < n:
            if x[j] != r[j]:
                last = j
            elif j - last >= h:  # a gap of h equal bytes: a new run is no dearer
                break
            j += 1
        left = last + 1 - s
        while left > 0:
            p = min(left, max_len)
            starts[nr] = s
            lens[nr] = p
            nr += 1
            s += p
            left -= p
        i = last + 1
    return nr


@nb.njit(cache=True, nogil=True)
def encode(items, refs, h, pos_bits, max_len, out, meta):  # pragma: no cover - compiled
    n = items.shape[1]
    starts = np.empty(n, np.int64)
    lens = np.empty(n, np.int64)
    off = 0
    for a in range(items.shape[0]):
        x = items[a]
        nr = _runs(x, refs[a], h, max_len, starts, lens)
        p = off
        done = 0
        for k in range(nr):
            word = (starts[k] - done) | ((lens[k] - 1) << pos_bits)
            for b in range(h):
                out[p + b] = (word >> (8 * b)) & 0xFF
            p += h
            done += lens[k]
        for k in range(nr):
            for b in range(lens[k]):
                out[p + b] = x[starts[k] + b]
            p += lens[k]
        size = (p - off + h - 1) // h * h
        for b in range(p, off + size):
            out[b] = 0
        meta[a, 0] = nr
        meta[a, 1] = done
        meta[a, 2] = size
        off += size
    return off


@nb.njit(cache=True, nogil=True)
def cost_matrix(items, cands, h, max_len):  # pragma: no cover - compiled
    n = items.shape[1]
    starts = np.empty(n, np.int64)
    lens = np.empty(n, np.int64)
    out = np.empty((items.shape[0], cands.shape[0]), np.int64)
    for a in range(items.shape[0]):
        for b in range(cands.shape[0]):
            nr = _runs(items[a], cands[b], h, max_len, starts, lens)
            nv = 0
            for k in range(nr):
                nv += lens[k]
            out[a, b] = (h * nr + nv + h - 1) // h * h
    return out


@nb.njit(cache=True, nogil=True)
def copy_ranges(src, start, length, dst, dst_start):  # pragma: no cover - compiled
    for i in range(start.size):
        a = start[i]
        b = dst_start[i]
        for k in range(length[i]):
            dst[b + k] = src[a + k]
