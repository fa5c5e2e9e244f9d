"""The frame store's write path in one numba call per row (see :meth:`FrameStore.put_row`).

:meth:`FrameStore._put` stores a row in Python, env by env: compare the stack with
the env's last one (two ``tobytes`` copies), write the new frame through the frame
array's ``__setitem__``, copy the stack into ``last``, update the descriptors. At
one env that is ~25 us of interpreter work per replay ``add()``, five times SB3's
whole ``add()``. :func:`put_pairs` does the same for every env and every kind of
stack of a row in one GIL-free call: ``memcmp`` against the last stack, frames
copied straight into the open chunks of the frame array, descriptors and streams
updated in place.

It handles the common cases and leaves the rest to Python: a pair (env, kind)
whose frames go to a chunk that is not open, whose stream must grow the ring,
or whose descriptor needs a far delta stops the call *before* anything of that
pair changed, and returns the pair's index with the reason; the caller does what
Python must (open the chunk, or store that one pair with ``_put``) and calls
again from there. A numba call cannot be interrupted halfway (a signal is
handled between Python bytecodes), so every pair is written whole or not at all.

Stacks are compared and copied as bytes: frame ``j`` of a stack is ``outer``
runs of ``wi`` bytes, run ``o`` at byte ``o * depth * wi + j * wi`` (one run for
a channel-first stack, one run per pixel for a channel-last one), and a frame in
the frame array is those runs back to back.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic

from chunkstore.native.guard import guard_module
from chunkstore.native.kernels import copy_runs
from chunkstore.native.kernels import memcpy as _memcpy
from chunkstore.native.kernels import u8ptr as _u8ptr

__all__ = ["GROW", "NEED_OPEN", "NPARAMS", "SLOW", "RowWriter", "as_u8", "memcmp_address", "put_pairs",
           "release_bounds"]

# slots of the parameter vector (module constants: numba freezes them into the code)
DEPTH, OUTER, WI, CHUNK_LEN, DEDUP, MEMCMP, SPR = range(7)
NPARAMS = 7
# why a call stopped at a pair (res[1]); res[2] is the chunk to open for NEED_OPEN
NEED_OPEN, GROW, SLOW = 1, 2, 3

_WRAP = 1 << 32
_FAR = 255
_UNWRITTEN = 255
SAME, SHIFT, FRESH = 0, 1, 2


def memcmp_address() -> int:
    """The address of libc's ``memcmp`` (the kernels call it through its address: cacheable)."""
    return int(ctypes.cast(ctypes.CDLL(None).memcmp, ctypes.c_void_p).value or 0)


_MEMCMP = memcmp_address()  # at import: a first call later would change how many steps a call takes


