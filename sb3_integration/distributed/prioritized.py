"""Prioritized replay across the shards of a service: the learner's side.

A service created with ``alpha`` keeps, in each shard, ``(p + epsilon) ** alpha`` per
transition (:mod:`~sb3_integration.distributed.shard_priority`). A
:class:`PrioritizedDistributedReplayBuffer` samples it as the local
:class:`~sb3_integration.buffers.prioritized.CompressedPrioritizedReplayBuffer` samples one buffer:

- each shard's share of a batch is stratified over the shards' priority masses as their
  latest replies gave them (every sample call asks every shard that is up, so a shard
  that was empty or restarted counts as soon as it holds data), and each shard draws its
  share stratified over its own masses: transition ``i`` is drawn with
  ``P(i) = m_i / sum_j m_j`` over every transition of the service, whichever shard holds it;
- ``weights``: ``w_i = (N P(i))^-beta / max_j (N P(j))^-beta = (m_i / m_min)^-beta`` with
  ``m_min`` the smallest mass of the whole service (each reply carries its shard's);
- ``indices``: int64 ``shard << 48 | generation << 32 | ring position``, so that
  :meth:`~PrioritizedDistributedReplayBuffer.update_priorities` goes back to the right
  shard and slot, and a shard drops an update for a slot overwritten or evicted since;
- updates go to the shards as one remote call per shard per ``update_priorities`` call,
  not awaited (at most ``max_updates_in_flight`` calls in flight: beyond that, the call waits
  until enough of them are answered); an update a shard never got (it was down) is counted in
  :attr:`PriorityUpdates.lost`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecNormalize

from sb3_integration.buffers.prioritized import (
    PrioritizedReplayBufferSamples,
    checked_update,
    importance_weights,
)
from sb3_integration.distributed import options, remote
from sb3_integration.distributed.sampler import DistributedReplayBuffer
from sb3_integration.distributed.service import ReplayService

__all__ = ["PrioritizedDistributedReplayBuffer", "PriorityUpdates", "decode_indices", "encode_indices"]

SHARD_SHIFT, GENERATION_SHIFT = 48, 32
_SLOT_MASK, _GEN_MASK = (1 << 32) - 1, (1 << 16) - 1


def encode_indices(shards: np.ndarray, generations: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``shard << 48 | generation << 32 | row`` as int64."""
    return ((np.asarray(shards, np.int64) << SHARD_SHIFT) | (np.asarray(generations, np.int64) << GENERATION_SHIFT)
            | np.asarray(rows, np.int64))


