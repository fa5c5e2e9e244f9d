"""Samplers: what a replay buffer draws, apart from how its storage reads it.

TorchRL's split (``torchrl.data.replay_buffers.samplers``): a sampler draws the
indices of a batch, the buffer's storage turns them into SB3 samples. Every
compressed replay buffer's ``sample()`` is ``sampler.sample(buffer, n, rng)``
(a :class:`~sb3_integration.samplers.base.Draw`), then the buffer's read of
those (row, env) pairs.

* :mod:`~sb3_integration.samplers.base` -- :class:`Draw`, the :class:`Sampler` protocol
* :mod:`~sb3_integration.samplers.uniform` -- :class:`UniformSampler` (SB3's random-number use, call for call)
* :mod:`~sb3_integration.samplers.prioritized` -- :class:`PrioritizedSampler` (the prioritized
  buffers' stratified draw) and :func:`priority_masses`, the one ``(p + epsilon) ** alpha`` of the
  host buffers and the Ray shards
* :mod:`~sb3_integration.samplers.shards` -- :class:`UniformShardSampler` and
  :class:`PrioritizedShardSampler`: how a Ray learner splits a batch over the shards
* :mod:`~sb3_integration.samplers.prefetch` -- :class:`Prefetcher`: ``prefetch=k``, the next
  ``k`` batches drawn and read on a worker thread while the learner computes
"""

from __future__ import annotations

from sb3_integration.samplers.base import Draw, Sampler
from sb3_integration.samplers.prefetch import Prefetcher, check_prefetch
from sb3_integration.samplers.prioritized import PrioritizedSampler, priority_masses
from sb3_integration.samplers.shards import (
           PrioritizedShardSampler,
           ShardSampler,
           UniformShardSampler,
)
from sb3_integration.samplers.uniform import UniformSampler

__all__ = ["Draw", "Prefetcher", "PrioritizedSampler", "PrioritizedShardSampler", "Sampler", "ShardSampler",
           "UniformSampler", "UniformShardSampler", "check_prefetch", "priority_masses"]
