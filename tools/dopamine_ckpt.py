"""Write replay checkpoints exactly as dopamine's ``OutOfGraphReplayBuffer`` does, from real ALE frames.

For the tests and ``tools/bench_offline.py``; no dopamine or tensorflow needed.
:class:`DopamineWriter` is a plain-numpy copy of the buffer's ``add`` (``stack_size - 1``
zero transitions before each episode, a circular store, ``add_count``, ``invalid_range``,
``episode_end_indices``) and ``save`` (one gzip'd ``np.save`` per element,
``{name}_ckpt.{N}.gz``, ``$store$_`` before the stored arrays, a pickled set for the
episode ends). :func:`collect_run` plays a real Atari game with a uniformly random policy
through SB3's ``AtariWrapper`` set up like dopamine's ``AtariPreprocessing`` (84x84
grayscale, frame skip 4, max-pool, no life-loss terminals) and clips rewards to [-1, 1]
as dopamine's agents store them.
"""

from __future__ import annotations

import gzip
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["DopamineWriter", "Run", "collect_run", "write_checkpoints"]


class DopamineWriter:
    """``OutOfGraphReplayBuffer``'s storage and checkpoint files, in numpy."""

    def __init__(self, capacity: int, observation_shape: tuple[int, ...] = (84, 84), stack_size: int = 4,
                 update_horizon: int = 1, *, save_episode_ends: bool = False):
        self.capacity, self.stack_size, self.update_horizon = capacity, stack_size, update_horizon
        self.store = {
            "observation": np.empty((capacity, *observation_shape), np.uint8),
            "action": np.empty(capacity, np.int32),
            "reward": np.empty(capacity, np.float32),
            "terminal": np.empty(capacity, np.uint8),
        }
        for a in self.store.values():  # np.empty: what dopamine leaves in unwritten rows is arbitrary
            a.fill(0x5A if a.dtype == np.uint8 else 7)
        self.add_count = np.array(0)
        self.invalid_range = np.zeros(stack_size)  # dopamine's initial value: floats
        self.episode_end_indices: set[int] = set()
        self.save_episode_ends = save_episode_ends
        self._episode_start = True

    def cursor(self) -> int:
        return self.add_count % self.capacity

    def _add(self, obs: np.ndarray, action: int, reward: float, terminal: int) -> None:
        c = self.cursor()
        self.store["observation"][c] = obs
        self.store["action"][c] = action
        self.store["reward"][c] = reward
        self.store["terminal"][c] = terminal
        self.add_count += 1
        cur = self.cursor()
        self.invalid_range = np.array([(cur - self.update_horizon + i) % self.capacity
                                       for i in range(self.stack_size + self.update_horizon)])

    def add(self, obs: np.ndarray, action: int, reward: float, terminal: bool, episode_end: bool = False) -> None:
        if self._episode_start:
            for _ in range(self.stack_size - 1):
                self.episode_end_indices.discard(self.cursor())
                self._add(np.zeros_like(obs), 0, 0.0, 0)
            self._episode_start = False
        if episode_end or terminal:
            self.episode_end_indices.add(self.cursor())
            self._episode_start = True
        else:
            self.episode_end_indices.discard(self.cursor())
        self._add(obs, action, reward, int(terminal))

    def save(self, directory: str | os.PathLike[str], iteration: int) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        elements: dict[str, object] = {f"$store$_{k}": v for k, v in self.store.items()}
        elements["add_count"] = self.add_count
        elements["invalid_range"] = self.invalid_range
        if self.save_episode_ends:
            elements["episode_end_indices"] = set(self.episode_end_indices)
        for name, value in elements.items():
            with gzip.open(d / f"{name}_ckpt.{iteration}.gz", "wb", compresslevel=1) as f:
                if isinstance(value, np.ndarray):
                    np.save(f, value, allow_pickle=False)
                else:
                    pickle.dump(value, f)


@dataclass
class Run:
    """One random-policy run, step by step as a dopamine agent stores it."""

    frames: np.ndarray  # (n, 84, 84) uint8: the observation the action was taken on
    actions: np.ndarray
    rewards: np.ndarray  # clipped to [-1, 1]
    terminals: np.ndarray  # game over
    episode_ends: np.ndarray  # a time limit ended the episode without a terminal


def collect_run(game: str = "Breakout", n_steps: int = 2000, seed: int = 0,
                max_episode_steps: int | None = None) -> Run:
    """``n_steps`` steps of a real ALE game with a uniformly random policy (see the module text)."""
    import gymnasium as gym
    from atari_data import make_env_id
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    env_id, kwargs = make_env_id(game)
    env = AtariWrapper(gym.make(env_id, **kwargs), noop_max=30, terminal_on_life_loss=False,
                       clip_reward=False)
    env.action_space.seed(seed)
    frames = np.empty((n_steps, 84, 84), np.uint8)
    actions = np.empty(n_steps, np.int32)
    rewards = np.empty(n_steps, np.float32)
    terminals = np.zeros(n_steps, bool)
    ends = np.zeros(n_steps, bool)
    obs, _ = env.reset(seed=seed)
    steps = 0
    for t in range(n_steps):
        a = int(env.action_space.sample())
        frames[t], actions[t] = obs[..., 0], a
        obs, r, term, trunc, _ = env.step(a)
        steps += 1
        rewards[t] = np.clip(r, -1, 1)
        limit = max_episode_steps is not None and steps >= max_episode_steps
        if term or trunc or limit:
            terminals[t], ends[t] = bool(term), not term
            obs, _ = env.reset()
            steps = 0
    env.close()
    return Run(frames, actions, rewards, terminals, ends)


def write_checkpoints(run: Run, directory: str | os.PathLike[str], capacity: int, every: int,
                      *, first: int = 0, stack_size: int = 4, update_horizon: int = 1,
                      save_episode_ends: bool = False, steps: int | None = None) -> list[int]:
    """Feed ``run`` to a :class:`DopamineWriter` and save a checkpoint after every ``every``
    steps (iteration numbers ``first, first + 1, ...``) and at the end; returns the numbers.
    ``steps`` cycles the run to that many steps (a benchmark's stand-in for a longer run)."""
    w = DopamineWriter(capacity, run.frames.shape[1:], stack_size, update_horizon,
                       save_episode_ends=save_episode_ends)
    n = len(run.frames) if steps is None else steps
    saved, it = [], first
    for t in range(n):
        i = t % len(run.frames)
        w.add(run.frames[i], int(run.actions[i]), float(run.rewards[i]), bool(run.terminals[i]),
              episode_end=bool(run.episode_ends[i]))
        if (t + 1) % every == 0 or t == n - 1:
            w.save(directory, it)
            saved.append(it)
            it += 1
    return saved
