"""The native read path: one GIL-free call per batch, each distinct chunk decoded once.

A batch read through Python costs 10-20 us of interpreter work per chunk on top of
the decode itself; for a uniform replay sample that is one chunk per transition,
and it doubled the sampling time. This package moves the whole read of a batch
into one numba kernel (:mod:`chunkstore.native._kernels`) that calls libzstd
directly (:mod:`chunkstore.native._lib`): it groups the requested items by chunk,
decodes each chunk once, and copies each item straight into the output.

Availability. The kernels need numba (a dependency) and a libzstd (the one inside
the python-zstandard wheel). Compiled kernels are cached on disk by numba
(``cache=True``): the first process on a machine compiles them (a few seconds),
later ones load them (~0.3 s). If the layer cannot load, reads fall back to the
Python path with one warning. Set ``CHUNKSTORE_NATIVE=0`` to switch it off, or use
:func:`disabled` for a block of code.

Which codecs. A codec says how the kernel can decode it through its
``native_spec()`` method: raw bytes (``none``) and zstd with or without a
dictionary run natively; every other codec keeps the Python path.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore import _threads
from chunkstore.native.guard import interrupts_deferred

__all__ = [
    "CRC_ERROR",
    "NativeSpec",
    "available",
    "disabled",
    "gather",
    "item_placement",
    "libzstd_paths",
    "raw_spec",
    "unavailable_reason",
    "zstd_spec",
]

#: one more thread joins a read per this many items: a statically split small read did not
#: gain from a second thread (measured: results/bench_sampling_run1.md against
#: results/bench_sampling.md, and the manual's "Threads" (docs/performance.md))
PARALLEL_MIN_ITEMS = 512
#: a read of this many items or more shares its chunks with one helper thread (the helper takes
#: chunks one at a time while the caller does too, so a helper that starts late costs nothing)
SHARED_MIN_ITEMS = 64
#: a read of fewer bytes than this runs on the caller alone, however many items: waking a helper
#: costs more than it saves there (a 1M-transition SAC buffer of Pendulum's 12-byte observations:
#: sample(256) 539 us with a helper against 281 us without, SB3's 38 us; Atari's 64 frames are 451 KB)
PARALLEL_MIN_BYTES = 64 << 10
#: a read of fewer than PARALLEL_MIN_ITEMS items whose calling thread served less than this share
#: of its chunks ran beside its helper, not in parallel with it (after an idle pause, such as a
#: learner's step, the woken helper shares the caller's core: measured on a 2-core VM, Pong
#: sample(32) after a 2 ms sleep, the caller served 10 of 59 chunks, against 31 back to back) ...
SOLO_SHARE = 0.3
#: ... so the next this many such reads run on the caller alone; then one tries the helper again
SOLO_READS = 32
_solo_left = 0  # small reads still to run alone (shared by every thread: a hint, not a state)

#: GatherResult.code of a chunk whose CRC32 did not match (``found``: the CRC32 computed)
CRC_ERROR = 5

_lock = threading.Lock()
_loaded: Any = None  # the _Native instance once loaded
_reason: str | None = None  # why it could not load
_off = 0  # nesting depth of disabled()
_warned = False


class _Native:
    def __init__(self) -> None:
        from chunkstore.native import _kernels
        from chunkstore.native._lib import crc32_address, load_zstd

        self.kernels = _kernels
        self.zstd = load_zstd()
        self.crc32 = crc32_address()  # 0: the kernels' own table CRC32
        self.local = threading.local()


def _load() -> _Native | None:
    global _loaded, _reason, _warned
    if _off:
        return None
    if _loaded is not None or _reason is not None:
        return _loaded
    with _lock:
        if _loaded is None and _reason is None:
            if os.environ.get("CHUNKSTORE_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
                _reason = "disabled by CHUNKSTORE_NATIVE=0"
                return None
            try:
                with interrupts_deferred():  # no Ctrl-C inside numba's import and setup
                    _loaded = _Native()
            except Exception as e:  # ImportError (numba), OSError (libzstd), numba errors
                _reason = f"{type(e).__name__}: {e}"
                if not _warned:
                    _warned = True
                    warnings.warn(
                        f"chunkstore: the native read path is unavailable ({_reason}); reads use "
                        "the Python path, which samples several times slower. Install numba "
                        "(a chunkstore dependency) to enable it.",
                        RuntimeWarning,
                        stacklevel=3,
                    )
    return _loaded


def libzstd_paths() -> list[str]:
    """The libzstd builds the native layer tries, best first: python-zstandard's, then the system's."""
    from chunkstore.native._lib import candidates

    return candidates()


def available() -> bool:
    """Whether batch reads run natively (loads the layer on first call)."""
    if _loaded is not None and not _off:  # the common case, once per read or write: no call
        return True
    return _load() is not None


def unavailable_reason() -> str | None:
    """Why the native layer is not used, or None when it is."""
    if _off:
        return "disabled by chunkstore.native.disabled()"
    _load()
    return _reason


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run a block on the Python read path (tests, benchmarks, debugging)."""
    global _off
    with _lock:
        _off += 1
    try:
        yield
    finally:
        with _lock:
            _off -= 1


