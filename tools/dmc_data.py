"""Rendered RGB camera frames from dm_control for the benchmarks (DrQ-style pixel observations).

dm_control is optional (``pip install "chunkstore-rl[pixels]"``, i.e. ``dm-control`` and
``mujoco<4``; headless rendering needs an OpenGL backend, e.g. ``apt-get install libosmesa6``
and ``MUJOCO_GL=osmesa``). :func:`available` says whether it imports and renders.

Frames are ``physics.render(84, 84, camera_id=0)`` after each agent step of a uniformly random
policy, with DrQ's action repeats (cheetah 4, walker 2, cartpole 8), episodes of 1,000 physics
steps. :func:`collect` caches each task's frames on disk (``./data`` or ``$CHUNKSTORE_DATA``, as
``tools/atari_data.py`` does): software rendering costs ~80 ms a frame on a small VM.
:func:`transitions` turns them into what an SB3 replay buffer's ``add()`` receives: channel-first
stacks of 3 frames, ``(9, 84, 84)`` uint8, zero-padded after a reset (``VecFrameStack``), the
time-limit end of an episode a done with ``TimeLimit.truncated`` and its terminal stack as
``next_obs``. ``synthetic=True`` makes frames of the same shapes without dm_control (smooth
moving blobs: for smoke tests only, not for figures).

Example: ``python tools/dmc_data.py --steps 700`` pre-fills the cache.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from atari_data import _Npz, _save_npz, default_cache_dir

__all__ = ["INSTALL_HINT", "TASKS", "Frames", "Transitions", "available", "collect", "load", "transitions"]

#: (domain, task, action repeat): DrQ's settings
TASKS = (("cheetah", "run", 4), ("walker", "walk", 2), ("cartpole", "swingup", 8))
INSTALL_HINT = ('dm_control is not installed or cannot render: pip install "chunkstore-rl[pixels]" '
                '(dm-control, mujoco<4), apt-get install libosmesa6, and set MUJOCO_GL=osmesa')
STACK = 3
_CACHE_VERSION = 1


@dataclass
class Frames:
    """One task's rendered frames, episode by episode: ``frames[i]`` follows ``states[i]``."""

    task: str
    frames: np.ndarray  # (n, 84, 84, 3) uint8
    states: np.ndarray  # (n, d) float32: the proprioceptive observation (dm_control's, flattened)
    first: np.ndarray  # (n,) bool: a reset frame (an episode's first)
    last: np.ndarray  # (n,) bool: an episode's terminal frame (its time limit)
    render_s: float


def available() -> str | None:
    """None when dm_control imports and renders one frame; else why not."""
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    try:
        from dm_control import suite

        env = suite.load("cartpole", "swingup", task_kwargs={"random": 0})
        env.reset()
        env.physics.render(8, 8, camera_id=0)
        return None
    except Exception as e:  # not installed, no GL backend, ...
        return f"{type(e).__name__}: {e}"


def _flat(obs: dict[str, Any]) -> np.ndarray:
    return np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in obs.values()])


def _render(domain: str, task: str, repeat: int, n: int, seed: int) -> Frames:
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    from dm_control import suite

    env = suite.load(domain, task, task_kwargs={"random": seed})
    spec, rng = env.action_spec(), np.random.default_rng(seed)
    frames = np.empty((n, 84, 84, 3), np.uint8)
    states, first, last = [], np.zeros(n, bool), np.zeros(n, bool)
    ts, t0, i = env.reset(), time.perf_counter(), 0
    first[0] = True
    while i < n:
        frames[i] = env.physics.render(84, 84, camera_id=0)
        states.append(_flat(ts.observation))
        last[i] = ts.last()
        i += 1
        if ts.last():  # that was the terminal frame; the next one starts an episode
            ts = env.reset()
            first[i:i + 1] = True
            continue
        a = rng.uniform(spec.minimum, spec.maximum, spec.shape)
        for _ in range(repeat):
            ts = env.step(a)
            if ts.last():
                break
    return Frames(f"{domain}-{task}", frames, np.stack(states), first, last, time.perf_counter() - t0)


