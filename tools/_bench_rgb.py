"""RGB camera stacks in SB3's buffers and ours: the spaces, the buffers and their ``add()`` rows.

Shared by ``tools/bench_sample_kinds.py`` (``--kinds rgb``) and ``tools/bench_training.py``
(``drq-rgb``); the frames come from ``tools/dmc_data.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: the RGB kinds of bench_sample_kinds: (observation layout, n_envs)
KINDS = {"RGB camera (9,84,84)": ("box", 1), "RGB camera Dict (pixels + state)": ("dict", 1),
         "RGB camera (9,84,84), n_envs 4": ("box", 4)}
OBS_SHAPE = (9, 84, 84)
STATE_DIM = 24  # the largest proprioceptive state of the three tasks (walker); the others are zero-padded
ACT_DIM = 6
#: SB3's bytes per transition of a (9, 84, 84) uint8 observation: obs and next_obs
SB3_OBS_BYTES = 2 * int(np.prod(OBS_SHAPE))


class Data:
    """Transitions ready for ``add()``: frames from dmc_data, made-up actions and rewards."""

    def __init__(self, frames: int, source: str, seed: int = 0):
        import dmc_data

        tr = dmc_data.load(frames, synthetic=source == "synthetic", seed=seed)
        self.n = len(tr)
        self.obs, self.next_obs, self.dones, self.tasks = tr.obs, tr.next_obs, tr.dones, tr.tasks
        self.state = np.zeros((self.n, STATE_DIM), np.float32)
        self.next_state = np.zeros((self.n, STATE_DIM), np.float32)
        self.state[:, : tr.state.shape[1]] = tr.state
        self.next_state[:, : tr.next_state.shape[1]] = tr.next_state
        rng = np.random.default_rng(seed)
        self.actions = rng.uniform(-1, 1, (self.n, ACT_DIM)).astype(np.float32)
        self.rewards = rng.random(self.n).astype(np.float32)

    def row(self, t: int, n_envs: int, layout: str) -> tuple[Any, ...]:
        """``add()``'s arguments at step ``t``: env e reads transition ``t + e * n // n_envs`` (cycled)."""
        idx = (t + np.arange(n_envs) * (self.n // n_envs)) % self.n
        obs: Any = self.obs[idx]
        nxt: Any = self.next_obs[idx]
        if layout == "dict":
            obs, nxt = {"pixels": obs, "state": self.state[idx]}, {"pixels": nxt, "state": self.next_state[idx]}
        done = self.dones[idx]
        infos = [{"TimeLimit.truncated": bool(d)} for d in done]
        return obs, nxt, self.actions[idx], self.rewards[idx], done, infos


def spaces_for(layout: str) -> tuple[Any, Any]:
    from gymnasium import spaces

    pixels = spaces.Box(0, 255, OBS_SHAPE, np.uint8)
    obs = spaces.Dict({"pixels": pixels, "state": spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)}) \
        if layout == "dict" else pixels
    return obs, spaces.Box(-1, 1, (ACT_DIM,), np.float32)


def make(arm: str, layout: str, capacity: int, n_envs: int = 1, **kwargs: Any) -> Any:
    """SB3's (``arm == "sb3"``) or our buffer of the layout, SB3's other defaults."""
    from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer

    from sb3_integration import CompressedDictReplayBuffer, CompressedReplayBuffer

    obs_space, act_space = spaces_for(layout)
    cls = {("sb3", "box"): ReplayBuffer, ("sb3", "dict"): DictReplayBuffer,
           ("ours", "box"): CompressedReplayBuffer, ("ours", "dict"): CompressedDictReplayBuffer}[(arm, layout)]
    return cls(capacity, obs_space, act_space, "cpu", n_envs=n_envs, **kwargs)


def held(cfg: dict[str, Any]) -> dict[str, Any]:
    """One arm's bytes per transition, in a process of its own: each distinct transition added once.

    tracemalloc: what is allocated from before the buffer is made to after it is filled and sampled
    (SB3 preallocates with ``np.zeros``: its whole capacity, which here is the transitions added);
    RSS: the process's resident-set growth over the same span (pages touched, native allocations too).
    Both include what a buffer holds whatever its size (our reused sample output blocks: 2 x 256 stacks
    after a ``sample(256)``); the marginal figures are the growth over the second half of the adds alone.
    """
    import gc
    import tracemalloc

    import psutil

    kind, arm = cfg["kind"], cfg["arm"]
    layout, n_envs = KINDS[kind]
    data = Data(cfg["rgb_frames"], cfg["rgb_source"])
    rows = data.n // n_envs
    if arm == "ours":
        make(arm, layout, 64 * n_envs, n_envs).close()  # first use loads what a process loads once
    gc.collect()
    try:  # hand the heap freed while the data was built back to the OS: later mallocs then count in RSS
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    tracemalloc.start()
    t0 = tracemalloc.get_traced_memory()[0]
    buf = make(arm, layout, rows * n_envs, n_envs)
    half = {}
    for t in range(rows):
        if t == rows // 2:
            gc.collect()
            half = {"traced": tracemalloc.get_traced_memory()[0], "rss": proc.memory_info().rss}
        buf.add(*data.row(t, n_envs, layout))
    gc.collect()
    adds = {"traced": tracemalloc.get_traced_memory()[0], "rss": proc.memory_info().rss}
    for b in (32, 256):
        buf.sample(b)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - t0
    tracemalloc.stop()
    grown = proc.memory_info().rss - rss0
    n = rows * n_envs
    getattr(buf, "close", lambda: None)()
    m = (rows - rows // 2) * n_envs  # the transitions of the second half of the adds
    return {"kind": kind, "arm": arm, "transitions": n, "traced_per_transition": traced / n,
            "rss_per_transition": grown / n, "traced_marginal": (adds["traced"] - half["traced"]) / m,
            "rss_marginal": (adds["rss"] - half["rss"]) / m, "sample_outputs_traced": t0 + traced - adds["traced"]}
