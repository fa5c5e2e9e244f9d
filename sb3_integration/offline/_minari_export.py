"""A replay buffer's episodes as a Minari dataset: :func:`replay_buffer_to_minari`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["replay_buffer_episodes", "replay_buffer_to_minari"]


def _read(arr: Any, idx: np.ndarray, env: int) -> np.ndarray:
    return np.stack([np.asarray(arr[int(i), env]) for i in idx]) if len(idx) else np.asarray(arr[idx, env])


def _leaves(buffer: Any, name: str) -> dict[str | None, Any]:
    obs = getattr(buffer, name)
    return obs if isinstance(obs, dict) else {None: obs}


def _space(buffer: Any, key: str | None) -> spaces.Space:
    # SB3 keeps a Discrete observation as shape (1,); the space says ()
    return buffer.observation_space if key is None else buffer.observation_space.spaces[key]


def replay_buffer_episodes(buffer: Any, env_index: int = 0) -> Iterator[dict[str, Any]]:
    """The finished episodes of env ``env_index`` in an SB3 replay buffer (SB3's or this
    project's, plain or Dict), oldest first, as dicts of Minari's episode fields.

    Transitions are read in insertion order; an episode ends at a ``done``; a timeout
    (``TimeLimit.truncated``) is a truncation, any other ``done`` a termination. The last
    observation is the final transition's ``next_obs``. Left out: the unfinished episode at the
    end, and once the buffer has wrapped, the oldest episode (its start was overwritten).
    """
    if not 0 <= env_index < buffer.n_envs:
        raise ValueError(f"env_index must be within 0..{buffer.n_envs - 1}, got {env_index}")
    size = buffer.buffer_size
    n = size if buffer.full else buffer.pos
    order = (np.arange(n) + (buffer.pos if buffer.full else 0)) % size
    dones = np.asarray(buffer.dones[order, env_index]).astype(bool)
    timeouts = np.asarray(buffer.timeouts[order, env_index]).astype(bool)
    ends = np.flatnonzero(dones)
    starts = np.concatenate([[0], ends[:-1] + 1]) if len(ends) else np.zeros(0, np.int64)
    obs_leaves, optimized = _leaves(buffer, "observations"), getattr(buffer, "optimize_memory_usage", False)
    next_leaves = obs_leaves if optimized else _leaves(buffer, "next_observations")
    act_space = buffer.action_space
    for k, (lo, hi) in enumerate(zip(starts, ends + 1, strict=True)):
        if k == 0 and buffer.full:
            continue
        idx = order[lo:hi]
        last = np.array([(idx[-1] + 1) % size if optimized else idx[-1]])
        obs = {key: np.concatenate([_read(a, idx, env_index), _read(next_leaves[key], last, env_index)])
               .reshape((len(idx) + 1, *(_space(buffer, key).shape or ()))) for key, a in obs_leaves.items()}
        actions = _read(buffer.actions, idx, env_index).reshape((len(idx), *(act_space.shape or ())))
        if isinstance(act_space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
            actions = actions.astype(act_space.dtype)
        yield {
            "observations": obs.get(None, obs),
            "actions": actions,
            "rewards": np.asarray(buffer.rewards[idx, env_index]),
            "terminations": dones[lo:hi] & ~timeouts[lo:hi],
            "truncations": timeouts[lo:hi].copy(),
        }


def replay_buffer_to_minari(buffer: Any, dataset_id: str, *, env_index: int = 0, **metadata: Any) -> Any:
    """Write :func:`replay_buffer_episodes` as a Minari dataset (raw arrays, no JPEG);
    ``metadata`` goes to Minari's ``create_dataset_from_buffers`` (``env``, ``algorithm_name``, ...)."""
    from minari import create_dataset_from_buffers
    from minari.data_collector.episode_buffer import EpisodeBuffer

    def as_lists(x: Any) -> Any:
        return {k: as_lists(v) for k, v in x.items()} if isinstance(x, dict) else list(x)

    episodes = [EpisodeBuffer(id=i, observations=as_lists(ep["observations"]), actions=list(ep["actions"]),
                              rewards=list(ep["rewards"]), terminations=list(ep["terminations"]),
                              truncations=list(ep["truncations"]), infos={})
                for i, ep in enumerate(replay_buffer_episodes(buffer, env_index))]
    if not episodes:
        raise ValueError("buffer: no finished episode to export")
    metadata.setdefault("observation_space", buffer.observation_space)
    metadata.setdefault("action_space", buffer.action_space)
    return create_dataset_from_buffers(dataset_id, episodes, jpeg_encoding=False, **metadata)
