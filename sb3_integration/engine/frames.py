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

The ring. All envs share one :class:`~chunkstore.ChunkedArray` of frames
(``frames``), in regions of ``ring_frames`` frames (``F``, a whole number of
chunks); frame ``g`` of env ``e`` is item ``e * F + g % F``. ``F`` starts at about
one frame per row, which is what
Atari stacks need, and grows by half (up to the worst case, ``depth`` frames
per stack) when a stream would overwrite a frame that a live row still uses:
growing only moves chunk-table entries (:meth:`ChunkedArray.remap`), nothing is
decoded. Because descriptors hold global frame numbers, they do not change.
When the owner overwrites its oldest rows it calls :meth:`FrameStore.release_before`
(at least once every ``RELEASE_LAG_CHUNKS`` chunks of rows: the ring's bound leaves room
for that lag), and whole chunks of frames no live row uses are freed.

Reading. :meth:`FrameStore.gather` turns descriptors into frame ids (``-1`` for
padding) and reads every frame of a batch, for every kind of stack, with one
:meth:`ChunkedArray.take_into` straight into the output stacks (channel-first or
channel-last): one native call per batch.

Frames on a device. With ``device`` (a torch device: ``"cuda"``, ``"cpu"``,
``"meta"``) the frame array is a :class:`~chunkstore.device.DeviceArray` instead of a
ChunkedArray: the same engine (streams, descriptors, dedup, ring, releases) writes
it, and :meth:`FrameStore.gather` returns torch tensors on that device. The host
computes the frame ids of a batch (:meth:`FrameStore.frame_ids`), the device
decodes the frames and assembles the stacks (:mod:`sb3_integration.engine.device_stacks`);
no device data is read on the host. Its state (:meth:`FrameStore.state_dict`) holds
the frames as a host snapshot encoded with ``codec``, so files and pickles are the
same as a host store's, and :meth:`FrameStore.load_state_dict` puts them back on the
device. ``options.budget_bytes`` (or ``budget``, a shared :class:`~chunkstore.device.heap.DeviceBudget`)
caps the device bytes of record segments; past it the oldest segments move to host RAM, still read.

The buffers' seam. What a buffer asks of a frame store is :class:`FrameStoreAPI`
(put a row, release, gather, clear, state in and out, close, sizes); the buffers
call nothing else, so a second implementation plugs in without touching them.

Interrupts. A KeyboardInterrupt (or any exception) at any point of a call leaves
every row other than the one being written as it was, and the store usable:
a stream is marked "no last stack" before it moves and marked again only once
its frames, descriptors and last stack agree; growing the ring is one swap of
the frame array's table (``ring_frames`` is derived from it); deciding the
layout, clearing and loading a state build their new state apart and install it
with one assignment (:class:`~sb3_integration.engine.frame_ring.RingState`).
Reads and writes hold the store's lock in ``with`` blocks.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from chunkstore import ChunkedArray, LRUChunkCache, Tier
from chunkstore.array import ArraySnapshot
from chunkstore.device import DeviceArray
from sb3_integration.engine._frame_writes import DETECT_MAX_PUTS, FrameWrites, _native_writer
from sb3_integration.engine._outputs import OutputBlocks
from sb3_integration.engine.api import NEXT, OBS, FrameStoreAPI
from sb3_integration.engine.device_stacks import (
    META_NO_DATA,
    available_device,
    check_device,
    device_info,
    read_stacks,
)
from sb3_integration.engine.frame_ids import stack_frame_ids
from sb3_integration.engine.frame_ring import RingState
from sb3_integration.engine.frame_state import (
    FAR,
    UNWRITTEN,
    FrameStoreState,
    check_state,
    far_array,
    pickle_state,
    ring_bound,
    unpickle_state,
)
from sb3_integration.engine.options import StoreOptions, check_chunk_len
from sb3_integration.engine.stacking import (
    StackLayout,
    bitwise_comparable,
    detect_layout,
    stack_candidates,
)

__all__ = [
    "DETECT_MAX_PUTS",
    "FAR",
    "NEXT",
    "OBS",
    "UNWRITTEN",
    "FrameStore",
    "FrameStoreAPI",
    "FrameStoreState",
    "StackLayout",
    "detect_layout",
]

#: frames per row the ring starts with: Atari stacks share all but one frame, and each
#: episode adds one more (its first frame); the ring grows by half when that is short
_START_FRAMES_PER_ROW = 1.25


