"""Learners: batches drawn uniformly over every shard, as SB3 replay samples.

:class:`GlobalSampler` asks the service's rate limiter for ``n`` samples, splits them
over the shards with its shard sampler (:mod:`sb3_integration.samplers.shards`: a
multinomial draw in proportion to the shards' sizes, so each transition of the service
is equally likely, whichever shard holds it), asks every
shard for its share at once (one remote call per shard, in parallel; a shard whose
share is 0 is asked for its weight alone), and joins the replies. Every reply carries
its shard's size and weight (:meth:`ShardStore.weight
<sb3_integration.distributed.shard_store.ShardStore.weight>`, the one seam a prioritized
store changes), so the learner's weights are never older than its last call, whether
or not anyone calls ``size()``. A shard that fails is left out of that batch (its share
is drawn again from the others) with one warning per outage, and probed again on a
schedule (:data:`PROBE_FIRST_S`, doubling up to :data:`PROBE_MAX_S`) until it answers.
A prioritized sampler (``prioritized=True``, used by
:class:`~sb3_integration.distributed.prioritized.PrioritizedDistributedReplayBuffer`) splits
batches stratified by the shards' priority masses instead, the shards draw by priority, and
batches carry each row's mass and generation and the smallest mass of the service.

Where observations are decoded: ``decode="learner"`` (the default, chosen by
``tools/bench_distributed.py``) has shards send the distinct compressed chunks a batch
needs and the learner decode them in one native call; ``decode="shard"`` has shards
decode and send raw stacks (a sample(256) of Atari stacks is 14 MB raw against
about 0.4 MB of chunks).

:class:`DistributedReplayBuffer` is an SB3 ``ReplayBuffer`` (``replay_buffer_class=``
for DQN, QR-DQN, SAC) whose ``sample()`` is the global sampler's and whose ``add()``
(when the algorithm collects experience itself) goes through a
:class:`~sb3_integration.distributed.writer.ReplayWriter`.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer, ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

from chunkstore import ChunkedArray, ChunkRef, Codec, Tier
from sb3_integration.buffers.sb3_front import SB3ReplayFront
from sb3_integration.distributed import options, remote
from sb3_integration.distributed.errors import (
    LimiterClosed,
    RateLimiterTimeout,
    ShardUnavailableWarning,
)
from sb3_integration.distributed.service import ReplayService
from sb3_integration.distributed.wire import SampleReply
from sb3_integration.distributed.writer import ReplayWriter
from sb3_integration.samplers.shards import (
    PrioritizedShardSampler,
    ShardSampler,
    UniformShardSampler,
)

__all__ = ["DECODE_DEFAULT", "DistributedReplayBuffer", "GlobalSampler", "ShardUnavailableWarning"]

#: where a batch's observations are decoded by default (see the module docstring)
DECODE_DEFAULT = "learner"
#: a shard that failed is probed again after PROBE_FIRST_S, then at doubling intervals up to PROBE_MAX_S
PROBE_FIRST_S, PROBE_MAX_S = 0.2, 2.0


class GlobalSampler:
    """Uniform batches over all shards of a service (see the module docstring).

    Parameters
    ----------
    service
        The service or its name.
    decode
        ``"learner"`` (compressed chunks travel) or ``"shard"`` (raw stacks travel).
    timeout
        Seconds a sample may wait for the rate limiter and for data (None: forever).
    threads
        Threads of the learner-side decode.
    prefetch
        Ask for the next batch (same size) while the caller uses this one: it comes
        from the service one ``sample()`` call earlier, and its rate-limiter permit is
        counted then.

    Examples
    --------
    >>> # needs: ray
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> from sb3_integration.distributed import ReplayService, ReplayWriter, start_local_ray
    >>> _ = start_local_ray(num_cpus=1)
    >>> frames, actions = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6)
    >>> svc = ReplayService.create("apex", frames, actions, capacity=10_000, min_size=100)
    >>> stack = np.zeros((1, 4, 84, 84), np.uint8)
    >>> with ReplayWriter("apex") as writer:
    ...     for t in range(100):
    ...         nxt = np.concatenate([stack[:, 1:], np.full((1, 1, 84, 84), t, np.uint8)], axis=1)
    ...         writer.add(stack, nxt, np.array([t % 6]), np.array([1.0]), np.array([False]), [{}])
    ...         stack = nxt
    >>> batch = GlobalSampler("apex").sample(256, np.random)
    >>> batch["obs"].shape
    (256, 4, 84, 84)
    >>> svc.close()
    """

    def __init__(self, service: ReplayService | str, *, decode: str = DECODE_DEFAULT,
                 timeout: float | None = None, threads: int | None = None, prefetch: bool = False,
                 prioritized: bool = False) -> None:
        if decode not in ("learner", "shard"):
            raise ValueError(f"decode must be 'learner' or 'shard', got {decode!r}")
        timeout = options.seconds("timeout", timeout)
        if threads is not None:
            threads = options.count("threads", threads)
        self.service = service if isinstance(service, ReplayService) else ReplayService.connect(service)
        self.decode, self.timeout, self.threads, self.prefetch = decode, timeout, threads, bool(prefetch)
        self.prioritized = bool(prioritized)
        self.shard_sampler: ShardSampler = PrioritizedShardSampler() if self.prioritized else UniformShardSampler()
        if self.prioritized and self.service.config.spec.priority_alpha is None:
            raise ValueError(f"replay service {self.service.name!r} keeps no priorities: create it with alpha=...")
        self._pending: tuple[int, Any, Any] | None = None
        self._unlimited = False  # a MinSize limiter that has let a sample through
        self.spec = self.service.config.spec
        n = self.service.n_shards
        self.sizes = np.zeros(n, np.int64)
        self.weights = np.zeros(n, np.float64)  # each shard's sampling mass, from its latest reply
        self.mins = np.full(n, np.inf)  # each shard's smallest positive priority mass (prioritized)
        self._down: dict[int, list[Any]] = {}  # shard -> [next probe time, probe ref or None, delay]
        self._codec: tuple[int, Codec] | None = None
        self._layout: Any = None
        self.bytes_received = 0

    # -- every shard's weight ------------------------------------------------------------
    def refresh_sizes(self) -> np.ndarray:
        """Ask every shard for its size and weight now (a shard that is down is probed at once)."""
        for i in list(self._down):
            self._down[i][0] = 0.0
        self._poll_probes(wait=5.0)
        self._collect(self._submit(np.zeros(len(self.sizes), np.int64), np.random))
        return self.sizes

    def _mark_down(self, i: int) -> None:
        self.sizes[i], self.weights[i], self.mins[i] = 0, 0.0, np.inf
        if i not in self._down:
            self._down[i] = [time.monotonic() + PROBE_FIRST_S, None, PROBE_FIRST_S]
            warnings.warn(f"replay service {self.service.name!r}: shard {i} is unavailable; sampling "
                          "from the other shards until it answers again", ShardUnavailableWarning, stacklevel=5)

    def _poll_probes(self, wait: float = 0.0) -> None:
        """Probe shards that are down on their schedule; one that answers is sampled again."""
        import ray

        now = time.monotonic()
        for i, state in self._down.items():
            if state[1] is None and now >= state[0]:
                try:
                    state[1] = self.service.shard(i).weight.remote()
                except ValueError:  # no actor of that name (yet): the next probe tries again
                    state[2] = min(PROBE_MAX_S, 2 * state[2])
                    state[0] = now + state[2]
        refs = [s[1] for s in self._down.values() if s[1] is not None]
        if not refs:
            return
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=wait)
        done = {r.hex() for r in ready}
        for i, state in list(self._down.items()):
            if state[1] is None or state[1].hex() not in done:
                continue
            try:
                size, weight = remote.get(state[1])
            except (ray.exceptions.RayActorError, ValueError):
                state[2] = min(PROBE_MAX_S, 2 * state[2])
                state[0], state[1] = time.monotonic() + state[2], None
                continue
            del self._down[i]
            self.sizes[i], self.weights[i] = size, self._mass(size, weight)

    def _mass(self, size: int, weight: float) -> float:
        """A shard's sampling weight (:meth:`ShardSampler.weight
        <sb3_integration.samplers.shards.ShardSampler.weight>`): its priority mass for a prioritized
        sampler, else its size (a uniform learner of a prioritized service samples uniformly)."""
        return self.shard_sampler.weight(size, weight)

    def _counts(self, n: int, weights: np.ndarray, rng: Any) -> np.ndarray:
        """Per-shard counts of ``n`` in proportion to ``weights`` (the shard sampler's split)."""
        return self.shard_sampler.counts(n, weights, rng)

    def _live_weights(self) -> np.ndarray:
        w = self.weights.copy()
        w[list(self._down)] = 0.0
        return w

    # -- sampling ---------------------------------------------------------------------------
    def sample(self, n: int, rng: Any = np.random) -> dict[str, np.ndarray]:
        """``n`` transitions: ``obs``, ``next_obs``, ``actions``, ``rewards``, ``dones``, ``timeouts``,
        and where they came from (``shard``, ``row``).

        Each shard's share is drawn from a multinomial over the shards' weights as their
        latest replies gave them (every shard is asked every time, for its share or for its
        weight alone; a shard that is down is probed on a schedule), so each stored
        transition is equally likely, up to what changed within the last round trip.
        The rate limiter's permit and the shards' replies are asked for at once (reading
        a shard changes nothing); replies that arrive before the permit was granted are
        used only if the permit then comes at once, otherwise the batch is fetched again
        after it, so a batch never predates its permit by more than a round trip. With
        ``prefetch``, the next batch of the same size is asked for before this one
        returns (its permit too). Under a MinSize limiter (no ratio) the sampler stops
        asking once a sample was allowed, since nothing can block it again; the
        limiter's ``samples`` count then stays where it was.
        """
        n = options.count("n", n, minimum=0)
        if self.service.closed:
            raise LimiterClosed(f"replay service {self.service.name!r} is closed")
        if n == 0:
            return self._empty()
        pending, self._pending = self._pending, None
        if pending is None or pending[0] != n:
            pending = (n, *self._start(n, rng))
        batch = self._finish(*pending, rng)
        if self.prefetch:
            self._pending = (n, *self._start(n, rng))
        return batch

    def _empty(self) -> dict[str, np.ndarray]:
        spec, f = self.spec, np.zeros(0, np.float32)
        obs = np.zeros((0, *spec.obs_shape), spec.obs_dtype)
        out = {"obs": obs, "next_obs": obs.copy(), "actions": np.zeros((0, *spec.action_shape), spec.action_dtype),
               "rewards": f, "dones": f.copy(), "timeouts": f.copy(), "shard": np.zeros(0, np.int64),
               "row": np.zeros(0, np.int64)}
        if self.prioritized:
            out.update(masses=np.zeros(0), generations=np.zeros(0, np.uint16), min_mass=np.array(np.inf))
        return out

    def _start(self, n: int, rng: Any) -> tuple[Any, Any]:
        """Ask for the permit and, if any shard is known to hold data, for the replies."""
        # a MinSize limiter never blocks again once it let one sample through: no more asking
        permit = None if self._unlimited else self.service.coordinator.acquire_sample.remote(n, self.timeout)
        self._poll_probes()
        weights = self._live_weights()
        if not weights.sum():  # nothing seen yet: the permit first (it waits for min_size)
            return permit, None
        return permit, self._submit(self._counts(n, weights, rng), rng)

    def _finish(self, n: int, permit: Any, asked: Any, rng: Any) -> dict[str, np.ndarray]:
        import ray

        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        replies: list[SampleReply] = []
        if asked is not None:
            replies, left = self._collect(asked)
            granted = permit is None or bool(ray.wait([permit], timeout=0)[0])
            self._await_permit(permit)
            if not granted:  # the limiter held the batch back: sample what is there now
                replies, left = [], n
        else:
            self._await_permit(permit)
            left = n
        while left:  # each round either serves the rest or loses a shard (which is then probed)
            got, left = self._collect(self._submit(self._split(left, rng, deadline), rng))
            replies += got
        batch = self._join([r for r in replies if r.n])
        if self.prioritized:  # the smallest mass of every shard that answered (the global minimum)
            live = self._live_weights() > 0
            batch["min_mass"] = np.array(self.mins[live].min() if live.any() else np.inf)
        return batch

    def _await_permit(self, permit: Any) -> None:
        import ray

        if permit is None:
            return
        try:
            remote.get(permit)
        except ray.exceptions.RayActorError:
            raise LimiterClosed(f"replay service {self.service.name!r} is closed (its coordinator is gone)") from None
        self._unlimited = self.service.config.limiter["kind"] == "min_size"

    def _split(self, n: int, rng: Any, deadline: float | None) -> np.ndarray:
        """Per-shard counts of ``n`` samples in proportion to the weights; while no shard is known
        to hold data, ask them all (with a bounded back-off) until ``deadline``."""
        delay = 0.01
        while True:
            self._poll_probes()
            weights = self._live_weights()
            if weights.sum():
                return self._counts(n, weights, rng)
            self._collect(self._submit(np.zeros(len(self.sizes), np.int64), rng))
            if self._live_weights().sum():
                continue
            if self.service.is_closed():
                raise LimiterClosed(f"replay service {self.service.name!r} is closed")
            if deadline is not None and time.monotonic() > deadline:
                raise RateLimiterTimeout(f"replay service {self.service.name!r}: no shard held data "
                                         f"within the timeout of {self.timeout} s ({len(self._down)} of "
                                         f"{len(self.sizes)} shards unavailable)")
            self._poll_probes(wait=delay)
            delay = min(1.0, 2 * delay)

    def _submit(self, counts: np.ndarray, rng: Any) -> list[tuple[int, int, Any]]:
        """One sample call to every shard that is up: ``(shard, count, ref)`` (a count of 0
        asks for the shard's weight alone)."""
        want = [(i, int(c)) for i, c in enumerate(counts) if i not in self._down]
        seeds = rng.randint(0, 2**31 - 1, size=len(want)) if hasattr(rng, "randint") else \
            rng.integers(0, 2**31 - 1, size=len(want))
        return [(i, c, self.service.shard(i).sample.remote(c, int(s), self.decode == "shard", self.prioritized))
                for (i, c), s in zip(want, seeds, strict=True)]

    def _collect(self, asked: list[tuple[int, int, Any]]) -> tuple[list[SampleReply], int]:
        """The replies that came, and how many samples the failed shards owe."""
        import ray

        out, left = [], 0
        for i, c, ref in asked:
            try:
                reply = remote.get(ref)
            except ray.exceptions.RayActorError:
                if self.service.is_closed():  # not an outage: the service was closed (maybe elsewhere)
                    raise LimiterClosed(f"replay service {self.service.name!r} is closed") from None
                self._mark_down(i)
                left += c
                continue
            except IndexError:  # emptied since its last reply (restarted without a checkpoint)
                self.sizes[i], self.weights[i], self.mins[i] = 0, 0.0, np.inf
                left += c
                continue
            self.sizes[i], self.weights[i] = reply.size, self._mass(reply.size, reply.weight)
            self.mins[i] = reply.min_mass
            self.bytes_received += reply.nbytes
            out.append(reply)
        return out, left

    def _join(self, replies: list[SampleReply]) -> dict[str, np.ndarray]:
        def cat(name: str) -> np.ndarray:
            parts = [getattr(r, name) for r in replies]
            return parts[0] if len(parts) == 1 else np.concatenate(parts)

        if self.decode == "shard":
            obs, nxt = cat("obs"), cat("next_obs")
        else:
            obs, nxt = self._decode_all(replies)
        out = {"obs": obs, "next_obs": nxt, "actions": cat("actions"), "rewards": cat("rewards"),
               "dones": cat("dones"), "timeouts": cat("timeouts"),
               "shard": np.concatenate([np.full(r.n, r.shard, np.int64) for r in replies]),
               "row": cat("rows")}
        if self.prioritized:
            out["masses"], out["generations"] = cat("masses"), cat("generations")
        return out

    def _codec_for(self, version: int) -> Codec:
        if self._codec is None or self._codec[0] < version:
            self._codec = self.service.codec()
        return self._codec[1]

    def _decode_all(self, replies: list[SampleReply]) -> tuple[np.ndarray, np.ndarray]:
        """Every reply's chunks, in place, as one chunk array read with one native call."""
        if self._layout is None:
            self._layout = self.service.layout()
        lay, spec, L = self._layout, self.spec, self.spec.chunk_len
        codec = self._codec_for(max(r.codec_version for r in replies))
        sizes = np.concatenate([r.chunk_nbytes for r in replies]).astype(np.int64)
        nchunks = len(sizes)
        data = replies[0].chunk_data if len(replies) == 1 else b"".join(r.chunk_data for r in replies)
        tier = _ReplyTier(np.frombuffer(data, np.uint8) if data else np.zeros(1, np.uint8))
        arr = ChunkedArray(max(1, nchunks) * L, lay.frame_shape, spec.obs_dtype, chunk_len=L, codec=codec,
                           tier=tier, threads=self.threads, name="batch", max_open=1)
        if nchunks:  # the chunks stay where Ray put them: one table install, no copy
            arr.adopt_chunks(np.arange(nchunks), np.stack([np.zeros(nchunks, np.int64),
                                                           np.cumsum(sizes) - sizes, sizes]))
        obs_ids, next_ids, base = [], [], 0
        for r in replies:
            assert r.chunk_nbytes is not None and r.frame_ids is not None
            f = r.frame_ids.astype(np.int64)
            f = np.where(f >= 0, f + base * L, -1)
            obs_ids.append(f[:r.n])
            next_ids.append(f[r.n:])
            base += len(r.chunk_nbytes)
        n = sum(r.n for r in replies)
        out = np.empty((2 * n, *spec.obs_shape), spec.obs_dtype)
        arr.take_into(np.concatenate(obs_ids + next_ids), lay.split(out))
        return out[:n], out[n:]


class _ReplyTier(Tier):
    """The compressed chunks of sample replies, read where they are: one read-only segment.

    A batch's chunk array adopts its chunks from here (``adopt_chunks``) and only reads
    them; nothing is put or released.
    """

    kind = "reply"

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self._addr = np.array([[data.ctypes.data], [-1]], np.int64)

    def put(self, data: Any) -> ChunkRef:
        raise TypeError("a reply's chunks are read-only")

    def get(self, ref: ChunkRef) -> np.ndarray:
        return self.data[ref.offset:ref.offset + ref.nbytes]

    def release(self, ref: ChunkRef) -> None:
        pass

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def used_nbytes(self) -> int:
        return int(self.data.nbytes)

    def read_lock(self) -> tuple[Any, Callable[[], np.ndarray | None]]:
        return contextlib.nullcontext(), self._segments  # read-only: nothing moves

    def _segments(self) -> np.ndarray:
        return self._addr


class DistributedReplayBuffer(SB3ReplayFront, ReplayBuffer):
    """SB3's ``ReplayBuffer`` backed by a replay service: ``sample()`` draws over all shards.

    Bad arguments fail as they fail in :class:`~sb3_integration.CompressedReplayBuffer`
    (SB3's constructor checks, SB3's ``add()`` and ``sample(batch_size)`` errors, through
    :class:`~sb3_integration.buffers.sb3_front.SB3ReplayFront`), before any call to the
    service. What differs by design: ``sample()`` before the service holds ``min_size``
    transitions waits for them (the rate limiter; ``timeout`` bounds the wait) where a local
    buffer raises, and ``optimize_memory_usage=True`` is refused.

    Parameters
    ----------
    buffer_size, observation_space, action_space, device, n_envs, handle_timeout_termination
        As in SB3 (``buffer_size`` is the service's business: it is recorded, not used).
    optimize_memory_usage
        Must be False (the service stores each frame once anyway).
    service
        The :class:`~sb3_integration.distributed.service.ReplayService` or its name.
    decode
        Where observations are decoded (``"learner"`` or ``"shard"``).
    timeout
        Seconds ``sample()`` and ``add()`` may wait for the rate limiter (None: forever).
    threads, prefetch
        As for :class:`GlobalSampler`.
    flush_every
        Steps per message of the buffer's own writer (used only if ``add()`` is called).

    Examples
    --------
    >>> # needs: ray, atari
    >>> import ale_py, gymnasium, numpy as np
    >>> from gymnasium import spaces
    >>> from stable_baselines3 import DQN
    >>> from stable_baselines3.common.env_util import make_atari_env
    >>> from stable_baselines3.common.vec_env import VecFrameStack
    >>> from sb3_integration.distributed import ReplayService, start_local_ray
    >>> gymnasium.register_envs(ale_py)
    >>> env = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=1, seed=0), 4)
    >>> _ = start_local_ray(num_cpus=1)
    >>> frames = spaces.Box(0, 255, (4, 84, 84), np.uint8)  # channel-first, as DQN sees them
    >>> svc = ReplayService.create("apex", frames, env.action_space, capacity=10_000, min_size=32)
    >>> model = DQN("CnnPolicy", env, buffer_size=10_000, learning_starts=32,
    ...             replay_buffer_class=DistributedReplayBuffer,
    ...             replay_buffer_kwargs={"service": "apex", "flush_every": 16, "timeout": 60})
    >>> _ = model.learn(64)   # its add() writes to the service (every 16 steps), its sample() reads from it
    >>> sum(shard["size"] for shard in svc.info())
    64
    >>> svc.close()
    """

    _prioritized = False  # the prioritized subclass samples by the shards' priorities

    def __init__(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space,
                 device: th.device | str = "auto", n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True, *, service: ReplayService | str,
                 decode: str = DECODE_DEFAULT, timeout: float | None = None, threads: int | None = None,
                 prefetch: bool = False, flush_every: int = 256) -> None:
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self._sb3_constructor_checks(optimize_memory_usage, handle_timeout_termination)
        if optimize_memory_usage:
            raise ValueError("DistributedReplayBuffer does not take optimize_memory_usage (frames are stored once)")
        self.optimize_memory_usage = False
        self.handle_timeout_termination = handle_timeout_termination
        self.sampler = GlobalSampler(service, decode=decode, timeout=timeout, threads=threads, prefetch=prefetch,
                                     prioritized=self._prioritized)
        self.service = self.sampler.service
        spec = self.service.config.spec
        if tuple(spec.obs_shape) != tuple(self.obs_shape) or spec.action_shape != (self.action_dim,):
            raise ValueError(f"service {self.service.name!r} stores observations {spec.obs_shape} and actions "
                             f"{spec.action_shape}; this buffer is for {self.obs_shape} and ({self.action_dim},)")
        self.timeout, self.flush_every = timeout, options.count("flush_every", flush_every)
        self._declare_geometry(spec.obs_shape, spec.obs_dtype, spec.action_dtype)
        self.writer: ReplayWriter | None = None

    def add(self, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any,
            infos: list[dict[str, Any]]) -> None:
        """SB3's ``add``: SB3's errors (and DataLossError for lossy observations) before anything is sent."""
        o, x, rows = self._checked_add(obs, next_obs, action, reward, done, infos)
        if self.writer is None:
            self.writer = ReplayWriter(self.service, self.n_envs, flush_every=self.flush_every, timeout=self.timeout)
        # without timeout handling SB3 ignores infos: the service stores no truncation then
        self.writer.add(o, x, rows[0], rows[1], rows[2], infos if self.handle_timeout_termination else None)

    def size(self) -> int:
        """Transitions the service holds now (one call to every shard, in parallel)."""
        return int(self.sampler.refresh_sizes().sum())

    def reset(self) -> None:
        raise NotImplementedError("a replay service is not reset from one learner; close it and create another")

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> ReplayBufferSamples:
        """``batch_size`` transitions drawn over all shards (SB3's error for a bad batch size)."""
        return self._samples(self.sampler.sample(self._check_batch_size(batch_size), np.random), env)

    def _samples(self, b: dict[str, np.ndarray], env: VecNormalize | None) -> ReplayBufferSamples:
        """SB3's sample fields of a sampler's batch."""
        dones = b["dones"] * (1 - b["timeouts"]) if self.handle_timeout_termination else b["dones"]
        data = (self._normalize_obs(b["obs"], env), b["actions"], self._normalize_obs(b["next_obs"], env),
                dones.reshape(-1, 1), self._normalize_reward(b["rewards"].reshape(-1, 1), env))
        return ReplayBufferSamples(*tuple(map(self._tensor, data)))

    def _tensor(self, array: Any) -> th.Tensor:
        # arrays this call made (decoded batches, SB3's arithmetic) are handed over without a
        # copy; read-only ones (Ray's zero-copy views of a shard's reply) are copied
        return th.as_tensor(array, device=self.device) if array.flags.writeable else self.to_torch(array)

    def _get_samples(self, batch_inds: np.ndarray, env: VecNormalize | None = None) -> ReplayBufferSamples:
        raise NotImplementedError("DistributedReplayBuffer samples through the service: call sample()")

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a DistributedReplayBuffer is a handle on a replay service and is not pickled "
                        "(save_replay_buffer): checkpoint the service instead (ReplayService.checkpoint)")

    def close(self) -> None:
        """Send what this buffer's writer staged (the service stays up)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
