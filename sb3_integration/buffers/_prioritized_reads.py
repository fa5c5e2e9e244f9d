"""SB3's ``_get_samples`` for given rows *and* envs (SB3 draws the envs itself).

A prioritized sample draws transitions, each a (row, env) pair; SB3's ``_get_samples`` takes
rows only and draws the envs with ``numpy.random``. These functions are SB3 2.x's
computations of ``ReplayBuffer``, ``DictReplayBuffer`` and ``NStepReplayBuffer._get_samples``
with ``env_indices`` given, line for line (the tests compare them with SB3's own on the same
rows and envs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.buffers import DictReplayBuffer, NStepReplayBuffer
from stable_baselines3.common.type_aliases import DictReplayBufferSamples, ReplayBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

__all__ = ["read_samples"]


def read_samples(buf: Any, batch_inds: np.ndarray, env_indices: np.ndarray, env: VecNormalize | None) -> Any:
    """What ``buf._get_samples(batch_inds, env)`` returns when SB3 draws ``env_indices``."""
    if isinstance(buf, NStepReplayBuffer):
        return _nstep(buf, batch_inds, env_indices, env)
    if isinstance(buf, DictReplayBuffer):
        return _dict(buf, batch_inds, env_indices, env)
    return _replay(buf, batch_inds, env_indices, env)


def _replay(buf: Any, batch_inds: np.ndarray, env_indices: np.ndarray, env: VecNormalize | None) -> Any:
    if buf.optimize_memory_usage:
        next_obs = buf._normalize_obs(buf.observations[(batch_inds + 1) % buf.buffer_size, env_indices, :], env)
    else:
        next_obs = buf._normalize_obs(buf.next_observations[batch_inds, env_indices, :], env)
    data = (
        buf._normalize_obs(buf.observations[batch_inds, env_indices, :], env),
        buf.actions[batch_inds, env_indices, :],
        next_obs,
        (buf.dones[batch_inds, env_indices] * (1 - buf.timeouts[batch_inds, env_indices])).reshape(-1, 1),
        buf._normalize_reward(buf.rewards[batch_inds, env_indices].reshape(-1, 1), env),
    )
    return ReplayBufferSamples(*tuple(map(buf.to_torch, data)))


def _dict(buf: Any, batch_inds: np.ndarray, env_indices: np.ndarray, env: VecNormalize | None) -> Any:
    obs_ = buf._normalize_obs({key: obs[batch_inds, env_indices, :] for key, obs in buf.observations.items()}, env)
    next_obs_ = buf._normalize_obs(
        {key: obs[batch_inds, env_indices, :] for key, obs in buf.next_observations.items()}, env)
    return DictReplayBufferSamples(
        observations={key: buf.to_torch(obs) for key, obs in obs_.items()},
        actions=buf.to_torch(buf.actions[batch_inds, env_indices]),
        next_observations={key: buf.to_torch(obs) for key, obs in next_obs_.items()},
        dones=buf.to_torch(buf.dones[batch_inds, env_indices] * (1 - buf.timeouts[batch_inds, env_indices])).reshape(
            -1, 1),
        rewards=buf.to_torch(buf._normalize_reward(buf.rewards[batch_inds, env_indices].reshape(-1, 1), env)),
    )


def _nstep(buf: Any, batch_inds: np.ndarray, env_indices: np.ndarray, env: VecNormalize | None) -> Any:
    # the row before pos may continue into the row being overwritten: SB3 marks it truncated meanwhile
    last_valid_index = buf.pos - 1
    original_timeout_values = buf.timeouts[last_valid_index].copy()
    buf.timeouts[last_valid_index] = np.logical_or(original_timeout_values,
                                                   np.logical_not(buf.dones[last_valid_index]))
    try:
        steps = np.arange(buf.n_steps).reshape(1, -1)
        indices = (batch_inds[:, None] + steps) % buf.buffer_size
        rewards_seq = buf._normalize_reward(buf.rewards[indices, env_indices[:, None]], env)
        dones_seq = buf.dones[indices, env_indices[:, None]]
        truncated_seq = buf.timeouts[indices, env_indices[:, None]]
        done_or_truncated = np.logical_or(dones_seq, truncated_seq)
        done_idx = done_or_truncated.argmax(axis=1)
        done_idx = np.where(done_or_truncated.any(axis=1), done_idx, buf.n_steps - 1)
        mask = np.arange(buf.n_steps).reshape(1, -1) <= done_idx[:, None]
        target_q_discounts = buf.gamma ** mask.sum(axis=1, keepdims=True).astype(np.float32)
        discounts = buf.gamma ** np.arange(buf.n_steps, dtype=np.float32).reshape(1, -1)
        n_step_returns = (rewards_seq * discounts * mask).sum(axis=1, keepdims=True)
        last_indices = (batch_inds + done_idx) % buf.buffer_size
        next_obs = buf._normalize_obs(buf.next_observations[last_indices, env_indices], env)
        next_dones = buf.dones[last_indices, env_indices][:, None].astype(np.float32)
        next_timeouts = buf.timeouts[last_indices, env_indices][:, None].astype(np.float32)
        final_dones = next_dones * (1.0 - next_timeouts)
    finally:
        buf.timeouts[last_valid_index] = original_timeout_values
    obs = buf._normalize_obs(buf.observations[batch_inds, env_indices], env)
    actions = buf.actions[batch_inds, env_indices]
    return ReplayBufferSamples(
        observations=buf.to_torch(obs),
        actions=buf.to_torch(actions),
        next_observations=buf.to_torch(next_obs),
        dones=buf.to_torch(final_dones),
        rewards=buf.to_torch(n_step_returns),
        discounts=buf.to_torch(target_q_discounts),
    )
