"""Shard samplers: how a Ray learner splits a batch over the shards of a replay service.

A learner's draw has two stages. The first, here, splits ``n`` over the shards in
proportion to each shard's *weight*; the second happens in each shard, which draws its
share of rows (uniformly, or by priority) and reads them. Like the buffers' samplers, a
shard sampler holds no transitions and no state between draws.

* :class:`UniformShardSampler` -- weight: the shard's size; a multinomial draw, so every
  transition of the service is equally likely whichever shard holds it.
* :class:`PrioritizedShardSampler` -- weight: the shard's priority mass (the sum of its
  ``(p + epsilon) ** alpha``); stratified, as the prioritized buffers draw: the total split
  into ``n`` equal segments and one draw in each, so shard ``s`` gets its share
  ``n * w_s / sum(w)`` to within less than 2 (a shard's span can cut two segments at each end).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> PrioritizedShardSampler().counts(10, np.array([1.0, 3.0]), rng).tolist()
[3, 7]
>>> int(UniformShardSampler().counts(10, np.array([5.0, 5.0]), rng).sum())
10
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PrioritizedShardSampler", "ShardSampler", "UniformShardSampler"]


class ShardSampler:
    """Base of the shard samplers (see the module docstring)."""

    #: the sampler's name
    name = "shards"

    def weight(self, size: int, mass: float) -> float:
        """A shard's weight from its size and its priority mass (0 for a shard without priorities)."""
        raise NotImplementedError

    def counts(self, n: int, weights: np.ndarray, rng: Any) -> np.ndarray:
        """Per-shard counts (int, summing to ``n``) in proportion to ``weights`` (some positive)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class UniformShardSampler(ShardSampler):
    """Every stored transition equally likely: weights are sizes, a multinomial split."""

    name = "uniform-shards"

    def weight(self, size: int, mass: float) -> float:
        return float(size)

    def counts(self, n: int, weights: np.ndarray, rng: Any) -> np.ndarray:
        return np.asarray(rng.multinomial(n, weights / weights.sum()))


class PrioritizedShardSampler(ShardSampler):
    """Transitions in proportion to their priority mass: weights are masses, a stratified split."""

    name = "prioritized-shards"

    def weight(self, size: int, mass: float) -> float:
        return float(mass)

    def counts(self, n: int, weights: np.ndarray, rng: Any) -> np.ndarray:
        w = np.asarray(weights, np.float64)
        # scaled by the largest first: masses as small as subnormals (whose total over n underflows
        # to 0, which sent the whole batch to the first shard) split like any others
        edges = np.cumsum(w / w.max())
        targets = (np.arange(n) + rng.random(n)) * (edges[-1] / n)
        at = np.minimum(np.searchsorted(edges, targets, side="right"), len(weights) - 1)
        return np.bincount(at, minlength=len(weights))
