"""The frame engine: each distinct frame of a frame-stacked observation is stored once.

Every compressed buffer (replay, dict replay, n-step, HER, rollout, dict rollout)
keeps each observation key in a :class:`FrameStore`: observations of shape
``(n_rows, n_envs, *obs_shape)``, where ``n_rows`` is SB3's ``buffer_size``.

Streams. Per env, frames are appended to a *stream* and numbered by a global
frame number ``g`` (0, 1, 2, ... since the last :meth:`FrameStore.clear`). A stored
observation ("stack") is two small numbers:

* where its newest frame ``g`` is, and
* ``pad`` (uint8): how many leading frames are all-zero and not stored,

because the frames of a stack are consecutive in the stream: frame ``j`` of the
stack (``pad <= j < depth``) is frame ``g - (depth - 1) + j``. Several kinds of
stack (``which``: :data:`OBS`, :data:`NEXT`) can be kept per row. The first
kind's ``g`` is held as ``g mod 2**32`` (uint32, ``slots``); every other kind's
as a uint8 ``delta`` from the first kind's of the same row (a next observation is
0 to ``depth`` frames after its observation), with the rare larger distance kept
aside. That is 7 bytes of index per replay transition instead of 10.

Writing a stack ``x`` for env ``e`` compares it with the last stack stored for
that env (a kept copy), bit for bit (floats by their bit patterns, so ``-0.0``
and NaN payloads survive), and never assumes:

1. ``x`` equals the last stack: reuse its descriptor (``obs[t] == next_obs[t-1]``);
2. ``x``'s first ``depth - 1`` frames equal the last stack's last ``depth - 1``:
   append only ``x``'s newest frame (``next_obs[t]`` after ``obs[t]``);
3. otherwise store ``x``'s frames fresh, leaving out leading all-zero frames
   (``VecFrameStack``'s padding after a reset).

Layout detection. The stack axis, frame width and depth are found from data: the
candidates are the buffer's preferred axes (where SB3's ``VecFrameStack`` stacks)
with every width ``w`` that divides the axis; the first candidate under which two
consecutive stacks satisfy ``x[:-w] == prev[w:]``, on a pair whose frames are not
all identical, wins. Until then (at most :data:`DETECT_MAX_PUTS` puts, or the
first read) stacks wait as plain copies; if nothing stacks, each whole
observation is one frame (depth 1) and rule 1 still stores ``obs[t+1] ==
next_obs[t]`` once. Detection decides how well data compresses, never what is
read back.

The ring. All envs share one :class:`~chunkstore.ChunkedArray` of frames, in
regions of ``F`` frames (a whole number of chunks); frame ``g`` of env ``e`` is
item ``e * F + g % F``. ``F`` starts at about one frame per row, which is what
Atari stacks need, and grows by half (up to the worst case, ``depth`` frames
per stack) when a stream would overwrite a frame that a live row still uses:
growing only moves chunk-table entries (:meth:`ChunkedArray.remap`), nothing is
decoded. Because descriptors hold global frame numbers, they do not change.
When the owner overwrites its oldest row it calls :meth:`FrameStore.release_before`,
and whole chunks of frames no live row uses are freed.

Reading. :meth:`FrameStore.gather` turns descriptors into frame ids (``-1`` for
padding) and reads every frame of a batch, for every kind of stack, with one
:meth:`ChunkedArray.take_into` straight into the output stacks (channel-first or
channel-last): one native call per batch.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkstore import ChunkedArray, LRUChunkCache, Tier, native
from chunkstore.array import DEFAULT_CHUNK_LEN, DEFAULT_CODEC
from sb3_integration._common import pack_array, unpack_array
from sb3_integration.stacking import (
    StackLayout,
    bitwise_comparable,
    detect_layout,
    is_zero,
    same,
    stack_candidates,
)

__all__ = [
    "DETECT_MAX_PUTS",
    "FAR",
    "NEXT",
    "OBS",
    "UNWRITTEN",
    "FrameStore",
    "FrameStoreState",
    "StackLayout",
    "detect_layout",
]

#: kinds of stack a row can hold: the observation and the next observation
OBS, NEXT = 0, 1
#: stacks kept as plain copies while the layout is undetected, at most
DETECT_MAX_PUTS = 32
#: the ``pad`` of a stack never written: more padding than any stack has frames
UNWRITTEN = 255
#: a ``delta`` too large for a uint8: the frame number is kept aside
FAR = 255
#: frames per row the ring starts with: Atari stacks share all but one frame, and each
#: episode adds one more (its first frame); the ring grows by half when that is short
_START_FRAMES_PER_ROW = 1.25
_GROWTH = 1.5
_WRAP = 1 << 32  # slots hold global frame numbers modulo this


@dataclass
class FrameStoreState:
    """Everything a :class:`FrameStore` is, as plain values and arrays (for persistence).

    ``frames`` is the ChunkedArray of frames (None until the layout is known);
    the rest is small: descriptors, per-env streams, the last stack per env, and
    stacks still waiting for layout detection.
    """

    obs_shape: tuple[int, ...]
    dtype: np.dtype
    n_rows: int
    n_envs: int
    stacks_per_row: int
    dedup: bool
    layout: StackLayout | None
    ring_frames: int | None
    slots: np.ndarray
    deltas: np.ndarray
    far: np.ndarray
    pads: np.ndarray
    heads: np.ndarray
    released: np.ndarray
    last_slot: np.ndarray
    last_pad: np.ndarray
    has_last: np.ndarray
    last: np.ndarray | None
    used: list[bool]
    frames: ChunkedArray | None = None
    pending: list[tuple[int, int, np.ndarray]] = field(default_factory=list)

    def scalars(self) -> dict[str, Any]:
        """The JSON-able part (everything but the arrays)."""
        return {
            "obs_shape": list(self.obs_shape),
            "dtype": self.dtype.str,
            "n_rows": self.n_rows,
            "n_envs": self.n_envs,
            "stacks_per_row": self.stacks_per_row,
            "dedup": self.dedup,
            "layout": None if self.layout is None else self.layout.to_dict(),
            "ring_frames": self.ring_frames,
            "used": list(self.used),
            "pending": len(self.pending),
        }


class FrameStore:
    """Observations of one key, ``(n_rows, n_envs, *obs_shape)``, each distinct frame stored once.

    Parameters
    ----------
    obs_shape, dtype
        Shape and dtype of one observation.
    n_rows, n_envs
        Rows (SB3's ``buffer_size``) and envs.
    stacks_per_row
        How many kinds of stack a row holds (2 for a replay buffer: obs and next
        obs; 1 for a rollout buffer).
    chunk_len, codec, tier, cache, threads
        Passed to the :class:`~chunkstore.ChunkedArray` of frames. ``tier`` is a
        Tier or a zero-argument factory.
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
    >>> fs.put(OBS, 0, a); fs.put(OBS, 1, b)
    >>> fs.layout.depth, fs.frames_written
    (4, 2)
    >>> bool((fs.gather([(OBS, np.array([1]))], np.array([0]))[0] == b).all())
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
        chunk_len: int = DEFAULT_CHUNK_LEN,
        codec: Any = DEFAULT_CODEC,
        tier: Tier | Any = None,
        cache: LRUChunkCache | int | None = 0,
        threads: int | None = None,
        dedup: bool = True,
        axis_order: Sequence[int] = (-1, 0),
        name: str = "observations",
    ) -> None:
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.dtype = np.dtype(dtype)
        self.n_rows, self.n_envs = int(n_rows), int(n_envs)
        self.stacks_per_row = int(stacks_per_row)
        if min(self.n_rows, self.n_envs, self.stacks_per_row) < 1:
            raise ValueError(f"{name}: n_rows, n_envs and stacks_per_row must be >= 1")
        self.chunk_len = int(chunk_len)
        if self.chunk_len < 1:
            raise ValueError(f"{name}: chunk_len must be >= 1, got {chunk_len}")
        self.codec, self.tier, self.cache, self.threads = codec, tier, cache, threads
        self.dedup = bool(dedup) and bitwise_comparable(self.dtype)
        self.axis_order = tuple(axis_order)
        self.name = name
        self._lock = threading.RLock()  # put / gather / release are atomic to each other
        # descriptors: where the newest frame of stack [which, row, env] is (see the module
        # docstring), and its padding; an unwritten stack is all padding, so it reads as zeros
        self.slots = np.zeros((self.n_rows, self.n_envs), np.uint32)
        self.deltas = np.zeros((self.stacks_per_row - 1, self.n_rows, self.n_envs), np.uint8)
        self.far: dict[tuple[int, int, int], int] = {}  # deltas of FAR: (which, row, env) -> g mod 2**32
        self.pads = np.full((self.stacks_per_row, self.n_rows, self.n_envs), UNWRITTEN, np.uint8)
        self.used = [False] * self.stacks_per_row
        self.layout: StackLayout | None = None
        self.array: ChunkedArray | None = None
        self.F = 0  # frames per env region of the ring
        self._pending: list[tuple[int, int, np.ndarray]] = []
        self._reset_streams()
        if not self.dedup or not self.obs_shape or not stack_candidates(self.obs_shape, self.axis_order):
            self._decide(StackLayout.whole(self.obs_shape))

    # -- state ---------------------------------------------------------------------
    def _reset_streams(self) -> None:
        n = self.n_envs
        self.heads = np.zeros(n, np.int64)  # global frame number of the next frame, per env
        self.released = np.zeros(n, np.int64)  # frames below this (chunk-aligned) are freed
        self.last_slot = np.full(n, -1, np.int64)  # global number of the last stack's newest frame
        self.last_pad = np.zeros(n, np.int64)
        self.has_last = np.zeros(n, bool)
        self.last: np.ndarray | None = (
            None if self.layout is None else np.zeros((n, *self.obs_shape), self.dtype))

    @property
    def frames_written(self) -> int:
        """Frames stored since the last clear, all envs."""
        return int(self.heads.sum())

    @property
    def max_ring_frames(self) -> int:
        """The worst case: every stack of every row stored fresh, plus two chunks of slack."""
        k = 1 if self.layout is None else self.layout.depth
        return self._round((self.n_rows + 1) * self.stacks_per_row * k + 2 * self.chunk_len)

    def _round(self, frames: int) -> int:
        L = self.chunk_len
        return -(-frames // L) * L

    def _decide(self, layout: StackLayout) -> None:
        """Fix the layout, build the ring, and store what waited for it."""
        self.layout = layout
        start = int((self.n_rows + 1) * _START_FRAMES_PER_ROW) + layout.depth + 2 * self.chunk_len
        self.F = min(self._round(start), self.max_ring_frames)
        tier = self.tier() if callable(self.tier) and not isinstance(self.tier, Tier) else self.tier
        self.array = ChunkedArray(
            self.F * self.n_envs, layout.frame_shape, self.dtype, chunk_len=self.chunk_len,
            codec=self.codec, tier=tier, cache=self.cache, threads=self.threads,
            name=f"{self.name}.frames",
            max_open=self.n_envs + 1,  # each env writes its own region sequentially
        )
        self.last = np.zeros((self.n_envs, *self.obs_shape), self.dtype)
        pending, self._pending = self._pending, []
        final = {(w, r): i for i, (w, r, _) in enumerate(pending)}  # rows overwritten meanwhile are dead
        for i, (which, row, x) in enumerate(pending):
            if final[(which, row)] == i:
                self._put(which, row, x)

    def ensure_layout(self) -> StackLayout:
        """Decide the layout now (whole observations if nothing stacked yet)."""
        with self._lock:
            if self.layout is None:
                self._decide(StackLayout.whole(self.obs_shape))
            assert self.layout is not None
            return self.layout

    # -- writing -------------------------------------------------------------------
    def put(self, which: int, row: int, x: np.ndarray) -> None:
        """Store ``x`` (``(n_envs, *obs_shape)``, our dtype, validated by the caller) at ``[which, row]``."""
        with self._lock:
            if self.layout is None:
                self._put_pending(which, row, x)
            else:
                self._put(which, row, x)

    def put_row(self, row: int, stacks: Sequence[np.ndarray]) -> None:
        """Store ``stacks[w]`` at ``[w, row]`` for every kind ``w``, atomically for readers."""
        with self._lock:
            for which, x in enumerate(stacks):
                self.put(which, row, x)

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
        lay, last = self.layout, self.last
        assert lay is not None and last is not None
        k = lay.depth
        older, newer = lay.older, lay.newer
        for e in range(self.n_envs):
            xe = x[e]
            if self.dedup and self.has_last[e]:
                le = last[e]
                if same(xe, le):
                    self._describe(which, row, e, int(self.last_slot[e]), int(self.last_pad[e]))
                    continue
                if k > 1 and same(xe[older], le[newer]):
                    self._append(e, lay.frames(xe, k - 1))
                    self._remember(which, row, e, xe, max(int(self.last_pad[e]) - 1, 0))
                    continue
            xs = lay.frames(xe, 0)
            pad = 0
            while pad < k and is_zero(xs[pad]):
                pad += 1
            self._append(e, xs[pad:])
            self._remember(which, row, e, xe, pad)
        self.used[which] = True

    def _remember(self, which: int, row: int, e: int, x: np.ndarray, pad: int) -> None:
        newest = int(self.heads[e]) - 1
        self.last_slot[e], self.last_pad[e] = newest, pad
        assert self.last is not None
        self.last[e] = x
        self.has_last[e] = True
        self._describe(which, row, e, newest, pad)

    def _describe(self, which: int, row: int, e: int, newest: int, pad: int) -> None:
        self.pads[which, row, e] = pad
        if which == 0:
            self.slots[row, e] = newest % _WRAP
            if self.stacks_per_row > 1:  # the other kinds were relative to the old first stack
                self.pads[1:, row, e] = UNWRITTEN
                if self.far:
                    for w in range(1, self.stacks_per_row):
                        self.far.pop((w, row, e), None)
            return
        delta = newest - self._newest(0, row, e) if self.pads[0, row, e] != UNWRITTEN else FAR
        if 0 <= delta < FAR:
            self.deltas[which - 1, row, e] = delta
            if self.far:
                self.far.pop((which, row, e), None)
        else:
            self.deltas[which - 1, row, e] = FAR
            self.far[(which, row, e)] = newest % _WRAP

    def _newest(self, which: int, row: int, e: int) -> int:
        """Global frame number of the newest frame of a written stack."""
        head = int(self.heads[e])
        if which and self.deltas[which - 1, row, e] != FAR:
            return self._newest(0, row, e) + int(self.deltas[which - 1, row, e])
        low = self.far[(which, row, e)] if which else int(self.slots[row, e])
        return head - ((head - low) % _WRAP)

    def _append(self, e: int, frames: np.ndarray) -> None:
        """Append ``frames`` (``(m, *frame_shape)``) to env ``e``'s stream: one copy into the open chunk."""
        m = len(frames)
        if m == 0:
            return
        g = int(self.heads[e])
        if g + m - int(self.released[e]) > self.F:
            self._grow(g + m - int(self.released[e]))
        arr, F = self.array, self.F
        assert arr is not None
        base, local = e * F, g % F
        first = min(m, F - local)  # the run wraps around the ring at most once
        if m == 1:
            arr[base + local] = frames[0]
        else:
            arr.write(base + local, frames[:first])
            if first < m:
                arr.write(base, frames[first:])
        self.heads[e] = g + m

    def _grow(self, need: int) -> None:
        """Grow the ring by half (at least to ``need`` frames per env), keeping every live chunk."""
        arr, L, old = self.array, self.chunk_len, self.F
        assert arr is not None
        new = min(max(self._round(need), self._round(int(_GROWTH * old))), self.max_ring_frames)
        if new < need:  # pragma: no cover - the worst-case bound makes this unreachable
            raise RuntimeError(f"{self.name}: a stream needs {need} live frames, over its bound {new}")
        src, dst = [], []
        for e in range(self.n_envs):
            live = np.arange(int(self.released[e]) // L, -(-int(self.heads[e]) // L), dtype=np.int64)
            src.append(e * (old // L) + live % (old // L))
            dst.append(e * (new // L) + live % (new // L))
        arr.remap(new * self.n_envs, np.concatenate(src), np.concatenate(dst))
        self.F = new

    def release_before(self, row: int) -> None:
        """``row`` is the oldest live row: free whole chunks of frames no live row can use.

        Call it after the ring of rows has wrapped (every row written), before
        overwriting the row that precedes ``row``.
        """
        with self._lock:
            if self.layout is None or self.array is None:
                return
            k, L = self.layout.depth, self.chunk_len
            used = [w for w in range(self.stacks_per_row) if self.used[w]]
            for e in range(self.n_envs):
                if all(self.pads[w, row, e] == UNWRITTEN for w in used):
                    continue  # not written yet (rows filled out of order): nothing to infer from it
                low = int(self.heads[e]) - k
                for w in used:
                    if self.pads[w, row, e] != UNWRITTEN:
                        low = min(low, self._newest(w, row, e) - (k - 1))
                aligned = max(low, 0) // L * L
                if aligned > self.released[e]:
                    self._free(e, int(self.released[e]), aligned)
                    self.released[e] = aligned

    def _free(self, e: int, g0: int, g1: int) -> None:
        arr, F = self.array, self.F
        assert arr is not None
        base = e * F
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
        """Everything back to zeros (unwritten); the detected layout and ring are kept."""
        with self._lock:
            if self.array is not None:
                self.array.clear()
            self.slots[...] = 0
            self.deltas[...] = 0
            self.far.clear()
            self.pads[...] = UNWRITTEN
            self.used = [False] * self.stacks_per_row
            self._pending = []
            self._reset_streams()

    # -- reading -------------------------------------------------------------------
    def frame_ids(self, which: Any, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """Item ids in the frame array of stacks ``[which, rows, envs]``: ``(n, depth)``, -1 = zeros.

        ``which``, ``rows`` and ``envs`` broadcast together (int64, in range).
        """
        lay = self.ensure_layout()
        k, F = lay.depth, self.F
        if native.available():
            w = np.full(len(rows), which, np.int64) if np.isscalar(which) else np.asarray(which, np.int64)
            out = np.empty((len(rows), k), np.int64)
            from sb3_integration._native_frames import stack_ids

            if not stack_ids(w, rows, envs, self.slots, self.deltas, self.pads, self.heads, k, F, out):
                return out
            far = out[:, 0] == -2  # rare: resolved by the numpy path below
            out[far] = self._frame_ids_numpy(w[far], rows[far], envs[far], k, F)
            return out
        return self._frame_ids_numpy(which, rows, envs, k, F)

    def _frame_ids_numpy(self, which: Any, rows: np.ndarray, envs: np.ndarray, k: int, F: int) -> np.ndarray:
        heads = self.heads[envs]
        # the newest frame's global number, from its low 32 bits and the stream head
        ids = heads - ((heads - self.slots[rows, envs]) % _WRAP)
        if self.stacks_per_row > 1 and np.any(which):
            w = np.broadcast_to(np.asarray(which, np.int64), ids.shape)
            delta = np.where(w > 0, self.deltas[np.maximum(w - 1, 0), rows, envs], 0)
            ids += delta
            for i in np.flatnonzero(delta == FAR).tolist():  # rare: kept aside
                key = (int(w[i]), int(rows[i]), int(envs[i]))
                if key in self.far:
                    ids[i] = heads[i] - ((heads[i] - self.far[key]) % _WRAP)
        ids += envs * F - ids // F * F  # its item: env region + position in the ring
        if k > 1:
            ids = ids[:, None] + np.arange(1 - k, 1)
            ids[ids < (envs * F)[:, None]] += F  # frames of a stack can wrap around the ring
        else:
            ids = ids[:, None]
        ids[np.arange(k) < self.pads[which, rows, envs][:, None]] = -1
        return ids

    def gather(self, requests: Sequence[tuple[Any, np.ndarray]], envs: np.ndarray) -> list[np.ndarray]:
        """Read several index sets in one pass over the chunks.

        Each request is ``(which, rows)``: ``which`` an int or an int array like
        ``rows``; ``rows`` and ``envs`` are 1-D, in range, of equal length.
        Returns one ``(len(envs), *obs_shape)`` array per request, in order,
        each a C-contiguous slice of one output block read with one native call.
        """
        with self._lock:
            lay = self.ensure_layout()
            n, m = len(envs), len(requests)
            out = np.empty((m * n, *self.obs_shape), self.dtype)
            if n:
                envs = np.asarray(envs, np.int64)
                if m == 1:
                    which, rows = requests[0]
                else:  # all requests in one vectorised pass
                    which, rows = np.empty(m * n, np.int64), np.empty(m * n, np.int64)
                    for i, (w, r) in enumerate(requests):
                        which[i * n:(i + 1) * n], rows[i * n:(i + 1) * n] = w, r
                    envs = np.tile(envs, m)
                assert self.array is not None
                self.array.take_into(self.frame_ids(which, rows, envs), lay.split(out))
            return [out[i * n:(i + 1) * n] for i in range(m)]

    # -- sizes -----------------------------------------------------------------------
    @property
    def index_nbytes(self) -> int:
        """Descriptors (slots, deltas, pads, the rare far deltas) and the kept last stacks."""
        last = self.last.nbytes if self.last is not None else 0
        return self.slots.nbytes + self.deltas.nbytes + self.pads.nbytes + 32 * len(self.far) + last

    @property
    def nbytes_stored(self) -> int:
        """Compressed frames, open chunks, chunk table, descriptors, and stacks awaiting detection."""
        total = self.index_nbytes + sum(x.nbytes for _, _, x in self._pending)
        if self.array is not None:
            total += self.array.cbytes + self.array.table_nbytes
        return total

    def info(self) -> dict[str, Any]:
        lay, arr = self.layout, self.array
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

    # -- state in, state out ---------------------------------------------------------
    def state(self) -> FrameStoreState:
        """What this store is (arrays are shared, not copied; the frame array is flushed by savers)."""
        with self._lock:
            return FrameStoreState(
                obs_shape=self.obs_shape, dtype=self.dtype, n_rows=self.n_rows, n_envs=self.n_envs,
                stacks_per_row=self.stacks_per_row, dedup=self.dedup, layout=self.layout,
                ring_frames=self.F if self.layout is not None else None,
                slots=self.slots, deltas=self.deltas, far=_far_array(self.far), pads=self.pads,
                heads=self.heads, released=self.released,
                last_slot=self.last_slot, last_pad=self.last_pad, has_last=self.has_last,
                last=self.last, used=list(self.used), frames=self.array, pending=list(self._pending),
            )

    def load_state(self, state: FrameStoreState) -> None:
        """Become ``state`` (from :meth:`state`, or read from a file and checked there).

        Raises ValueError when the state does not fit this store's geometry.
        """
        want = (self.obs_shape, self.dtype, self.n_rows, self.n_envs, self.stacks_per_row, self.dedup)
        got = (tuple(state.obs_shape), np.dtype(state.dtype), state.n_rows, state.n_envs,
               state.stacks_per_row, state.dedup)
        if got != want:
            raise ValueError(f"{self.name}: saved as {got}, this store is {want} "
                             "(obs_shape, dtype, rows, envs, stacks per row, dedup)")
        n, spr = self.n_envs, self.stacks_per_row
        _check(state.slots, (self.n_rows, n), np.uint32, "slots")
        _check(state.deltas, (spr - 1, self.n_rows, n), np.uint8, "deltas")
        _check(state.far, (len(state.far), 4), np.int64, "far")
        _check(state.pads, (spr, self.n_rows, n), np.uint8, "pads")
        far = state.far
        if far.size and (far[:, 0].min() < 1 or far[:, 0].max() >= spr or far[:, 1].min() < 0
                         or far[:, 1].max() >= self.n_rows or far[:, 2].min() < 0 or far[:, 2].max() >= n
                         or far[:, 3].min() < 0 or far[:, 3].max() >= _WRAP):
            raise ValueError(f"{self.name}: far deltas out of range")
        for name in ("heads", "released", "last_slot", "last_pad"):
            _check(getattr(state, name), (n,), np.int64, name)
        _check(state.has_last, (n,), np.bool_, "has_last")
        if np.any(state.heads < 0) or np.any(state.released < 0) or np.any(state.released > state.heads):
            raise ValueError(f"{self.name}: stream positions out of range")
        if np.any((state.pads > (state.layout.depth if state.layout else 1)) & (state.pads != UNWRITTEN)):
            raise ValueError(f"{self.name}: pads hold more padding than a stack has frames")
        # every stack with a stored frame has its newest frame in its stream
        written = state.pads[0] < (state.layout.depth if state.layout else 0)
        if state.layout is not None and written.any():
            heads = state.heads[None, :].astype(np.int64)
            back = ((heads - state.slots.astype(np.int64)) % _WRAP)[written]
            live = np.broadcast_to(state.heads - state.released, written.shape)[written]
            if back.min() < 1 or np.any(back > live):
                raise ValueError(f"{self.name}: slots point at frames outside the stored stream")
        with self._lock:
            self.slots, self.deltas, self.pads = state.slots, state.deltas, state.pads
            self.far = {(int(w), int(r), int(e)): int(g) for w, r, e, g in state.far.tolist()}
            self.heads, self.released = state.heads, state.released
            self.last_slot, self.last_pad, self.has_last = state.last_slot, state.last_pad, state.has_last
            self.used = [bool(u) for u in state.used]
            self._pending = list(state.pending)
            self.layout = state.layout
            if state.layout is None:
                self.array, self.last, self.F = None, None, 0
                return
            lay = state.layout
            F = int(state.ring_frames or 0)
            if F < 1 or F % self.chunk_len or self.max_ring_frames < F:
                raise ValueError(f"{self.name}: ring of {F} frames does not fit chunk_len "
                                 f"{self.chunk_len} and {self.n_rows} rows")
            frames = state.frames
            want_arr = ((F * n, *lay.frame_shape), self.dtype)
            if frames is None or (frames.shape, frames.dtype) != want_arr:
                got_arr = None if frames is None else (frames.shape, frames.dtype)
                raise ValueError(f"{self.name}: frames are {got_arr}; the layout needs {want_arr}")
            _check(state.last, (n, *self.obs_shape), self.dtype, "last")
            frames.max_open = n + 1
            self.array, self.F, self.last = frames, F, state.last

    # -- pickling: compressed chunks and small arrays; caches and threads are rebuilt --
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        for name in ("slots", "deltas", "pads"):
            state[name] = pack_array(state[name])
        if callable(state["tier"]) or isinstance(state["tier"], Tier):
            state["tier"] = None  # a tier is live storage; the pickle holds the chunks themselves
        if isinstance(state["cache"], LRUChunkCache):
            state["cache"] = state["cache"].max_bytes
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in ("slots", "deltas", "pads"):
            state[name] = unpack_array(state[name])
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def share_cache(self, cache: LRUChunkCache | int) -> None:
        """Use one shared decoded-chunk cache (after unpickling); 0 for none."""
        self.cache = cache
        if self.array is not None:
            self.array.cache = cache if isinstance(cache, LRUChunkCache) else None


def _far_array(far: dict[tuple[int, int, int], int]) -> np.ndarray:
    return np.array([[w, r, e, g] for (w, r, e), g in sorted(far.items())], np.int64).reshape(-1, 4)


def _check(a: Any, shape: tuple[int, ...], dtype: Any, name: str) -> None:
    if not isinstance(a, np.ndarray) or a.shape != tuple(shape) or a.dtype != np.dtype(dtype):
        got = (getattr(a, "shape", None), getattr(a, "dtype", type(a).__name__))
        raise ValueError(f"{name}: expected shape {tuple(shape)} and dtype {np.dtype(dtype)}, got {got}")
