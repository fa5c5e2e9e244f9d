"""What a :class:`~sb3_integration.engine.frames.FrameStore` is, as data: its state in and out.

:class:`FrameStoreState` is the frame store's one state object: persistence
(:mod:`sb3_integration.persistence.files`) writes and reads it, pickling goes through
it (:func:`pickle_state` / :func:`unpickle_state`), and :func:`check_state`
refuses one that does not fit a store, or is not consistent in itself (streams,
descriptors and the last stack that disagree: see :func:`check_streams`), before
anything is changed. Loading a file, unpickling and ``load_state_dict`` all install
through it; ``chunkstore-verify`` (``tools/verify.py``) runs it on a saved buffer (:func:`check_own_state`).

A state taken from a live store (``FrameStore.state_dict()``) is one moment of
it: its small arrays are copies, and ``frames`` is a snapshot of the frame array
(:class:`~chunkstore.array.ArraySnapshot`) that keeps the captured chunks' bytes
intact while the store keeps being written. Close the state (or use it in a
``with`` block) when done with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from chunkstore import ChunkedArray
from chunkstore.array import ArraySnapshot
from sb3_integration.engine.packing import pack_array, unpack_array
from sb3_integration.engine.stacking import StackLayout

__all__ = ["FAR", "RELEASE_LAG_CHUNKS", "STATE_VERSION", "UNWRITTEN", "WRAP", "FrameStoreState", "check_own_state",
           "check_state", "check_streams", "far_array", "pickle_state", "ring_bound", "unpickle_state"]

#: version of a pickled frame store (1: 0.1.0's pickled ``__dict__``; 2: a config of FrameStore's keywords
#: before it took one StoreOptions, still read; 3: the config holds the StoreOptions fields)
STATE_VERSION = 3
#: the ``pad`` of a stack never written: more padding than any stack has frames
UNWRITTEN = 255
#: a ``delta`` too large for a uint8: the frame number is kept aside
FAR = 255
#: slots hold global frame numbers modulo this
WRAP = 1 << 32
#: an owner may overwrite up to this many chunks of rows between calls of ``release_before`` (the
#: replay buffers free every 4 chunks of rows, all at once: a call costs a few µs, most of it per call)
RELEASE_LAG_CHUNKS = 4
#: rows per block of the consistency check (:func:`check_streams`): its temporaries, about 70 bytes
#: per row of a block (replay, 1 env; measured by tracemalloc), stay near 70 MB
_CHECK_ROWS = 1 << 20

_PACKED = ("slots", "deltas", "pads")


@dataclass
class FrameStoreState:
    """Everything a :class:`FrameStore` is, as plain values and arrays.

    ``frames`` is the frame array (None until the layout is known): a
    ChunkedArray (read from a file), an ArraySnapshot (taken from a live store) or
    a ChunkedArray's plain state dict (from a pickle); the rest is small:
    descriptors, per-env streams, the last stack per env, and stacks still waiting
    for layout detection.
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
    frames: ChunkedArray | ArraySnapshot | dict[str, Any] | None = None
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

    def close(self) -> None:
        """Release the frame snapshot's hold on the store's tier (a no-op for other states)."""
        if isinstance(self.frames, ArraySnapshot):
            self.frames.close()

    def __enter__(self) -> FrameStoreState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def far_array(far: dict[tuple[int, int, int], int]) -> np.ndarray:
    """The far deltas ``{(which, row, env): g mod 2**32}`` as an ``(n, 4)`` int64 table."""
    return np.array([[w, r, e, g] for (w, r, e), g in sorted(far.items())], np.int64).reshape(-1, 4)


def _check(a: Any, shape: tuple[int, ...], dtype: Any, name: str) -> None:
    if not isinstance(a, np.ndarray) or a.shape != tuple(shape) or a.dtype != np.dtype(dtype):
        got = (getattr(a, "shape", None), getattr(a, "dtype", type(a).__name__))
        raise ValueError(f"{name}: expected shape {tuple(shape)} and dtype {np.dtype(dtype)}, got {got}")


