"""Real Atari transitions, exactly as an SB3 off-policy algorithm hands them to ``add()``.

Used by the buffer tests and the benchmarks. The env is SB3's own pipeline:
``make_atari_env`` (Monitor + ``AtariWrapper``: 84x84 grayscale, frame skip 4,
no-op starts, life loss as episode end) -> ``VecFrameStack`` (-> ``VecTransposeImage``
for channel-first). A ``TimeLimit`` of ``max_episode_steps`` emulator frames makes
time-limit truncations happen (``infos[t][e]["TimeLimit.truncated"]``). At an
episode end ``next_obs`` holds the ``terminal_observation`` (as SB3's
``_store_transition`` does), not the first observation of the next episode.
Actions are uniformly random; everything is deterministic for a given seed.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["AtariTransitions", "collect_atari"]


@dataclass(frozen=True)
class AtariTransitions:
    """``(n_steps, n_envs, ...)`` arrays; ``steps()`` yields the arguments of each ``add()``."""

    obs: np.ndarray
    next_obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    infos: list[list[dict[str, Any]]]

    def __len__(self) -> int:
        return len(self.obs)

    def steps(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]]:
        for t in range(len(self.obs)):
            yield self.obs[t], self.next_obs[t], self.actions[t], self.rewards[t], self.dones[t], self.infos[t]

    @property
    def truncations(self) -> int:
        return sum(bool(i.get("TimeLimit.truncated", False)) for step in self.infos for i in step)


def _env_id(game: str) -> tuple[str, dict[str, Any]]:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    if f"{game}NoFrameskip-v4" in gym.registry:
        return f"{game}NoFrameskip-v4", {}
    return f"ALE/{game}-v5", {"frameskip": 1, "repeat_action_probability": 0.0}


def collect_atari(
    game: str,
    n_steps: int,
    n_envs: int = 1,
    seed: int = 0,
    frame_stack: int = 4,
    channels_last: bool = False,
    max_episode_steps: int = 1000,
) -> AtariTransitions:
    """Collect ``n_steps`` vectorised steps of ``game`` (``"Pong"``, ``"Breakout"``, ``"MsPacman"``).

    Observations are ``(frame_stack, 84, 84)`` uint8 (``(84, 84, frame_stack)``
    with ``channels_last``). ``max_episode_steps`` counts emulator frames (4 per
    step). Results are cached per process; treat the arrays as read-only.
    """
    return _collect(game, int(n_steps), int(n_envs), int(seed), int(frame_stack), bool(channels_last),
                    int(max_episode_steps))


@functools.lru_cache(maxsize=8)
def _collect(game: str, n_steps: int, n_envs: int, seed: int, frame_stack: int, channels_last: bool,
             max_episode_steps: int) -> AtariTransitions:
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecTransposeImage

    env_id, kwargs = _env_id(game)
    venv = make_atari_env(env_id, n_envs=n_envs, seed=seed,
                          env_kwargs={**kwargs, "max_episode_steps": max_episode_steps})
    venv = VecFrameStack(venv, n_stack=frame_stack)
    if not channels_last:
        venv = VecTransposeImage(venv)
    rng = np.random.default_rng(seed)
    shape = (n_steps, n_envs, *venv.observation_space.shape)
    obs_all, next_all = np.empty(shape, np.uint8), np.empty(shape, np.uint8)
    actions = rng.integers(0, int(venv.action_space.n), size=(n_steps, n_envs)).astype(np.int64)
    rewards = np.empty((n_steps, n_envs), np.float32)
    dones = np.empty((n_steps, n_envs), bool)
    infos: list[list[dict[str, Any]]] = []
    obs = venv.reset()
    for t in range(n_steps):
        obs_all[t] = obs
        new_obs, rew, done, info = venv.step(actions[t])
        next_all[t] = new_obs
        for e in np.flatnonzero(done):
            if info[e].get("terminal_observation") is not None:
                next_all[t, e] = info[e]["terminal_observation"]
        rewards[t], dones[t] = rew, done
        infos.append([{"TimeLimit.truncated": bool(i.get("TimeLimit.truncated", False))} for i in info])
        obs = new_obs
    venv.close()
    for a in (obs_all, next_all, actions, rewards, dones):
        a.flags.writeable = False
    return AtariTransitions(obs_all, next_all, actions, rewards, dones, infos)