class FrameStore(FrameWrites):
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
    options
        How the frames are kept, whole (:class:`~sb3_integration.engine.options.StoreOptions`,
        default ``StoreOptions()``; its fields given as keywords, ``chunk_len=16``, replace
        its own). ``tier``, a Tier, is shared (its giver closes it); a factory's tier is the
        store's own. With ``device`` the frames are a :class:`~chunkstore.device.DeviceArray`
        there and :meth:`gather` returns tensors (``codec`` then encodes saved states only).
    axis_order
        Axes tried for stacking, best guess first (default: last, then 0).
    name
        Shown in errors and :meth:`info`.
    cache, budget
        What several stores of one buffer share: a :class:`~chunkstore.LRUChunkCache`
        (default: a cache of ``options.cache_bytes`` of their own, none at 0) and a
        :class:`~chunkstore.device.heap.DeviceBudget` (default: ``options.budget_bytes``).

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
        options: StoreOptions | None = None,
        stacks_per_row: int = 2,
        axis_order: Sequence[int] = (-1, 0),
        name: str = "observations",
        cache: LRUChunkCache | int | None = None,
        budget: Any = None,
        **fields: Any,
    ) -> None:
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.dtype = np.dtype(dtype)
        self.n_rows, self.n_envs = int(n_rows), int(n_envs)
        self.stacks_per_row = int(stacks_per_row)
        if min(self.n_rows, self.n_envs, self.stacks_per_row) < 1:
            raise ValueError(f"{name}: n_rows, n_envs and stacks_per_row must be >= 1")
        budget = fields.pop("device_budget", None) if budget is None else budget
        opts = StoreOptions.merge(options, fields, None if isinstance(cache, LRUChunkCache) else cache, "FrameStore")
        chunk_len = check_chunk_len(opts.chunk_len, self.obs_shape, self.dtype, name)
        self.options = opts.replace(chunk_len=chunk_len, device=check_device(opts.device, self.dtype, name))
        self.cache = cache if isinstance(cache, LRUChunkCache) else self.options.cache_bytes
        self.budget = self.options.budget_bytes if budget is None else budget
        self.dedup = bool(self.options.dedup) and bitwise_comparable(self.dtype)  # floats by bits, or no sharing
        self.axis_order = tuple(axis_order)
        self.name = name
        self._lock = threading.RLock()  # put / gather / release are atomic to each other
        self._closed = False
        self._ring = self._blank_ring()
        _native_writer()  # loaded now, not in the middle of a first put (which would then take more steps)
        if not self.dedup or not self.obs_shape or not stack_candidates(self.obs_shape, self.axis_order):
            self._decide(StackLayout.whole(self.obs_shape))

    # -- state: self._ring, a RingState (sb3_integration.engine.frame_ring) -----------
    chunk_len = property(lambda self: self.options.chunk_len, doc="Frames per chunk.")
    codec = property(lambda self: self.options.codec, doc="Codec of the frames (of a device store's saved state).")
    tier = property(lambda self: self.options.tier, doc="Tier of a host store's chunks, or a factory of one.")
    threads = property(lambda self: self.options.threads, doc="Threads sharing one batch's chunks.")
    device = property(lambda self: self.options.device, doc="torch device of the frames (None: host memory).")

    @property
    def ring_frames(self) -> int:
        """Frames per env region of the ring (0 before the layout is known)."""
        frames = self._ring.frames
        return 0 if frames is None else frames.capacity // self.n_envs

    @property
    def frames_written(self) -> int:
        """Frames stored since the last clear, all envs."""
        return int(self._ring.heads.sum())

    @property
    def max_ring_frames(self) -> int:
        """The worst case (:func:`~sb3_integration.engine.frame_state.ring_bound`)."""
        layout = self._ring.layout
        k = 1 if layout is None else layout.depth
        return ring_bound(self.n_rows, self.stacks_per_row, k, self.chunk_len)

    def _round(self, frames: int) -> int:
        L = self.chunk_len
        return -(-frames // L) * L

    def _new_frames(self, layout: StackLayout, ring_frames: int) -> ChunkedArray | DeviceArray:
        if self.device is not None:
            return DeviceArray(ring_frames * self.n_envs, layout.frame_shape, self.dtype, chunk_len=self.chunk_len,
                               device=self.device, budget_bytes=self.budget, name=f"{self.name}.frames",
                               max_open=self.n_envs + 1)
        tier = self._make_tier()
        return ChunkedArray(
            ring_frames * self.n_envs, layout.frame_shape, self.dtype, chunk_len=self.chunk_len,
            codec=self.codec, tier=tier, cache=self.cache, threads=self.threads,
            name=f"{self.name}.frames",
            max_open=self.n_envs + 1,  # each env writes its own region sequentially
            own_tier=self._owns_tier or tier is None,
        )

    @property
    def _owns_tier(self) -> bool:
        """``tier`` is a factory: each frame array gets a tier of its own, closed with it."""
        return callable(self.tier) and not isinstance(self.tier, Tier)

    def _make_tier(self) -> Tier | None:
        """The tier for a new frame array: a fresh one from the factory, or the shared one given."""
        if callable(self.tier) and not isinstance(self.tier, Tier):
            made = self.tier()
            if not isinstance(made, Tier):  # (the first add() after the layout is known calls it)
                raise TypeError(f"{self.name}: the tier factory {self.tier!r} returned {type(made).__name__} "
                                f"{made!r}; it must return a chunkstore Tier (MemoryTier, DiskTier, ...)")
            return made
        return self.tier

    def _decide(self, layout: StackLayout) -> None:
        """Fix the layout, build the ring, and store what waited for it: one step for readers."""
        start = int((self.n_rows + 1) * _START_FRAMES_PER_ROW) + layout.depth + 2 * self.chunk_len
        old = self._ring
        frames = self._new_frames(layout, min(self._round(start), ring_bound(self.n_rows, self.stacks_per_row,
                                                                             layout.depth, self.chunk_len)))
        scratch = FrameStore.__new__(FrameStore)  # this store's config with the new state: written apart
        scratch.__dict__.update(self.__dict__)  # (the config only: the state is the one _ring below)
        scratch._ring = self._blank_ring(layout, frames, list(old.used))
        final = {(w, r): i for i, (w, r, _) in enumerate(old.pending)}  # rows overwritten meanwhile are dead
        for i, (which, row, x) in enumerate(old.pending):
            if final[(which, row)] == i:
                scratch._put(which, row, x)
        self._ring = scratch._ring  # the one step

    def set_layout(self, layout: StackLayout) -> None:
        """Use ``layout`` instead of detecting one (several stores whose chunks must fit each other).

        Stacks already waiting for detection are stored under it. ValueError if a
        different layout was already decided, or it does not fit ``obs_shape``.
        """
        if tuple(layout.obs_shape) != self.obs_shape:
            raise ValueError(f"{self.name}: a layout of {layout.obs_shape} does not fit observations of "
                             f"{self.obs_shape}")
        with self._lock:
            if self.layout is None:
                self._decide(layout)
            elif self.layout != layout:
                raise ValueError(f"{self.name}: the layout is already {self.layout.describe()}")

    def ensure_layout(self) -> StackLayout:
        """Decide the layout now (whole observations if nothing stacked yet)."""
        with self._lock:
            layout = self._ring.layout
            if layout is None:
                self._decide(StackLayout.whole(self.obs_shape))
                layout = self._ring.layout
                assert layout is not None
            return layout

    # -- reading -------------------------------------------------------------------
    def frame_ids(self, which: Any, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """Item ids in the frame array of stacks ``[which, rows, envs]``: ``(n, depth)``, -1 = zeros.

        ``which``, ``rows`` and ``envs`` broadcast together (int64, in range)
        (:func:`sb3_integration.engine.frame_ids.stack_frame_ids`).
        """
        layout = self.ensure_layout()
        return stack_frame_ids(self._ring, which, rows, envs, layout.depth, self.ring_frames)

    def newest_frames(self, which: Any, rows: np.ndarray, envs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The global frame number of each stack's newest frame in its env's stream, and its padding.

        Frame ``j`` of stack ``i`` is stream frame ``g[i] - (depth - 1) + j`` (zeros for
        ``j < pad[i]``): what a writer ships to another process's store. A stack that is
        all padding has ``pad == depth`` and no meaningful ``g``.
        """
        ids = self.frame_ids(which, rows, envs)
        envs = np.asarray(envs, np.int64)
        ring_frames, heads = self.ring_frames, self._ring.heads[envs]
        local = ids[:, -1] - envs * ring_frames  # position in the env's ring (an all-padding stack: meaningless)
        newest = heads - 1 - ((heads - 1 - local) % ring_frames)
        return newest, (ids < 0).sum(axis=1)

    def gather(self, requests: Sequence[tuple[Any, np.ndarray]], envs: np.ndarray) -> list[Any]:
        """Read several index sets in one pass over the chunks.

        Each request is ``(which, rows)``: ``which`` an int or an int array like
        ``rows``; ``rows`` and ``envs`` are 1-D, in range, of equal length.
        Returns one ``(len(envs), *obs_shape)`` array per request, in order,
        each a C-contiguous slice of one output block read with one native call;
        with frames on a device, tensors there (one device read, no host reads).
        """
        with self._lock:
            self._check_open()
            lay = self.ensure_layout()
            st, n, m = self._ring, len(envs), len(requests)  # (read after ensure_layout: it may install one)
            envs = np.asarray(envs, np.int64)
            if m == 1:
                which, rows = requests[0]
            else:  # all requests in one vectorised pass
                rows = np.concatenate([r for _, r in requests]).astype(np.int64, copy=False)
                if rows.shape != (m * n,):
                    raise ValueError(f"each request's rows must be 1-D, {n} long like envs")
                ws = tuple(w for w, _ in requests)  # an int each (one kind of stack), or an int array like rows
                which = (self._which_of(ws, n) if all(type(w) is int for w in ws)
                         else np.concatenate([np.broadcast_to(w, n) for w in ws]).astype(np.int64, copy=False))
                envs = np.concatenate((envs,) * m)  # (np.tile's Python costs ~5 us a sample)
            frames = st.frames
            assert frames is not None  # (the layout is known)
            if frames.device is not None:  # tensors on the frames' device
                ids = self.frame_ids(which, rows, envs) if n else np.zeros((0, lay.depth), np.int64)
                return read_stacks(frames, lay, ids, m)
            outputs = self.__dict__.get("_outputs") or self.__dict__.setdefault("_outputs", OutputBlocks())
            out = outputs.take((m * n, *self.obs_shape), self.dtype)  # reused once no batch refers to it
            if n:
                ids = stack_frame_ids(st, which, rows, envs, lay.depth, self.ring_frames)
                frames.take_into(ids, lay.split(out), checked=False)
            return [out[:n], out[n:]] if m == 2 else [out[i * n:(i + 1) * n] for i in range(m)]

    def _which_of(self, ws: tuple[int, ...], n: int) -> np.ndarray:
        """``ws[i]`` repeated ``n`` times each; the last one is kept (a sampler asks the same), so its
        readers never write it (left writeable: a read-only array would compile the kernels again)."""
        kept = self.__dict__.get("_which")
        if kept is None or kept[0] != (ws, n):
            kept = self.__dict__["_which"] = ((ws, n), np.repeat(np.array(ws, np.int64), n))
        return kept[1]

    def view(self, which: int) -> None:
        """None: a frame store's stacks are read through :meth:`gather` (the buffer's views call it)."""
        return None

    @property
    def output_nbytes(self) -> int:
        """Bytes of the output blocks :meth:`gather` keeps for reuse (:mod:`sb3_integration.engine._outputs`)."""
        outputs = self.__dict__.get("_outputs")
        return 0 if outputs is None else outputs.nbytes

    # -- sizes -----------------------------------------------------------------------
    @property
    def index_nbytes(self) -> int:
        """Descriptors (slots, deltas, pads, the rare far deltas) and the kept last stacks."""
        st = self._ring
        last = st.last.nbytes if st.last is not None else 0
        return st.slots.nbytes + st.deltas.nbytes + st.pads.nbytes + 32 * len(st.far) + last

    @property
    def nbytes_stored(self) -> int:
        """Compressed frames, open chunks, chunk table, descriptors, and stacks awaiting detection.

        With frames on a device: the device bytes (records, references, read inbox) and
        the frame array's host bytes (per-frame index, open chunks, spilled segments,
        staging buffers, reference copies) instead of chunks and table.
        """
        st = self._ring
        total = self.index_nbytes + sum(x.nbytes for _, _, x in st.pending)
        if st.frames is not None:
            total += st.frames.nbytes_stored
        return total

    @property
    def device_nbytes(self) -> int:
        """Bytes of device memory the frames hold (0 for host frames)."""
        frames = self._ring.frames
        return 0 if frames is None else frames.device_nbytes

    def held_info(self) -> dict[str, int]:
        """Every byte of this process's memory the store holds, by kind (:attr:`nbytes_held` sums them).

        The frame array's (:meth:`ChunkedArray.held_info`: its tier with slack, open
        chunks, spare buffers, chunk table; frames on a device: the array's host bytes),
        the descriptors and last stacks (``index``), stacks awaiting layout detection,
        and the output blocks kept for reuse by :meth:`gather`. Device memory is
        :attr:`device_nbytes`.
        """
        st = self._ring
        held = {"tier": 0, "open_chunks": 0, "spare_buffers": 0, "chunk_table": 0}
        if st.frames is not None:
            held.update(st.frames.held_info())
        held["index"] = self.index_nbytes
        held["pending"] = sum(x.nbytes for _, _, x in st.pending)
        held["output_blocks"] = self.output_nbytes
        return held

    @property
    def nbytes_held(self) -> int:
        """What this store costs the process, slack, spare and output buffers included."""
        return sum(self.held_info().values())

    def info(self) -> dict[str, Any]:
        st = self._ring
        if st.frames is not None and st.frames.device is not None:
            return device_info(self, st.frames)
        layout, arr = st.layout, (st.frames.info() if st.frames is not None else None)
        return {
            "name": self.name,
            "obs_shape": self.obs_shape,
            "dtype": str(self.dtype),
            "layout": layout.describe() if layout else "undetected",
            "stack_axis": layout.axis if layout else None,
            "frame_width": layout.width if layout else None,
            "depth": layout.depth if layout else None,
            "ring_frames": self.ring_frames if layout else None,
            "frames_written": self.frames_written,
            "frames_cbytes": arr["cbytes"] if arr else 0,
            "sealed_chunks": arr["nchunks"] if arr else 0,
            "sealed_cratio": arr["cratio"] if arr else 1.0,
            "index_nbytes": self.index_nbytes,
            "chunk_table_nbytes": arr["table_nbytes"] if arr else 0,
            "nbytes_stored": self.nbytes_stored,
            "nbytes_held": self.nbytes_held,
            "held": self.held_info(),
            "codec": arr["codec"] if arr else str(self.codec),
            "chunk_len": self.chunk_len,
            "device": None if self.device is None else str(self.device),
        }

    # -- ownership -------------------------------------------------------------------
    def close(self) -> None:
        """Give the frames' storage back (the tier too if this store made it); unusable after."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._ring.frames is not None:
                self._ring.frames.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.name}: the store is closed")

    # -- state in, state out ---------------------------------------------------------
    def state_dict(self) -> FrameStoreState:
        """This store at this moment (copies of its small arrays, the frames as a snapshot): close it when done.

        The store may go on being written meanwhile; the state does not change.
        """
        with self._lock:
            st = self._ring
            return FrameStoreState(
                obs_shape=self.obs_shape, dtype=self.dtype, n_rows=self.n_rows, n_envs=self.n_envs,
                stacks_per_row=self.stacks_per_row, dedup=self.dedup, layout=st.layout,
                ring_frames=self.ring_frames if st.layout is not None else None,
                slots=st.slots.copy(), deltas=st.deltas.copy(), far=far_array(st.far),
                pads=st.pads.copy(), heads=st.heads.copy(), released=st.released.copy(),
                last_slot=st.last_slot.copy(), last_pad=st.last_pad.copy(), has_last=st.has_last.copy(),
                last=None if st.last is None else st.last.copy(), used=list(st.used),
                frames=self._frames_snapshot(),
                pending=[(w, r, x.copy()) for w, r, x in st.pending],
            )

    def _frames_snapshot(self) -> ArraySnapshot | None:
        """The frames now: a ChunkedArray's snapshot, or device frames encoded on the host with ``codec``."""
        frames = self._ring.frames
        if frames is None:
            return None
        if frames.device is not None and frames.device.type == "meta":  # before torch's error
            raise ValueError(f"{self.name}: {META_NO_DATA}: it cannot be saved, pickled or captured "
                             "(state_dict)")
        return frames.snapshot(self.codec)

    def load_state_dict(self, state: FrameStoreState) -> None:
        """Become ``state`` (from :meth:`state_dict`, a file or a pickle), in one step.

        A frames ChunkedArray in the state is adopted as it is (its tier with it); a
        snapshot or plain state is copied into a new array on this store's tier.
        A store with ``device`` copies the frames of any of them onto the device
        (a ChunkedArray given is read, not kept).
        Raises ValueError (and changes nothing) when the state does not fit
        (:func:`sb3_integration.engine.frame_state.check_state`); else installs it in one step.
        """
        depth = state.layout.depth if state.layout else 1
        check_state(state, obs_shape=self.obs_shape, dtype=self.dtype, n_rows=self.n_rows, n_envs=self.n_envs,
                    stacks_per_row=self.stacks_per_row, dedup=self.dedup, chunk_len=self.chunk_len,
                    max_ring_frames=ring_bound(self.n_rows, self.stacks_per_row, depth, self.chunk_len),
                    name=self.name)
        frames = self._state_frames(state.frames, state.layout)
        known = state.layout is not None
        new = RingState(
            layout=state.layout, frames=frames if known else None, slots=state.slots, deltas=state.deltas,
            far={(int(which), int(row), int(env)): int(number) for which, row, env, number in state.far.tolist()},
            pads=state.pads, used=[bool(u) for u in state.used], heads=state.heads, released=state.released,
            last_slot=state.last_slot, last_pad=state.last_pad, has_last=state.has_last,
            last=state.last if known else None, pending=list(state.pending), undo=[None],
        )
        with self._lock:
            old = self._ring.frames
            self._ring = new  # one step
            if old is not None and old is not new.frames:
                old.close()

    def _state_frames(self, given: Any, layout: StackLayout | None) -> ChunkedArray | DeviceArray | None:
        """The frame array a state's ``frames`` becomes in this store (see :meth:`load_state_dict`)."""
        frames: ChunkedArray | DeviceArray | None
        if self.device is not None and given is not None and layout is not None:
            frames = self._device_frames(given)
        elif isinstance(given, ArraySnapshot):
            tier = self._make_tier()
            frames = ChunkedArray.from_state(given, tier=tier, cache=self.cache)
            frames.own_tier = self._owns_tier or tier is None
        elif isinstance(given, dict):
            frames = ChunkedArray.from_state(given)
        else:
            frames = given
        if frames is not None:
            frames.max_open = self.n_envs + 1
        return frames

    def _device_frames(self, frames: Any) -> DeviceArray:
        """The frames of a state (ChunkedArray, snapshot or pickled state) copied onto the device."""
        if isinstance(frames, DeviceArray):
            return frames
        # a ChunkedArray (a loaded file's) is read, not kept: not closed either, since the arrays of
        # one file share its mapping; it is released with the last of them
        return DeviceArray.from_state(frames, device=self.device, budget_bytes=self.budget,
                                      name=f"{self.name}.frames", max_open=self.n_envs + 1)

    def share_cache(self, cache: LRUChunkCache | int) -> None:
        """Use one shared decoded-chunk cache (after unpickling); 0 for none. Device frames have none."""
        self.cache = cache
        frames = self._ring.frames
        if isinstance(frames, ChunkedArray):
            frames.cache = cache if isinstance(cache, LRUChunkCache) else None

    # -- pickling: compressed chunks and small arrays, through the state -------------
    def _config(self) -> dict[str, Any]:
        """A pickle's config beside the state: geometry, budget (one buffer pickle shares it) and options' fields
        (no tier: the pickle holds the chunks themselves; the cache's size; the device by name)."""
        cache = self.cache.max_bytes if isinstance(self.cache, LRUChunkCache) else self.cache
        options = self.options.replace(tier=None, cache_bytes=int(cache or 0),
                                       device=None if self.device is None else str(self.device))
        return {"obs_shape": self.obs_shape, "dtype": self.dtype, "n_rows": self.n_rows, "n_envs": self.n_envs,
                "stacks_per_row": self.stacks_per_row, "axis_order": self.axis_order, "name": self.name,
                "budget": self.budget, **options.as_dict()}

    def __getstate__(self) -> dict[str, Any]:
        with self.state_dict() as state:
            return pickle_state(state, self._config())

    def __setstate__(self, data: dict[str, Any]) -> None:
        config, state = unpickle_state(data)
        init = {k: config.pop(k) for k in ("obs_shape", "dtype", "n_rows")}
        config["device"] = available_device(config.get("device"), config.get("name", "observations"))
        self.__init__(**init, **config)  # type: ignore[misc]  # a version-2 config: the old keywords
        self.load_state_dict(state)

