"""A shard's checkpoint: its store at one moment, written atomically and read back.

:class:`ShardCheckpoints` is a base of :class:`~sb3_integration.distributed.shard_store.ShardStore`:
``snapshot()`` copies the small tables and pins the compressed frames under the store's
lock (the only pause writers see), ``write_snapshot()`` writes them with chunkstore's
atomic HDF5 format with no lock held, ``restore()`` becomes a checkpoint of the same
geometry (format version 3: stamped rows, a ring that grows, a horizon, and a prioritized
shard's priority index; a version 2 file, which has no priorities, still loads, every
held row at mass 1.0 in a prioritized shard; a version 1 file is refused with a
FormatError naming the versions).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chunkstore import hdf5 as fmt
from chunkstore.errors import FormatError
from sb3_integration.engine.stacking import StackLayout

__all__ = ["SHARD_FORMAT", "SHARD_FORMAT_VERSION", "ShardCheckpoints"]

#: the ``format`` attribute of a shard checkpoint, and its version
SHARD_FORMAT = "sb3_integration.distributed.shard"
SHARD_FORMAT_VERSION = 3  # 2: stamped rows, a ring that grows, a horizon; 3: + priorities
_READS = (2, 3)
_ROW_FIELDS = ("stamp", "stream", "slot_obs", "off_obs", "pad_obs", "slot_next", "off_next", "pad_next",
               "actions", "rewards", "dones", "timeouts")


class ShardCheckpoints:
    """The checkpoint methods of a shard store (which provides every attribute used here)."""

    # the store's state (see ShardStore)
    lock: Any
    rows: dict[str, np.ndarray]
    streams: list[Any]
    applied: dict[int, int]
    slot_stream: np.ndarray
    slot_chunk: np.ndarray
    slot_prev: np.ndarray
    spec: Any
    name: str
    capacity: int
    pos: int
    count: int
    horizon: int
    inserted: int
    codec_version: int
    codec: Any
    L: int
    layout: StackLayout | None
    frames: Any
    _free: list[int]

    def _new_rows(self, cap: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _restore_streams(self, table: np.ndarray, slots: np.ndarray) -> None:
        raise NotImplementedError

    def _priority_state(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _restore_priorities(self, extras: dict[str, Any], path: str) -> None:
        raise NotImplementedError

    # -- checkpoints -------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Everything this store is, at this moment (under the lock: the only pause writers see).

        The small tables are copied; the frames are an :class:`~chunkstore.array.ArraySnapshot`
        (the chunk table copied, the tier pinned: no chunk bytes are copied while writers wait).
        :meth:`write_snapshot` closes it.
        """
        with self.lock:
            st = self.streams
            snap: dict[str, Any] = {
                "rows": {k: v.copy() for k, v in self.rows.items()},
                "slot_stream": self.slot_stream.copy(), "slot_chunk": self.slot_chunk.copy(),
                "slot_prev": self.slot_prev.copy(),
                "streams": np.array([[s.writer, s.env, s.lo, s.hi, s.live_rows, s.closed] for s in st],
                                    np.int64).reshape(-1, 6),
                "stream_slots": np.concatenate([s.slots[s.lo - s.base:s.hi - s.base] for s in st])
                if st else np.zeros(0, np.int64),
                "applied": np.array(sorted(self.applied.items()), np.int64).reshape(-1, 2),
                "attrs": {"format": SHARD_FORMAT, "format_version": SHARD_FORMAT_VERSION,
                          "name": self.name, "capacity": self.capacity, "pos": self.pos,
                          "count": self.count, "horizon": self.horizon, "inserted": self.inserted,
                          "codec_version": self.codec_version, "chunk_len": self.L,
                          "obs_shape": list(self.spec.obs_shape), "obs_dtype": self.spec.obs_dtype.str,
                          "action_shape": list(self.spec.action_shape),
                          "action_dtype": self.spec.action_dtype.str,
                          "layout": None if self.layout is None else list(
                              (self.layout.axis, self.layout.width, self.layout.depth))},
                "frames": None,
                "priority": self._priority_state(),
            }
            if self.frames is not None:
                snap["frames"] = self.frames.snapshot()
            return snap

    def write_snapshot(self, path: str, snap: dict[str, Any]) -> None:
        """Write a :meth:`snapshot` to ``path`` atomically (chunkstore's HDF5 format); no lock held."""
        frames = snap["frames"]
        arrays = {} if frames is None else {"frames": frames}
        extras = {f"rows/{k}": v for k, v in snap["rows"].items()}
        extras.update({k: snap[k] for k in ("slot_stream", "slot_chunk", "slot_prev", "streams",
                                             "stream_slots", "applied")})
        extras.update(snap.get("priority", {}))
        try:
            fmt.save(path, arrays, extras, snap["attrs"], progress=False)
        finally:
            if frames is not None:
                frames.close()  # unpin: the tier reuses emptied segments again

    def restore(self, path: str) -> None:
        """Become the checkpoint at ``path`` (FormatError when it is not one of this geometry)."""
        with fmt.load(path, lazy=False) as saved, self.lock:
            a, x = saved.attrs, saved.extras
            if a.get("format") != SHARD_FORMAT:
                raise FormatError(f"{path} is not a shard checkpoint (format {a.get('format')!r})")
            if a.get("format_version") not in _READS:
                raise FormatError(f"{path}: a shard checkpoint of format version {a.get('format_version')}, "
                                  f"this version reads {' and '.join(map(str, _READS))}")
            want = (self.capacity, self.L, list(self.spec.obs_shape), self.spec.obs_dtype.str,
                    list(self.spec.action_shape), self.spec.action_dtype.str)
            got = (a["capacity"], a["chunk_len"], a["obs_shape"], a["obs_dtype"], a["action_shape"],
                   a["action_dtype"])
            if got != want:
                raise FormatError(f"{path}: a shard of {got}, this one is {want}")
            ring = len(x["rows/stream"])
            like = self._new_rows(ring)
            if not 1 <= ring <= self.capacity or not 0 <= int(a["count"]) <= ring:
                raise FormatError(f"{path}: a ring of {ring} rows holding {a['count']} does not fit this shard")
            for k in _ROW_FIELDS:
                if x[f"rows/{k}"].shape != like[k].shape or x[f"rows/{k}"].dtype != like[k].dtype:
                    raise FormatError(f"{path}: rows/{k} does not fit this shard")
                like[k] = x[f"rows/{k}"]
            self.rows = like
            self.pos, self.count, self.inserted = int(a["pos"]), int(a["count"]), int(a["inserted"])
            self.horizon = int(a["horizon"])
            self.codec_version = int(a["codec_version"])
            self.applied = {int(w): int(s) for w, s in x["applied"].tolist()}
            self.slot_stream, self.slot_chunk, self.slot_prev = x["slot_stream"], x["slot_chunk"], x["slot_prev"]
            self._restore_streams(x["streams"], x["stream_slots"])
            self._free = [int(s) for s in np.flatnonzero(self.slot_stream < 0)[::-1]]
            if a["layout"] is not None:
                axis, width, depth = a["layout"]
                self.layout = StackLayout(self.spec.obs_shape, axis, int(width), int(depth))
                self.frames = saved.arrays["frames"]
                self.frames.max_open = 1
                self.codec = self.frames.codec
            self._restore_priorities(x, path)

