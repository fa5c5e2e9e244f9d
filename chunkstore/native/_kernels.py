"""The numba kernels of the native read path.

One call serves a whole batch: the requested items are grouped by chunk, each
distinct chunk is decoded once into a per-thread scratch buffer (or read in
place when it is stored raw or still open), and every requested item is copied
from there straight to its place in the output. The GIL is released throughout.

Everything is passed as addresses and flat arrays, so the kernels never see a
Python object: chunk bytes stay where their tier keeps them (a RAM segment, a
memory-mapped file), and libzstd is called through a function address
(``_call6``) rather than a ctypes object, which keeps ``cache=True`` possible.

An item is copied as ``nruns`` runs of ``run`` bytes, read contiguously from the
source and written ``stride`` bytes apart: one run for a contiguous output, one
run per pixel for a channel-last frame stack. Item ``-1`` is written as zeros.

A chunk listed in ``crc_chunks`` (sorted) has its CRC32 checked against ``crc_want``
on the very bytes the kernel decodes (the buffer ``pread`` filled, for a chunk in a
file), before they are decoded: by zlib's ``crc32`` through its address ``p[CRC_FN]``,
or, when no libz could be loaded (0), by :func:`crc32_table`, a slicing-by-8 table
CRC32 bit-exact with zlib's.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from chunkstore.native.guard import guard_module

__all__ = ["NPARAMS", "RAW", "ZSTD", "crc32_at", "crc32_table", "gather_all", "gather_groups", "gather_shared",
           "plan_groups"]


# slots of the int64 parameter vector of gather_groups (module constants: numba
# freezes them into the compiled code)
CHUNK_LEN, CAPACITY, ITEM_BYTES, NRUNS, RUN, STRIDE, DST, KIND, FN, DDICT, DCTX, PREAD, CRC_FN = range(13)
NPARAMS = 13
#: KIND: the chunk bytes are the raw items / a zstd frame
RAW, ZSTD = 0, 1


# status[0] codes (status[1] = chunk, status[2] = what was found)
OK, WRONG_SIZE, DECODE_ERROR, NO_ADDRESS, READ_ERROR, CRC_ERROR = 0, 1, 2, 3, 4, 5


def _crc_tables() -> np.ndarray:
    """The 8 x 256 tables of a slicing-by-8 CRC32 (zlib's polynomial, reflected)."""
    t = np.zeros((8, 256), np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[0, i] = c
    for k in range(1, 8):
        t[k] = (t[k - 1] >> 8) ^ t[0, t[k - 1] & 0xFF]
    return t


_CRC_T = _crc_tables()  # a global array: numba freezes it into the compiled code


@intrinsic
def _call6(typingctx, fn, a, b, c, d, e, f):
    """``fn(a, b, c, d, e, f)`` for a C function at address ``fn`` (all int64 / pointers)."""
    sig = types.int64(types.int64, types.int64, types.int64, types.int64, types.int64,
                      types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(i64, [i64] * 6)
        return builder.call(builder.inttoptr(args[0], fnty.as_pointer()), args[1:])

    return sig, codegen


@intrinsic
def _call4(typingctx, fn, a, b, c, d):
    """``fn(a, b, c, d)`` for a C function at address ``fn`` (pread: an int fd, then int64s)."""
    sig = types.int64(types.int64, types.int64, types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        fnty = ir.FunctionType(i64, [i32, i64, i64, i64])
        fd = builder.trunc(args[1], i32)
        return builder.call(builder.inttoptr(args[0], fnty.as_pointer()), [fd, *args[2:]])

    return sig, codegen


@intrinsic
def _call_crc(typingctx, fn, crc, buf, n):
    """zlib's ``crc32(uLong crc, const Bytef *buf, uInt len)`` at address ``fn``."""
    sig = types.int64(types.int64, types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i64, i32 = ir.IntType(64), ir.IntType(32)
        fnty = ir.FunctionType(i64, [i64, i64, i32])
        return builder.call(builder.inttoptr(args[0], fnty.as_pointer()),
                            [args[1], args[2], builder.trunc(args[3], i32)])

    return sig, codegen


@intrinsic
def _memcpy(typingctx, dst, src, n):
    sig = types.void(types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        cgutils.raw_memcpy(builder, builder.inttoptr(args[0], i8p),
                           builder.inttoptr(args[1], i8p), args[2], 1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _memzero(typingctx, dst, n):
    sig = types.void(types.int64, types.int64)

    def codegen(context, builder, signature, args):
        ptr = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        cgutils.memset(builder, ptr, args[1], 0)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _u8ptr(typingctx, addr):
    sig = types.CPointer(types.uint8)(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())

    return sig, codegen


@intrinsic
def _fetch_add(typingctx, addr, val):
    """Atomically add ``val`` to the int64 at ``addr``; returns the value before (sequentially consistent)."""
    sig = types.int64(types.int64, types.int64)

    def codegen(context, builder, signature, args):
        ptr = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.atomic_rmw("add", ptr, args[1], "seq_cst")

    return sig, codegen


@njit(nogil=True, cache=True, inline="always")
def _copy_runs(dst, dst_stride, src, src_stride, nruns, run):
    """``nruns`` runs of ``run`` bytes from ``src`` to ``dst``, run ``r`` at ``r * stride`` on each side."""
    if nruns == 1:
        _memcpy(dst, src, run)
    elif run >= 32:
        for r in range(nruns):
            _memcpy(dst + r * dst_stride, src + r * src_stride, run)
    else:  # channel-last stacks of narrow frames: a strided byte loop beats a call per run
        s = carray(_u8ptr(src), (nruns - 1) * src_stride + run)
        d = carray(_u8ptr(dst), (nruns - 1) * dst_stride + run)
        for r in range(nruns):
            for b in range(run):
                d[r * dst_stride + b] = s[r * src_stride + b]


@njit(nogil=True, cache=True, inline="always")
def _zero_item(dst, nruns, run, stride):
    if nruns == 1:
        _memzero(dst, run)
    elif run >= 32:
        for r in range(nruns):
            _memzero(dst + r * stride, run)
    else:
        d = carray(_u8ptr(dst), (nruns - 1) * stride + run)
        for r in range(nruns):
            for b in range(run):
                d[r * stride + b] = 0


@njit(nogil=True, cache=True)
def crc32_table(addr, n):
    """CRC32 of the ``n`` bytes at ``addr`` (zlib's), slicing-by-8 over :data:`_CRC_T`."""
    t = _CRC_T
    buf = carray(_u8ptr(addr), max(n, 1))
    c = np.uint32(0xFFFFFFFF)
    i = 0
    while i + 8 <= n:
        a = c ^ (np.uint32(buf[i]) | (np.uint32(buf[i + 1]) << 8) | (np.uint32(buf[i + 2]) << 16)
                 | (np.uint32(buf[i + 3]) << 24))
        c = (t[7, a & 0xFF] ^ t[6, (a >> 8) & 0xFF] ^ t[5, (a >> 16) & 0xFF] ^ t[4, a >> 24]
             ^ t[3, buf[i + 4]] ^ t[2, buf[i + 5]] ^ t[1, buf[i + 6]] ^ t[0, buf[i + 7]])
        i += 8
    while i < n:
        c = t[0, (c ^ buf[i]) & 0xFF] ^ (c >> 8)
        i += 1
    return np.int64(c ^ np.uint32(0xFFFFFFFF))


@njit(nogil=True, cache=True)
def crc32_at(fn, addr, n):
    """CRC32 of the ``n`` bytes at ``addr``: zlib's ``crc32`` at address ``fn``, or the table (``fn`` 0)."""
    if fn == 0:
        return crc32_table(addr, n)
    crc = np.int64(0)
    done = np.int64(0)
    while True:  # zlib takes a 32-bit length: 1 GiB at a time
        step = min(n - done, np.int64(1) << 30)
        crc = _call_crc(fn, crc, addr + done, step)
        done += step
        if done >= n:
            return crc & 0xFFFFFFFF


@njit(nogil=True, cache=True)
def plan_groups(ids, chunk_len, order, starts):
    """Order the requests by chunk into ``order`` (n) and ``starts`` (n + 1); return the group count.

    Group ``g`` is ``order[starts[g]:starts[g+1]]``; requests for item -1 (zeros) form their
    own group, first. The outputs are the caller's: a kernel that returned arrays it
    allocated would turn a Ctrl-C landing in its call into a SystemError (and, with
    another thread in numba, freed memory) in numba's dispatcher.
    """
    n = ids.size
    keys = np.empty(n, np.int64)
    for i in range(n):
        keys[i] = ids[i] // chunk_len if ids[i] >= 0 else -1
    order[:] = np.argsort(keys)
    ng = 0
    for t in range(n):
        if t == 0 or keys[order[t]] != keys[order[t - 1]]:
            starts[ng] = t
            ng += 1
    starts[ng] = n
    return ng


@njit(nogil=True, cache=True)
def _serve_groups(g0, g1, counter, ids, dst_off, order, starts, p, seg, off, clen, segs, open_chunks, open_addr,
                  crc_chunks, crc_want, scratch, cbuf, status):
    """Serve groups of a plan: ``g0..g1``, or (``counter`` != 0) groups taken one at a time from the
    int64 at address ``counter`` with an atomic increment until none is left. Decodes each group's
    chunk once and copies its items out; returns how many groups it served, ``status`` set.

    Every group is served in this one loop, not by a helper called per group: a jitted call that
    takes arrays increments and decrements each array's reference count (atomically), ~28 atomic
    operations a group here, which cost more than copying a small item (and, with several threads
    on one plan, bounce those counts' cache lines between cores).
    """
    chunk_len, capacity, item = p[CHUNK_LEN], p[CAPACITY], p[ITEM_BYTES]
    nruns, run, stride, dst = p[NRUNS], p[RUN], p[STRIDE], p[DST]
    work, cwork, cbuf_size = scratch.ctypes.data, cbuf.ctypes.data, cbuf.size
    served = 0
    g = g0 - 1
    while True:
        if counter != 0:
            g = _fetch_add(counter, 1)
            if g >= g1:
                break
        else:
            g += 1
            if g >= g1:
                break
        served += 1
        s0, s1 = starts[g], starts[g + 1]
        first = ids[order[s0]]
        if first < 0:
            for t in range(s0, s1):
                _zero_item(dst + dst_off[order[t]], nruns, run, stride)
            continue
        c = first // chunk_len
        base = 0
        sg = seg[c]
        if sg >= 0:
            n = np.int64(clen[c])
            if sg >= segs.shape[1]:
                status[0], status[1], status[2] = NO_ADDRESS, c, sg
                return served - 1
            if segs[0, sg] != 0:
                src = segs[0, sg] + off[c]
            elif segs[1, sg] >= 0 and n <= cbuf_size:
                got = _call4(p[PREAD], segs[1, sg], cwork, n, off[c])
                if got != n:
                    status[0], status[1], status[2] = READ_ERROR, c, got
                    return served - 1
                src = cwork
            else:
                status[0], status[1], status[2] = NO_ADDRESS, c, sg
                return served - 1
            if crc_chunks.size:
                j = np.searchsorted(crc_chunks, c)
                if j < crc_chunks.size and crc_chunks[j] == c:
                    got = crc32_at(p[CRC_FN], src, n)
                    if got != crc_want[j]:
                        status[0], status[1], status[2] = CRC_ERROR, c, got
                        return served - 1
            want = min(chunk_len, capacity - c * chunk_len) * item
            if p[KIND] == RAW:
                if n != want:
                    status[0], status[1], status[2] = WRONG_SIZE, c, n
                    return served - 1
                base = src
            else:
                got = _call6(p[FN], p[DCTX], work, want, src, n, p[DDICT])
                if got != want:  # zstd errors are huge size_t values: negative here
                    status[0], status[1], status[2] = (DECODE_ERROR if got < 0 else WRONG_SIZE), c, got
                    return served - 1
                base = work
        else:
            for k in range(open_chunks.size):
                if open_chunks[k] == c:
                    base = open_addr[k]
                    break
        for t in range(s0, s1):
            i = order[t]
            if base == 0:
                _zero_item(dst + dst_off[i], nruns, run, stride)
            else:
                _copy_runs(dst + dst_off[i], stride, base + (ids[i] - c * chunk_len) * item, run, nruns, run)
    status[0] = OK
    return served


@njit(nogil=True, cache=True)
def gather_groups(ids, dst_off, order, starts, g0, g1, p, seg, off, clen, segs,
                  open_chunks, open_addr, crc_chunks, crc_want, scratch, cbuf, status):
    """Serve groups ``g0..g1`` of a plan: decode each chunk once, copy its items out.

    ``segs[0, s]`` is segment ``s``'s host address (0: not in memory), ``segs[1, s]``
    a file descriptor to ``pread`` it from (-1: none): bytes in files are read into
    ``cbuf``, never mapped, so reading a file adds nothing to the resident set and a
    truncated file is a short read, not a SIGBUS. A chunk in ``crc_chunks`` (sorted; its
    expected CRC32 at the same place in ``crc_want``) is checked before it is decoded.
    ``status`` receives (code, chunk,
    found) of the first failure; nothing is written outside ``dst`` (whose layout
    ``dst_off`` and the copy pattern in ``p`` describe), ``scratch`` and ``cbuf``.
    """
    _serve_groups(g0, g1, 0, ids, dst_off, order, starts, p, seg, off, clen, segs, open_chunks, open_addr,
                  crc_chunks, crc_want, scratch, cbuf, status)


@njit(nogil=True, cache=True)
def gather_shared(ids, dst_off, order, starts, next_group, p, seg, off, clen, segs,
                  open_chunks, open_addr, crc_chunks, crc_want, scratch, cbuf, status):
    """Serve groups of a plan that no other thread took, one at a time, until none is left.

    Several threads run this on one plan at once, each with its own ``scratch``,
    ``cbuf``, ``status`` and ``p`` (its decompression context): ``next_group[0]`` is
    the next group nobody took, taken with an atomic increment, so a thread that
    starts late simply takes less (nothing if the others finished). On a failure
    the thread stops taking groups and says so in ``status``. Returns how many
    groups this thread served.
    """
    return _serve_groups(0, starts.size - 1, next_group.ctypes.data, ids, dst_off, order, starts, p, seg, off, clen,
                         segs, open_chunks, open_addr, crc_chunks, crc_want, scratch, cbuf, status)


@njit(nogil=True, cache=True)
def gather_all(ids, dst_off, p, seg, off, clen, segs, open_chunks, open_addr, crc_chunks, crc_want, scratch,
               cbuf, status):
    """:func:`plan_groups` then :func:`gather_groups` over every group: a whole read on one thread."""
    order = np.empty(ids.size, np.int64)
    starts = np.empty(ids.size + 1, np.int64)
    ng = plan_groups(ids, p[CHUNK_LEN], order, starts)
    gather_groups(ids, dst_off, order, starts, 0, ng, p, seg, off, clen, segs,
                  open_chunks, open_addr, crc_chunks, crc_want, scratch, cbuf, status)


guard_module(globals())  # kernels load with Ctrl-C held off (chunkstore.native.guard)