def _synthetic(task: str, n: int, seed: int) -> Frames:
    """Frames of the same shapes without dm_control: a smooth moving blob over a gradient (tests only)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:84, 0:84]
    frames = np.empty((n, 84, 84, 3), np.uint8)
    for i in range(n):
        cy, cx = 42 + 30 * np.sin(i / 9 + seed), 42 + 30 * np.cos(i / 13)
        blob = 200 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 60)
        frames[i] = np.clip(np.stack([blob + xx, blob + yy, blob / 2 + 40], -1), 0, 255).astype(np.uint8)
    first, last = np.zeros(n, bool), np.zeros(n, bool)
    first[::250], last[249::250] = True, True
    return Frames(task + " (synthetic)", frames, rng.standard_normal((n, 17)).astype(np.float32), first, last, 0.0)


def collect(domain: str, task: str, n: int = 700, seed: int = 0, *, synthetic: bool = False,
            cache_dir: str | Path | None = None) -> Frames:
    """``n`` rendered frames of one task (cached on disk); ``synthetic``: made-up frames, no dm_control."""
    repeat = dict(((d, t), r) for d, t, r in TASKS)[(domain, task)]
    if synthetic:
        return _synthetic(f"{domain}-{task}", n, seed)
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = base / f"dmc_v{_CACHE_VERSION}_{domain}-{task}_{n}_s{seed}.npz"
    if path.exists():
        with _Npz(path) as z:
            return Frames(f"{domain}-{task}", z["frames"], z["states"], z["first"], z["last"], float(z["render_s"]))
    fr = _render(domain, task, repeat, n, seed)
    _save_npz(path, frames=fr.frames, states=fr.states, first=fr.first, last=fr.last,
              render_s=np.asarray(fr.render_s))
    return fr


@dataclass
class Transitions:
    """What ``add()`` receives, one row per transition: ``obs`` / ``next_obs`` are (9, 84, 84) stacks."""

    obs: np.ndarray
    next_obs: np.ndarray
    state: np.ndarray
    next_state: np.ndarray
    dones: np.ndarray
    truncated: np.ndarray
    tasks: list[str]

    def __len__(self) -> int:
        return len(self.obs)


def _stack(frames: np.ndarray, first: np.ndarray, i: int) -> np.ndarray:
    """Channel-first stack of frames ``i - 2 .. i`` (zeros before the episode's first frame)."""
    out = np.zeros((STACK * 3, 84, 84), np.uint8)
    start = i
    while start > 0 and not first[start]:
        start -= 1
    for k in range(STACK):
        j = i - (STACK - 1 - k)
        if j >= start:
            out[3 * k:3 * k + 3] = frames[j].transpose(2, 0, 1)
    return out


def transitions(frames: list[Frames]) -> Transitions:
    """Every (frame, next frame) pair within an episode of each task, tasks one after another (states zero-padded)."""
    obs, nxt, st, nst, dones = [], [], [], [], []
    width = max(fr.states.shape[1] for fr in frames)  # states zero-padded to the widest task's
    for fr in frames:
        states = np.zeros((len(fr.states), width), np.float32)
        states[:, : fr.states.shape[1]] = fr.states
        for i in range(len(fr.frames) - 1):
            if fr.first[i + 1]:
                continue  # i is a terminal frame: no transition out of it
            obs.append(_stack(fr.frames, fr.first, i))
            nxt.append(_stack(fr.frames, fr.first, i + 1))
            st.append(states[i])
            nst.append(states[i + 1])
            dones.append(bool(fr.last[i + 1]))
    d = np.array(dones)
    return Transitions(np.stack(obs), np.stack(nxt), np.stack(st), np.stack(nst), d, d.copy(),
                       [fr.task for fr in frames])


def load(n: int = 700, *, synthetic: bool = False, seed: int = 0) -> Transitions:
    """The three tasks' transitions, ``n`` frames each (dm_control, cached), or synthetic ones."""
    return transitions([collect(d, t, n, seed, synthetic=synthetic) for d, t, _ in TASKS])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Render (and cache) dm_control frames for the benchmarks.")
    p.add_argument("--steps", type=int, default=700, help="frames per task")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    why = available()
    if why is not None:
        print(f"{INSTALL_HINT} ({why})")
        return 1
    for d, t, _ in TASKS:
        fr = collect(d, t, args.steps, args.seed)
        print(f"{fr.task}: {fr.frames.shape}, {int(fr.first.sum())} episodes, rendered in {fr.render_s:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
