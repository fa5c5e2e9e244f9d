"""The replay service on Ray: a coordinator actor and shard actors, found by name.

(The actors' bodies are in :mod:`~sb3_integration.distributed.actors`.)

``ReplayService.create(name, ...)`` starts

* a coordinator (named ``name``): the rate limiter (Reverb's semantics, across all
  shards), the shared codec (the first writer that trains a zstd dictionary offers
  it; every writer and shard then uses it), the frame stack layout (first writer
  wins), and writer registration (each writer is assigned one shard, round robin);
* ``n_shards`` shard actors (named ``name/shard<i>``), each holding a
  :class:`~sb3_integration.distributed.shard_store.ShardStore`. Shards never talk to
  each other; a shard asks the coordinator only for a newer codec.

Eviction is the service's, not a shard's: with each insert permit the coordinator hands
the message a range of global stamps, and tells every shard the number of stamps handed
out whenever it grew by ``capacity / 64`` since it last told them; a shard lets go of
rows stamped ``capacity`` or more below the newest stamp it heard of (see
:mod:`~sb3_integration.distributed.shard_store`). So the service keeps what one buffer of
``capacity`` would keep, however writers are spread over shards.

Every actor lives in the Ray namespace :data:`NAMESPACE`, so any process of the cluster
finds the service with ``ReplayService.connect(name)``; ``detached=True`` keeps it
alive after the creating process exits (``close()`` ends it).

Checkpoints. With ``checkpoint_dir``, each shard writes ``<dir>/<name>-shard<i>.h5``
(chunkstore's atomic HDF5 format: temporary file, fsync, rename) every
``checkpoint_every_s`` seconds and on :meth:`ReplayService.checkpoint`. Writers are
paused only while the shard copies its tables and compressed chunk bytes in memory;
the file is written after the pause. A shard restarted by Ray (``max_restarts``)
reruns its constructor, which loads that file. What a checkpoint covers: every
transition of every message the shard applied before the copy, its chunks, the
per-writer message numbers and the codec (dictionary included). What it does not
cover: messages applied after it (writers keep them and send them again to a
restarted shard: nothing acknowledged is lost while the writer lives), the rate
limiter's counts and the writer registry (held by the coordinator, which is not
checkpointed: a coordinator restart starts them afresh), and anything of a writer
whose process died with messages unacknowledged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from typing import Any, cast

from chunkstore import Codec, get_codec
from chunkstore.array import DEFAULT_CHUNK_LEN, DEFAULT_CODEC
from sb3_integration.distributed import options
from sb3_integration.distributed.actors import NAMESPACE, Coordinator, ServiceConfig, Shard
from sb3_integration.distributed.errors import LimiterClosed, ServiceUnavailableError
from sb3_integration.distributed.remote import call, get
from sb3_integration.distributed.shard_store import StoreSpec
from sb3_integration.engine.stacking import StackLayout

__all__ = ["NAMESPACE", "ReplayService", "ServiceConfig", "ServiceUnavailableError"]


class ReplayService:
    """A handle on a replay service: create it, connect to it, close it (picklable).

    Examples
    --------
    >>> # needs: ray
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> from sb3_integration.distributed import start_local_ray
    >>> _ = start_local_ray(num_cpus=1)
    >>> frames, actions = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6)  # env's spaces
    >>> svc = ReplayService.create("apex", frames, actions, capacity=100_000, n_shards=2, min_size=5_000)
    >>> svc = ReplayService.connect("apex")        # from any process of the cluster
    >>> svc.close()
    """

    def __init__(self, name: str, config: ServiceConfig | None = None) -> None:
        self.name = name
        self._config = config
        self._handles: dict[str, Any] = {}
        self.closed = False  # close() was called on this handle

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "_config": self._config, "_handles": {}, "closed": self.closed}

    # -- creating and finding ----------------------------------------------------------
    @classmethod
    def create(cls, name: str, observation_space: Any, action_space: Any, capacity: int, *,
               n_shards: int = 1, chunk_len: int = DEFAULT_CHUNK_LEN, codec: str = DEFAULT_CODEC, min_size: int = 1,
               samples_per_insert: float | None = None, error_buffer: float | None = None,
               max_insert_batch: int = 64, max_sample_batch: int = 1024,
               checkpoint_dir: str | None = None, checkpoint_every_s: float | None = None,
               max_restarts: int = 0, detached: bool = False, threads: int | None = None,
               shard_options: list[dict[str, Any]] | None = None,
               coordinator_options: dict[str, Any] | None = None, alpha: float | None = None,
               epsilon: float = 1e-6) -> ReplayService:
        """Start a service of ``n_shards`` shards holding ``capacity`` transitions in all.

        ``min_size`` alone: sampling waits for that many inserted transitions.
        ``samples_per_insert`` with ``error_buffer``: Reverb's SampleToInsertRatio
        (bands that could deadlock batches of ``max_insert_batch`` / ``max_sample_batch``
        are refused; writers ask for their messages' permits in pieces of
        ``max_insert_batch``, a learner's batch may not exceed ``max_sample_batch``).
        ``shard_options[i]`` / ``coordinator_options``: extra Ray actor options
        (placement: ``resources``, ``scheduling_strategy``). ``max_restarts``: how
        often Ray restarts a dead shard (it reloads its checkpoint). ``alpha``: a
        prioritized service (each shard keeps ``(p + epsilon) ** alpha`` per transition;
        see :class:`~sb3_integration.distributed.sampler.PrioritizedDistributedReplayBuffer`);
        None (the default): uniform.
        """
        import ray

        from sb3_integration.buffers.observations import stack_axis_order

        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        n_shards = options.count("n_shards", n_shards)
        capacity = options.count("capacity", capacity)
        if capacity < n_shards:
            raise ValueError(f"capacity {capacity} is below n_shards {n_shards}")
        min_size = options.count("min_size", min_size)
        if min_size > capacity:
            raise ValueError(f"min_size {min_size} exceeds the capacity {capacity}: sampling would never start")
        chunk_len = options.count("chunk_len", chunk_len)
        max_restarts = options.count("max_restarts", max_restarts, minimum=-1)  # -1: Ray's "forever"
        if threads is not None:
            threads = options.count("threads", threads)
        if not isinstance(codec, str):
            raise TypeError(f"codec must be a codec name (str), got {codec!r}")
        get_codec(codec)
        if (samples_per_insert is None) != (error_buffer is None):
            raise ValueError("give samples_per_insert and error_buffer together (or neither)")
        if checkpoint_every_s is not None:
            checkpoint_every_s = options.number("checkpoint_every_s", checkpoint_every_s, positive=True)
            if checkpoint_dir is None:
                raise ValueError("checkpoint_every_s needs checkpoint_dir")
        if shard_options is not None and (not isinstance(shard_options, (list, tuple))
                                          or len(shard_options) > n_shards):
            raise ValueError(f"shard_options must be a list of at most n_shards ({n_shards}) dicts")
        batches = {"max_insert_batch": options.count("max_insert_batch", max_insert_batch),
                   "max_sample_batch": options.count("max_sample_batch", max_sample_batch)}
        limiter: dict[str, Any] = {"kind": "min_size", "min_size": min_size, **batches}
        if samples_per_insert is not None and error_buffer is not None:
            limiter = {"kind": "ratio",
                       "samples_per_insert": options.number("samples_per_insert", samples_per_insert, positive=True),
                       "min_size": min_size, "error_buffer": options.number("error_buffer", error_buffer,
                                                                            positive=True), **batches}
        spec = _spec(observation_space, action_space, capacity, chunk_len, threads)
        if alpha is not None:
            alpha = options.number("alpha", alpha, minimum=0.0)
        spec = dataclasses.replace(spec, priority_alpha=alpha,
                                   priority_epsilon=options.number("epsilon", epsilon, minimum=0.0))
        config = ServiceConfig(name, spec, n_shards, codec, limiter, stack_axis_order(observation_space),
                               checkpoint_dir, checkpoint_every_s, max_restarts, bool(detached),
                               list(shard_options or []))
        config.make_limiter()  # a band that can deadlock fails here, before any actor starts
        if checkpoint_dir is not None:
            os.makedirs(checkpoint_dir, exist_ok=True)
        life = {"lifetime": "detached"} if detached else {}
        # (Ray's stubs know neither max_concurrency here nor actor methods' .remote)
        coord = ray.remote(num_cpus=0, max_concurrency=256)(Coordinator).options(  # type: ignore[call-overload]
            name=name, namespace=NAMESPACE, **life, **(coordinator_options or {})).remote(config)
        shards = []
        for i in range(config.n_shards):
            extra = config.shard_options[i] if i < len(config.shard_options) else {}
            opts = {"num_cpus": 0, "max_concurrency": 16, "max_restarts": config.max_restarts,
                    "name": config.shard_name(i), "namespace": NAMESPACE, **life, **extra}
            shards.append(ray.remote(Shard).options(**opts).remote(i, config))
        ray.get([coord.get_config.remote()] + [s.size.remote() for s in shards])  # type: ignore[union-attr]
        svc = cls(name, config)
        svc._handles = {"coordinator": coord, **{config.shard_name(i): s for i, s in enumerate(shards)}}
        return svc

    @classmethod
    def connect(cls, name: str) -> ReplayService:
        """The running service called ``name`` (ValueError when there is none)."""
        import ray

        try:
            coord = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:
            raise ValueError(f"no replay service named {name!r} in Ray namespace {NAMESPACE!r}") from None
        svc = cls(name, ray.get(coord.get_config.remote()))
        svc._handles["coordinator"] = coord
        return svc

    @property
    def config(self) -> ServiceConfig:
        if self._config is None:
            import ray

            self._config = ray.get(self.coordinator.get_config.remote())
        return self._config

    @property
    def coordinator(self) -> Any:
        if "coordinator" not in self._handles:
            import ray

            self._handles["coordinator"] = ray.get_actor(self.name, namespace=NAMESPACE)
        return self._handles["coordinator"]

    def shard(self, i: int) -> Any:
        key = self.config.shard_name(i)
        if key not in self._handles:
            import ray

            self._handles[key] = ray.get_actor(key, namespace=NAMESPACE)
        return self._handles[key]

    @property
    def n_shards(self) -> int:
        return self.config.n_shards

    # -- the coordinator's calls -------------------------------------------------------
    def _call(self, method: str, *args: Any) -> Any:
        """One call to the coordinator: our errors as themselves; a coordinator that is gone
        after close() is :class:`LimiterClosed` (the coordinator is never restarted)."""
        import ray

        if self.closed:
            raise LimiterClosed(f"replay service {self.name!r} is closed")
        try:
            return get(getattr(self.coordinator, method).remote(*args))
        except ray.exceptions.RayActorError:
            raise LimiterClosed(f"replay service {self.name!r} is closed (its coordinator is gone)") from None

    def is_closed(self) -> bool:
        """Whether the service was closed (by any process) or its coordinator is gone."""
        if self.closed:
            return True
        try:
            return bool(self._call("is_closed"))
        except LimiterClosed:
            return True

    def register_writer(self) -> dict[str, Any]:
        return self._call("register_writer")

    def acquire_insert(self, n: int, timeout: float | None, have: int) -> tuple[int, Codec | None, int]:
        """Permits for ``n`` inserts (one call); the newest codec version, its codec if newer
        than ``have``, and the global stamp of the first of the ``n`` rows."""
        return self._call("acquire_insert", n, timeout, have)

    def acquire_sample(self, m: int, timeout: float | None) -> int:
        return self._call("acquire_sample", m, timeout)

    def offer_codec(self, codec: Codec) -> tuple[int, Codec]:
        return self._call("offer_codec", codec)

    def codec(self, version: int | None = None) -> tuple[int, Codec]:
        return self._call("codec", version)

    def offer_layout(self, layout: StackLayout) -> StackLayout:
        return self._call("offer_layout", layout)

    def layout(self) -> StackLayout | None:
        """The agreed frame stack layout (None until a writer sent frames)."""
        return self._call("offer_layout", None)

    def limiter_state(self) -> dict[str, float]:
        """The rate limiter's counts and band: ``inserts``, ``samples``, ``diff``, ``min_size``,
        ``min_diff``, ``max_diff``, ``samples_per_insert``."""
        return self._call("limiter_state")

    # -- the shards' calls -------------------------------------------------------------
    def _each_shard(self, method: str) -> list[Any]:
        """``method`` of every shard, retried while a shard restarts (ServiceUnavailableError
        when one does not answer within remote.RETRY_S, or is gone)."""
        if self.closed:
            raise LimiterClosed(f"replay service {self.name!r} is closed")
        restarts = self.config.max_restarts != 0
        return [call(functools.partial(self._submit_shard, i, method),
                     f"replay service {self.name!r}: shard {i}.{method}()", restarts=restarts)
                for i in range(self.n_shards)]

    def _submit_shard(self, i: int, method: str) -> Any:
        return getattr(self.shard(i), method).remote()

    def sizes(self) -> list[int]:
        """Transitions each shard holds now."""
        return self._each_shard("size")

    def info(self) -> list[dict[str, Any]]:
        """Each shard's state: size, weight, inserted, horizon, epoch, restored, bytes stored,
        codec version, per-writer applied / durable message numbers and transitions held,
        last checkpoint, pid, node."""
        return self._each_shard("info")

    def checkpoint(self) -> list[dict[str, float]]:
        """Checkpoint every shard now (in parallel); each returns its pause and total seconds.
        ValueError, before any shard is called, for a service created without ``checkpoint_dir``."""
        import ray

        if self.closed:
            raise LimiterClosed(f"replay service {self.name!r} is closed")
        if self.config.checkpoint_dir is None:
            raise ValueError(f"replay service {self.name!r} has no checkpoint_dir: "
                             "create it with ReplayService.create(..., checkpoint_dir=...) to checkpoint it")
        refs = [self.shard(i).checkpoint.remote() for i in range(self.n_shards)]  # in parallel
        out = []
        for i, ref in enumerate(refs):
            try:
                out.append(get(ref))
            except ray.exceptions.RayActorError:  # restarting: once it is back, checkpoint it again
                out.append(call(functools.partial(self._submit_shard, i, "checkpoint"),
                                f"replay service {self.name!r}: shard {i}.checkpoint()",
                                restarts=self.config.max_restarts != 0))
        return out

    def close(self) -> None:
        """Cancel every blocked call (they raise LimiterClosed) and end the service's actors.

        Later calls through any handle raise LimiterClosed at once."""
        import ray

        self.closed = True

        with _suppress():
            ray.get(self.coordinator.close.remote(), timeout=10)
        for i in range(self.n_shards):
            with _suppress():
                ray.get(self.shard(i).stop.remote(), timeout=10)
            with _suppress():
                ray.kill(self.shard(i), no_restart=True)
        with _suppress():
            ray.kill(self.coordinator, no_restart=True)
        self._handles = {}


def _spec(observation_space: Any, action_space: Any, capacity: int, chunk_len: int,
          threads: int | None) -> StoreSpec:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.preprocessing import get_action_dim, get_obs_shape

    if isinstance(observation_space, spaces.Dict):
        raise TypeError("the replay service stores Box/Discrete observations; Dict spaces are not supported")
    action_dtype = ReplayBuffer._maybe_cast_dtype(action_space.dtype)
    obs_shape = tuple(cast("tuple[int, ...]", get_obs_shape(observation_space)))
    return StoreSpec(capacity, obs_shape, observation_space.dtype, (get_action_dim(action_space),), action_dtype,
                     chunk_len, threads)


def _suppress() -> contextlib.AbstractContextManager[None]:
    """Ignore errors of actors that are already gone while closing."""
    return contextlib.suppress(Exception)
