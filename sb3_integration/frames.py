"""Frame dedup: each distinct frame of a frame-stacked observation is stored once.

A :class:`FrameStore` holds the observations of one key of an SB3 buffer (shape
``(n_rows, n_envs, *obs_shape)``; ``n_rows`` is SB3's ``buffer_size``). Per env,
it appends frames to a *stream* kept in a :class:`~chunkstore.ChunkedArray`
used as a ring: global frame number ``g`` of env ``e`` lives at local slot
``g % F``. A stored observation ("stack") is described by two small numbers,

* ``slot`` (uint32): the local slot of its newest frame, and
* ``pad`` (uint8): how many leading frames are all-zero and not stored,

because the frames of a stack are consecutive in the stream: frame ``j`` of
the stack (``pad <= j < depth``) is at slot ``(slot - (depth - 1) + j) % F``.
Several kinds of stack (``which``: 0 = observation, 1 = next observation) can
be kept per row; a buffer picks what it needs.

Writing a stack ``x`` for env ``e`` compares it with the last stack stored for
that env (a kept copy) and, checking equality every time, never assuming:

1. ``x`` equals the last stack: reuse its descriptor (``obs[t] == next_obs[t-1]``);
2. ``x``'s first ``depth - 1`` frames equal the last stack's last ``depth - 1``
   frames: append only ``x``'s newest frame (``next_obs[t]`` after ``obs[t]``);
3. otherwise store ``x``'s frames fresh, leaving out leading all-zero frames
   (``VecFrameStack``'s padding after a reset).

Layout detection. The stack axis, frame width and depth are found from data:
the candidates are axis 0 and the last axis (the image channel axis first, as
SB3's ``VecFrameStack`` picks it), with every width ``w`` that divides the axis;
the first candidate for which two consecutive stacks satisfy ``x[:-w] ==
prev[w:]`` along that axis, on a pair whose frames are not all identical, wins.
Until then (at most ``DETECT_MAX_PUTS`` puts, or until the first read) the
stacks wait as plain copies; if nothing stacks, each whole observation is one
"frame" (depth 1) and rule 1 still stores ``next_obs[t] == obs[t+1]`` once.
Detection only decides how well data compresses, never what is read back.

Ring size and release. A row can append at most ``stacks_per_row * depth``
frames, and a live row references at most ``depth`` frames behind the stream
head at the time it was written, so a ring of
``F = (n_rows + 1) * stacks_per_row * depth + 2 * chunk_len`` (rounded up to a
whole chunk) can never overwrite a frame a live row uses. Unwritten chunks cost
only their entry in the chunk table (20 bytes a chunk). When the owner
overwrites its oldest row it calls :meth:`FrameStore.release_before`; whole
chunks of frames older than the oldest live row are then discarded from the
tier, so memory stays proportional to the live data.

All envs share one ChunkedArray, in disjoint regions of ``F`` slots, with one
open chunk per env: one ``take`` serves a whole batch, and a learning codec
(``zstd3+dict``) trains one dictionary for all envs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore import ChunkedArray, LRUChunkCache, Tier
from sb3_integration._common import pack_array, unpack_array

__all__ = ["DETECT_MAX_PUTS", "MAX_DEPTH", "UNWRITTEN", "FrameStore", "StackLayout", "detect_layout"]

#: stacks kept as plain copies while the layout is undetected, at most
DETECT_MAX_PUTS = 32
#: deepest stack considered (``pad`` is a uint8)
MAX_DEPTH = 254
#: the ``pad`` of a stack never written: more padding than any stack has frames
UNWRITTEN = 255


@dataclass(frozen=True)
class StackLayout:
    """How an observation of ``obs_shape`` splits into ``depth`` frames.

    ``axis`` is 0, the last axis, or None (the whole observation is one frame).
    """

    obs_shape: tuple[int, ...]
    axis: int | None
    width: int
    depth: int

    @classmethod
    def whole(cls, obs_shape: tuple[int, ...]) -> StackLayout:
        return cls(tuple(obs_shape), None, 0, 1)

    @property
    def frame_shape(self) -> tuple[int, ...]:
        shp = self.obs_shape
        if self.axis is None:
            return shp
        if self.axis == 0:
            return (self.width, *shp[1:])
        return (*shp[:-1], self.width)

    def split(self, x: np.ndarray) -> np.ndarray:
        """``x`` of shape ``(n, *obs_shape)`` as ``(n, depth, *frame_shape)`` (a view where possible)."""
        n, shp = x.shape[0], self.obs_shape
        if self.axis is None:
            return x[:, None]
        if self.axis == 0:
            return x.reshape(n, self.depth, self.width, *shp[1:])
        return np.moveaxis(x.reshape(n, *shp[:-1], self.depth, self.width), -2, 1)

    def split_view(self, out: np.ndarray) -> np.ndarray:
        """Like :meth:`split`, but guaranteed to be a writable view of ``out``."""
        v = self.split(out)
        if not np.shares_memory(v, out):  # pragma: no cover - out is always C-contiguous
            raise ValueError("output array cannot be viewed as frames")
        return v

    def describe(self) -> str:
        if self.axis is None:
            return "whole observations (no stacking detected)"
        return f"{self.depth} frames of {self.frame_shape} stacked on axis {self.axis}"


def _candidates(obs_shape: tuple[int, ...], axis_order: Sequence[int]) -> list[StackLayout]:
    out = []
    ndim = len(obs_shape)
    for axis in dict.fromkeys(a % ndim for a in axis_order) if ndim else ():
        length = obs_shape[axis]
        for w in range(1, length):
            if length % w == 0 and length // w <= MAX_DEPTH:
                out.append(StackLayout(tuple(obs_shape), axis if axis == 0 else ndim - 1, w, length // w))
    return out


def _bits(x: np.ndarray) -> np.ndarray:
    """``x`` viewed so that ``==`` compares bit patterns (-0.0 != 0.0, NaN == NaN)."""
    if x.dtype.kind in "fc":
        return x.view(f"u{x.dtype.itemsize}")
    return x


def _bitwise_comparable(dtype: np.dtype) -> bool:
    return dtype.kind not in "fc" or dtype.itemsize in (1, 2, 4, 8)


def _equal_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per leading index, whether ``a[i]`` and ``b[i]`` are bit-identical."""
    a, b = _bits(a), _bits(b)
    if a.shape[0] == 1:  # the common case; two copies + memcmp beat array_equal 2x (28 KB stacks)
        return np.array([a.tobytes() == b.tobytes()])
    return np.equal(a, b).reshape(a.shape[0], -1).all(axis=1)


