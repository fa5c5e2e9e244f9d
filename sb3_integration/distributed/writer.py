"""Writers: frames deduplicated and chunks compressed where the experience is born.

:class:`ChunkWriter` (no Ray) keeps a small :class:`~sb3_integration.engine.frames.FrameStore`
ring of the transitions not yet sent (frames kept raw: it is a staging area), and
:meth:`ChunkWriter.drain` turns them into one
:class:`~sb3_integration.distributed.wire.InsertMessage`: the chunks of frames each env
wrote since the last drain, compressed with the service's codec, and one record per
transition naming its stacks by stream frame numbers. A shard stores those bytes as
they are.

:class:`ReplayWriter` is the Ray side: it registers with a
:class:`~sb3_integration.distributed.service.ReplayService`, asks the rate limiter
before each message, sends messages to its shard with one call in flight (the next
message is built while the previous one travels), trains the shared zstd dictionary
if it is the first writer to need one, and keeps every message until a checkpoint of
its shard covers it, so that a restarted shard gets back what it lost.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from typing import Any

import numpy as np

from chunkstore import Codec
from chunkstore.array import DEFAULT_CHUNK_LEN, should_train, trained_codec, wants_training
from chunkstore.codecs import TrainableCodec
from sb3_integration.buffers.observations import coerce_obs
from sb3_integration.distributed import options, remote
from sb3_integration.distributed.errors import DataLossWarning, ShardLostError
from sb3_integration.distributed.service import ReplayService
from sb3_integration.distributed.wire import InsertAck, InsertMessage, pack_rows, row_dtype
from sb3_integration.engine.frames import NEXT, OBS, FrameStore
from sb3_integration.engine.stacking import StackLayout

__all__ = ["ChunkWriter", "DataLossWarning", "ReplayWriter", "ShardLostError"]

#: every this many messages, a writer with the shared dictionary checks that it beats plain zstd
#: on its own frames (a service shared by games keeps the first trainer's dictionary)
RECHECK_EVERY = 64


class ChunkWriter:
    """Stage transitions of ``n_envs`` envs and drain them as compressed insert messages.

    Parameters
    ----------
    writer_id
        The writer's id in its service (messages carry it).
    obs_shape, obs_dtype, action_shape, action_dtype
        One observation and one action (per env).
    n_envs
        Envs added per :meth:`add` call, as in SB3.
    chunk_len, codec, codec_version
        Frames per chunk, and the service's codec (an untrained ``zstd3+dict`` writes
        plain zstd until :meth:`train` gives it a dictionary).
    layout
        The frame stack layout to use (the service's, once known); None detects it.
    flush_every
        Transitions per env between messages; the staging ring holds twice that.

    Examples
    --------
    >>> from chunkstore import get_codec
    >>> w = ChunkWriter(0, (4, 8, 8), np.uint8, (1,), np.int64, codec=get_codec("zstd3"))
    >>> frames = np.random.default_rng(0).integers(0, 255, (24, 8, 8), dtype=np.uint8)
    >>> for t in range(20):     # SB3's add(): stacks of 4 frames, one env
    ...     w.add(frames[None, t:t + 4], frames[None, t + 1:t + 5], np.array([[1]]),
    ...           np.array([1.0]), np.array([False]), [{}])
    >>> msg = w.drain()         # an InsertMessage for a ShardStore
    >>> type(msg).__name__
    'InsertMessage'
    """

    def __init__(self, writer_id: int, obs_shape: tuple[int, ...], obs_dtype: Any,
                 action_shape: tuple[int, ...], action_dtype: Any, n_envs: int = 1, *,
                 chunk_len: int = DEFAULT_CHUNK_LEN, codec: Codec, codec_version: int = 0,
                 layout: StackLayout | None = None, axis_order: tuple[int, ...] = (0, -1),
                 flush_every: int = 256) -> None:
        flush_every = options.count("flush_every", flush_every)
        n_envs = options.count("n_envs", n_envs)
        self.writer_id, self.n_envs = int(writer_id), int(n_envs)
        self.obs_shape, self.obs_dtype = tuple(obs_shape), np.dtype(obs_dtype)
        self.L, self.flush_every = int(chunk_len), int(flush_every)
        self.R = 2 * self.flush_every + self.L  # staging rows: a drain every flush_every keeps them apart
        self.axis_order = tuple(axis_order)
        self._rec = row_dtype(tuple(action_shape), action_dtype)
        self.small = np.zeros((self.R, self.n_envs), self._rec)
        self.set_codec(codec, codec_version)
        self._new_store(layout)
        self.seq = 0
        self.train_samples: list[np.ndarray] | None = [] if self.wants_training else None
        self.bytes_sent = 0
        self.transitions_sent = 0

    def _new_store(self, layout: StackLayout | None) -> None:
        # raw frames ("none"): the ring only stages frames until their chunk is sent
        self.fs = FrameStore(self.obs_shape, self.obs_dtype, self.R, self.n_envs, stacks_per_row=2,
                             chunk_len=self.L, codec="none", cache=0, threads=1,
                             axis_order=self.axis_order, name=f"writer{self.writer_id}")
        if layout is not None and self.fs.layout is None:
            self.fs.set_layout(layout)  # the service's layout, so every writer's chunks fit every shard
        self.row, self.full, self.pending = 0, False, 0
        self.sent_full = np.zeros(self.n_envs, np.int64)  # whole chunks sent, per env
        self.sent_head = np.zeros(self.n_envs, np.int64)  # frames sent, per env

    # -- codec ---------------------------------------------------------------------------
    @property
    def wants_training(self) -> bool:
        return wants_training(self.codec)

    def set_codec(self, codec: Codec, version: int) -> None:
        """Encode with ``codec`` (version ``version`` of the service's) from the next drain on."""
        self.codec, self.codec_version = codec, int(version)
        trainable = isinstance(codec, TrainableCodec) and codec.wants_training
        self._encoder = codec.untrained_equivalent() if trainable else codec  # type: ignore[attr-defined]
        # a trained dictionary is checked against plain zstd on this writer's own frames
        self._plain = codec.untrained_equivalent() if isinstance(codec, TrainableCodec) and not trainable else None
        self.use_plain, self._drains = False, 0
        if not trainable:
            self.train_samples = None

    def train(self) -> Codec | None:
        """A codec trained on the chunks drained so far, once chunkstore's rule says so (else None).

        The rule of every array (:func:`chunkstore.array.should_train`: after
        ``TRAIN_AFTER_BYTES`` of frames; :func:`chunkstore.array.trained_codec`: trained
        on the even chunks, kept only if it beats the plain codec on the odd ones),
        applied to the chunks in the order they were drained.
        """
        samples = self.train_samples
        if samples is None or not should_train(self.codec, sum(s.nbytes for s in samples)):
            return None
        self.train_samples = None
        return trained_codec(self.codec, dict(enumerate(samples)))

    # -- writing ---------------------------------------------------------------------------
    def add(self, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any,
            infos: list[dict[str, Any]] | None = None, priorities: Any = None) -> None:
        """One step of ``n_envs`` envs, SB3's ``ReplayBuffer.add`` arguments; ValueError on bad input.

        ``priorities``: the transitions' initial priorities (``n_envs`` finite numbers >= 0,
        e.g. the actor's ``|TD error|``; a prioritized shard stores ``(p + epsilon) ** alpha``);
        None: the shard gives each the largest priority it has seen.
        """
        prio = check_priorities(priorities, self.n_envs)
        if self.pending >= self.R - self.L:
            raise RuntimeError(f"writer {self.writer_id}: {self.pending} transitions waiting; drain() first")
        n = self.n_envs
        shape = (n, *self.obs_shape)
        o = coerce_obs(obs, shape, self.obs_dtype, "obs")
        x = coerce_obs(next_obs, shape, self.obs_dtype, "next_obs")
        rec = np.zeros(n, self._rec)
        rec["priority"] = prio
        try:
            rec["action"] = np.asarray(action).reshape((n, *self._rec["action"].shape))
            rec["reward"], rec["done"] = reward, done
            infos = infos if infos is not None else [{} for _ in range(n)]
            if len(infos) != n:
                raise ValueError(f"expected {n} infos, got {len(infos)}")
            rec["timeout"] = [info.get("TimeLimit.truncated", False) for info in infos]
        except (ValueError, TypeError) as e:
            raise ValueError(f"writer {self.writer_id}: action/reward/done/infos do not fit {n} envs: {e}") from None
        if self.full and self.row % self.L == 0:  # whole chunks of frames no staged row uses go
            self.fs.release_before((self.row + 1) % self.R)
        self.fs.put_row(self.row, (o, x))
        self.small[self.row] = rec
        self.row = (self.row + 1) % self.R
        self.full = self.full or self.row == 0
        self.pending += 1

    @property
    def ready(self) -> bool:
        """``flush_every`` transitions (per env) wait to be sent."""
        return self.pending >= self.flush_every

    def relayout(self, layout: StackLayout) -> None:
        """Restage what waits under ``layout`` (another writer's, adopted by the service first)."""
        if self.seq:
            raise RuntimeError(f"writer {self.writer_id}: cannot change layout after sending")
        rows = (self.row - self.pending + np.arange(self.pending)) % self.R
        envs = np.arange(self.n_envs)
        stacks = [self.fs.gather([(OBS, np.full(self.n_envs, r)), (NEXT, np.full(self.n_envs, r))], envs)
                  for r in rows.tolist()]
        small = self.small[rows].copy()
        self._new_store(layout)
        for (o, x), rec in zip(stacks, small, strict=True):
            self.fs.put_row(self.row, (o, x))
            self.small[self.row] = rec
            self.row += 1
            self.pending += 1

    def drain(self) -> InsertMessage | None:
        """Everything staged since the last drain as one message (None when nothing waits)."""
        if self.pending == 0:
            return None
        fs = self.fs
        lay = fs.ensure_layout()
        env_of, chunk_no, blobs = self._chunks()
        rows = (self.row - self.pending + np.arange(self.pending)) % self.R
        recs = self._records(rows)
        self.seq += 1
        msg = InsertMessage(
            writer=self.writer_id, seq=self.seq, codec_version=self.codec_version,
            layout=(lay.axis, lay.width, lay.depth), chunk_env=env_of, chunk_no=chunk_no,
            chunk_nbytes=np.fromiter((len(b) for b in blobs), np.uint32, len(blobs)),
            chunk_data=b"".join(blobs), n_rows=len(recs), rows=pack_rows(recs))
        self.pending = 0
        self.bytes_sent += msg.nbytes
        self.transitions_sent += len(recs)
        return msg

    def _chunks(self) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
        """Every chunk with frames not sent yet, per env (a partial one again when it grew)."""
        fs, L = self.fs, self.L
        arr, per_env = fs.frames, fs.ring_frames // L
        assert arr is not None
        envs, nums = [], []
        for e in range(self.n_envs):
            head = int(fs.heads[e])
            if head > self.sent_head[e]:
                j = np.arange(self.sent_full[e], -(-head // L), dtype=np.int64)
                envs.append(np.full(len(j), e, np.uint16))
                nums.append(j)
            self.sent_full[e], self.sent_head[e] = head // L, head
        if not nums:
            return np.zeros(0, np.uint16), np.zeros(0, np.int64), []
        env_of, chunk_no = np.concatenate(envs), np.concatenate(nums)
        ring = env_of.astype(np.int64) * per_env + chunk_no % per_env
        items = (ring[:, None] * L + np.arange(L)).reshape(-1)
        raw = arr.take(items).reshape(len(ring), L, *arr.item_shape)  # open chunks too: nothing sealed twice
        if self.train_samples is not None:
            self.train_samples.extend(raw.copy())
        return env_of, chunk_no, self._encode(raw)

    def _encode(self, raw: np.ndarray) -> list[bytes]:
        """Chunks with the service's codec, or plain zstd where the shared dictionary (trained on
        another writer's frames, maybe another game's) makes this writer's chunks larger: every
        :data:`RECHECK_EVERY` messages both are tried and the smaller wins until the next check
        (chunks without a dictionary decode with it too)."""
        plain, self._drains = self._plain, self._drains + 1
        if plain is None:
            return [bytes(self._encoder.encode(c)) for c in raw]
        if (self._drains - 1) % RECHECK_EVERY:
            enc = plain if self.use_plain else self._encoder
            return [bytes(enc.encode(c)) for c in raw]
        with_dict = [bytes(self._encoder.encode(c)) for c in raw]
        without = [bytes(plain.encode(c)) for c in raw]
        self.use_plain = sum(map(len, without)) < sum(map(len, with_dict))
        return without if self.use_plain else with_dict

    def _records(self, rows: np.ndarray) -> np.ndarray:
        fs, n = self.fs, self.n_envs
        r = np.repeat(rows, n).astype(np.int64)
        e = np.tile(np.arange(n, dtype=np.int64), len(rows))
        recs = self.small[rows].reshape(-1).copy()
        recs["env"] = e
        k = fs.layout.depth if fs.layout is not None else 1
        for which, g_name, pad_name in ((OBS, "g_obs", "pad_obs"), (NEXT, "g_next", "pad_next")):
            g, pad = fs.newest_frames(which, r, e)
            recs[g_name] = np.where(pad < k, g, 0)
            recs[pad_name] = pad
        return recs


def check_priorities(priorities: Any, n: int) -> np.ndarray:
    """``n`` initial priorities as float32 (NaN each when None); ValueError naming ``priorities``."""
    if priorities is None:
        return np.full(n, np.nan, np.float32)
    try:
        p = np.asarray(priorities.detach().cpu() if hasattr(priorities, "detach") else priorities)
    except Exception as e:
        raise ValueError(f"priorities must be {n} numbers, got {priorities!r}: {e}") from None
    if p.ndim == 0:
        p = p.reshape(1)
    if p.shape != (n,) or (p.size and p.dtype.kind not in "iuf"):
        raise ValueError(f"priorities must be {n} numbers (one per env), got shape {p.shape} dtype {p.dtype}")
    p = p.astype(np.float64)
    if not (np.isfinite(p).all() and (p >= 0).all() and (p <= np.finfo(np.float32).max).all()):
        raise ValueError("priorities must be finite, >= 0 and within float32's range")
    return p.astype(np.float32)


class ReplayWriter:
    """Feeds a :class:`~sb3_integration.distributed.service.ReplayService` from one process.

    ``add()`` takes SB3's arguments; every ``flush_every`` steps the staged
    transitions go to this writer's shard as one message (one remote call, one
    rate-limiter call). ``close()`` (or a ``with`` block) sends the rest and waits.

    Parameters
    ----------
    service
        The service, or its name.
    n_envs
        Envs per ``add()``.
    flush_every
        Steps per message.
    timeout
        Seconds an insert may wait for the rate limiter (None: forever).
    restart_timeout
        Seconds to wait for a restarted shard before :class:`ShardLostError`.
    train
        Train the shared dictionary if the service has none yet.
    retain_bytes
        Messages kept for a restarted shard (those its last checkpoint lacks), at most
        this many bytes (oldest dropped first; none kept when the service has no
        checkpoints). A restart that needs a dropped message is a
        :class:`DataLossWarning` naming what was lost.

    Examples
    --------
    >>> # needs: ray
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> from sb3_integration.distributed import ReplayService, start_local_ray
    >>> _ = start_local_ray(num_cpus=1)
    >>> frames, actions = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6)
    >>> svc = ReplayService.create("apex", frames, actions, capacity=10_000)
    >>> obs = np.zeros((1, 4, 84, 84), np.uint8)   # SB3's (n_envs, *obs_shape) arrays
    >>> next_obs = np.concatenate([obs[:, 1:], np.ones((1, 1, 84, 84), np.uint8)], axis=1)
    >>> action, reward, done, infos = np.array([2]), np.array([1.0]), np.array([False]), [{}]
    >>> with ReplayWriter("apex") as writer:
    ...     writer.add(obs, next_obs, action, reward, done, infos)
    >>> sum(shard["size"] for shard in svc.info())
    1
    >>> svc.close()
    """

    def __init__(self, service: ReplayService | str, n_envs: int = 1, *, flush_every: int = 256,
                 timeout: float | None = None, restart_timeout: float = 60.0, train: bool = True,
                 retain_bytes: int = 256 << 20) -> None:
        self.n_envs, self.flush_every = options.count("n_envs", n_envs), options.count("flush_every", flush_every)
        timeout = options.seconds("timeout", timeout)
        restart_timeout = options.number("restart_timeout", restart_timeout, minimum=0.0)
        retain_bytes = options.count("retain_bytes", retain_bytes, minimum=0)
        self.service = service if isinstance(service, ReplayService) else ReplayService.connect(service)
        self.timeout, self.restart_timeout, self._train = timeout, float(restart_timeout), bool(train)
        self._inflight: Any = None
        self._retained: deque[InsertMessage] = deque()
        self._epoch: str | None = None
        self._unsent: InsertMessage | None = None
        self._retained_bytes = 0
        # nothing to give back to a shard that restarts empty (no checkpoints)
        self.retain_bytes = int(retain_bytes) if self.service.config.checkpoint_dir else 0
        self.resent = 0
        self.lost = 0  # transitions a restarted shard came back without (DataLossWarning)
        self._register()

    def _register(self) -> None:
        info = self.service.register_writer()
        spec = info["spec"]
        self.writer_id, self.shard_index = info["writer"], info["shard"]
        self._shard = self.service.shard(self.shard_index)
        self._held, self._held_seq = 0, 0  # what the last acknowledgement said the shard holds of us
        self._rows: dict[int, int] = {}  # rows of each message sent after that acknowledgement
        self.chunks = ChunkWriter(
            self.writer_id, spec.obs_shape, spec.obs_dtype, spec.action_shape, spec.action_dtype,
            self.n_envs, chunk_len=spec.chunk_len, codec=info["codec"], codec_version=info["codec_version"],
            layout=info["layout"], axis_order=info["axis_order"], flush_every=self.flush_every)
        if not self._train:
            self.chunks.train_samples = None

    # -- SB3's add ---------------------------------------------------------------------------
    def add(self, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any,
            infos: list[dict[str, Any]] | None = None, priorities: Any = None) -> None:
        """SB3's ``add`` arguments, and optionally the transitions' initial ``priorities``
        (one per env, finite, >= 0; see :meth:`ChunkWriter.add`)."""
        self.chunks.add(obs, next_obs, action, reward, done, infos, priorities)
        if self.chunks.ready:
            self.flush()

    def flush(self, wait: bool = False) -> None:
        """Send what is staged (one message); ``wait=True``: return only once the shard has
        applied it (and everything before it), so that a learner can sample it.

        Raises :class:`~sb3_integration.distributed.RateLimiterTimeout` when the rate
        limiter holds the message longer than ``timeout``; the message stays staged
        and goes first at the next flush.
        """
        if self.chunks.seq == 0 and self.chunks.pending and self._unsent is None:
            self._agree_layout()
        msg = self._unsent or self.chunks.drain()
        if msg is not None:
            self.send(msg)
        if wait:
            self._wait_inflight()

    def send(self, msg: InsertMessage) -> None:
        """Send one message this writer's :attr:`chunks` drained (``flush()`` does it for you).

        Waits for the previous message's acknowledgement and for the rate limiter, then
        sends without waiting: one message is in flight while the next is built.
        """
        self._unsent = msg
        self._wait_inflight()
        version, codec, stamp = self.service.acquire_insert(msg.n_rows, self.timeout, self.chunks.codec_version)
        self._unsent = None
        if codec is not None:
            self.chunks.set_codec(codec, version)
        msg.stamp = stamp
        self._rows[msg.seq] = msg.n_rows
        self._retain(msg)
        self._inflight = (self._shard.insert.remote(msg), msg.seq)
        self._offer_dictionary()

    def _agree_layout(self) -> None:
        """Before the first message: use the service's layout, or offer ours (first one wins)."""
        fs = self.chunks.fs
        agreed = self.service.layout() if fs.layout is None else self.service.offer_layout(fs.layout)
        if agreed is None:  # nobody has decided: decide ours now (whole observations if undetected)
            agreed = self.service.offer_layout(fs.ensure_layout())
        if agreed != fs.layout:
            self.chunks.relayout(agreed)

    def _offer_dictionary(self) -> None:
        trained = self.chunks.train() if self.chunks.wants_training else None
        if trained is not None:
            version, codec = self.service.offer_codec(trained)
            self.chunks.set_codec(codec, version)

    # -- acknowledgements, restarts ----------------------------------------------------------
    def _wait_inflight(self) -> None:
        import ray

        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        ref, seq = inflight
        try:
            ack = remote.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            ack = self._await_restart()
        self._on_ack(ack, seq)

    def _await_restart(self) -> InsertAck:
        import ray

        deadline = time.monotonic() + self.restart_timeout
        while True:
            try:
                return ray.get(self._shard.ack_for.remote(self.writer_id), timeout=5)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                    ray.exceptions.GetTimeoutError) as e:
                if time.monotonic() > deadline:
                    raise ShardLostError(f"writer {self.writer_id}: shard {self.shard_index} did not come "
                                         f"back within {self.restart_timeout} s") from e
                time.sleep(0.2)

    def _on_ack(self, ack: InsertAck, seq: int) -> None:
        """The shard holds this writer's messages up to ``ack.applied``; send again what it lacks."""
        self._epoch = ack.epoch
        self._trim(ack.durable)
        # what the shard should hold of this writer: the count its last acknowledgement gave and
        # every row sent since (rows the service's eviction let go in between, at most about a
        # message's worth, count as lost too)
        expected = self._held + sum(n for s, n in self._rows.items() if self._held_seq < s <= seq)
        if ack.applied < seq:
            missing = [m for m in self._retained if m.seq > ack.applied]
            if missing and missing[0].seq == ack.applied + 1:
                for m in missing:  # what a restarted shard lost, again, in order
                    ack = remote.get(self._shard.insert.remote(m))
                self._trim(ack.durable)
                self.resent += len(missing)
        if ack.applied >= seq:
            self._held, self._held_seq = ack.held, seq
            self._rows = {s: n for s, n in self._rows.items() if s > seq}
            return
        lost = max(0, expected - ack.held)
        self.lost += lost
        warnings.warn(f"writer {self.writer_id}: shard {self.shard_index} came back holding {ack.held} of this "
                      f"writer's transitions where it held {expected}: {lost} transitions (of messages "
                      f"{ack.applied + 1}..{seq}, no longer retained here) are lost; this writer starts afresh",
                      DataLossWarning, stacklevel=4)
        self._retained.clear()
        self._retained_bytes = 0
        self._register()

    def _retain(self, msg: InsertMessage) -> None:
        """Keep ``msg`` until a checkpoint covers it, within ``retain_bytes`` (oldest go first)."""
        self._retained.append(msg)
        self._retained_bytes += msg.nbytes
        while self._retained and self._retained_bytes > self.retain_bytes:
            self._retained_bytes -= self._retained.popleft().nbytes

    def _trim(self, durable: int) -> None:
        while self._retained and self._retained[0].seq <= durable:
            self._retained_bytes -= self._retained.popleft().nbytes  # a checkpoint covers it

    # -- sizes, closing ------------------------------------------------------------------------
    @property
    def wire_bytes(self) -> int:
        """Payload bytes sent so far (chunks, rows, chunk tables)."""
        return self.chunks.bytes_sent

    @property
    def transitions_sent(self) -> int:
        return self.chunks.transitions_sent

    def close(self) -> None:
        """Send what is staged, wait for it, and tell the shard this writer is done."""
        if self._shard is None:
            return
        self.flush(wait=True)
        remote.get(self._shard.end_writer.remote(self.writer_id))
        self._shard = None

    def __enter__(self) -> ReplayWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
