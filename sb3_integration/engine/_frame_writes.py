"""The frame store's write path: rows of stacks into streams of distinct frames.

:class:`FrameWrites` is the part of :class:`~sb3_integration.engine.frames.FrameStore` that
writes (``put``, ``put_row``, ``release_before``, ``clear`` and the steps behind them);
the module docstring of :mod:`sb3_integration.engine.frames` describes the streams, the
descriptors and the ring it maintains. A row goes to the native writer
(:mod:`sb3_integration.engine._native_put`) when it can, in one call for every env and
every kind of stack; the Python path here is the reference it matches and what it
falls back to. Crash safety: streams are marked stale before they move, a stream's
head moves last (frames past it are invisible), frees happen before ``released``
moves, and whole states (:class:`~sb3_integration.engine.frame_ring.RingState`) are installed in one
assignment.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from chunkstore import ChunkedArray, native
from chunkstore.device import DeviceArray
from sb3_integration.engine.frame_ring import RingState, RingView, UndoRecord
from sb3_integration.engine.frame_state import FAR, UNWRITTEN, WRAP
from sb3_integration.engine.stacking import StackLayout, detect_layout, is_zero, same

__all__ = ["DETECT_MAX_PUTS", "FrameWrites"]

#: stacks kept as plain copies while the layout is not known yet, at most
DETECT_MAX_PUTS = 32
#: the ring grows by half when a stream needs more room
_GROWTH = 1.5


class FrameWrites(RingView):
    """The write path of :class:`~sb3_integration.engine.frames.FrameStore` (a base class of it, never used alone).

    Its state is ``self._ring`` (:class:`~sb3_integration.engine.frame_ring.RingState`), replaced
    whole by one assignment; its fields read as the store's attributes (``layout``, ``heads``, ...).
    """

    _lock: threading.RLock
    obs_shape: tuple[int, ...]
    dtype: np.dtype
    n_rows: int
    n_envs: int
    stacks_per_row: int
    dedup: bool
    axis_order: tuple[int, ...]
    name: str

    if TYPE_CHECKING:  # defined by FrameStore
        @property
        def chunk_len(self) -> int: ...
        @property
        def ring_frames(self) -> int: ...
        @property
        def max_ring_frames(self) -> int: ...

        def _check_open(self) -> None: ...
        def _decide(self, layout: StackLayout) -> None: ...
        def _round(self, frames: int) -> int: ...

    def _blank_ring(self, layout: StackLayout | None = None, frames: ChunkedArray | DeviceArray | None = None,
                    used: list[bool] | None = None) -> RingState:
        """A state with nothing written (:meth:`RingState.blank`), of this store's geometry."""
        return RingState.blank(self.n_rows, self.n_envs, self.stacks_per_row, self.obs_shape, self.dtype,
                               layout, frames, used)

    # -- writing -------------------------------------------------------------------
    def put(self, which: int, row: int, x: np.ndarray, attempt: Any = None) -> None:
        """Store ``x`` (``(n_envs, *obs_shape)``, our dtype, validated by the caller) at ``[which, row]``.

        ``attempt`` (see :meth:`put_row`) makes a retried, uncommitted write leave no frame behind.
        """
        with self._lock:
            self._check_open()
            if attempt is not None:
                self._begin_attempt(row, attempt)
            if self._ring.layout is None:
                self._put_pending(which, row, x)
            elif not self._put_native(row, (x,), (which,)):
                self._put(which, row, x)

    def put_row(self, row: int, stacks: Sequence[np.ndarray], attempt: Any = None) -> None:
        """Store ``stacks[w]`` at ``[w, row]`` for every kind ``w``, atomically for readers.

        Every env and every kind in one native call when it can (:mod:`sb3_integration.engine._native_put`).

        ``attempt`` is the owner's name for the write it is making (any value but None; the
        buffers pass their count of committed adds): the same for every try of one add, new
        once the add committed. A try that comes with the ``attempt`` of an earlier try first
        undoes it (:meth:`abandon`): an add interrupted after its frames were written and
        before its row committed leaves no frame live in the ring, so retries cannot
        overflow it. With None the row is written as it comes.
        """
        with self._lock:
            self._check_open()
            if attempt is not None:
                self._begin_attempt(row, attempt)
            if self._ring.layout is not None and self._put_native(row, stacks, range(len(stacks))):
                return
            for which, x in enumerate(stacks):
                self.put(which, row, x)

    def _begin_attempt(self, row: int, attempt: Any) -> None:
        """Undo an uncommitted earlier try of ``attempt``, then remember where this one starts."""
        record = self._ring.undo[0]
        if record is not None and record[0] == attempt:
            self._roll_back(record)
        st = self._ring  # (after a roll back: the new state, with the same undo cell)
        # nothing to undo while the layout is unknown: pending stacks are not in a stream
        # (the put that decides the layout forgets this record: _decide installs a state with none)
        st.undo[0] = None if st.layout is None else (attempt, row, st.heads.copy())  # one step

    def abandon(self, attempt: Any) -> None:
        """The owner's add ``attempt`` failed before it committed: its frames leave the streams.

        Repeating it, or a later :meth:`put_row` with the same ``attempt``, is harmless. The
        row being written reads as zeros until it is written again (it was torn anyway).
        """
        with self._lock:
            record = self._ring.undo[0]
            if record is not None and record[0] == attempt:
                self._roll_back(record)

    def _roll_back(self, record: UndoRecord) -> None:
        """Streams back to where try ``undo`` began (one step; repeatable: it installs copies).

        Frames past the old heads are invisible from then on, and are overwritten in place
        by the next frames (a chunk sealed meanwhile is reopened). The streams are marked
        stale (their last stacks may be the abandoned ones) and the row's descriptors
        unwritten (they may point past the heads).
        """
        _, row, heads = record
        st = self._ring
        pads = st.pads.copy()
        pads[:, row] = UNWRITTEN
        # one step; the undo cell goes along, so repeating the roll back is harmless
        self._ring = replace(st, heads=heads.copy(), has_last=np.zeros(self.n_envs, bool), pads=pads)

    def _put_native(self, row: int, stacks: Sequence[np.ndarray], whiches: Sequence[int]) -> bool:
        """Store a row with one native call (:mod:`sb3_integration.engine._native_put`); False if it cannot."""
        writer = self._row_writer()
        return writer is not None and bool(writer.store(self, row, stacks, whiches))

    def _row_writer(self) -> Any:
        """This store's native writer (built once per layout), or None: no native layer, or no open chunks."""
        nat, st = _native_writer(), self._ring
        if nat is None or st.layout is None or st.frames is None or not st.frames.supports_native_writes:
            return None
        writer = self.__dict__.get("_writer")
        if writer is None or writer.layout is not st.layout:
            writer = nat.RowWriter(st.layout, self.obs_shape, self.dtype.itemsize, self.n_envs, self.chunk_len,
                                   self.dedup, self.stacks_per_row)
            self.__dict__["_writer"] = writer
        return writer

    def _put_pending(self, which: int, row: int, x: np.ndarray) -> None:
        st = self._ring
        pending = st.pending
        prev = pending[-1][2] if pending else None
        pending.append((which, row, np.array(x, copy=True)))
        st.used[which] = True
        if prev is not None:
            for e in range(self.n_envs):
                lay = detect_layout(prev[e], x[e], self.axis_order)
                if lay is not None:
                    self._decide(lay)
                    return
        if len(pending) >= DETECT_MAX_PUTS:
            self._decide(StackLayout.whole(self.obs_shape))

    def _put(self, which: int, row: int, x: np.ndarray) -> None:
        """The write path in Python, env by env (the reference the native path matches)."""
        for e in range(self.n_envs):
            self._put_env(which, row, e, x[e])
        self._ring.used[which] = True

    def _put_env(self, which: int, row: int, e: int, xe: np.ndarray) -> None:
        st = self._ring
        lay, last = st.layout, st.last
        assert lay is not None and last is not None
        k = lay.depth
        if self.dedup and st.has_last[e]:
            le = last[e]
            if same(xe, le):
                self._describe(which, row, e, int(st.last_slot[e]), int(st.last_pad[e]))
                return
            if k > 1 and same(xe[lay.older], le[lay.newer]):
                pad = max(int(st.last_pad[e]) - 1, 0)
                st.has_last[e] = False  # the stream moves: its last stack is stale until _remember
                self._append(e, lay.frames(xe, k - 1))
                self._remember(which, row, e, xe, pad)
                return
        xs = lay.frames(xe, 0)
        pad = 0
        while pad < k and is_zero(xs[pad]):
            pad += 1
        st.has_last[e] = False
        self._append(e, xs[pad:])
        self._remember(which, row, e, xe, pad)

    def _remember(self, which: int, row: int, e: int, x: np.ndarray, pad: int) -> None:
        st = self._ring
        newest = int(st.heads[e]) - 1
        assert st.last is not None
        st.last[e] = x
        self._describe(which, row, e, newest, pad)
        st.last_slot[e], st.last_pad[e] = newest, pad
        st.has_last[e] = True  # last: the stream, its last stack and its descriptors agree

    def _describe(self, which: int, row: int, e: int, newest: int, pad: int) -> None:
        st = self._ring
        st.pads[which, row, e] = pad
        if which == 0:
            st.slots[row, e] = newest % WRAP
            if self.stacks_per_row > 1:  # the other kinds were relative to the old first stack
                st.pads[1:, row, e] = UNWRITTEN
                if st.far:
                    for w in range(1, self.stacks_per_row):
                        st.far.pop((w, row, e), None)
            return
        delta = newest - self._newest(0, row, e) if st.pads[0, row, e] != UNWRITTEN else FAR
        if 0 <= delta < FAR:
            st.deltas[which - 1, row, e] = delta
            if st.far:
                st.far.pop((which, row, e), None)
        else:
            st.deltas[which - 1, row, e] = FAR
            st.far[(which, row, e)] = newest % WRAP

    def _newest(self, which: int, row: int, e: int) -> int:
        """Global frame number of the newest frame of a written stack."""
        st = self._ring
        head = int(st.heads[e])
        if which and st.deltas[which - 1, row, e] != FAR:
            return self._newest(0, row, e) + int(st.deltas[which - 1, row, e])
        low = st.far[(which, row, e)] if which else int(st.slots[row, e])
        return head - ((head - low) % WRAP)

    def _append(self, e: int, frames: np.ndarray) -> None:
        """Append ``frames`` (``(m, *frame_shape)``) to env ``e``'s stream: one copy into the open chunk."""
        m = len(frames)
        if m == 0:
            return
        st = self._ring
        g = int(st.heads[e])
        if g + m - int(st.released[e]) > self.ring_frames:
            self._grow(g + m - int(st.released[e]))
        arr, F = st.frames, self.ring_frames
        assert arr is not None
        base, local = e * F, g % F
        first = min(m, F - local)  # the run wraps around the ring at most once
        if m == 1:
            arr[base + local] = frames[0]
        else:
            arr.write(base + local, frames[:first])
            if first < m:
                arr.write(base, frames[first:])
        st.heads[e] = g + m  # frames past the head are invisible: this is the step that adds them

    def _grow(self, need: int) -> None:
        """Grow the ring by half (at least to ``need`` frames per env), keeping every live chunk."""
        st = self._ring
        arr, L, old = st.frames, self.chunk_len, self.ring_frames
        assert arr is not None
        new = min(max(self._round(need), self._round(int(_GROWTH * old))), self.max_ring_frames)
        if new < need:  # pragma: no cover - the worst-case bound makes this unreachable
            raise RuntimeError(f"{self.name}: a stream needs {need} live frames, over its bound {new}")
        src, dst = [], []
        for e in range(self.n_envs):
            live = np.arange(int(st.released[e]) // L, -(-int(st.heads[e]) // L), dtype=np.int64)
            src.append(e * (old // L) + live % (old // L))
            dst.append(e * (new // L) + live % (new // L))
        arr.remap(new * self.n_envs, np.concatenate(src), np.concatenate(dst))  # one step: ring_frames follows

    def release_before(self, row: int) -> None:
        """``row`` is the oldest live row: free whole chunks of frames no live row can use.

        Call it after the ring of rows has wrapped (every row written), before
        overwriting the row that precedes ``row``, or up to ``RELEASE_LAG_CHUNKS`` chunks of
        rows later (:mod:`sb3_integration.engine.frame_state`). Repeating it is harmless.
        """
        with self._lock:
            st = self._ring
            if st.layout is None or st.frames is None:
                return
            writer = self._row_writer()
            if writer is not None and writer.release(self, row):
                return
            k, L = st.layout.depth, self.chunk_len
            used = [w for w in range(self.stacks_per_row) if st.used[w]]
            for e in range(self.n_envs):
                if bool((st.pads[used, row, e] == UNWRITTEN).all()):  # (no generator: see RowWriter.release)
                    continue  # not written yet (rows filled out of order): nothing to infer from it
                low = int(st.heads[e]) - k
                for w in used:
                    if st.pads[w, row, e] != UNWRITTEN:
                        low = min(low, self._newest(w, row, e) - (k - 1))
                aligned = max(low, 0) // L * L
                if aligned > st.released[e]:
                    self._free(e, int(st.released[e]), aligned)
                    st.released[e] = aligned  # after the frees: an interrupt repeats them, harmlessly

    def _free(self, e: int, g0: int, g1: int) -> None:
        arr, F = self._ring.frames, self.ring_frames
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
            self._check_open()
            st = self._ring
            st.has_last[:] = False  # first: no put extends a stream about to be freed
            st.pads[...] = UNWRITTEN  # every row reads as zeros from here on
            if st.frames is not None:
                st.frames.clear()
            self._ring = self._blank_ring(st.layout, st.frames)  # one step (no undo record: a fresh cell)


_WRITER: Any = None  # sb3_integration.engine._native_put once imported


def _native_writer() -> Any:
    """The native write path's module when the native layer is available (not disabled), else None."""
    global _WRITER
    if not native.available():
        return None
    if _WRITER is None:
        from chunkstore.native.guard import interrupts_deferred

        with interrupts_deferred():  # its kernels are guarded from here on (chunkstore.native.guard)
            from sb3_integration.engine import _native_put

        _WRITER = _native_put
    return _WRITER