def _is_zero(frame: np.ndarray) -> bool:
    """All bits zero (a -0.0 is not zero: it would not read back as -0.0)."""
    return not _bits(frame).any()


def detect_layout(prev: np.ndarray, x: np.ndarray, axis_order: Sequence[int]) -> StackLayout | None:
    """The first candidate layout under which ``x`` is ``prev`` shifted by one frame.

    ``prev`` and ``x`` are two consecutive stacks of one env (``obs_shape``).
    A candidate counts only if ``x``'s frames are not all identical (otherwise
    the shift proves nothing). Returns None when no candidate fits this pair.
    """
    pb, xb = _bits(prev)[None], _bits(x)[None]
    if np.array_equal(pb, xb):
        return None
    for lay in _candidates(x.shape, axis_order):
        xs, ps = lay.split(xb)[0], lay.split(pb)[0]
        if np.array_equal(xs[1:], xs[:-1]):
            continue  # constant along this axis: uninformative
        if np.array_equal(xs[:-1], ps[1:]):
            return lay
    return None


class FrameStore:
    """Observations of one key, ``(n_rows, n_envs, *obs_shape)``, with each distinct frame stored once.

    Parameters
    ----------
    obs_shape, dtype
        Shape and dtype of one observation.
    n_rows, n_envs
        Rows (SB3's ``buffer_size``) and envs.
    stacks_per_row
        How many stacks a row can hold (2 for a replay buffer: obs and next obs;
        1 for a rollout buffer). Sizes the ring.
    chunk_len, codec, tier, cache
        Passed to each :class:`~chunkstore.ChunkedArray`. ``tier`` is a Tier
        (shared) or a zero-argument factory called once per array.
    dedup
        False stores every stack whole and fresh (no sharing), for comparison.
    axis_order
        Axes tried for stacking, best guess first (default: last, then 0).
    name
        Shown in errors and :meth:`info`.

    Examples
    --------
    >>> fs = FrameStore((4, 8, 8), np.uint8, n_rows=10, n_envs=1, chunk_len=16)
    >>> a = np.zeros((1, 4, 8, 8), np.uint8); a[0, 3] = 1
    >>> b = np.roll(a, -1, axis=1); b[0, 3] = 2
    >>> fs.put(0, 0, a); fs.put(1, 0, b)
    >>> fs.layout.depth, fs.frames_written
    (4, 2)
    >>> bool((fs.gather([(1, np.array([0]))], np.array([0]))[0] == b).all())
    True
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        dtype: Any,
        n_rows: int,
        n_envs: int = 1,
        *,
        stacks_per_row: int = 2,
        chunk_len: int = 64,
        codec: Any = "zstd3",
        tier: Tier | Any = None,
        cache: LRUChunkCache | int | None = None,
        dedup: bool = True,
        axis_order: Sequence[int] = (-1, 0),
        name: str = "observations",
    ) -> None:
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.dtype = np.dtype(dtype)
        self.n_rows, self.n_envs = int(n_rows), int(n_envs)
        self.stacks_per_row = int(stacks_per_row)
        self.chunk_len = int(chunk_len)
        self.codec, self.tier, self.cache = codec, tier, cache
        self.dedup = bool(dedup) and _bitwise_comparable(self.dtype)
        self.axis_order = tuple(axis_order)
        self.name = name
        # descriptors [which, row, env]; an unwritten stack is all padding, so it reads as zeros
        self.slots = np.zeros((self.stacks_per_row, self.n_rows, self.n_envs), np.uint32)
        self.pads = np.full((self.stacks_per_row, self.n_rows, self.n_envs), UNWRITTEN, np.uint8)
        self.used = [False] * self.stacks_per_row  # which kinds of stack have been put
        self.layout: StackLayout | None = None
        self._pending: list[tuple[int, int, np.ndarray]] = []
        self._reset_streams()
        if not self.dedup or not self.obs_shape or not _candidates(self.obs_shape, self.axis_order):
            self._decide(StackLayout.whole(self.obs_shape))

    # -- state ---------------------------------------------------------------------
    def _reset_streams(self) -> None:
        n = self.n_envs
        self.heads = [0] * n  # global frame number of the next frame, per env
        self.released = [0] * n  # frames below this (global, chunk-aligned) are discarded
        self.last_slot = [-1] * n
        self.last_pad = [0] * n
        self.has_last = np.zeros(n, bool)
        self.last: np.ndarray | None = None  # (n_envs, *obs_shape) copy of the last stack
        self.frames_written = 0

    def _decide(self, layout: StackLayout) -> None:
        """Fix the layout, build the ring(s), and store what waited for it."""
        self.layout = layout
        k, L = layout.depth, self.chunk_len
        ring = (self.n_rows + 1) * self.stacks_per_row * k + 2 * L
        self.F = -(-ring // L) * L
        self.array = ChunkedArray(
            self.F * self.n_envs,
            layout.frame_shape,
            self.dtype,
            chunk_len=L,
            codec=self.codec,
            tier=self.tier() if callable(self.tier) and not isinstance(self.tier, Tier) else self.tier,
            cache=self.cache,
            name=f"{self.name}.frames",
            max_open=self.n_envs + 1,  # each env writes its own region sequentially
        )
        self.env_base = np.arange(self.n_envs) * self.F  # where env e's ring starts
        self.last = np.zeros((self.n_envs, *self.obs_shape), self.dtype)
        pending, self._pending = self._pending, []
        final = {(w, r): i for i, (w, r, _) in enumerate(pending)}  # rows overwritten meanwhile are dead
        for i, (which, row, x) in enumerate(pending):
            if final[(which, row)] == i:
                self._put(which, row, x)

    def ensure_layout(self) -> StackLayout:
        """Decide the layout now (whole observations if nothing stacked yet)."""
        if self.layout is None:
            self._decide(StackLayout.whole(self.obs_shape))
        assert self.layout is not None
        return self.layout

    # -- writing -------------------------------------------------------------------
    def put(self, which: int, row: int, x: np.ndarray) -> None:
        """Store ``x`` (``(n_envs, *obs_shape)``, our dtype, validated by the caller) at ``[which, row]``."""
        if self.layout is None:
            self._put_pending(which, row, x)
        else:
            self._put(which, row, x)

    def _put_pending(self, which: int, row: int, x: np.ndarray) -> None:
        prev = self._pending[-1][2] if self._pending else None
        self._pending.append((which, row, np.array(x, copy=True)))
        self.used[which] = True
        if prev is not None:
            for e in range(self.n_envs):
                lay = detect_layout(prev[e], x[e], self.axis_order)
                if lay is not None:
                    self._decide(lay)
                    return
        if len(self._pending) >= DETECT_MAX_PUTS:
            self._decide(StackLayout.whole(self.obs_shape))

    def _put(self, which: int, row: int, x: np.ndarray) -> None:
        lay = self.layout
        assert lay is not None and self.last is not None
        k = lay.depth
        slots, pads = self.slots[which, row], self.pads[which, row]
        xs = lay.split(x)
        same = shift = np.zeros(self.n_envs, bool)
        if self.dedup and self.has_last.any():
            same = self.has_last & _equal_rows(x, self.last)
            cand = self.has_last & ~same
            if k > 1 and cand.any():
                ls = lay.split(self.last)
                if cand.all():
                    shift = _equal_rows(xs[:, :-1], ls[:, 1:])
                else:
                    shift = np.zeros(self.n_envs, bool)
                    for e in np.flatnonzero(cand):
                        shift[e] = np.array_equal(_bits(xs[e, :-1]), _bits(ls[e, 1:]))
        for e in range(self.n_envs):
            if same[e]:
                slots[e], pads[e] = self.last_slot[e] % self.F, self.last_pad[e]
                continue
            if shift[e]:
                self._append(e, xs[e, k - 1 :])
                pad = max(self.last_pad[e] - 1, 0)
            else:
                pad = 0
                while pad < k and _is_zero(xs[e, pad]):
                    pad += 1
                self._append(e, xs[e, pad:])
            self.last_slot[e], self.last_pad[e] = self.heads[e] - 1, pad
            slots[e], pads[e] = (self.heads[e] - 1) % self.F, pad
            self.last[e] = x[e]
            self.has_last[e] = True
        self.used[which] = True

    def _append(self, e: int, frames: np.ndarray) -> None:
        """Append ``frames`` (``(m, *frame_shape)``) to env ``e``'s stream: one copy into the open chunk."""
        m = len(frames)
        if m == 0:
            return
        arr, base = self.array, int(self.env_base[e])
        g = self.heads[e]
        local = g % self.F
        first = min(m, self.F - local)  # the run wraps around the ring at most once
        if m == 1:
            arr[base + local] = frames[0]
        else:
            arr.write(base + local, frames[:first])
            if first < m:
                arr.write(base, frames[first:])
        self.heads[e] = g + m
        self.frames_written += m

    def release_before(self, row: int) -> None:
        """``row`` is the oldest live row: discard whole chunks of frames no live row can reference.

        Call it after the ring of rows has wrapped (every row written), before
        overwriting the row that precedes ``row``.
        """
        if self.layout is None:
            return
        k, F, L = self.layout.depth, self.F, self.chunk_len
        used = [w for w in range(self.stacks_per_row) if self.used[w]]
        if not used:
            return
        for e in range(self.n_envs):
            head = self.heads[e]
            low = head - k
            for w in used:
                s = int(self.slots[w, row, e])
                low = min(low, head - 1 - ((head - 1 - s) % F) - (k - 1))
            aligned = (low // L) * L
            if aligned > self.released[e]:
                self._discard(e, self.released[e], aligned)
                self.released[e] = aligned

    def _discard(self, e: int, g0: int, g1: int) -> None:
        arr, base, F = self.array, int(self.env_base[e]), self.F
        if g1 - g0 >= F:
            arr.discard(base, base + F)
            return
        a, b = g0 % F, g1 % F
        if a < b:
            arr.discard(base + a, base + b)
        else:
            arr.discard(base + a, base + F)
            arr.discard(base, base + b)

    def clear(self) -> None:
        """Everything back to zeros (unwritten); the detected layout is kept."""
        if self.layout is not None:
            self.array.clear()
        self.slots[...] = 0
        self.pads[...] = UNWRITTEN
        self.used = [False] * self.stacks_per_row
        self._pending = []
        last_layout = self.layout
        self._reset_streams()
        if last_layout is not None:
            self.last = np.zeros((self.n_envs, *self.obs_shape), self.dtype)

    # -- reading -------------------------------------------------------------------
    def gather(self, requests: Sequence[tuple[Any, np.ndarray]], envs: np.ndarray) -> list[np.ndarray]:
        """Read several index sets in one pass over the chunks.

        Each request is ``(which, rows)``: ``which`` an int or an int array like
        ``rows``; ``rows`` and ``envs`` are 1-D, in range, of equal length.
        Returns one ``(len(envs), *obs_shape)`` array per request, in order,
        each a C-contiguous slice of one output block (one ``take`` per array).
        """
        lay = self.ensure_layout()
        assert self.last is not None
        n, m, k = len(envs), len(requests), lay.depth
        out = np.empty((m * n, *self.obs_shape), self.dtype)
        if n == 0:
            return [out[:0] for _ in requests]
        slots = np.empty((m, n), np.int64)
        pads = np.empty((m, n), np.int64)
        for i, (which, rows) in enumerate(requests):
            slots[i] = self.slots[which, rows, envs]
            pads[i] = self.pads[which, rows, envs]
        env_rep = np.broadcast_to(envs, (m, n))
        ids = slots[..., None] + np.arange(1 - k, 1)  # (m, n, k)
        if k > 1:
            ids %= self.F
        ids += self.env_base[env_rep][..., None]
        padded = np.arange(k) < pads[..., None]
        any_pad = bool(padded.any())
        if any_pad:  # read a frame we read anyway, so padding touches no extra chunk
            ids = np.where(padded, ids[..., -1:], ids)
        frames = lay.split_view(out)  # (m*n, k, *frame_shape)
        self._take(ids.reshape(-1), frames)
        if any_pad:
            frames[padded.reshape(m * n, k)] = 0
        return [out[i * n : (i + 1) * n] for i in range(m)]

    def _take(self, ids: np.ndarray, frames: np.ndarray) -> None:
        """Frames ``ids`` into ``frames``: straight in when it is contiguous."""
        if frames.flags.c_contiguous:
            self.array.take(ids, out=frames)
        else:  # channel-last stacks: frames interleave in the output, one strided copy
            frames[...] = self.array.take(ids).reshape(frames.shape)

    # -- sizes -----------------------------------------------------------------------
    @property
    def index_nbytes(self) -> int:
        """Descriptor arrays (a uint32 slot and a uint8 pad per stack) and the kept last stacks."""
        last = self.last.nbytes if self.last is not None else 0
        return self.slots.nbytes + self.pads.nbytes + last

    @property
    def nbytes_stored(self) -> int:
        """Compressed frames, open chunks, chunk tables, descriptors, and stacks awaiting detection."""
        total = self.index_nbytes + sum(x.nbytes for _, _, x in self._pending)
        if self.layout is not None:
            total += self.array.cbytes + self.array.table_nbytes
        return total

    def info(self) -> dict[str, Any]:
        lay = self.layout
        arr = self.array if lay is not None else None
        return {
            "name": self.name,
            "obs_shape": self.obs_shape,
            "dtype": str(self.dtype),
            "layout": lay.describe() if lay else "undetected",
            "stack_axis": lay.axis if lay else None,
            "frame_width": lay.width if lay else None,
            "depth": lay.depth if lay else None,
            "ring_frames": self.F if lay else None,
            "frames_written": self.frames_written,
            "frames_cbytes": arr.cbytes if arr else 0,
            "sealed_chunks": arr.nchunks if arr else 0,
            "sealed_cratio": arr.cratio if arr else 1.0,
            "index_nbytes": self.index_nbytes,
            "chunk_table_nbytes": arr.table_nbytes if arr else 0,
            "nbytes_stored": self.nbytes_stored,
            "codec": arr.codec.name if arr else str(self.codec),
            "chunk_len": self.chunk_len,
        }

    # -- pickling: compressed chunks and small arrays; caches and threads are rebuilt --
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("slots", "pads"):
            state[name] = pack_array(state[name])
        if callable(state["tier"]) or isinstance(state["tier"], Tier):
            state["tier"] = None  # a tier is live storage; the pickle holds the chunks themselves
        if isinstance(state["cache"], LRUChunkCache):
            state["cache"] = state["cache"].max_bytes
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in ("slots", "pads"):
            state[name] = unpack_array(state[name])
        self.__dict__.update(state)

    def share_cache(self, cache: LRUChunkCache | int) -> None:
        """Use one shared decoded-chunk cache (after unpickling); 0 for none."""
        self.cache = cache
        if self.layout is not None:
            self.array.cache = cache if isinstance(cache, LRUChunkCache) else None