@dataclass(frozen=True)
class NativeSpec:
    """How the kernel decodes one codec's chunks: ``kind`` and a digested dictionary."""

    kind: int
    ddict: int = 0
    owner: Any = None  # keeps the digested dictionary alive


def raw_spec() -> NativeSpec | None:
    """Spec of a codec whose chunk bytes are the raw items (``none``); None without the layer."""
    nat = _load()
    return None if nat is None else NativeSpec(nat.kernels.RAW)


def zstd_spec(dictionary: bytes | None = None) -> NativeSpec | None:
    """Spec of zstd frames (decoded with ``dictionary`` if given); None without the layer."""
    nat = _load()
    if nat is None:
        return None
    if not dictionary:
        return NativeSpec(nat.kernels.ZSTD)
    ddict, owner = nat.zstd.ddict(bytes(dictionary))
    return NativeSpec(nat.kernels.ZSTD, ddict, owner)


@dataclass(frozen=True)
class GatherResult:
    """What :func:`gather` found: ``code`` 0 for success, else the failing chunk."""

    code: int
    chunk: int
    found: int

    @property
    def message(self) -> str:
        from chunkstore.native import _kernels as k  # loaded: a result came from it

        if self.code == k.WRONG_SIZE:
            return f"decodes to {self.found} bytes, not the expected size"
        if self.code == k.DECODE_ERROR:
            return f"is not a valid frame (libzstd error {-self.found})"
        if self.code == k.CRC_ERROR:
            return f"has CRC32 {self.found:#010x}, not the one its file records"
        if self.code == k.READ_ERROR:
            return f"could not be read from its file (read returned {self.found}: truncated?)"
        return f"lies in segment {self.found}, which has no host address or file"


