"""A pixel-observation control task that needs nothing beyond gymnasium: Pendulum seen as an image.

``PixelPendulum`` runs gymnasium's ``Pendulum-v1`` dynamics and returns a
``(1, 64, 64)`` uint8 image of the rod (channel-first, as SB3's ``CnnPolicy``
wants it), drawn with numpy (no pygame, no display). Stack frames
(``VecFrameStack``) to let the policy see the velocity. The env is plain Python,
so it pickles with its state (used by ``resume_exactly.py``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

SIZE = 64


def draw(theta: float, size: int = SIZE) -> np.ndarray:
    """The rod at angle ``theta`` (0 = upright) from the centre, as a ``(1, size, size)`` uint8 image."""
    img = np.zeros((1, size, size), np.uint8)
    c = (size - 1) / 2
    t = np.linspace(0.0, 1.0, 4 * size)
    ys = np.rint(c - 0.42 * size * t * np.cos(theta)).astype(int)
    xs = np.rint(c + 0.42 * size * t * np.sin(theta)).astype(int)
    for dy in (0, 1):
        for dx in (0, 1):
            img[0, np.clip(ys + dy, 0, size - 1), np.clip(xs + dx, 0, size - 1)] = 255
    img[0, int(c) - 1:int(c) + 2, int(c) - 1:int(c) + 2] = 128  # the pivot
    return img


class PixelPendulum(gym.Wrapper):
    """``Pendulum-v1`` with image observations (``max_episode_steps`` as given, default 200)."""

    def __init__(self, max_episode_steps: int = 200) -> None:
        super().__init__(gym.make("Pendulum-v1", max_episode_steps=max_episode_steps))
        self.observation_space = spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)

    def _image(self) -> np.ndarray:
        theta, _ = self.env.unwrapped.state
        return draw(float(theta))

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        _, info = self.env.reset(**kwargs)
        return self._image(), info

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        _, reward, terminated, truncated, info = self.env.step(action)
        return self._image(), reward, terminated, truncated, info


def make_pixel_pendulum(seed: int = 0, n_stack: int = 3, max_episode_steps: int = 200) -> VecFrameStack:
    """``(n_stack, 64, 64)`` observations: ``n_stack`` frames stacked on the channel axis."""
    venv = DummyVecEnv([lambda: PixelPendulum(max_episode_steps)])
    venv.seed(seed)
    return VecFrameStack(venv, n_stack, channels_order="first")
