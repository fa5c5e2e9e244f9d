"""One arm of ``bench_distributed.py``'s outside-client measurement, in a process of its own.

Builds SB3's ``DQN`` with the arm's replay buffer (a local ``CompressedReplayBuffer``
filled with the benchmark's MsPacman transitions, or a ``DistributedReplayBuffer``
connected to the service the benchmark filled) and times the buffer's ``sample()``
exactly as ``DQN.train`` calls it. Prints one JSON line: per-block milliseconds per call.

    python tools/_service_client.py --config '{"arm": "local", "steps": 20000, "batch": 256}'
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable

ensure_importable()


class _SpacesOnly:
    """A gymnasium env with the benchmark's spaces (DQN needs one to build its policy)."""

    def __new__(cls, obs_space: Any, act_space: Any) -> Any:
        import gymnasium as gym

        class Env(gym.Env):
            observation_space, action_space = obs_space, act_space

            def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
                return np.zeros(obs_space.shape, obs_space.dtype), {}

            def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
                return np.zeros(obs_space.shape, obs_space.dtype), 0.0, False, False, {}

        return Env()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    cfg = json.loads(p.parse_args().config)
    import torch
    from gymnasium import spaces
    from stable_baselines3 import DQN

    torch.set_num_threads(1)
    from bench_distributed import SERVICE, infos, transitions

    data = transitions(cfg["steps"])
    n = len(data["obs"])
    space = (spaces.Box(0, 255, data["obs"].shape[2:], np.uint8), spaces.Discrete(9))
    if cfg["arm"] == "local":
        from sb3_integration import CompressedReplayBuffer

        cls, kwargs = CompressedReplayBuffer, {}
    else:
        import ray

        from sb3_integration.distributed import DistributedReplayBuffer
        from sb3_integration.distributed.local import loopback_only

        loopback_only()
        ray.init(address=cfg["address"], log_to_driver=False)
        cls, kwargs = DistributedReplayBuffer, {"service": SERVICE, "prefetch": bool(cfg.get("prefetch", False))}
    model = DQN("CnnPolicy", _SpacesOnly(*space), buffer_size=n, replay_buffer_class=cls,
                replay_buffer_kwargs=kwargs, device="cpu", learning_starts=0)
    buf = model.replay_buffer
    if cfg["arm"] == "local":
        for i in range(n):
            buf.add(data["obs"][i], data["next_obs"][i], data["actions"][i], data["rewards"][i],
                    data["dones"][i], infos(data["timeouts"][i]))
    del data
    env = model._vec_normalize_env
    for _ in range(20):
        buf.sample(cfg["batch"], env=env)
    blocks = []
    for _ in range(cfg.get("blocks", 10)):
        t0 = time.perf_counter()
        for _ in range(cfg.get("per_block", 10)):
            buf.sample(cfg["batch"], env=env)  # as DQN.train calls it
        blocks.append(1e3 * (time.perf_counter() - t0) / cfg.get("per_block", 10))
    print(json.dumps({"arm": cfg["arm"], "ms": float(np.median(blocks)), "blocks": blocks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