def gather(
    ids: np.ndarray,
    dst: np.ndarray,
    dst_off: np.ndarray,
    pattern: tuple[int, int, int],
    *,
    chunk_len: int,
    capacity: int,
    item_bytes: int,
    table: tuple[np.ndarray, np.ndarray, np.ndarray],
    segs: np.ndarray,
    max_chunk_bytes: int,
    open_chunks: np.ndarray,
    open_addr: np.ndarray,
    spec: NativeSpec,
    threads: int = 1,
    keep: Any = None,
    crc_chunks: np.ndarray | None = None,
    crc_want: np.ndarray | None = None,
) -> GatherResult:
    """Copy item ``ids[i]`` of a chunked array to ``dst`` at byte ``dst_off[i]`` (``-1``: zeros).

    ``pattern`` is ``(nruns, run, stride)``: an item is ``nruns`` runs of ``run``
    bytes, contiguous in the chunk and ``stride`` bytes apart in ``dst``.
    ``table`` is the chunk table (segment, offset, nbytes per chunk); ``segs`` the
    host address (row 0) or file descriptor (row 1) of each segment, and
    ``max_chunk_bytes`` the largest encoded chunk (chunks in files are read into a
    buffer of that size). The caller keeps all of them unchanged and alive for the
    duration of the call. ``threads`` > 1 splits the chunks of the batch over that
    many threads.

    Worker threads hold ``dst``, the tables, ``spec`` (its digested dictionary) and
    ``keep`` (whatever else the addresses point into: open chunk buffers, segment
    storage) until they end, so a worker of a read whose caller was interrupted
    before it could wait writes and reads only memory that is still allocated.

    ``crc_chunks`` (sorted int64 chunk indices) and ``crc_want`` (their CRC32s, int64):
    chunks whose stored bytes are checked, on the buffer they were read into, before
    they are decoded; a mismatch is ``code`` CRC_ERROR with the CRC found.
    """
    nat = _load()
    assert nat is not None, "gather() needs the native layer; check available() first"
    k = nat.kernels
    p = _params(nat, chunk_len, capacity, item_bytes, pattern, spec)
    p[k.DST] = dst.ctypes.data
    if crc_chunks is None or crc_want is None:
        crc_chunks = crc_want = _NO_CRC
    seg, off, clen = table
    need = chunk_len * item_bytes
    global _solo_left
    threads = _threads_for(int(threads), ids.size, ids.size * item_bytes)
    small = threads == 2 and ids.size < PARALLEL_MIN_ITEMS  # one helper (see SOLO_SHARE)
    if small and _solo_left > 0:
        _solo_left -= 1
        threads = 1
    if threads <= 1:  # one call, no pool, no plan round trip
        p[k.DCTX] = nat.zstd.dctx()
        status = getattr(nat.local, "status", None)
        if status is None:
            status = nat.local.status = np.zeros(3, np.int64)
        k.gather_all(ids, dst_off, p, seg, off, clen, _plain(segs), open_chunks, open_addr, crc_chunks, crc_want,
                     _scratch(nat, need),
                     _cbuf(nat, max_chunk_bytes), status)
        return _OK if status[0] == 0 else GatherResult(int(status[0]), int(status[1]), int(status[2]))
    order, starts = np.empty(ids.size, np.int64), np.empty(ids.size + 1, np.int64)
    starts = starts[: k.plan_groups(ids, chunk_len, order, starts) + 1]
    helpers = min(threads - 1, len(starts) - 2)  # no more threads than distinct chunks
    next_group = np.zeros(1, np.int64)  # the groups are shared out one at a time, atomically

    def run(_hold: Any = (dst, keep, spec, segs)) -> np.ndarray:
        pp = p.copy()
        pp[k.DCTX] = nat.zstd.dctx()
        status = np.zeros(4, np.int64)  # the kernel's (code, chunk, found), then the groups this thread served
        status[3] = k.gather_shared(ids, dst_off, order, starts, next_group, pp, seg, off, clen, _plain(segs),
                                    open_chunks, open_addr, crc_chunks, crc_want, _scratch(nat, need),
                                    _cbuf(nat, max_chunk_bytes), status)
        return status

    futures: list[_threads.Task] = []
    try:
        if helpers > 0:
            pool = _threads.pool("chunkstore-native", helpers)
            for _ in range(helpers):
                _threads.submit(pool, futures, run)
        results = [run()]  # the calling thread's first
    finally:  # also when interrupted: the workers write into dst, which must outlive them
        for f in futures:
            f.cancel()  # a helper that has not started has nothing left to take
        _threads.wait_all(futures)
    results += [f.result() for f in futures if not f.cancelled()]
    if small and helpers > 0 and results[0][3] < SOLO_SHARE * (len(starts) - 1):
        _solo_left = SOLO_READS  # the helper ran beside the caller, not with it
    bad = next((st for st in results if st[0] != 0), results[0])
    return _OK if bad[0] == 0 else GatherResult(int(bad[0]), int(bad[1]), int(bad[2]))


_NO_CRC = np.zeros(0, np.int64)
_OK = GatherResult(0, 0, 0)  # (frozen: shared by every read that succeeds)
#: the parameter vectors of recent reads, but for the output's address and the thread's context
_templates: dict[tuple[Any, ...], np.ndarray] = {}


