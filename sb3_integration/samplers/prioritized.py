"""Prioritized draws, and the one priority-to-mass formula of host buffers and Ray shards.

:class:`PrioritizedSampler` is the seam's face of the prioritized buffers' draw
(:class:`~sb3_integration.buffers.prioritized.PrioritizedReplayMixin`): the buffer
draws ``batch_size`` slots stratified by mass from its priority index and computes
their importance weights (its ``_draw_slots``); the sampler splits the slots into rows
and envs (slot ``row * n_envs + env``, SB3's position-major layout).

:func:`priority_masses` is ``(p + epsilon) ** alpha``, what a priority index holds per
transition: the host buffers' ``update_priorities`` and a Ray shard's writes and
updates (:mod:`~sb3_integration.distributed.shard_priority`) both call it, so the two
cannot drift apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chunkstore.priority import F32_TINY
from sb3_integration.samplers.base import Draw, Sampler

__all__ = ["PrioritizedSampler", "priority_masses"]

_F32_MAX = float(np.finfo(np.float32).max)


def priority_masses(priorities: Any, alpha: float, epsilon: float, *, clamp: bool = False) -> np.ndarray:
    """``(p + epsilon) ** alpha`` in fp64 (NaN stays NaN).

    A mass above float32's largest (the index holds float32), or positive below its smallest
    normal (which float32 holds imprecisely or as 0: see :func:`chunkstore.priority.check_masses`),
    is a ValueError, or with ``clamp`` the nearest mass the index holds in its place (float32's
    largest, or its smallest normal: a shard clamps rows already written).

    Examples
    --------
    >>> priority_masses([0.0, 3.0], alpha=0.5, epsilon=1.0)
    array([1., 2.])
    """
    with np.errstate(over="ignore", under="ignore"):
        m = (np.asarray(priorities, np.float64) + epsilon) ** alpha
    if clamp:  # NaN stays NaN
        return np.where((m > 0) & (m < F32_TINY), F32_TINY, np.minimum(m, _F32_MAX))
    if m.size and np.nanmax(m, initial=0.0) > _F32_MAX:
        raise ValueError("priorities ** alpha must fit in float32")
    low = m[m > 0].min(initial=np.inf)
    if low < F32_TINY:
        raise ValueError(f"a mass (priority ** alpha) of {low:g} is below float32's smallest normal "
                         f"({F32_TINY:g}), where float32 holds it imprecisely or as 0: use a priority of 0 "
                         f"(never drawn) or at least the smallest normal, or epsilon > 0")
    return m


class PrioritizedSampler(Sampler):
    """The prioritized buffers' stratified draw, as a sampler (see the module docstring)."""

    name = "prioritized"

    def sample(self, buffer: Any, batch_size: int, rng: Any = None) -> Draw:
        slots, weights, generations = buffer._draw_slots(batch_size, rng)
        return Draw(slots // buffer.n_envs, slots % buffer.n_envs, weights, generations)