def check_state(state: FrameStoreState, *, obs_shape: tuple[int, ...], dtype: np.dtype, n_rows: int,
                n_envs: int, stacks_per_row: int, dedup: bool, chunk_len: int, max_ring_frames: int,
                name: str) -> None:
    """Raise ValueError when ``state`` does not fit a store of this geometry (nothing is changed)."""
    want = (tuple(obs_shape), np.dtype(dtype), n_rows, n_envs, stacks_per_row, dedup)
    got = (tuple(state.obs_shape), np.dtype(state.dtype), state.n_rows, state.n_envs,
           state.stacks_per_row, state.dedup)
    if got != want:
        raise ValueError(f"{name}: saved as {got}, this store is {want} "
                         "(obs_shape, dtype, rows, envs, stacks per row, dedup)")
    n, spr = n_envs, stacks_per_row
    _check(state.slots, (n_rows, n), np.uint32, "slots")
    _check(state.deltas, (spr - 1, n_rows, n), np.uint8, "deltas")
    _check(state.far, (len(state.far), 4), np.int64, "far")
    _check(state.pads, (spr, n_rows, n), np.uint8, "pads")
    far = state.far
    if far.size and (far[:, 0].min() < 1 or far[:, 0].max() >= spr or far[:, 1].min() < 0
                     or far[:, 1].max() >= n_rows or far[:, 2].min() < 0 or far[:, 2].max() >= n
                     or far[:, 3].min() < 0 or far[:, 3].max() >= WRAP):
        raise ValueError(f"{name}: far deltas out of range")
    for field_name in ("heads", "released", "last_slot", "last_pad"):
        _check(getattr(state, field_name), (n,), np.int64, field_name)
    _check(state.has_last, (n,), np.bool_, "has_last")
    if np.any(state.heads < 0) or np.any(state.released < 0) or np.any(state.released > state.heads):
        raise ValueError(f"{name}: stream positions out of range")
    depth = state.layout.depth if state.layout else 1
    if np.any((state.pads > depth) & (state.pads != UNWRITTEN)):
        raise ValueError(f"{name}: pads hold more padding than a stack has frames")
    # every stack with a stored frame has its newest frame in its stream
    written = state.pads[0] < (state.layout.depth if state.layout else 0)
    if state.layout is not None and written.any():
        heads = state.heads[None, :].astype(np.int64)
        back = ((heads - state.slots.astype(np.int64)) % WRAP)[written]
        live = np.broadcast_to(state.heads - state.released, written.shape)[written]
        if back.min() < 1 or np.any(back > live):
            raise ValueError(f"{name}: slots point at frames outside the stored stream")
    if state.layout is None:
        return
    F = int(state.ring_frames or 0)
    if F < 1 or F % chunk_len or max_ring_frames < F:
        raise ValueError(f"{name}: ring of {F} frames does not fit chunk_len {chunk_len} and {n_rows} rows")
    frames = state.frames
    want_arr = ((F * n, *state.layout.frame_shape), np.dtype(dtype))
    got_arr = None
    if isinstance(frames, (ChunkedArray, ArraySnapshot)):
        got_arr = (frames.shape, frames.dtype)
    elif isinstance(frames, dict):
        cfg = frames["config"]
        got_arr = ((cfg["capacity"], *tuple(cfg["item_shape"])), np.dtype(cfg["dtype"]))
    if got_arr != want_arr:
        raise ValueError(f"{name}: frames are {got_arr}; the layout needs {want_arr}")
    _check(state.last, (n, *obs_shape), dtype, "last")
    check_streams(state, name)