def _params(nat: _Native, chunk_len: int, capacity: int, item_bytes: int, pattern: tuple[int, int, int],
            spec: NativeSpec) -> np.ndarray:
    """A fresh copy of the kernels' parameter vector of a read; ``DST`` and ``DCTX`` are the caller's to set.

    Made once per (array geometry, copy pattern, codec spec) and copied after: building it
    element by element took ~10 us of a small read (issue 38).
    """
    key = (chunk_len, capacity, item_bytes, pattern, spec.kind, spec.ddict)
    t = _templates.get(key)
    if t is None:
        k = nat.kernels
        t = np.zeros(k.NPARAMS, np.int64)
        t[k.CHUNK_LEN], t[k.CAPACITY], t[k.ITEM_BYTES] = chunk_len, capacity, item_bytes
        t[k.NRUNS], t[k.RUN], t[k.STRIDE] = pattern
        t[k.KIND], t[k.FN], t[k.DDICT] = spec.kind, nat.zstd.decompress, spec.ddict
        t[k.PREAD], t[k.CRC_FN] = nat.zstd.pread, nat.crc32
        if len(_templates) >= 64:
            _templates.clear()
        _templates[key] = t
    return t.copy()


def _threads_for(threads: int, items: int, nbytes: int) -> int:
    """Threads for a read of ``items`` items (``nbytes`` bytes out): the caller alone for small
    reads (fewer than :data:`SHARED_MIN_ITEMS` items or :data:`PARALLEL_MIN_BYTES` bytes), one
    helper from there on, one more per :data:`PARALLEL_MIN_ITEMS` items."""
    if threads <= 1 or items < min(SHARED_MIN_ITEMS, PARALLEL_MIN_ITEMS) or nbytes < PARALLEL_MIN_BYTES:
        return 1
    return min(threads, 2 + items // PARALLEL_MIN_ITEMS)


def item_placement(out: np.ndarray, lead: int, itemsize: int) -> tuple[np.ndarray, tuple[int, int, int]] | None:
    """Where each item of ``out`` (``lead`` leading axes) starts, and how its bytes lie.

    Returns ``(byte offsets, (nruns, run, stride))``: an item is ``nruns`` runs of
    ``run`` contiguous bytes, ``stride`` bytes apart (a C-contiguous item is one
    run). None when the item axes do not fold into that pattern.
    """
    shape, strides = out.shape[lead:], out.strides[lead:]
    run, k = itemsize, len(shape)
    while k and strides[k - 1] == run:  # trailing axes contiguous with each other
        run *= shape[k - 1]
        k -= 1
    nruns, stride = 1, 0
    if k:  # the rest must be one evenly strided run of runs
        stride = strides[k - 1]
        for ax in range(k - 1, 0, -1):
            if strides[ax - 1] != strides[ax] * shape[ax]:
                return None
        nruns = int(np.prod(shape[:k]))
        if stride < run or any(s < 0 for s in strides):
            return None
    lead_off = np.zeros(out.shape[:lead], np.int64)
    for ax in range(lead):
        lead_off = lead_off + np.arange(out.shape[ax], dtype=np.int64).reshape(
            (-1,) + (1,) * (lead - ax - 1)) * out.strides[ax]
    return lead_off.reshape(-1), (nruns, run, stride)  # relative to the view's first byte


def _plain(a: np.ndarray) -> np.ndarray:
    """A base-class view (a subclass holding references would make the kernels compile anew)."""
    return a if type(a) is np.ndarray else a.view(np.ndarray)


def _scratch(nat: _Native, nbytes: int) -> np.ndarray:
    buf = getattr(nat.local, "scratch", None)
    if buf is None or buf.size < nbytes:
        buf = nat.local.scratch = np.empty(max(nbytes, 1), np.uint8)
    return buf


def _cbuf(nat: _Native, nbytes: int) -> np.ndarray:
    buf = getattr(nat.local, "cbuf", None)
    if buf is None or buf.size < nbytes:
        buf = nat.local.cbuf = np.empty(max(nbytes, 1 << 16), np.uint8)
    return buf


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
