"""The wire format: what travels between writers, shards and learners.

Everything is a small dataclass of numpy arrays and ``bytes``, pickled by Ray (numpy
arrays and bytes are copied as flat buffers, never element by element).

Writer -> shard: :class:`InsertMessage`, one per writer flush (every ``flush_every``
transitions, 256 by default):

``writer``, ``seq``
    The writer's id and the message's number (1, 2, ...). A shard applies each writer's
    messages in order and exactly once: a message at or below the writer's applied
    ``seq`` is acknowledged and skipped (a re-sent message after a shard restart).
``codec_version``
    Which codec of the service encoded the chunks (0: the service's codec before a
    dictionary was trained; 1: the codec the first trainer offered).
``layout``
    ``(axis, width, depth)`` of the frame stack (see :class:`sb3_integration.engine.stacking.StackLayout`).
``chunk_env``, ``chunk_no``, ``chunk_nbytes``, ``chunk_data``
    Sealed, compressed chunks of ``chunk_len`` frames: env ``chunk_env[i]``'s stream chunk
    ``chunk_no[i]`` (frames ``chunk_no * chunk_len ...`` of that env's frame stream) is
    ``chunk_data[sum(chunk_nbytes[:i]) : ...]``. The bytes are the codec's output, stored
    by the shard verbatim. A chunk a writer sends again (the partial chunk an env was
    writing at the previous flush, now longer) replaces the earlier one.
``stamp``
    The number of the message's first transition in the service's global insert order,
    handed out by the coordinator with the message's rate-limiter permit (rows are
    ``stamp, stamp + 1, ...``); shards evict by it. ``-1`` when sent without a service.
``rows``
    The transitions, one :func:`row_dtype` record each, zstd-compressed (level 1):
    env, the stream frame numbers ``g_obs`` / ``g_next`` of the newest frame of the
    observation and next observation stacks, their counts of leading all-zero frames
    (``pad_*``; ``depth`` = the whole stack is zeros), action, reward, done, timeout, and
    the initial priority the actor gave (NaN when none: a prioritized shard gives the
    largest priority it has seen; a uniform shard ignores it).
    Frame ``j`` of a stack is frame ``g - (depth - 1) + j`` of the env's stream.

Shard -> learner: :class:`SampleReply`. With ``decoded`` stacks the observations travel
raw (``obs``, ``next_obs``). Otherwise the chunks travel compressed: ``chunk_nbytes`` /
``chunk_data`` hold each distinct chunk the batch needs once, and ``frame_ids``
(``(2 * n, depth)`` int32: obs rows then next-obs rows) number frames in the
concatenation of those decoded chunks (-1: a zero frame); the learner decodes them with
the codec of ``codec_version``. Small arrays (actions, rewards, dones, timeouts) are raw.
Every reply carries the shard's ``size`` and ``weight`` (its sampling mass) at the time of the reply, a reply to a
request for 0 transitions included: that is how learners keep every shard's weight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zstandard

__all__ = ["InsertAck", "InsertMessage", "SampleReply", "pack_rows", "row_dtype", "unpack_rows"]

_ROWS_LEVEL = 1


def row_dtype(action_shape: tuple[int, ...], action_dtype: Any) -> np.dtype:
    """One transition's record on the wire (and in a shard's checkpoint of pending rows)."""
    return np.dtype([
        ("env", np.uint16), ("g_obs", np.int64), ("g_next", np.int64),
        ("pad_obs", np.uint8), ("pad_next", np.uint8),
        ("action", np.dtype(action_dtype), tuple(action_shape)),
        ("reward", np.float32), ("done", np.float32), ("timeout", np.float32),
        ("priority", np.float32),  # the actor's initial priority (NaN: none; the shard gives its largest)
    ])


def pack_rows(rows: np.ndarray) -> bytes:
    """Records as zstd bytes (frame numbers are nearly consecutive: they shrink ~5x)."""
    return zstandard.ZstdCompressor(level=_ROWS_LEVEL).compress(np.ascontiguousarray(rows).tobytes())


def unpack_rows(data: bytes, n: int, dtype: np.dtype) -> np.ndarray:
    """The ``n`` records of :func:`pack_rows`; ValueError when the bytes do not hold them."""
    raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=n * dtype.itemsize)
    if len(raw) != n * dtype.itemsize:
        raise ValueError(f"rows: {len(raw)} bytes do not hold {n} records of {dtype.itemsize} bytes")
    return np.frombuffer(raw, dtype).copy()


@dataclass
class InsertMessage:
    """One writer flush (see the module docstring)."""

    writer: int
    seq: int
    codec_version: int
    layout: tuple[int | None, int, int]
    chunk_env: np.ndarray
    chunk_no: np.ndarray
    chunk_nbytes: np.ndarray
    chunk_data: bytes
    n_rows: int
    rows: bytes
    stamp: int = -1  # the global insert number of the first row (set with the permit; -1: none)

    @property
    def nbytes(self) -> int:
        """Payload bytes: chunks, rows and the chunk table."""
        return (len(self.chunk_data) + len(self.rows) + self.chunk_env.nbytes + self.chunk_no.nbytes
                + self.chunk_nbytes.nbytes)


@dataclass
class InsertAck:
    """A shard's answer to an insert: what it holds of this writer, and who it is.

    ``epoch`` changes whenever the shard's actor is (re)started; ``applied`` is the
    writer's last applied ``seq``, ``durable`` the last one covered by a checkpoint;
    ``held`` the writer's transitions the shard holds.
    """

    shard: int
    epoch: str
    applied: int
    durable: int
    size: int
    codec_version: int
    held: int = 0


@dataclass
class SampleReply:
    """What a shard returns for ``n`` sampled transitions (see the module docstring)."""

    shard: int
    n: int
    size: int
    codec_version: int
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    timeouts: np.ndarray
    rows: np.ndarray
    obs: np.ndarray | None = None
    next_obs: np.ndarray | None = None
    frame_ids: np.ndarray | None = None
    chunk_nbytes: np.ndarray | None = None
    chunk_data: bytes = b""
    weight: float = 0.0  # the shard's sampling mass when it replied (ShardStore.weight)
    # prioritized replies: each row's mass and generation, and the shard's smallest positive mass
    masses: np.ndarray | None = None
    generations: np.ndarray | None = None
    min_mass: float = float("inf")
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        parts = [self.actions, self.rewards, self.dones, self.timeouts, self.rows, self.obs,
                 self.next_obs, self.frame_ids, self.chunk_nbytes]
        return len(self.chunk_data) + sum(p.nbytes for p in parts if p is not None)
