"""SB3's replay-buffer front: its constructor checks, ``add()`` checks and ``sample()`` errors, for any storage.

:class:`SB3ReplayFront` is what a replay buffer whose transitions do not live in SB3's
arrays needs to fail as SB3 fails, from :mod:`sb3_integration.buffers.sb3_checks` (the
functions the compressed buffers' ``add()``, ``sample()`` and constructor call):

* :meth:`~SB3ReplayFront._sb3_constructor_checks` -- the SB3 class's own checks, in its order;
* :meth:`~SB3ReplayFront._checked_add` -- ``ReplayBuffer.add``'s operations on scratch rows
  (SB3's exception types and messages, plus ours), nothing stored yet;
* :meth:`~SB3ReplayFront._check_batch_size` -- the error SB3's ``sample(batch_size)`` raises for a
  batch size numpy refuses (its ``randint(..., size=batch_size)``), without touching
  ``np.random``.

The buffer declares its observation geometry with :meth:`~SB3ReplayFront._declare_geometry`
(what the checks read: one :class:`ObsGeometry` per key and SB3's array dtypes).
:class:`~sb3_integration.distributed.sampler.DistributedReplayBuffer` uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sb3_integration.buffers.sb3_checks import check_replay_add, replay_constructor_checks

__all__ = ["ObsGeometry", "SB3ReplayFront"]

#: a private generator: SB3's ``np.random.randint`` errors for a batch size, ``np.random`` untouched
_SIZE_CHECK = np.random.RandomState(0)


@dataclass(frozen=True)
class ObsGeometry:
    """One observation key as the checks read it: the per-env shape and the stored dtype."""

    obs_shape: tuple[int, ...]
    dtype: np.dtype


class SB3ReplayFront:
    """SB3's checks and errors at the call (put before the SB3 class; see the module docstring)."""

    n_envs: int
    action_dim: int
    _stores: dict[Any, Any]

    def _sb3_constructor_checks(self, optimize_memory_usage: bool, handle_timeout_termination: bool) -> None:
        """The checks of the SB3 replay class this one extends (after ``BaseBuffer.__init__``)."""
        for check in replay_constructor_checks(type(self)):
            check(self, optimize_memory_usage, handle_timeout_termination)

    def _declare_geometry(self, obs_shape: tuple[int, ...], obs_dtype: Any, action_dtype: Any) -> None:
        """What :meth:`_checked_add` checks against: the observations (one key) and SB3's small
        arrays' dtypes, as zero-row arrays (the transitions are held elsewhere)."""
        self._stores = {None: ObsGeometry(tuple(obs_shape), np.dtype(obs_dtype))}
        n = self.n_envs
        self.actions = np.zeros((0, n, self.action_dim), action_dtype)
        self.rewards = np.zeros((0, n), np.float32)
        self.dones = np.zeros((0, n), np.float32)
        self.timeouts = np.zeros((0, n), np.float32)

    def _checked_add(self, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any,
                     infos: Any) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """``add()``'s arguments as SB3 would store them (observations, next observations, and
        the rows of actions, rewards, dones and, when handled, timeouts), or SB3's error."""
        obs_in, next_in, rows = check_replay_add(self, obs, next_obs, action, reward, done, infos)
        return obs_in[None], next_in[None], rows

    @staticmethod
    def _check_batch_size(batch_size: Any) -> int:
        """``batch_size`` as SB3's ``sample()`` takes it; else the exception SB3 raises for it."""
        if type(batch_size) is int and batch_size >= 0:
            return batch_size
        drawn = _SIZE_CHECK.randint(0, 1, size=batch_size)  # numpy's error, as SB3's sample() raises it
        if np.ndim(drawn) != 1:  # None or a shape: SB3 fails further on, or draws a batch of another shape
            raise TypeError(f"batch_size must be an int, got {type(batch_size).__name__} {batch_size!r}")
        return len(drawn)