def ring_bound(n_rows: int, stacks_per_row: int, depth: int, chunk_len: int) -> int:
    """The most frames an env's region of the ring can need, a whole number of chunks: every stack
    of every row stored fresh, and of the rows overwritten before a release
    (:data:`RELEASE_LAG_CHUNKS`), plus two chunks of slack."""
    frames = (n_rows + 1 + RELEASE_LAG_CHUNKS * chunk_len) * stacks_per_row * depth + 2 * chunk_len
    return -(-frames // chunk_len) * chunk_len


def check_own_state(state: FrameStoreState, *, chunk_len: int, name: str) -> None:
    """:func:`check_state` against the geometry the state declares (a saved buffer, before a store exists)."""
    depth = state.layout.depth if state.layout else 1
    check_state(state, obs_shape=tuple(state.obs_shape), dtype=state.dtype, n_rows=state.n_rows,
                n_envs=state.n_envs, stacks_per_row=state.stacks_per_row, dedup=state.dedup,
                chunk_len=chunk_len, max_ring_frames=ring_bound(state.n_rows, state.stacks_per_row, depth, chunk_len),
                name=name)


def check_streams(state: FrameStoreState, name: str) -> np.ndarray:
    """Raise ValueError unless the streams, the descriptors and the last stacks agree.

    Returns, per env, the live frames above the oldest one a stack uses that no stack
    uses (0 in a store no interrupt tore).

    Per env: the live frames (``released`` up to ``heads``) fit the ring; every written
    stack's frames, of every kind, and the last stack's lie among them (a far delta is
    where the descriptors say it is); the last stack ends at the head; and no more
    live frames above the oldest one a stack uses go unused than one interrupted add
    leaves behind (``stacks_per_row * depth``): a store holding more, such as one whose
    retried adds appended their frames again and again, could not keep adding (its ring
    would overflow). Frames below the oldest used one wait for the next release: fine.
    Vectorised, in blocks of rows (bounded temporaries): about 12 ms per 300k rows.
    """
    lay = state.layout
    if lay is None:
        return np.zeros(state.n_envs, np.int64)
    k, n, spr, F = lay.depth, state.n_envs, state.stacks_per_row, int(state.ring_frames or 0)
    heads, released = state.heads, state.released
    live = heads - released
    if np.any(live > F):
        e = int(np.argmax(live > F))
        raise ValueError(f"{name}: env {e}'s stream holds {int(live[e])} live frames, more than its ring of "
                         f"{F}: the state is inconsistent")
    bad_last = state.has_last & ((state.last_slot != heads - 1) | (state.last_pad < 0) | (state.last_pad > k))
    if bad_last.any():
        e = int(np.argmax(bad_last))
        raise ValueError(f"{name}: env {e}'s last stack ends at frame {int(state.last_slot[e])} with padding "
                         f"{int(state.last_pad[e])}; its stream's head is {int(heads[e])}")
    never = np.iinfo(np.int64).max
    base = np.concatenate([[0], np.cumsum(live)])  # env e's positions in one line: base[e] + position
    total = int(base[-1])
    cover = np.zeros(total + 1, np.int64)  # +1 where a used run of frames starts, -1 past its end
    last = state.has_last & (state.last_pad < k)
    last_bottom = state.last_slot - (k - 1) + state.last_pad - released
    if np.any(last & (last_bottom < 0)):
        e = int(np.argmax(last & (last_bottom < 0)))
        raise ValueError(f"{name}: env {e}'s last stack uses frames below its live frames (from "
                         f"{int(released[e])})")
    lowest = np.where(last, last_bottom, never)
    np.add.at(cover, (last_bottom + base[:-1])[last], 1)
    np.add.at(cover, (state.last_slot - released + base[:-1] + 1)[last], -1)
    far = state.far[np.argsort(state.far[:, 1], kind="stable")] if len(state.far) else state.far
    for r0 in range(0, state.n_rows, _CHECK_ROWS):  # in blocks of rows: bounded temporaries
        r1 = min(r0 + _CHECK_ROWS, state.n_rows)
        block_far = far[(far[:, 1] >= r0) & (far[:, 1] < r1)] if len(far) else far
        bottom, top, stored = _stack_positions(state, r0, r1, block_far, k, name)
        outside = stored & ((bottom < 0) | (top >= live))
        if outside.any():
            w, r, e = (int(i[0]) for i in np.nonzero(outside))
            raise ValueError(f"{name}: stack {w} of row {r0 + r}, env {e} uses frames "
                             f"{int(bottom[w, r, e] + released[e])}..{int(top[w, r, e] + released[e])}, outside "
                             f"env {e}'s live frames {int(released[e])}..{int(heads[e]) - 1}")
        lowest = np.minimum(lowest, np.where(stored, bottom, never).min(axis=(0, 1)))
        if n > 1:
            bottom, top = bottom + base[:-1], top + base[:-1]
        cover += np.bincount(bottom[stored], minlength=total + 1)
        cover -= np.bincount(top[stored] + 1, minlength=total + 1)
    unused = _unused_above_oldest(cover, lowest, live)
    allowed = spr * k
    if np.any(unused > allowed):
        e = int(np.argmax(unused > allowed))
        raise ValueError(f"{name}: env {e}'s stream holds {int(unused[e])} live frames that no stack uses, more "
                         f"than the {allowed} one interrupted add leaves: the state is inconsistent (its ring "
                         "would overflow)")
    return unused


def _stack_positions(state: FrameStoreState, r0: int, r1: int, far: np.ndarray, k: int,
                     name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``r0..r1``: each stack's oldest stored and newest frame as positions in its env's live
    frames (0 = the oldest live frame), and whether it holds a frame; ValueError for a lost far delta."""
    heads, released = state.heads, state.released
    pads = state.pads[:, r0:r1]
    newest = np.empty(pads.shape, np.int64)  # global frame numbers first
    newest[0] = heads - ((heads - state.slots[r0:r1].astype(np.int64)) % WRAP)
    far_mask = np.zeros(pads.shape, bool)
    if len(newest) > 1:
        newest[1:] = newest[0] + state.deltas[:, r0:r1]
        far_mask[1:] = state.deltas[:, r0:r1] == FAR
    for w, r, e, low in far.tolist():
        newest[w, r - r0, e] = int(heads[e]) - ((int(heads[e]) - low) % WRAP)
        far_mask[w, r - r0, e] = False
    stored = pads < k  # written, with at least one frame in the stream
    if np.any(far_mask & stored):
        w, r, e = (int(i[0]) for i in np.nonzero(far_mask & stored))
        raise ValueError(f"{name}: stack {w} of row {r0 + r}, env {e} has a far delta that is not kept")
    newest -= released
    return newest - (k - 1) + pads, newest, stored


def _unused_above_oldest(cover: np.ndarray, lowest: np.ndarray, live: np.ndarray) -> np.ndarray:
    """Per env: positions from ``lowest[e]`` (its oldest used frame) to its last live one that no
    used run of frames covers. ``cover`` holds +1 where a run starts and -1 past its end, env ``e``'s
    positions ``0 .. live[e] - 1`` at ``sum(live[:e]) + position``; ``lowest >= live``: none used."""
    base = np.concatenate([[0], np.cumsum(live)])
    covered = np.concatenate([[0], np.cumsum(np.cumsum(cover[:-1]) > 0)])
    used = covered[base[1:]] - covered[base[:-1]]
    span = np.where(lowest < live, live - lowest, 0)
    return np.maximum(span - used, 0)


def pickle_state(state: FrameStoreState, config: dict[str, Any]) -> dict[str, Any]:
    """What a pickle of a frame store holds: its constructor config and its state, plain data."""
    frames = state.frames
    if isinstance(frames, ArraySnapshot):
        frames = frames.materialize()
    elif isinstance(frames, ChunkedArray):
        frames = frames.state_dict()
    plain = replace(state, frames=frames)
    data = {f: getattr(plain, f) for f in plain.__dataclass_fields__}
    for f in _PACKED:
        data[f] = pack_array(data[f])
    return {"version": STATE_VERSION, "config": config, "state": data}


def unpickle_state(data: dict[str, Any]) -> tuple[dict[str, Any], FrameStoreState]:
    """``(config, state)`` from :func:`pickle_state`'s output or a 0.1.0 pickle's ``__dict__``."""
    if "version" not in data:
        return _legacy(data)
    if data["version"] > STATE_VERSION:
        raise ValueError(f"this frame store was pickled by a newer sb3_integration (state version "
                         f"{data['version']}; this one reads up to {STATE_VERSION})")
    fields = dict(data["state"])
    for f in _PACKED:
        fields[f] = unpack_array(fields[f])
    return dict(data["config"]), FrameStoreState(**fields)


def _legacy(d: dict[str, Any]) -> tuple[dict[str, Any], FrameStoreState]:
    """0.1.0 pickled a frame store's ``__dict__``: the same values under the attribute names."""
    config = {k: d[k] for k in ("obs_shape", "dtype", "n_rows", "n_envs", "stacks_per_row", "chunk_len",
                                "codec", "cache", "threads", "dedup", "axis_order", "name")}
    config["tier"] = None
    frames = d["array"]
    state = FrameStoreState(
        obs_shape=tuple(d["obs_shape"]), dtype=np.dtype(d["dtype"]), n_rows=d["n_rows"], n_envs=d["n_envs"],
        stacks_per_row=d["stacks_per_row"], dedup=d["dedup"], layout=d["layout"],
        ring_frames=d["F"] if d["layout"] is not None else None,
        slots=unpack_array(d["slots"]), deltas=unpack_array(d["deltas"]), far=far_array(d["far"]),
        pads=unpack_array(d["pads"]), heads=d["heads"], released=d["released"], last_slot=d["last_slot"],
        last_pad=d["last_pad"], has_last=d["has_last"], last=d["last"], used=list(d["used"]),
        frames=frames, pending=list(d["_pending"]),
    )
    return config, state