def decode_indices(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(shard, generation, row)`` of :func:`encode_indices`' values."""
    idx = np.asarray(indices, np.int64)
    return idx >> SHARD_SHIFT, (idx >> GENERATION_SHIFT) & _GEN_MASK, idx & _SLOT_MASK


class PriorityUpdates:
    """Priority updates sent to a service's shards without waiting (see the module docstring)."""

    def __init__(self, service: ReplayService, max_in_flight: int = 8) -> None:
        self.service = service
        self.max_in_flight = options.count("max_updates_in_flight", max_in_flight)
        spec = service.config.spec
        self.alpha, self.epsilon = float(spec.priority_alpha or 0.0), float(spec.priority_epsilon)
        self._in_flight: list[tuple[Any, int]] = []  # (ref, entries sent)
        self.applied = 0  # entries the shards applied (counted as answers are read)
        self.dropped = 0  # entries the shards dropped as stale (overwritten or evicted since sampled)
        self.lost = 0  # entries sent to a shard that failed

    def send(self, indices: Any, priorities: Any) -> None:
        """Check everything first (ValueError, nothing sent), then one remote call per shard."""
        idx, pri, _ = checked_update(indices, priorities, self.alpha, self.epsilon)
        shard, gen, row = decode_indices(idx)
        if idx.size and (idx.min() < 0 or shard.max() >= self.service.n_shards
                         or row.max() >= self.service.config.spec.capacity):
            raise ValueError(f"indices must come from this buffer's samples (shard < {self.service.n_shards}, "
                             f"row < {self.service.config.spec.capacity}); got {idx.min()}..{idx.max()}")
        self.poll()
        for s in np.unique(shard).tolist():
            m = shard == s
            try:
                ref = self.service.shard(s).update_priorities.remote(row[m], gen[m].astype(np.uint16), pri[m])
            except ValueError:  # no actor of that name now (being restarted): those updates are lost
                self.lost += int(m.sum())
                continue
            self._in_flight.append((ref, int(m.sum())))
        if len(self._in_flight) > self.max_in_flight:
            self._wait(len(self._in_flight) - self.max_in_flight)

    def poll(self) -> None:
        """Read the answers that came."""
        self._wait(0)

    def flush(self, timeout: float | None = None) -> int:
        """Wait for every update sent; returns :attr:`applied`."""
        self._wait(len(self._in_flight), timeout)
        return self.applied

    def _wait(self, at_least: int, timeout: float | None = None) -> None:
        import ray

        if not self._in_flight:
            return
        refs = [r for r, _ in self._in_flight]
        ready, _ = ray.wait(refs, num_returns=max(at_least, 0) or len(refs), timeout=timeout if at_least else 0)
        done = {r.hex() for r in ready}
        keep = []
        for ref, n in self._in_flight:
            if ref.hex() not in done:
                keep.append((ref, n))
                continue
            try:
                applied = int(remote.get(ref))
            except Exception:
                self.lost += n
                continue
            self.applied += applied
            self.dropped += n - applied
        self._in_flight = keep


class PrioritizedDistributedReplayBuffer(DistributedReplayBuffer):
    """A :class:`DistributedReplayBuffer` that samples a prioritized service by priority.

    The local :class:`~sb3_integration.buffers.prioritized.CompressedPrioritizedReplayBuffer`'s API:
    ``sample()`` returns SB3's fields plus ``weights`` (float32 tensor on the buffer's device)
    and ``indices`` (numpy int64); ``update_priorities(indices, priorities)`` (1-D, finite,
    >= 0; ValueError and nothing sent otherwise); ``beta`` settable; ``alpha`` and
    ``epsilon`` are the service's (``ReplayService.create(..., alpha=, epsilon=)``).

    Parameters
    ----------
    beta
        Importance-sampling exponent (>= 0).
    max_updates_in_flight
        Update calls sent and not yet answered before ``update_priorities`` waits.
    Others
        As for :class:`DistributedReplayBuffer`.
    """

    _prioritized = True

    def __init__(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space,
                 device: th.device | str = "auto", n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True, *, service: ReplayService | str, beta: float = 0.4,
                 max_updates_in_flight: int = 8, **kwargs: Any) -> None:
        self._beta = options.number("beta", beta, minimum=0.0)
        super().__init__(buffer_size, observation_space, action_space, device, n_envs, optimize_memory_usage,
                         handle_timeout_termination, service=service, **kwargs)
        if self.service.n_shards >= 1 << 15 or self.service.config.spec.capacity > 1 << 32:
            raise ValueError("indices encode shards below 32768 and capacities up to 2**32")
        self.updates = PriorityUpdates(self.service, max_updates_in_flight)

    @property
    def alpha(self) -> float:
        """The service's prioritization exponent (0: uniform)."""
        return self.updates.alpha

    @property
    def epsilon(self) -> float:
        """Added to every priority (the service's)."""
        return self.updates.epsilon

    @property
    def beta(self) -> float:
        """Importance-sampling exponent (settable, >= 0)."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = options.number("beta", value, minimum=0.0)

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> PrioritizedReplayBufferSamples:  # type: ignore[override]
        """A prioritized, stratified sample over every shard: SB3's fields, ``weights``, ``indices``."""
        b = self.sampler.sample(self._check_batch_size(batch_size), np.random)
        weights = importance_weights(b["masses"], float(b["min_mass"]), self._beta)
        indices = encode_indices(b["shard"], b["generations"], b["row"])
        samples = self._samples(b, env)
        return PrioritizedReplayBufferSamples(*samples, weights=th.as_tensor(weights, device=self.device),
                                              indices=indices)

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """``p_i = priorities + epsilon`` for the sampled transitions at ``indices`` (e.g. ``|TD
        error|``), sent to their shards without waiting; an entry whose transition was
        overwritten or evicted since it was sampled is dropped there."""
        self.updates.send(indices, priorities)

    def flush_priorities(self, timeout: float | None = None) -> int:
        """Wait until the shards applied every update sent; returns how many entries were applied."""
        return self.updates.flush(options.seconds("timeout", timeout))
