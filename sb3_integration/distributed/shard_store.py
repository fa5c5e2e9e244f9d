"""One shard's replay store: compressed chunks adopted from several writers, sampled uniformly.

No Ray here: :mod:`~sb3_integration.distributed.service` wraps a :class:`ShardStore` in
an actor. A shard receives :class:`~sb3_integration.distributed.wire.InsertMessage`
objects (sealed chunks of frames plus transition records) and stores the chunk bytes
verbatim in one :class:`~chunkstore.ChunkedArray` used as a pool of chunk slots.

Streams. Each ``(writer, env)`` is a stream of frames numbered 0, 1, 2, ...; its stream
chunk ``j`` (frames ``j * chunk_len .. (j + 1) * chunk_len - 1``) lives in some pool slot. A stream's live
chunks are the contiguous range ``[lo, hi)``; :class:`_Stream` maps them to slots, and
``slot_prev[slot]`` links each chunk to the slot of its stream's previous chunk, so
the frames of a stack (which may start in an earlier chunk) are found from the slot of
its newest frame without a per-stream lookup at sampling time.

Rows. A transition is held as ``(slot, offset, pad)`` for its observation and next
observation stacks (the slot of the chunk holding the newest frame, that frame's row
in the chunk, the count of leading zero frames), SB3's small values, and its stream.
Rows form a FIFO ring (grown on demand up to ``capacity``); a row leaving it frees the
chunks of its stream that lie wholly before the row's first frame: a stream's stacks
never move backwards, so no later row of that stream can use them.

Eviction: one buffer of ``capacity`` over all shards. Every row carries a stamp, its
number in the service's global insert order (the coordinator hands each message a range
of them with its rate-limiter permit; a store used alone stamps rows itself). The
``horizon`` is the highest stamp the store has heard of (from its messages and from
:meth:`ShardStore.advance`); rows stamped below ``horizon - capacity`` leave from the
front of the ring. Together the shards keep the newest ``capacity`` transitions of the
service, up to what a shard has not heard of yet (see the eviction rule in docs/guide/ray.md).

Weight. :meth:`ShardStore.weight` is the shard's sampling mass: its transition count
under uniform sampling, the sum of its priority masses when the spec has ``priority_alpha``
(:mod:`~sb3_integration.distributed.shard_priority`). Learners split a batch over shards
in proportion to it, so a transition's probability is the same whichever shard holds it.

Why not the frame engine's index (:class:`~sb3_integration.engine.frames.FrameStore`). The
engine's index is one owner's: a fixed grid of ``(row, env)`` descriptors written in row
order, each env's frames at fixed ring positions (item ``e * F + g % F``), freed by the
owner's ``release_before`` as it overwrites rows, and frames it deduplicates and encodes
itself. A shard has none of that: it adopts chunks already encoded, from writers (and
envs) that come, end and restart at any time, into whichever pool slot is free (so a
stream's chunks are found through :class:`_Stream` and ``slot_prev``, not by position);
its rows come interleaved from all streams into one FIFO ring and leave by the service's
global stamp; and it never sees a raw frame. What is shared: the writers' side *is* the
engine (:class:`~sb3_integration.distributed.writer.ChunkWriter` stages in a FrameStore,
whose stream frame numbers the records carry), the stack geometry
(:class:`~sb3_integration.engine.stacking.StackLayout`), the chunk pool
(:class:`~chunkstore.ChunkedArray`, its snapshots) and the state protocol
(:mod:`~sb3_integration.distributed.shard_checkpoint`).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from chunkstore import ChunkedArray, Codec
from chunkstore.array import DEFAULT_CHUNK_LEN
from sb3_integration.distributed.errors import MissingMessagesError
from sb3_integration.distributed.options import number
from sb3_integration.distributed.shard_checkpoint import (
    SHARD_FORMAT,
    ShardCheckpoints,
    ShardStoreState,
)
from sb3_integration.distributed.shard_priority import ShardPriorities
from sb3_integration.distributed.wire import InsertMessage, SampleReply, row_dtype, unpack_rows
from sb3_integration.engine.stacking import StackLayout

__all__ = ["SHARD_FORMAT", "MissingMessagesError", "ShardStore", "ShardStoreState", "StoreSpec"]

NONE = np.uint32(0xFFFFFFFF)  # a stack with no stored frame (all zeros)
_GROWTH = 1.5
_MIN_RING = 1024


@dataclass(frozen=True)
class StoreSpec:
    """What a shard stores: capacity in transitions, observation and action geometry.

    Examples
    --------
    >>> spec = StoreSpec(1000, (4, 84, 84), "uint8", (1,), "int64")
    >>> spec.obs_dtype
    dtype('uint8')
    """

    capacity: int
    obs_shape: tuple[int, ...]
    obs_dtype: Any
    action_shape: tuple[int, ...]
    action_dtype: Any
    chunk_len: int = DEFAULT_CHUNK_LEN
    threads: int | None = None
    priority_alpha: float | None = None  # None: uniform sampling; else shards keep (p + epsilon) ** alpha
    priority_epsilon: float = 1e-6

    def __post_init__(self) -> None:
        object.__setattr__(self, "obs_shape", tuple(int(d) for d in self.obs_shape))
        object.__setattr__(self, "action_shape", tuple(int(d) for d in self.action_shape))
        object.__setattr__(self, "obs_dtype", np.dtype(self.obs_dtype))
        object.__setattr__(self, "action_dtype", np.dtype(self.action_dtype))
        if int(self.capacity) < 1 or not 1 <= int(self.chunk_len) <= 0xFFFF:
            raise ValueError(f"capacity must be >= 1 and chunk_len in 1..65535, got "
                             f"{self.capacity}, {self.chunk_len}")
        if self.priority_alpha is not None:
            object.__setattr__(self, "priority_alpha", number("alpha", self.priority_alpha, minimum=0.0))
        object.__setattr__(self, "priority_epsilon", number("epsilon", self.priority_epsilon, minimum=0.0))

    @property
    def row_dtype(self) -> np.dtype:
        return row_dtype(self.action_shape, self.action_dtype)


class _Stream:
    """One ``(writer, env)`` stream's live chunks ``[lo, hi)`` and their slots."""

    def __init__(self, writer: int, env: int) -> None:
        self.writer, self.env = writer, env
        self.base = self.lo = self.hi = 0
        self.slots = np.zeros(16, np.int64)
        self.live_rows = 0
        self.closed = False

    def lookup(self, j: np.ndarray) -> np.ndarray:
        """Slots of stream chunks ``j`` (all within ``[lo, hi)``)."""
        return self.slots[np.asarray(j, np.int64) - self.base]

    def append(self, slot: int) -> None:
        if self.hi - self.base == len(self.slots):
            live = self.slots[self.lo - self.base:self.hi - self.base]
            grown = np.zeros(max(16, 2 * len(live)), np.int64)
            grown[:len(live)] = live
            self.slots, self.base = grown, self.lo
        self.slots[self.hi - self.base] = slot
        self.hi += 1

    def pop_before(self, j: int) -> np.ndarray:
        """Drop chunks below ``j``; returns their slots."""
        j = min(max(j, self.lo), self.hi)
        out = self.slots[self.lo - self.base:j - self.base].copy()
        self.lo = j
        return out


