"""numba kernels of :mod:`chunkstore.device.runs` (the same bytes as its numpy code)."""

from __future__ import annotations

import numba as nb
import numpy as np

from chunkstore.native.guard import guard_module


@nb.njit(cache=True, nogil=True, inline="always")
def _next_diff(x, r, x8, r8, i):  # pragma: no cover - compiled
    """The first index >= i where ``x`` and ``r`` differ (``x.size`` if none).

    Frames differ from their reference in a few percent of their bytes, so equal
    stretches are skipped 8 bytes at a time through the uint64 views ``x8``/``r8``
    (empty when the rows are not a whole number of words).
    """
    n = x.size
    if x8.size:
        while i < n and i & 7:
            if x[i] != r[i]:
                return i
            i += 1
        w = i >> 3
        while w < x8.size and x8[w] == r8[w]:
            w += 1
        i = w << 3
    while i < n and x[i] == r[i]:
        i += 1
    return i


@nb.njit(cache=True, nogil=True)
def _runs(x, r, x8, r8, h, max_len, starts, lens):  # pragma: no cover - compiled
    """Fill ``starts``/``lens`` with the runs of ``x`` against ``r``; returns their count."""
    n = x.size
    nr = 0
    i = 0
    while i < n:
        i = _next_diff(x, r, x8, r8, i)
        if i >= n:
            break
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
def encode(items, refs, items8, refs8, h, pos_bits, max_len, out, meta):  # pragma: no cover - compiled
    n = items.shape[1]
    starts = np.empty(n, np.int64)
    lens = np.empty(n, np.int64)
    off = 0
    for a in range(items.shape[0]):
        x = items[a]
        nr = _runs(x, refs[a], items8[a], refs8[a], h, max_len, starts, lens)
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
def _cost(x, r, x8, r8, h, max_len, bound):  # pragma: no cover - compiled
    """Record bytes of ``x`` against ``r`` (the runs of :func:`_runs`, counted, not stored).

    Stops as soon as the count passes ``bound`` (then returns a value above it).
    """
    n = x.size
    cost = 0
    i = 0
    while i < n and cost <= bound:
        i = _next_diff(x, r, x8, r8, i)
        if i >= n:
            break
        last = i
        j = i + 1
        while j < n:
            if x[j] != r[j]:
                last = j
            elif j - last >= h:
                break
            j += 1
        span = last + 1 - i
        cost += span + h * ((span + max_len - 1) // max_len)
        i = last + 1
    return (cost + h - 1) // h * h


@nb.njit(cache=True, nogil=True)
def cost_matrix(items, cands, items8, cands8, h, max_len, bounded):  # pragma: no cover - compiled
    out = np.empty((items.shape[0], cands.shape[0]), np.int64)
    for a in range(items.shape[0]):
        bound = 1 << 62
        for b in range(cands.shape[0]):
            c = _cost(items[a], cands[b], items8[a], cands8[b], h, max_len, bound)
            out[a, b] = c
            if bounded and c < bound:
                bound = c
    return out


@nb.njit(cache=True, nogil=True)
def copy_ranges(src, start, length, dst, dst_start):  # pragma: no cover - compiled
    for i in range(start.size):
        a = start[i]
        b = dst_start[i]
        for k in range(length[i]):
            dst[b + k] = src[a + k]


guard_module(globals())  # kernels load with Ctrl-C held off (chunkstore.native.guard)
