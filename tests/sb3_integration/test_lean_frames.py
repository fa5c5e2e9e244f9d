"""The lean read of compressed frame stacks (``sb3_integration.buffers._lean_frames``): SB3's samples, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer

from sb3_integration import CompressedReplayBuffer

DEPTH, SIDE, STEPS = 4, 12, 60


def _stacks(n_envs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(obs, next_obs, dones) of frame stacks with VecFrameStack's padding after each episode's end."""
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 255, (STEPS + 1, n_envs, SIDE, SIDE), dtype=np.uint8)
    dones = rng.random((STEPS, n_envs)) < 0.08
    obs = np.zeros((STEPS + 1, n_envs, DEPTH, SIDE, SIDE), np.uint8)
    start = np.zeros(n_envs, int)
    for t in range(STEPS + 1):
        for e in range(n_envs):
            for j in range(DEPTH):
                if t - DEPTH + 1 + j >= start[e]:
                    obs[t, e, j] = frames[t - DEPTH + 1 + j, e]
            if t < STEPS and dones[t, e]:
                start[e] = t + 1
    nxt = obs[1:].copy()
    for t, e in zip(*np.nonzero(dones), strict=True):  # SB3 stores the terminal observation
        nxt[t, e] = np.concatenate((obs[t, e, 1:], frames[t + 1, e][None]))
    return obs[:-1], nxt, dones


@pytest.mark.parametrize("omu", [False, True])
@pytest.mark.parametrize("n_envs", [1, 3])
@pytest.mark.parametrize("capacity", [25, 200])
def test_lean_frame_samples_are_sb3s(omu: bool, n_envs: int, capacity: int) -> None:
    obs_space = spaces.Box(0, 255, (DEPTH, SIDE, SIDE), np.uint8)
    act_space = spaces.Box(-1, 1, (2,), np.float32)
    kw = {"n_envs": n_envs, "optimize_memory_usage": omu, "handle_timeout_termination": not omu}
    sb3 = ReplayBuffer(capacity, obs_space, act_space, "cpu", **kw)
    ours = CompressedReplayBuffer(capacity, obs_space, act_space, "cpu", observation_storage="compressed", **kw)
    obs, nxt, dones = _stacks(n_envs)
    rng = np.random.default_rng(2)
    for t in range(STEPS):
        act = rng.uniform(-1, 1, (n_envs, 2)).astype(np.float32)
        rew = rng.standard_normal(n_envs).astype(np.float32)
        infos = [{"TimeLimit.truncated": bool(rng.random() < 0.3)} for _ in range(n_envs)]
        for buf in (sb3, ours):
            buf.add(obs[t], nxt[t], act, rew, dones[t], infos)
    assert ours._lean_frames
    for seed, batch in enumerate((1, 7, 32, 64)):
        np.random.seed(seed)  # noqa: NPY002 (SB3 draws from numpy's global generator)
        want = sb3.sample(batch)
        after_sb3 = np.random.randint(1 << 30)  # noqa: NPY002
        np.random.seed(seed)  # noqa: NPY002
        got = ours.sample(batch)
        assert np.random.randint(1 << 30) == after_sb3  # noqa: NPY002 (the same draws)
        for w, g in zip(want, got, strict=True):
            if w is None:
                assert g is None
                continue
            assert g.dtype == w.dtype and g.shape == w.shape and g.device == w.device
            assert th.equal(g, w)
    ours.close()


def test_lean_frames_not_taken_for_raw_or_nstep() -> None:
    from sb3_integration import CompressedNStepReplayBuffer

    space = spaces.Box(0, 255, (DEPTH, SIDE, SIDE), np.uint8)
    raw = CompressedReplayBuffer(10, space, spaces.Discrete(2), "cpu", observation_storage="raw")
    nstep = CompressedNStepReplayBuffer(10, space, spaces.Discrete(2), "cpu", observation_storage="compressed")
    assert not raw._lean_frames and not nstep._lean_frames
    raw.close()
    nstep.close()
