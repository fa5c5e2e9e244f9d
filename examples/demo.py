"""The main job: train DQN on real Pong with a compressed replay buffer, save, resume.

    make demo                       # or: .venv/bin/python examples/demo.py --steps 20000

It trains a short DQN run on ``PongNoFrameskip-v4`` (ale-py ships the ROM) with
``CompressedReplayBuffer``, prints what the buffer stores against what SB3's
``ReplayBuffer`` would hold for the same transitions, saves the buffer (SB3's
``save_replay_buffer`` pickle and chunkstore's HDF5 file), reloads it into a fresh
model and continues training.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import ale_py
import gymnasium as gym
import psutil
from stable_baselines3 import DQN
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack

from sb3_integration import DEFAULT_COMPRESSION, CompressedReplayBuffer


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def make_model(env, args: argparse.Namespace) -> DQN:
    return DQN(
        "CnnPolicy",
        env,
        buffer_size=args.buffer_size,
        learning_starts=2_000,
        train_freq=8,  # keeps the CPU-only demo short; the buffer is not the bottleneck
        target_update_interval=1_000,
        exploration_fraction=0.5,
        replay_buffer_class=CompressedReplayBuffer,
        replay_buffer_kwargs={"compression_method": args.codec},
        seed=0,
        verbose=0,
        device="cpu",
    )


def table(buffer: CompressedReplayBuffer) -> str:
    n = buffer.size() * buffer.n_envs
    per_slot_raw = buffer.nbytes_raw / (buffer.buffer_size * buffer.n_envs)
    rows = [
        ("transitions stored", f"{n:,}"),
        ("SB3 ReplayBuffer would hold (obs + next_obs)", mb(per_slot_raw * n)),
        ("SB3 ReplayBuffer allocates for buffer_size", mb(buffer.nbytes_raw)),
        ("chunkstore holds (compressed frames + index)", mb(buffer.nbytes_stored)),
        ("bytes per transition", f"{buffer.nbytes_stored / max(n, 1):,.0f}"),
        ("ratio against SB3 for the same transitions", f"{per_slot_raw * n / max(buffer.nbytes_stored, 1):,.0f}x"),
        ("process RSS", mb(psutil.Process().memory_info().rss)),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"| {'':{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {k:{width}} | {v} |" for k, v in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4_000, help="training steps before the save")
    parser.add_argument("--resume-steps", type=int, default=1_000, help="training steps after reloading")
    parser.add_argument("--buffer-size", type=int, default=100_000)
    parser.add_argument("--codec", default=DEFAULT_COMPRESSION,
                        help="compression_method (sb3-extra-buffers names; default %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="directory for the saved buffer (default: a temp dir)")
    args = parser.parse_args()
    gym.register_envs(ale_py)  # makes the Atari ids (ROMs ship in the ale-py wheel) known

    env = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=1, seed=0), n_stack=4)
    model = make_model(env, args)
    print(f"Training DQN on Pong for {args.steps:,} steps with CompressedReplayBuffer({args.codec!r})")
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.steps, progress_bar=True)
    print(f"trained in {time.perf_counter() - t0:.1f} s\n")
    buffer = model.replay_buffer
    print(table(buffer))

    out = args.out or Path(tempfile.mkdtemp(prefix="chunkstore-demo-"))
    out.mkdir(parents=True, exist_ok=True)
    pkl = out / "replay_buffer.pkl"
    t0 = time.perf_counter()
    model.save_replay_buffer(pkl)
    print(f"\nsave_replay_buffer: {mb(os.path.getsize(pkl))} in {time.perf_counter() - t0:.2f} s -> {pkl}")
    h5 = out / "replay_buffer.h5"
    if hasattr(buffer, "save"):
        t0 = time.perf_counter()
        buffer.save(h5)
        print(f"buffer.save (HDF5):  {mb(os.path.getsize(h5))} in {time.perf_counter() - t0:.2f} s -> {h5}")
    model.save(out / "dqn_pong")

    print(f"\nReloading into a fresh model and training {args.resume_steps:,} more steps")
    resumed = DQN.load(out / "dqn_pong", env=env, device="cpu")
    resumed.load_replay_buffer(pkl)
    before = resumed.replay_buffer.size()
    resumed.learn(total_timesteps=args.resume_steps, reset_num_timesteps=False, progress_bar=True)
    print(f"buffer had {before:,} transitions after load, {resumed.replay_buffer.size():,} after resuming\n")
    print(table(resumed.replay_buffer))
    env.close()


if __name__ == "__main__":
    main()