class ShardStore(ShardPriorities, ShardCheckpoints):
    """Transitions from several writers, frames in compressed chunks adopted verbatim.

    Parameters
    ----------
    spec
        Capacity and geometry (:class:`StoreSpec`).
    codec, codec_version
        The codec that decodes the chunks writers send, and its version in the service.
    name
        Shown in errors.

    Examples
    --------
    A writer (:class:`~sb3_integration.distributed.writer.ChunkWriter`) makes the messages:

    >>> from chunkstore import get_codec
    >>> from sb3_integration.distributed.writer import ChunkWriter
    >>> writer = ChunkWriter(0, (4, 8, 8), np.uint8, (1,), np.int64, codec=get_codec("zstd3"))
    >>> frames = np.random.default_rng(0).integers(0, 255, (24, 8, 8), dtype=np.uint8)
    >>> for t in range(20):
    ...     writer.add(frames[None, t:t + 4], frames[None, t + 1:t + 5], np.array([[1]]),
    ...                np.array([1.0]), np.array([False]), [{}])
    >>> store = ShardStore(StoreSpec(100, (4, 8, 8), "uint8", (1,), "int64"), get_codec("zstd3"), 0)
    >>> store.insert(writer.drain())        # the writer's one message
    1
    >>> store.size()
    20
    >>> reply = store.sample(8, np.random.default_rng(0), decode=True)
    >>> reply.obs.shape                     # decoded on the shard: raw stacks
    (8, 4, 8, 8)
    """

    def __init__(self, spec: StoreSpec, codec: Codec, codec_version: int, *, name: str = "shard") -> None:
        self.spec, self.name = spec, name
        self.codec, self.codec_version = codec, int(codec_version)
        self.chunk_len = int(spec.chunk_len)
        self.capacity = int(spec.capacity)
        self.layout: StackLayout | None = None
        self.frames: ChunkedArray | None = None
        self.pos, self.count, self.inserted = 0, 0, 0
        self.horizon = 0  # the highest global stamp heard of
        self.applied: dict[int, int] = {}
        self.streams: list[_Stream] = []
        self._stream_ids: dict[tuple[int, int], int] = {}
        self._free: list[int] = []
        self.slot_stream = np.zeros(0, np.int32)
        self.slot_chunk = np.zeros(0, np.int64)
        self.slot_prev = np.zeros(0, np.int64)
        self._rows_dtype = spec.row_dtype
        self.rows = self._new_rows(min(self.capacity, _MIN_RING))
        self.lock = threading.RLock()
        self._init_priorities()

    def _new_rows(self, cap: int) -> dict[str, np.ndarray]:
        spec = self.spec
        return {
            "stamp": np.full(cap, -1, np.int64), "stream": np.full(cap, -1, np.int32),
            "slot_obs": np.full(cap, NONE, np.uint32), "off_obs": np.zeros(cap, np.uint16),
            "pad_obs": np.zeros(cap, np.uint8),
            "slot_next": np.full(cap, NONE, np.uint32), "off_next": np.zeros(cap, np.uint16),
            "pad_next": np.zeros(cap, np.uint8),
            "actions": np.zeros((cap, *spec.action_shape), spec.action_dtype),
            "rewards": np.zeros(cap, np.float32), "dones": np.zeros(cap, np.float32),
            "timeouts": np.zeros(cap, np.float32),
        }

    # -- sizes ---------------------------------------------------------------------
    def size(self) -> int:
        """Transitions held."""
        return self.count

    def weight(self) -> float:
        """This shard's sampling mass (see the module docstring): its transition count, or the
        sum of its priority masses when prioritized."""
        return float(self.count) if self.priorities is None else self.priorities.total

    @property
    def ring(self) -> int:
        """Rows the ring has room for now (it grows up to ``capacity``)."""
        return len(self.rows["stream"])

    @property
    def tail(self) -> int:
        """Ring position of the oldest row."""
        return (self.pos - self.count) % self.ring

    def live_rows(self) -> np.ndarray:
        """Ring positions of the rows held, oldest first."""
        return (self.tail + np.arange(self.count)) % self.ring

    def writer_rows(self, writer: int) -> int:
        """Transitions of ``writer`` held."""
        return sum(st.live_rows for st in self.streams if st.writer == writer)

    @property
    def nbytes_stored(self) -> int:
        """Compressed frames, chunk table, slot tables, stream maps, rows and the priority index."""
        total = sum(a.nbytes for a in self.rows.values())
        if self.priorities is not None:
            total += self.priorities.nbytes
        total += self.slot_stream.nbytes + self.slot_chunk.nbytes + self.slot_prev.nbytes
        total += sum(s.slots.nbytes for s in self.streams)
        if self.frames is not None:
            total += self.frames.cbytes + self.frames.table_nbytes
        return total

    def set_codec(self, codec: Codec, version: int) -> None:
        """Decode with ``codec`` from now on (a newer version decodes what older ones wrote)."""
        with self.lock:
            if version > self.codec_version:
                self.codec, self.codec_version = codec, int(version)
                if self.frames is not None:
                    self.frames.codec = codec

    # -- the pool of chunk slots -----------------------------------------------------
    def _make_frames(self, layout: StackLayout) -> None:
        self.layout = layout
        slots = math.ceil(1.25 * self.ring / self.chunk_len) + 64  # grows with the ring (_alloc)
        self.frames = ChunkedArray(slots * self.chunk_len, layout.frame_shape, self.spec.obs_dtype,
                                   chunk_len=self.chunk_len, codec=self.codec, threads=self.spec.threads,
                                   name=f"{self.name}.frames", max_open=1)
        self._grow_tables(slots)

    def _grow_tables(self, slots: int) -> None:
        old = len(self.slot_stream)
        self._free.extend(range(slots - 1, old - 1, -1))  # popped from the end: lowest first
        for name, fill in (("slot_stream", -1), ("slot_chunk", -1), ("slot_prev", -1)):
            arr = getattr(self, name)
            grown = np.full(slots, fill, arr.dtype)
            grown[:old] = arr
            setattr(self, name, grown)

    def _alloc(self) -> int:
        if not self._free:
            arr = self.frames
            assert arr is not None
            old = arr.nchunks_total
            new = int(old * _GROWTH) + 1
            keep = arr.stored_chunks()
            arr.remap(new * self.chunk_len, keep, keep)  # only the chunk table grows
            self._grow_tables(new)
        return self._free.pop()

    def _release(self, slots: np.ndarray) -> None:
        arr = self.frames
        assert arr is not None
        for s in slots.tolist():
            arr.discard(s * self.chunk_len, (s + 1) * self.chunk_len)
            self.slot_stream[s], self.slot_chunk[s], self.slot_prev[s] = -1, -1, -1
            self._free.append(s)

    def _stream(self, writer: int, env: int) -> int:
        key = (writer, env)
        sid = self._stream_ids.get(key)
        if sid is None:
            sid = self._stream_ids[key] = len(self.streams)
            self.streams.append(_Stream(writer, env))
        return sid

    # -- inserting -------------------------------------------------------------------
    def insert(self, msg: InsertMessage) -> int:
        """Apply ``msg`` (once); returns the writer's applied ``seq``.

        Raises ValueError (and changes nothing) when the message does not fit this
        store: another frame layout, a newer codec than this store has, chunks
        out of order, or rows whose frames were never sent.
        """
        with self.lock:
            done = self.applied.get(msg.writer, 0)
            if msg.seq <= done:
                return done  # re-sent after a restart: already here
            if msg.seq != done + 1:
                raise MissingMessagesError(f"{self.name}: writer {msg.writer} sent message {msg.seq} after "
                                 f"{done}: messages in between are missing")
            self._check_message(msg)
            rows = unpack_rows(msg.rows, msg.n_rows, self._rows_dtype)
            self._install_chunks(msg)
            self._write_rows(msg.writer, rows, msg.stamp)
            self.applied[msg.writer] = msg.seq
            return msg.seq

    def _check_message(self, msg: InsertMessage) -> None:
        axis, width, depth = msg.layout
        layout = StackLayout(self.spec.obs_shape, axis, int(width), int(depth))
        try:
            layout.frame_shape  # noqa: B018 - validates the geometry
        except Exception as e:
            raise ValueError(f"{self.name}: bad layout {msg.layout}: {e}") from None
        if self.layout is None:
            if layout.axis is not None and layout.width * layout.depth != self.spec.obs_shape[layout.axis]:
                raise ValueError(f"{self.name}: layout {msg.layout} does not tile {self.spec.obs_shape}")
            self._make_frames(layout)
        elif layout != self.layout:
            raise ValueError(f"{self.name}: writer {msg.writer} stacks frames as {msg.layout}, this "
                             f"shard as {self.layout.to_dict()}")
        if msg.codec_version > self.codec_version:
            raise ValueError(f"{self.name}: chunks of codec version {msg.codec_version}, this shard "
                             f"has {self.codec_version}")
        n = len(msg.chunk_no)
        if not (len(msg.chunk_env) == len(msg.chunk_nbytes) == n) or int(msg.chunk_nbytes.sum()) != len(msg.chunk_data):
            raise ValueError(f"{self.name}: the chunk table does not match the chunk bytes")

    def _install_chunks(self, msg: InsertMessage) -> None:
        arr = self.frames
        assert arr is not None
        data = memoryview(msg.chunk_data)
        ends = np.cumsum(msg.chunk_nbytes.astype(np.int64))
        starts = ends - msg.chunk_nbytes
        for env, j, a, b in zip(msg.chunk_env.tolist(), msg.chunk_no.tolist(), starts.tolist(),
                                ends.tolist(), strict=True):
            sid = self._stream(msg.writer, env)
            st = self.streams[sid]
            if j < st.lo:
                continue  # every row that used it is gone
            if j > st.hi:
                raise ValueError(f"{self.name}: writer {msg.writer} env {env} sent chunk {j}, "
                                 f"expected at most {st.hi}")
            if j < st.hi:
                slot = int(st.lookup(np.array([j]))[0])
            else:
                slot = self._alloc()
                self.slot_stream[slot], self.slot_chunk[slot] = sid, j
                self.slot_prev[slot] = st.lookup(np.array([j - 1]))[0] if st.lo <= j - 1 < st.hi else -1
                st.append(slot)
            arr.put_chunk_bytes(slot, data[a:b])

    def _locate(self, sids: np.ndarray, frame_numbers: np.ndarray, pad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slot, offset) of each stack's newest frame, given by its number in its stream
        (``frame_numbers``); ValueError for frames never sent."""
        assert self.layout is not None
        k, chunk_len = self.layout.depth, self.chunk_len
        slot = np.full(len(frame_numbers), NONE, np.uint32)
        off = np.zeros(len(frame_numbers), np.uint16)
        has = pad < k
        for sid in np.unique(sids[has]).tolist():
            st, m = self.streams[sid], has & (sids == sid)
            numbers = frame_numbers[m]
            newest, first = numbers // chunk_len, (numbers - (k - 1) + pad[m].astype(np.int64)) // chunk_len
            if first.min() < st.lo or newest.max() >= st.hi:
                raise ValueError(f"{self.name}: writer {st.writer} env {st.env}: rows use frames "
                                 f"of chunks outside the stored {st.lo}..{st.hi - 1}")
            slot[m] = st.lookup(newest)
            off[m] = numbers % chunk_len
        return slot, off

    def _write_rows(self, writer: int, recs: np.ndarray, stamp: int = -1) -> None:
        if len(recs) == 0:
            return
        k = self.layout.depth if self.layout is not None else 1
        if int(recs["pad_obs"].max()) > k or int(recs["pad_next"].max()) > k:
            raise ValueError(f"{self.name}: rows pad more frames than a stack of {k} has")
        sids = np.array([self._stream(writer, e) for e in recs["env"].tolist()], np.int32)
        slot_obs, off_obs = self._locate(sids, recs["g_obs"], recs["pad_obs"])
        slot_next, off_next = self._locate(sids, recs["g_next"], recs["pad_next"])
        cols = {"stream": sids, "slot_obs": slot_obs, "off_obs": off_obs, "pad_obs": recs["pad_obs"],
                "slot_next": slot_next, "off_next": off_next, "pad_next": recs["pad_next"],
                "actions": recs["action"], "rewards": recs["reward"], "dones": recs["done"],
                "timeouts": recs["timeout"]}
        first = self.inserted if stamp < 0 else stamp  # a store used alone stamps rows itself
        cols["stamp"] = first + np.arange(len(recs), dtype=np.int64)
        for a in range(0, len(recs), self.capacity):  # a batch larger than the ring wraps it
            b = min(len(recs), a + self.capacity)
            self._make_room(b - a)
            at = (self.pos + np.arange(b - a)) % self.ring
            for name, values in cols.items():
                self.rows[name][at] = values[a:b]
            if self.priorities is not None:
                self._prio_written(at, recs["priority"][a:b])
            for sid, count in zip(*np.unique(sids[a:b], return_counts=True), strict=True):
                self.streams[int(sid)].live_rows += int(count)
            self.pos = (self.pos + b - a) % self.ring
            self.count += b - a
            self.inserted += b - a
        self.horizon = max(self.horizon, int(first) + len(recs))
        self._expire()

    def _make_room(self, n: int) -> None:
        """Room for ``n <= capacity`` more rows: grow the ring, or let the oldest rows go."""
        if self.count + n > self.ring and self.ring < self.capacity:
            self._grow_ring(min(self.capacity, max(2 * self.ring, self.count + n)))
        over = self.count + n - self.ring
        if over > 0:
            self._drop_oldest(over)

    def _grow_ring(self, size: int) -> None:
        live = self.live_rows()
        rows = self._new_rows(size)
        for name, arr in self.rows.items():
            rows[name][:len(live)] = arr[live]
        self.rows, self.pos = rows, self.count % size
        if self.priorities is not None:
            self._prio_moved(live)

    def _drop_oldest(self, n: int) -> None:
        if n > 0:
            self._evict((self.tail + np.arange(n)) % self.ring)
            self.count -= n

    def advance(self, horizon: int) -> None:
        """The service has stamped ``horizon`` rows: let those below ``horizon - capacity`` go."""
        with self.lock:
            if horizon > self.horizon:
                self.horizon = int(horizon)
                self._expire()

    def _expire(self) -> None:
        """Drop rows from the front while their stamps are below ``horizon - capacity``."""
        limit = self.horizon - self.capacity
        while self.count:
            block = (self.tail + np.arange(min(self.count, 4096))) % self.ring
            old = self.rows["stamp"][block] < limit
            k = len(old) if old.all() else int(np.argmin(old))
            self._drop_oldest(k)
            if k < len(block):
                return

    def _evict(self, at: np.ndarray) -> None:
        """Rows ``at`` (the oldest) leave: free the chunks no later row can use."""
        r = self.rows
        if self.priorities is not None:
            self._prio_evicted(at)
        sids = r["stream"][at]
        old = sids >= 0
        if not old.any():
            return
        assert self.layout is not None
        k, chunk_len = self.layout.depth, self.chunk_len
        at, sids = at[old], sids[old]
        slot = np.where(r["slot_obs"][at] != NONE, r["slot_obs"][at], r["slot_next"][at])
        off = np.where(r["slot_obs"][at] != NONE, r["off_obs"][at], r["off_next"][at])
        for sid in np.unique(sids).tolist():
            m = sids == sid
            st = self.streams[sid]
            st.live_rows -= int(m.sum())
            s = slot[m]
            if (s != NONE).any():
                s_ok, o_ok = s[s != NONE].astype(np.int64), off[m][s != NONE].astype(np.int64)
                # the first frame of the newest evicted stack
                bound = int((self.slot_chunk[s_ok] * chunk_len + o_ok).max()) - (k - 1)
                self._release(st.pop_before(max(bound, 0) // chunk_len))
            if st.closed and st.live_rows == 0:
                self._release(st.pop_before(st.hi))
        r["stream"][at] = -1
        r["stamp"][at] = -1

    def end_writer(self, writer: int) -> None:
        """``writer`` sends nothing more: its streams' chunks go with their last rows."""
        with self.lock:
            for st in self.streams:
                if st.writer == writer:
                    st.closed = True
                    if st.live_rows == 0 and self.frames is not None:
                        self._release(st.pop_before(st.hi))

    # -- reading -----------------------------------------------------------------------
    def _stack_ids(self, slot: np.ndarray, off: np.ndarray, pad: np.ndarray) -> np.ndarray:
        """Pool item ids ``(n, depth)`` of stacks given by their newest frame's slot; -1 = zeros."""
        assert self.layout is not None
        k, chunk_len = self.layout.depth, self.chunk_len
        valid = slot != NONE
        base = np.where(valid, slot, 0).astype(np.int64)
        off = off.astype(np.int64)
        ids = np.empty((len(slot), k), np.int64)
        for j in range(k):
            pos = off - (k - 1 - j)
            hops = np.where(j >= pad, np.maximum(0, -(pos // chunk_len)), 0)
            cur = base.copy()
            for h in range(int(hops.max()) if len(hops) else 0):
                m = hops > h
                cur[m] = self.slot_prev[cur[m]]
            ids[:, j] = cur * chunk_len + pos + hops * chunk_len
        ids[(np.arange(k)[None, :] < pad[:, None]) | ~valid[:, None]] = -1
        return ids

    def frame_ids(self, rows: np.ndarray) -> np.ndarray:
        """``(2 * n, depth)`` pool ids of rows' observation stacks, then their next observations."""
        r = self.rows
        return np.concatenate([self._stack_ids(r["slot_obs"][rows], r["off_obs"][rows], r["pad_obs"][rows]),
                               self._stack_ids(r["slot_next"][rows], r["off_next"][rows], r["pad_next"][rows])])

    def read(self, rows: np.ndarray, *, decode: bool) -> SampleReply:
        """Transitions at ring positions ``rows`` (those :meth:`live_rows` names)."""
        with self.lock:
            rows = np.asarray(rows, np.int64)
            if len(rows) and (rows.min() < 0 or rows.max() >= self.ring
                              or ((rows - self.tail) % self.ring >= self.count).any()):
                raise IndexError(f"{self.name}: rows must be ring positions of held rows (live_rows())")
            r = self.rows
            reply = SampleReply(shard=-1, n=len(rows), size=self.size(), weight=self.weight(),
                                codec_version=self.codec_version,
                                actions=r["actions"][rows], rewards=r["rewards"][rows],
                                dones=r["dones"][rows], timeouts=r["timeouts"][rows], rows=rows)
            if self.frames is None or self.layout is None or not len(rows):
                if len(rows):
                    raise IndexError(f"{self.name}: nothing stored yet")
                return reply  # a weight-only reply
            ids = self.frame_ids(rows)
            if decode:
                out = np.empty((2 * len(rows), *self.spec.obs_shape), self.spec.obs_dtype)
                self.frames.take_into(ids, self.layout.split(out))
                reply.obs, reply.next_obs = out[:len(rows)], out[len(rows):]
                return reply
            return self._compressed(reply, ids)

    def _compressed(self, reply: SampleReply, ids: np.ndarray) -> SampleReply:
        assert self.frames is not None
        chunk_len = self.chunk_len
        used = ids[ids >= 0] // chunk_len
        uniq = np.unique(used)
        local = np.full(ids.shape, -1, np.int32)
        ok = ids >= 0
        chunk_of, offset = ids[ok] // chunk_len, ids[ok] % chunk_len
        local[ok] = (np.searchsorted(uniq, chunk_of) * chunk_len + offset).astype(np.int32)
        views = list(self.frames.iter_chunk_bytes(uniq))
        reply.frame_ids = local
        reply.chunk_nbytes = np.fromiter((v.nbytes for v in views), np.uint32, len(views))
        reply.chunk_data = b"".join(views)
        return reply

    def sample(self, n: int, rng: np.random.Generator, *, decode: bool) -> SampleReply:
        """``n`` transitions drawn uniformly (with replacement) from what this shard holds."""
        with self.lock:
            size = self.size()
            if n and size == 0:
                raise IndexError(f"{self.name}: cannot sample from an empty shard")
            picked = (self.tail + rng.integers(0, size, n)) % self.ring if n else np.zeros(0, np.int64)
            return self.read(picked, decode=decode)

    def _streams_from(self, table: np.ndarray, slots: np.ndarray) -> tuple[list[_Stream], dict[tuple[int, int], int]]:
        """The streams of a state's table (writer, env, lo, hi, live rows, closed) and their slots."""
        streams: list[_Stream] = []
        ids: dict[tuple[int, int], int] = {}
        at = 0
        for writer, env, lo, hi, live, closed in table.tolist():
            st = _Stream(writer, env)
            st.base = st.lo = lo
            st.hi, st.live_rows, st.closed = hi, live, bool(closed)
            st.slots = np.zeros(max(16, hi - lo), np.int64)
            st.slots[:hi - lo] = slots[at:at + hi - lo]
            at += hi - lo
            ids[(writer, env)] = len(streams)
            streams.append(st)
        return streams, ids

