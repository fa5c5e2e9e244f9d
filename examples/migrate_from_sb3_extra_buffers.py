"""Migrating from sb3-extra-buffers: one import line, and existing replay pickles converted.

    .venv/bin/python examples/migrate_from_sb3_extra_buffers.py     # about a minute on a 2-core CPU

1. sb3-extra-buffers' own training recipe (its ``example_train_replay.py``: DQN on
   Atari, ``dtypes=find_buffer_dtypes(...)``, ``compression_method="rle-jit"``)
   with the import line changed and nothing else::

       # from sb3_extra_buffers.compressed import CompressedReplayBuffer, find_buffer_dtypes
       from sb3_integration import CompressedReplayBuffer, find_buffer_dtypes

2. A replay buffer that sb3-extra-buffers saved (``model.save_replay_buffer``)
   loaded into a model built with this package's class: SB3's own
   ``model.load_replay_buffer`` would leave it an sb3-extra-buffers buffer;
   ``sb3_integration.load_replay_buffer`` converts it, at the same rows, so it
   samples the same transitions. (Needs sb3-extra-buffers installed, to read its pickle.)

See docs/migration.md for every name, argument and codec.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path

import ale_py
import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3 import DQN
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack, VecTransposeImage

from sb3_integration import CompressedReplayBuffer, find_buffer_dtypes, load_replay_buffer

gym.register_envs(ale_py)
GAME = "PongNoFrameskip-v4"


def make_env(seed: int = 0) -> VecTransposeImage:
    """What sb3-extra-buffers' ``training_utils.atari.make_env`` builds (1 env, 4 frames)."""
    return VecTransposeImage(VecFrameStack(make_atari_env(GAME, n_envs=1, seed=seed), n_stack=4))


def dqn(env: VecTransposeImage, buffer_class: type, buffer_kwargs: dict, args: argparse.Namespace) -> DQN:
    return DQN("CnnPolicy", env, buffer_size=args.buffer_size, batch_size=32, learning_starts=args.learning_starts,
               target_update_interval=1000, train_freq=4, gradient_steps=1, exploration_final_eps=0.01,
               learning_rate=1e-4, replay_buffer_class=buffer_class, replay_buffer_kwargs=buffer_kwargs,
               device="cpu", seed=0, verbose=0)


def one_import_line(args: argparse.Namespace) -> None:
    obs = make_env().observation_space
    buffer_dtypes = find_buffer_dtypes(obs_shape=obs.shape, elem_dtype=obs.dtype, compression_method="rle-jit")
    model = dqn(make_env(), CompressedReplayBuffer,
                {"dtypes": buffer_dtypes, "compression_method": "rle-jit"}, args)
    model.learn(args.steps)
    buf = model.replay_buffer
    n = buf.size()
    print(f"1. sb3-extra-buffers' recipe, import line changed: {n:,} transitions of {obs.shape} in "
          f"{buf.nbytes_stored / 1e6:.2f} MB ({buf.nbytes_stored / n:,.0f} B/transition, "
          f"codec {buf.compression_method})")


def convert_a_pickle(args: argparse.Namespace) -> None:
    if importlib.util.find_spec("sb3_extra_buffers") is None:
        print("2. skipped: sb3-extra-buffers is not installed (pip install 'chunkstore-rl[sb3eb]')")
        return
    from sb3_extra_buffers.compressed import CompressedReplayBuffer as TheirBuffer

    theirs = dqn(make_env(), TheirBuffer, {"compression_method": "zstd3"}, args)
    theirs.learn(args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        theirs.save_replay_buffer(Path(tmp) / "sb3eb.pkl")
        ours = dqn(make_env(), CompressedReplayBuffer, {}, args)
        load_replay_buffer(ours, Path(tmp) / "sb3eb.pkl")
        ours.save_replay_buffer(Path(tmp) / "ours.pkl")
        sizes = [(Path(tmp) / f).stat().st_size / 1e6 for f in ("sb3eb.pkl", "ours.pkl")]
    same = True
    for seed in range(5):
        np.random.seed(seed)  # noqa: NPY002 - both buffers sample with the global generator
        a = theirs.replay_buffer.sample(256)
        np.random.seed(seed)  # noqa: NPY002
        b = ours.replay_buffer.sample(256)
        same &= all(th.equal(x, y) for x, y in zip(a[:5], b[:5], strict=True))
    print(f"2. sb3-extra-buffers pickle ({sizes[0]:.2f} MB) -> {type(ours.replay_buffer).__name__} "
          f"(pickle {sizes[1]:.2f} MB); same samples for the same seed: {same}")
    if not same:
        raise SystemExit("the converted buffer samples differently")
    ours.learn(args.steps // 4, reset_num_timesteps=False)  # and training goes on


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--learning-starts", type=int, default=1000)
    p.add_argument("--buffer-size", type=int, default=100_000)
    args = p.parse_args()
    th.set_num_threads(1)
    one_import_line(args)
    convert_a_pickle(args)


if __name__ == "__main__":
    main()