@intrinsic
def _memcmp(typingctx, fn, a, b, n):
    """``fn(a, b, n)`` for libc's ``memcmp`` at address ``fn``: 0 when the ``n`` bytes are equal."""
    sig = types.int64(types.int64, types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
        fnty = ir.FunctionType(i32, [i8p, i8p, i64])
        ptr = builder.inttoptr(args[0], fnty.as_pointer())
        res = builder.call(ptr, [builder.inttoptr(args[1], i8p), builder.inttoptr(args[2], i8p), args[3]])
        return builder.sext(res, i64)

    return sig, codegen


@njit(nogil=True, cache=True, inline="always")
def _runs_equal(fn, a, b, outer, stride, n):
    """``outer`` runs of ``n`` bytes, ``stride`` apart from ``a`` and from ``b``, all equal."""
    if n >= 32 or outer == 1:
        for o in range(outer):  # noqa: SIM110 - a numba kernel: loops, not generators
            if _memcmp(fn, a + o * stride, b + o * stride, n) != 0:
                return False
        return True
    x = carray(_u8ptr(a), (outer - 1) * stride + n)
    y = carray(_u8ptr(b), (outer - 1) * stride + n)
    for o in range(outer):
        for t in range(o * stride, o * stride + n):
            if x[t] != y[t]:
                return False
    return True


@njit(nogil=True, cache=True, inline="always")
def _frame_is_zero(src, outer, stride, n):
    """Frame at ``src`` (``outer`` runs of ``n`` bytes, ``stride`` apart): every bit zero."""
    x = carray(_u8ptr(src), (outer - 1) * stride + n)
    for o in range(outer):
        acc = 0
        for t in range(o * stride, o * stride + n):  # no early exit inside: the loop vectorises
            acc |= x[t]
        if acc:
            return False
    return True


@njit(nogil=True, cache=True, inline="always")
def _open_address(open_c, open_a, c):
    for k in range(open_c.size):
        if open_c[k] == c:
            return open_a[k]
    return 0


@njit(nogil=True, cache=True)
def put_pairs(x0, x1, w0, w1, nstacks, row, ring, start, p, heads, released, last_slot, last_pad, has_last,
              last, slots, deltas, pads, open_c, open_a, full, res):
    """Store pairs ``start..`` of row ``row``: pair ``e * nstacks + s`` is env ``e``'s stack ``s``.

    ``x0``/``x1``: the row's stacks of kinds ``w0``/``w1`` (``x1`` unused with one
    stack), C-contiguous ``(n_envs, ...)`` arrays viewed as uint8; ``last`` likewise,
    each env's last stack; ``ring`` frames per env region. Returns -1 when every pair
    is stored, else the pair it stopped at, untouched, with ``res[1]`` the reason (and
    ``res[2]`` the chunk for :data:`NEED_OPEN`). ``full[:res[0]]`` receives the chunks
    filled (to seal).
    """
    k, outer, wi, L = p[DEPTH], p[OUTER], p[WI], p[CHUNK_LEN]
    dedup, fn, spr = p[DEDUP], p[MEMCMP], p[SPR]
    run = k * wi  # bytes of one run of all frames of a stack
    nb = outer * run  # bytes of a stack
    item = outer * wi  # bytes of one frame in the frame array
    n_envs = heads.size
    x0a, x1a, lasta = x0.ctypes.data, x1.ctypes.data, last.ctypes.data
    nfull = 0
    res[0] = 0
    for pair in range(start, n_envs * nstacks):
        e, s = pair // nstacks, pair % nstacks
        w = w0 if s == 0 else w1
        xa = (x0a if s == 0 else x1a) + e * nb  # this env's stack
        la = lasta + e * nb
        # -- what the stack is: the last one, the last one moved by a frame, or fresh
        code = FRESH
        if dedup and has_last[e]:
            if _memcmp(fn, xa, la, nb) == 0:
                code = SAME
            elif k > 1 and _runs_equal(fn, xa, la + wi, outer, run, (k - 1) * wi):
                code = SHIFT
        if code == SAME:
            m, f0, pad = 0, 0, last_pad[e]
        elif code == SHIFT:
            m, f0, pad = 1, k - 1, max(last_pad[e] - 1, 0)
        else:
            pad = 0
            while pad < k and _frame_is_zero(xa + pad * wi, outer, run, wi):
                pad += 1
            m, f0 = k - pad, pad
        g = heads[e]
        h2 = g + m
        newest = last_slot[e] if code == SAME else h2 - 1
        # -- checks: the pair stops here, unchanged, when Python must act
        if m and h2 - released[e] > ring:
            res[1] = GROW
            res[0] = nfull
            return pair
        for j in range(m):
            i = e * ring + (g + j) % ring
            if _open_address(open_c, open_a, i // L) == 0:
                res[1], res[2] = NEED_OPEN, i // L
                res[0] = nfull
                return pair
        delta = 0
        if w > 0:
            if pads[0, row, e] == _UNWRITTEN:
                res[1] = SLOW
                res[0] = nfull
                return pair
            delta = newest - (h2 - ((h2 - np.int64(slots[row, e])) % _WRAP))
            if delta < 0 or delta >= _FAR:
                res[1] = SLOW
                res[0] = nfull
                return pair
        # -- commit: frames into their chunks, then the stream, then the descriptors
        for j in range(m):
            i = e * ring + (g + j) % ring
            c = i // L
            r = i - c * L
            copy_runs(_open_address(open_c, open_a, c) + r * item, wi, xa + (f0 + j) * wi, run, outer, wi)
            if r == L - 1:
                full[nfull] = c
                nfull += 1
        heads[e] = h2
        if code != SAME:
            _memcpy(la, xa, nb)
            last_slot[e], last_pad[e], has_last[e] = newest, pad, True
        pads[w, row, e] = pad
        if w == 0:
            slots[row, e] = newest % _WRAP
            for w2 in range(1, spr):
                pads[w2, row, e] = _UNWRITTEN
        else:
            deltas[w - 1, row, e] = delta
    res[0] = nfull
    return -1


@njit(nogil=True, cache=True)
def release_bounds(row, depth, chunk_len, used, heads, released, slots, deltas, pads, out):
    """What :meth:`FrameStore.release_before` frees: ``out[e]`` = env ``e``'s new ``released``.

    ``out[e]`` stays at ``released[e]`` where nothing is freed. Returns False (``out``
    meaningless) when a used stack of ``row`` has a far delta: Python looks it up.
    """
    for e in range(heads.size):
        out[e] = released[e]
        written = False
        for w in range(used.size):
            if used[w] and pads[w, row, e] != _UNWRITTEN:
                written = True
        if not written:
            continue  # not written yet (rows filled out of order): nothing to infer from it
        h = heads[e]
        newest0 = h - ((h - np.int64(slots[row, e])) % _WRAP)
        low = h - depth
        for w in range(used.size):
            if not used[w] or pads[w, row, e] == _UNWRITTEN:
                continue
            newest = newest0
            if w > 0:
                d = deltas[w - 1, row, e]
                if d == _FAR:
                    return False
                newest += d
            low = min(low, newest - (depth - 1))
        aligned = max(low, 0) // chunk_len * chunk_len
        if aligned > released[e]:
            out[e] = aligned
    return True


class RowWriter:
    """One frame store's side of :func:`put_pairs`: its fixed parameters and scratch, per layout.

    Built by the store when its layout is known; :meth:`store` is the store's fast path
    (see :meth:`sb3_integration.engine.frames.FrameStore.put_row`).
    """

    def __init__(self, layout: Any, obs_shape: tuple[int, ...], itemsize: int, n_envs: int, chunk_len: int,
                 dedup: bool, stacks_per_row: int) -> None:
        self.layout = layout
        if layout.axis is None:  # a frame is ``outer`` runs of ``wi`` bytes (module docstring)
            outer, wi = 1, math.prod(obs_shape) * itemsize
        elif layout.axis == 0:
            outer, wi = 1, layout.width * math.prod(obs_shape[1:]) * itemsize
        else:
            outer, wi = math.prod(obs_shape[:-1]), layout.width * itemsize
        self.p = np.zeros(NPARAMS, np.int64)
        self.p[DEPTH], self.p[OUTER], self.p[WI], self.p[CHUNK_LEN] = layout.depth, outer, wi, chunk_len
        self.p[DEDUP], self.p[MEMCMP], self.p[SPR] = dedup, _MEMCMP, stacks_per_row
        self.full = np.zeros(2 * n_envs * layout.depth + 1, np.int64)  # chunks one call can fill
        self.res = np.zeros(3, np.int64)
        self._last: tuple[Any, Any] = (None, None)
        self._used = np.zeros(0, bool)
        self._bounds = np.zeros(n_envs, np.int64)
        #: the envs whose stream filled a chunk in the last row: the chunk each goes on in is opened
        #: when the next row comes (not at once: a last row leaves no empty chunk open)
        self._ahead: set[int] = set()

    def last_bytes(self, last: np.ndarray) -> np.ndarray | None:
        """``last`` viewed as uint8 (remembered while ``last`` is the same array); None if it has no view."""
        if self._last[0] is not last:
            self._last = (last, as_u8(last) if last.flags.c_contiguous else None)
        return self._last[1]

    def store(self, fs: Any, row: int, stacks: Sequence[np.ndarray], whiches: Sequence[int]) -> bool:
        """Store ``stacks[s]`` at ``[whiches[s], row]`` of frame store ``fs`` for every env; False if it cannot.

        The native call stops at a pair that needs Python (a chunk to open, the ring to
        grow, a far delta); that pair is served here (the frame array's ``writable_chunk``, or
        ``fs._put_env``, the Python path) and the call goes on after it. Pairs already
        stored are whole: an interrupt leaves this row torn, as the Python path does,
        and every other row intact.
        """
        if len(stacks) > 2:
            return False
        st = fs._ring  # (the store's state, RingState: nothing here replaces it)
        far = st.far
        if far and any([(w, row, e) in far for w in range(1, fs.stacks_per_row) for e in range(fs.n_envs)]):
            return False  # the rare far deltas of this row are forgotten in Python
        stop = self.put(fs, row, stacks[0], stacks[-1], whiches[0], whiches[-1], len(stacks))
        if stop >= 0:
            self._rest(fs, row, stacks, whiches, stop)
        st.used[whiches[0]] = st.used[whiches[-1]] = True
        return True

    def _rest(self, fs: Any, row: int, stacks: Sequence[np.ndarray], whiches: Sequence[int], stop: int) -> None:
        """Go on from pair ``stop``, where the native call stopped, until the row is stored."""
        n_stacks, n_pairs = len(stacks), fs.n_envs * len(stacks)
        opened, at = 0, stop  # chunks opened for pair ``at`` (a stack of fresh frames may span two)
        while 0 <= stop < n_pairs:
            if stop != at:
                opened, at = 0, stop
            if self.res[1] == NEED_OPEN and opened < 2:
                fs._ring.frames.writable_chunk(int(self.res[2]))
                opened += 1  # then this pair again
            else:
                e, s = divmod(stop, n_stacks)
                fs._put_env(whiches[s], row, e, stacks[s][e])  # what only Python does
                stop += 1
                if stop == n_pairs:
                    break
            stop = self.put(fs, row, stacks[0], stacks[-1], whiches[0], whiches[-1], n_stacks, stop)

    def put(self, fs: Any, row: int, x0: np.ndarray, x1: np.ndarray, w0: int, w1: int, nstacks: int,
            start: int = 0) -> int:
        """Store what it can of a row of ``fs`` from pair ``start``; returns the pair it stopped at, or -1.

        (See :func:`put_pairs`; ``self.res`` says why it stopped.) The chunks it filled are sealed.
        """
        st = fs._ring
        last = self._last[1] if self._last[0] is st.last else self.last_bytes(st.last)
        a0 = x0 if x0.dtype == np.uint8 and x0.flags.c_contiguous else as_u8(x0)
        a1 = a0 if x1 is x0 else (x1 if x1.dtype == np.uint8 and x1.flags.c_contiguous else as_u8(x1))
        if last is None or a0 is None or a1 is None:
            self.res[1] = SLOW
            return start  # nothing stored: the caller takes the Python path
        arr, res = st.frames, self.res
        if start == 0 and self._ahead:  # a new row: the streams that filled a chunk go on in the next
            self._open_heads(fs, arr)
        chunks, addrs = arr.open_chunks()
        stop = put_pairs(a0, a1, w0, w1, nstacks, row, arr.capacity // fs.n_envs, start, self.p, st.heads,
                         st.released, st.last_slot, st.last_pad, st.has_last, last, st.slots, st.deltas, st.pads,
                         chunks, addrs, self.full, res)
        if res[0]:
            full = self.full[:res[0]]
            arr.seal_full(full)
            self._ahead.update((full // (arr.nchunks_total // fs.n_envs)).tolist())  # their envs
        return int(stop)

    def _open_heads(self, fs: Any, arr: Any) -> None:
        """Open the chunk each env of ``_ahead`` writes next (where its head points), if it is empty.

        Derived from the heads when the row comes, so a clear, a rolled-back add or a grown ring
        since the chunks filled need nothing: an open or stored chunk is left as it is.
        """
        envs, self._ahead = self._ahead, set()
        L = int(self.p[CHUNK_LEN])
        ring = arr.capacity // fs.n_envs
        heads = fs._ring.heads
        arr.open_empty([(e * ring + int(heads[e]) % ring) // L for e in envs if e < fs.n_envs])

    def release(self, fs: Any, row: int) -> bool:
        """:meth:`FrameStore.release_before` natively; False (nothing done) where Python must look far deltas up."""
        used, st = self._used, fs._ring
        # (a list, not any() over a generator: one left suspended is closed whenever it is collected,
        # and a Ctrl-C landing in that close is swallowed as an unraisable exception)
        if used.tolist() != [bool(v) for v in st.used]:
            used = self._used = np.array(st.used, bool)
        bounds = self._bounds
        if bounds.size != fs.n_envs:
            bounds = self._bounds = np.empty(fs.n_envs, np.int64)
        if not release_bounds(row, self.p[DEPTH], self.p[CHUNK_LEN], used, st.heads, st.released, st.slots,
                              st.deltas, st.pads, bounds):
            return False
        released = st.released
        for e in np.flatnonzero(bounds > released).tolist():
            fs._free(e, int(released[e]), int(bounds[e]))
            released[e] = bounds[e]  # after the frees: an interrupt repeats them, harmlessly
        return True


def as_u8(x: np.ndarray) -> np.ndarray | None:
    """``x`` as a C-contiguous uint8 array (itself when it is one): the kernel reads bytes. None for 0-d."""
    if not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    if x.dtype == np.uint8:
        return x
    try:
        return x.view(np.uint8)
    except ValueError:  # a 0-d array, say
        return None


guard_module(globals())  # kernels load with Ctrl-C held off (chunkstore.native.guard)
