"""The service's actor bodies: the coordinator and the shards (plain classes; Ray wraps them).

:class:`Coordinator` holds the rate limiter (Reverb's semantics, across all shards), the
shared codec (the first writer that trains a zstd dictionary offers it), the frame stack
layout (first writer wins), writer registration (each writer goes to the shard with the
fewest writers), and the global insert stamps: each insert permit comes with a range of
them, and every shard is told the count whenever it grew by ``capacity / 64`` since the
last telling (eviction: see :mod:`~sb3_integration.distributed.shard_store`).

:class:`Shard` holds a :class:`~sb3_integration.distributed.shard_store.ShardStore`, its
checkpoints (every ``checkpoint_every_s`` and on request) and its restarts (a shard Ray
restarts reruns its constructor, which loads its checkpoint). See
:mod:`~sb3_integration.distributed.service` for what a checkpoint covers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunkstore import Codec, get_codec
from chunkstore.codecs import TrainableCodec
from sb3_integration.distributed.errors import MissingMessagesError
from sb3_integration.distributed.rate_limiter import RateLimiter
from sb3_integration.distributed.shard_checkpoint import write_state
from sb3_integration.distributed.shard_store import ShardStore, StoreSpec
from sb3_integration.distributed.wire import InsertAck, InsertMessage, SampleReply
from sb3_integration.engine.stacking import StackLayout

__all__ = ["NAMESPACE", "Coordinator", "ServiceConfig", "Shard"]

#: the Ray namespace of every service actor
NAMESPACE = "chunkstore"
log = logging.getLogger("sb3_integration.distributed")


@dataclass(frozen=True)
class ServiceConfig:
    """How a service was created (every actor gets a copy)."""

    name: str
    spec: StoreSpec  # every shard's (capacity: the service's, which a shard may hold alone)
    n_shards: int
    codec: str
    limiter: dict[str, Any]
    axis_order: tuple[int, ...] = (0, -1)
    checkpoint_dir: str | None = None
    checkpoint_every_s: float | None = None
    max_restarts: int = 0
    detached: bool = False
    shard_options: list[dict[str, Any]] = field(default_factory=list)

    def shard_name(self, i: int) -> str:
        return f"{self.name}/shard{i}"

    def checkpoint_path(self, i: int) -> str | None:
        if self.checkpoint_dir is None:
            return None
        return os.path.join(self.checkpoint_dir, f"{self.name.replace('/', '_')}-shard{i}.h5")

    def make_limiter(self) -> RateLimiter:
        lim = dict(self.limiter)
        if lim.pop("kind") == "ratio":
            return RateLimiter.sample_to_insert_ratio(**lim)
        return RateLimiter.min_size_limiter(**lim)


def _version0(name: str) -> Codec:
    """What chunks encoded before any dictionary are decoded with."""
    codec = get_codec(name)
    return codec.untrained_equivalent() if isinstance(codec, TrainableCodec) and codec.wants_training else codec


class Coordinator:
    """The service's rate limiter, codec, layout and writer registry (a Ray actor's body)."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.limiter = config.make_limiter()
        self.codecs: dict[int, Codec] = {0: get_codec(config.codec)}
        self.layout: StackLayout | None = None
        self.writers: dict[int, int] = {}  # writer id -> shard
        self._lock = threading.Lock()
        self.stamped = 0  # global insert stamps handed out
        self._told = 0  # the stamp count last told to every shard
        self._shards: list[Any] = []
        self._tellings: list[Any] = []  # advance() calls not read yet
        self._tell_lock = threading.Lock()

    def get_config(self) -> ServiceConfig:
        return self.config

    def register_writer(self) -> dict[str, Any]:
        with self._lock:
            wid = len(self.writers) + 1
            load = np.bincount(list(self.writers.values()), minlength=self.config.n_shards)
            shard = int(np.argmin(load))
            self.writers[wid] = shard
            version = max(self.codecs)
            return {"writer": wid, "shard": shard, "codec": self.codecs[version], "codec_version": version,
                    "layout": self.layout, "spec": self.config.spec, "axis_order": self.config.axis_order}

    def acquire_insert(self, n: int, timeout: float | None, have: int) -> tuple[int, Codec | None, int]:
        """Permits for ``n`` inserts, in pieces of at most ``max_insert_batch`` (as Reverb admits
        items one by one: a message larger than the band can still go in, piece by piece).

        Returns the newest codec version, its codec if newer than ``have``, and the first of
        the ``n`` global stamps of the message's rows.
        """
        step = self.limiter.max_insert_batch
        deadline = None if timeout is None else time.monotonic() + timeout
        for a in range(0, n, step):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self.limiter.acquire_insert(min(step, n - a), left)
        with self._lock:
            stamp, self.stamped = self.stamped, self.stamped + n
            tell = self.stamped - self._told >= max(1, self.config.spec.capacity // 64)
            if tell:
                self._told = self.stamped
        if tell:
            with self._tell_lock:
                self._tell_shards(stamp + n)
        version = max(self.codecs)
        return version, (self.codecs[version] if version > have else None), stamp

    def _tell_shards(self, horizon: int) -> None:
        """Every shard hears how many stamps were handed out (no reply awaited; a shard that
        is down hears it with its next message or the next telling)."""
        import ray

        if not self._shards:
            try:
                self._shards = [ray.get_actor(self.config.shard_name(i), namespace=NAMESPACE)
                                for i in range(self.config.n_shards)]
            except ValueError:  # not all started yet
                return
        # the previous tellings' answers: read those that came (a shard that was down answers
        # with an error; read, it is not logged as an unhandled error), keep the rest
        done, self._tellings = ray.wait(self._tellings, num_returns=len(self._tellings), timeout=0) \
            if self._tellings else ([], [])
        for ref in done:
            with contextlib.suppress(Exception):
                ray.get(ref)
        for shard in self._shards:
            with contextlib.suppress(Exception):
                self._tellings.append(shard.advance.remote(horizon))

    def is_closed(self) -> bool:
        return self.limiter.closed

    def acquire_sample(self, m: int, timeout: float | None) -> int:
        self.limiter.acquire_sample(m, timeout)
        return max(self.codecs)

    def offer_codec(self, codec: Codec) -> tuple[int, Codec]:
        with self._lock:
            if max(self.codecs) == 0:
                self.codecs[1] = codec
            version = max(self.codecs)
            return version, self.codecs[version]

    def codec(self, version: int | None = None) -> tuple[int, Codec]:
        """The codec that decodes chunks of ``version`` (default: the newest)."""
        version = max(self.codecs) if version is None else version
        return version, (_version0(self.config.codec) if version == 0 else self.codecs[version])

    def offer_layout(self, layout: StackLayout) -> StackLayout:
        with self._lock:
            if self.layout is None:
                self.layout = layout
            return self.layout

    def limiter_state(self) -> dict[str, float]:
        return self.limiter.state()

    def close(self) -> None:
        self.limiter.close()


class Shard:
    """One shard: a ShardStore, its checkpoints, and its restarts (a Ray actor's body)."""

    def __init__(self, index: int, config: ServiceConfig) -> None:
        self.index, self.config = index, config
        self.epoch = uuid.uuid4().hex
        codec = _version0(config.codec)
        self.store = ShardStore(config.spec, codec, 0, name=config.shard_name(index))
        self.durable: dict[int, int] = {}
        self.path = config.checkpoint_path(index)
        self.restored = False
        if self.path is not None and os.path.exists(self.path):
            self.store.restore(self.path)
            self.durable = dict(self.store.applied)
            self.restored = True
            log.warning("%s restored %d transitions from %s", config.shard_name(index), self.store.size(), self.path)
        self._ckpt_lock = threading.Lock()
        self._stop = threading.Event()
        self.last_checkpoint: dict[str, float] = {}
        if self.path is not None and config.checkpoint_every_s:
            threading.Thread(target=self._checkpoint_loop, daemon=True, name="checkpoints").start()

    def _coordinator(self) -> Any:
        import ray

        return ray.get_actor(self.config.name, namespace=NAMESPACE)

    def insert(self, msg: InsertMessage) -> InsertAck:
        if msg.codec_version > self.store.codec_version:
            import ray

            version, codec = ray.get(self._coordinator().codec.remote(msg.codec_version))
            self.store.set_codec(codec, version)
        with contextlib.suppress(MissingMessagesError):  # a restarted shard: the ack says where to resume
            self.store.insert(msg)
        return self.ack_for(msg.writer)

    def ack_for(self, writer: int) -> InsertAck:
        with self.store.lock:
            return InsertAck(self.index, self.epoch, self.store.applied.get(writer, 0),
                             self.durable.get(writer, 0), self.store.size(), self.store.codec_version,
                             self.store.writer_rows(writer))

    def advance(self, horizon: int) -> None:
        self.store.advance(horizon)

    def weight(self) -> tuple[int, float]:
        """This shard's size and sampling mass (a learner's probe of a shard it lost)."""
        with self.store.lock:
            return self.store.size(), self.store.weight()

    def live_rows(self) -> np.ndarray:
        with self.store.lock:
            return self.store.live_rows()

    def sample(self, n: int, seed: int, decode: bool, prioritized: bool = False) -> SampleReply:
        rng = np.random.default_rng(seed)
        reply = self.store.sample_prioritized(n, rng, decode=decode) if prioritized else \
            self.store.sample(n, rng, decode=decode)
        reply.shard = self.index
        return reply

    def update_priorities(self, slots: np.ndarray, generations: np.ndarray, priorities: np.ndarray) -> int:
        return self.store.update_priorities(slots, generations, priorities)

    def priority_masses(self) -> np.ndarray:
        return self.store.priority_masses()

    def read(self, rows: np.ndarray, decode: bool) -> SampleReply:
        reply = self.store.read(rows, decode=decode)
        reply.shard = self.index
        return reply

    def size(self) -> int:
        return self.store.size()

    def info(self) -> dict[str, Any]:
        st = self.store
        with st.lock:
            return self._info()

    def _info(self) -> dict[str, Any]:
        st = self.store
        return {"shard": self.index, "epoch": self.epoch, "size": st.size(), "weight": st.weight(),
                "inserted": st.inserted, "horizon": st.horizon,
                "nbytes_stored": st.nbytes_stored, "codec_version": st.codec_version,
                "chunk_bytes": st.frames.cbytes if st.frames is not None else 0,
                "restored": self.restored, "applied": dict(st.applied), "durable": dict(self.durable),
                "held": {w: st.writer_rows(w) for w in st.applied},
                "streams": len(st.streams), "pid": os.getpid(), "last_checkpoint": dict(self.last_checkpoint),
                "node": _node_id()}

    def end_writer(self, writer: int) -> None:
        self.store.end_writer(writer)

    def checkpoint(self) -> dict[str, float]:
        """Write the checkpoint now; returns the pause (s), the total (s) and the file size."""
        if self.path is None:
            raise RuntimeError(f"{self.config.shard_name(self.index)} has no checkpoint_dir")
        with self._ckpt_lock:
            t0 = time.perf_counter()
            with self.store.state_dict() as state:  # the only pause writers see
                paused = time.perf_counter() - t0
                write_state(self.path, state)
            self.durable = state.applied
            self.last_checkpoint = {"pause_s": paused, "total_s": time.perf_counter() - t0,
                                    "bytes": float(os.path.getsize(self.path)), "time": time.time()}
            return dict(self.last_checkpoint)

    def _checkpoint_loop(self) -> None:
        period = float(self.config.checkpoint_every_s or 0)
        while not self._stop.wait(period):
            try:
                self.checkpoint()
            except Exception:  # keep serving; the next period tries again
                log.exception("%s: checkpoint failed", self.config.shard_name(self.index))

    def stop(self) -> None:
        self._stop.set()

    def pid(self) -> int:
        return os.getpid()


def _node_id() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # outside Ray
        return None
