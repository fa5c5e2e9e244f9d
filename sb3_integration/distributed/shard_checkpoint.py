"""A shard's state in and out (the frame store's protocol), and its checkpoint files.

:class:`ShardStoreState` is a :class:`~sb3_integration.distributed.shard_store.ShardStore`
as data, as :class:`~sb3_integration.engine.frame_state.FrameStoreState` is a frame
store's: ``state_dict()`` captures one moment under the store's lock (the small tables
copied, the compressed frames an :class:`~chunkstore.array.ArraySnapshot` that pins
them: the only pause writers see; close the state, or use it in a ``with`` block, when
done), ``load_state_dict(state)`` checks the whole state against the store first and
then installs it in one step (a ValueError changes nothing). Checkpoint files are
written from a state and read into one (:func:`write_state`, :func:`read_state`:
chunkstore's atomic HDF5 format, ``format`` :data:`SHARD_FORMAT`); ``save(path)`` and
``restore(path)`` do both ends.

File format version 3 (stamped rows, a ring that grows, a horizon, and a prioritized
shard's priority index) is what states are written as; a version 2 file (no
priorities) still loads, every held row at mass 1.0 in a prioritized shard; a version 1
file is refused with a FormatError naming the versions. Files written before shard
states existed are the same files (``tests/fixtures/shard_v3`` pins three of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkstore import ChunkedArray
from chunkstore import hdf5 as fmt
from chunkstore.array import ArraySnapshot
from chunkstore.errors import FormatError
from chunkstore.priority import PriorityIndex
from sb3_integration.engine.stacking import StackLayout

__all__ = ["SHARD_FORMAT", "SHARD_FORMAT_VERSION", "ShardCheckpoints", "ShardStoreState", "read_state",
           "write_state"]

#: the ``format`` attribute of a shard checkpoint, and its version (a state's ``version``)
SHARD_FORMAT = "sb3_integration.distributed.shard"
SHARD_FORMAT_VERSION = 3  # 2: stamped rows, a ring that grows, a horizon; 3: + priorities
_READS = (2, 3)
_ROW_FIELDS = ("stamp", "stream", "slot_obs", "off_obs", "pad_obs", "slot_next", "off_next", "pad_next",
               "actions", "rewards", "dones", "timeouts")
_TABLES = ("slot_stream", "slot_chunk", "slot_prev", "streams", "stream_slots", "applied")
_PRIORITY = ("priority/masses", "priority/generations", "priority/max")


@dataclass
class ShardStoreState:
    """Everything a shard store is, as plain values and arrays (see the module docstring).

    ``geometry`` is ``(capacity, chunk_len, obs_shape, obs_dtype, action_shape, action_dtype)``
    as JSON values; ``counters`` holds ``pos``, ``count``, ``horizon``, ``inserted`` and
    ``codec_version``; ``tables`` the slot tables, the streams (``(n, 6)``: writer, env,
    lo, hi, live rows, closed) with their slots, and ``applied`` (``(n, 2)``: writer, seq);
    ``priority`` a prioritized shard's index (``priority/masses``, ``/generations``,
    ``/max``; empty for a uniform one or a version 2 file); ``frames`` the chunk pool (None
    until a writer's layout is known): a ChunkedArray (from a file), an ArraySnapshot
    (from a live store) or a ChunkedArray's plain state (from a pickle).
    """

    version: int
    name: str
    geometry: tuple[Any, ...]
    counters: dict[str, int]
    layout: StackLayout | None
    rows: dict[str, np.ndarray]
    tables: dict[str, np.ndarray]
    priority: dict[str, np.ndarray] = field(default_factory=dict)
    frames: ChunkedArray | ArraySnapshot | dict[str, Any] | None = None

    @property
    def applied(self) -> dict[int, int]:
        """Each writer's last applied message number."""
        return {int(w): int(s) for w, s in self.tables["applied"].tolist()}

    def live_rows(self) -> np.ndarray:
        """Ring positions of the rows held, oldest first."""
        ring, pos, count = len(self.rows["stream"]), self.counters["pos"], self.counters["count"]
        return ((pos - count) % ring + np.arange(count)) % ring

    def attrs(self) -> dict[str, Any]:
        """The JSON attributes of its checkpoint file."""
        capacity, chunk_len, obs_shape, obs_dtype, action_shape, action_dtype = self.geometry
        lay = self.layout
        return {"format": SHARD_FORMAT, "format_version": self.version, "name": self.name, "capacity": capacity,
                **self.counters, "chunk_len": chunk_len, "obs_shape": obs_shape, "obs_dtype": obs_dtype,
                "action_shape": action_shape, "action_dtype": action_dtype,
                "layout": None if lay is None else [lay.axis, lay.width, lay.depth]}

    def close(self) -> None:
        """Release the frame snapshot's hold on the store's tier (a no-op for a state from a file)."""
        if isinstance(self.frames, ArraySnapshot):
            self.frames.close()

    def __enter__(self) -> ShardStoreState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_state(path: str, state: ShardStoreState) -> None:
    """Write ``state`` to ``path`` atomically (chunkstore's HDF5 format); the state stays open."""
    frames: Any = state.frames  # a snapshot quacks like the array for the writer
    arrays = {} if frames is None else {"frames": frames}
    extras = {f"rows/{k}": v for k, v in state.rows.items()}
    extras.update(state.tables)
    extras.update(state.priority)
    fmt.save(path, arrays, extras, state.attrs(), progress=False)


def read_state(path: str) -> ShardStoreState:
    """The state a checkpoint file holds (FormatError when it is not a shard checkpoint this
    version reads); its frames are read into RAM."""
    with fmt.load(path, lazy=False) as saved:
        a, x = saved.attrs, saved.extras
        if a.get("format") != SHARD_FORMAT:
            raise FormatError(f"{path} is not a shard checkpoint (format {a.get('format')!r})")
        if a.get("format_version") not in _READS:
            raise FormatError(f"{path}: a shard checkpoint of format version {a.get('format_version')}, "
                              f"this version reads {' and '.join(map(str, _READS))}")
        try:
            geometry = (a["capacity"], a["chunk_len"], a["obs_shape"], a["obs_dtype"], a["action_shape"],
                        a["action_dtype"])
            counters = {k: int(a[k]) for k in ("pos", "count", "horizon", "inserted", "codec_version")}
            rows = {k: x[f"rows/{k}"] for k in _ROW_FIELDS}
            tables = {k: x[k] for k in _TABLES}
        except KeyError as e:
            raise FormatError(f"{path}: a shard checkpoint without {e}") from None
        layout = None
        if a.get("layout") is not None:
            axis, width, depth = a["layout"]
            layout = StackLayout(tuple(a["obs_shape"]), axis, int(width), int(depth))
        return ShardStoreState(
            version=int(a["format_version"]), name=str(a.get("name", "shard")), geometry=geometry,
            counters=counters, layout=layout, rows=rows, tables=tables,
            priority={k: x[k] for k in _PRIORITY if k in x},
            frames=saved.arrays.get("frames") if layout is not None else None)


class ShardCheckpoints:
    """The state methods of a shard store (which provides every attribute used here)."""

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
    chunk_len: int
    layout: StackLayout | None
    frames: Any
    priorities: PriorityIndex | None
    _free: list[int]

    def _new_rows(self, cap: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _streams_from(self, table: np.ndarray, slots: np.ndarray) -> tuple[list[Any], dict[tuple[int, int], int]]:
        raise NotImplementedError

    def _shift_generations(self) -> None:
        raise NotImplementedError

    def _geometry(self) -> tuple[Any, ...]:
        s = self.spec
        return (self.capacity, self.chunk_len, list(s.obs_shape), s.obs_dtype.str, list(s.action_shape),
                s.action_dtype.str)

    # -- state out ----------------------------------------------------------------------
    def state_dict(self) -> ShardStoreState:
        """This store at this moment (under the lock: the only pause writers see); close it when done.

        The small tables are copied; the frames are an :class:`~chunkstore.array.ArraySnapshot`
        (the chunk table copied, the tier pinned: no chunk bytes are copied while writers wait).
        """
        with self.lock:
            st = self.streams
            tables = {
                "slot_stream": self.slot_stream.copy(), "slot_chunk": self.slot_chunk.copy(),
                "slot_prev": self.slot_prev.copy(),
                "streams": np.array([[s.writer, s.env, s.lo, s.hi, s.live_rows, s.closed] for s in st],
                                    np.int64).reshape(-1, 6),
                "stream_slots": np.concatenate([s.slots[s.lo - s.base:s.hi - s.base] for s in st])
                if st else np.zeros(0, np.int64),
                "applied": np.array(sorted(self.applied.items()), np.int64).reshape(-1, 2),
            }
            priority = {}
            if self.priorities is not None:
                p = self.priorities.state_dict()
                priority = {"priority/masses": p["masses"], "priority/generations": p["generations"],
                            "priority/max": np.array([p["max"]], np.float64)}
            return ShardStoreState(
                version=SHARD_FORMAT_VERSION, name=self.name, geometry=self._geometry(),
                counters={"pos": self.pos, "count": self.count, "horizon": self.horizon,
                          "inserted": self.inserted, "codec_version": self.codec_version},
                layout=self.layout, rows={k: v.copy() for k, v in self.rows.items()}, tables=tables,
                priority=priority, frames=None if self.frames is None else self.frames.snapshot())

    def save(self, path: str) -> None:
        """Write this store's checkpoint to ``path`` (its state, captured under the lock, written after)."""
        with self.state_dict() as state:
            write_state(path, state)

    # -- pickling: the constructor's arguments and the state, plain data ---------------------
    def __getstate__(self) -> dict[str, Any]:
        """A pickle of this store (as a frame store's): ``version``, ``config`` and its ``state``."""
        with self.state_dict() as state:
            data = {name: getattr(state, name) for name in state.__dataclass_fields__}
            if isinstance(state.frames, ArraySnapshot):
                data["frames"] = state.frames.materialize()
        config = {"spec": self.spec, "codec": self.codec, "codec_version": self.codec_version, "name": self.name}
        return {"version": SHARD_FORMAT_VERSION, "config": config, "state": data}

    def __setstate__(self, data: dict[str, Any]) -> None:
        if data.get("version", 0) > SHARD_FORMAT_VERSION:
            raise ValueError(f"this shard store was pickled by a newer sb3_integration (state version "
                             f"{data.get('version')}; this one reads up to {SHARD_FORMAT_VERSION})")
        c = data["config"]
        self.__init__(c["spec"], c["codec"], c["codec_version"], name=c["name"])  # type: ignore[misc]
        self.load_state_dict(ShardStoreState(**data["state"]))

    # -- state in -----------------------------------------------------------------------
    def restore(self, path: str) -> None:
        """Become the checkpoint at ``path`` (FormatError when it is not one of this geometry)."""
        try:
            self.load_state_dict(read_state(path))
        except FormatError:
            raise
        except ValueError as e:
            raise FormatError(f"{path}: {e}") from None

    def load_state_dict(self, state: ShardStoreState) -> None:
        """Become ``state`` (from :meth:`state_dict` or a file), in one step.

        Raises ValueError (and changes nothing) when the state does not fit this store:
        another geometry or version, or tables that do not agree with each other.
        A frames ChunkedArray in the state is adopted as it is; a snapshot is copied
        into a new array.
        """
        if not isinstance(state, ShardStoreState):
            raise TypeError(f"state must be a ShardStoreState (from state_dict()), got {type(state).__name__}")
        given = state.frames
        frames = ChunkedArray.from_state(given) if isinstance(given, (ArraySnapshot, dict)) else given
        try:
            new = self._check_state(state, frames)
            new["priorities"] = self._state_priorities(state)
        except BaseException:
            if frames is not given and frames is not None:
                frames.close()  # built here from a snapshot or a pickle: nobody else holds it
            raise
        if frames is not None:
            frames.max_open = 1
            new["frames"], new["codec"] = frames, frames.codec
        with self.lock:
            old = self.frames
            self.__dict__.update(new)  # one step
            if old is not None and old is not self.frames:
                old.close()
            self._shift_generations()

    def _check_state(self, state: ShardStoreState, frames: ChunkedArray | None) -> dict[str, Any]:
        """The attributes ``state`` gives this store; ValueError where it does not fit."""
        if state.version not in _READS:
            raise ValueError(f"a shard state of version {state.version}, this version reads "
                             f"{' and '.join(map(str, _READS))}")
        got, want = tuple(state.geometry), self._geometry()
        if got != want:
            raise ValueError(f"a shard of {got}, this one is {want} (capacity, chunk_len, observation and "
                             "action shapes and dtypes)")
        ring = len(state.rows.get("stream", ()))
        like = self._new_rows(max(ring, 1))
        c = state.counters
        if not 1 <= ring <= self.capacity or not 0 <= c["count"] <= ring or not 0 <= c["pos"] < ring:
            raise ValueError(f"a ring of {ring} rows holding {c['count']} at {c['pos']} does not fit this shard")
        for k in _ROW_FIELDS:
            v = state.rows.get(k)
            if not isinstance(v, np.ndarray) or v.shape != like[k].shape or v.dtype != like[k].dtype:
                raise ValueError(f"rows/{k} does not fit this shard")
        t = state.tables
        slots = len(t["slot_stream"])
        if any(len(t[k]) != slots for k in ("slot_chunk", "slot_prev")) or t["streams"].shape[1:] != (6,):
            raise ValueError("the slot and stream tables do not agree")
        if int((t["streams"][:, 3] - t["streams"][:, 2]).sum()) != len(t["stream_slots"]):
            raise ValueError("the streams' chunk counts do not match their slots")
        if (state.layout is None) != (frames is None) or (
                frames is not None and frames.capacity != slots * self.chunk_len):
            raise ValueError(f"frames of {None if frames is None else frames.capacity} items do not "
                             f"fit {slots} slots of {self.chunk_len}")
        streams, ids = self._streams_from(t["streams"], t["stream_slots"])
        return {"rows": {k: state.rows[k] for k in _ROW_FIELDS}, **{k: int(c[k]) for k in
                ("pos", "count", "horizon", "inserted", "codec_version")},
                "applied": state.applied, "slot_stream": t["slot_stream"], "slot_chunk": t["slot_chunk"],
                "slot_prev": t["slot_prev"], "streams": streams, "_stream_ids": ids,
                "_free": [int(s) for s in np.flatnonzero(t["slot_stream"] < 0)[::-1]],
                "layout": state.layout, "frames": None}

    def _state_priorities(self, state: ShardStoreState) -> PriorityIndex | None:
        """The priority index ``state`` gives this store: its masses on the held rows, or (a state
        without them: a version 2 file, or a uniform shard's) mass 1.0 for every held row."""
        if self.spec.priority_alpha is None:
            return None
        index = PriorityIndex(self.capacity)
        live = state.live_rows()
        masses = state.priority.get("priority/masses")
        if masses is not None and len(masses) == self.capacity:
            only_live = np.zeros(self.capacity, np.float32)  # only rows the shard holds have mass
            only_live[live] = np.asarray(masses, np.float32)[live]
            index.load_state_dict({"capacity": self.capacity, "fanout": index.fanout, "masses": only_live,
                                   "generations": state.priority["priority/generations"],
                                   "max": float(state.priority["priority/max"][0])})
        else:
            index.set(live, np.ones(len(live)))
        return index
