"""Save -> resume -> continue exactly: a resumed run ends with the parameters of an uninterrupted one.

    .venv/bin/python examples/resume_exactly.py          # about half a minute on a 2-core CPU

SAC on ``PixelPendulum`` (``pixel_pendulum.py``) with ``CompressedReplayBuffer``:

* uninterrupted: ``learn(N)`` then ``learn(M, reset_num_timesteps=False)``;
* interrupted: ``learn(N)``, save everything, drop the model, rebuild it from the
  files, ``learn(M, reset_num_timesteps=False)``.

SB3's ``model.save`` keeps the parameters, optimizers and counters; the buffer
file (``buffer.save``) keeps the buffer bit-exactly; what neither keeps, and this
script saves besides, is the random-number generators and the environment
(episodes in progress, the frame stack). See "Resuming training bit-identically"
in ``sb3_integration/persistence.py``.
"""

from __future__ import annotations

import argparse
import pickle
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from pixel_pendulum import make_pixel_pendulum
from stable_baselines3 import SAC
from stable_baselines3.common.vec_env import VecFrameStack

from sb3_integration import CompressedReplayBuffer


def new_model(env: Any, args: argparse.Namespace) -> SAC:
    return SAC("CnnPolicy", env, buffer_size=args.buffer_size, learning_starts=200, batch_size=32, train_freq=4,
               policy_kwargs={"net_arch": [32]}, replay_buffer_class=CompressedReplayBuffer, seed=0, device="cpu")


def save_everything(model: SAC, folder: Path) -> None:
    model.save(folder / "model.zip")                      # parameters, optimizers, counters, _last_obs
    model.replay_buffer.save(folder / "buffer.h5")        # the buffer, bit-exactly
    env = model.get_env()
    assert isinstance(env, VecFrameStack)  # a VecEnvWrapper does not pickle: keep its env and frame stack
    state = {"numpy": np.random.get_state(), "torch": th.get_rng_state(), "random": random.getstate(),  # noqa: NPY002
             "action_space": model.action_space.np_random.bit_generator.state,
             "venv": env.venv, "stacked_obs": env.stacked_obs}
    (folder / "state.pkl").write_bytes(pickle.dumps(state))


def load_everything(folder: Path) -> SAC:
    state = pickle.loads((folder / "state.pkl").read_bytes())
    env = VecFrameStack(state["venv"], state["stacked_obs"].n_stack, channels_order="first")
    env.stacked_obs = state["stacked_obs"]
    model = SAC.load(folder / "model.zip", env=env, device="cpu", force_reset=False)  # keeps _last_obs
    np.random.set_state(state["numpy"])  # noqa: NPY002 - SB3 samples with the global generator
    th.set_rng_state(state["torch"])
    random.setstate(state["random"])
    model.action_space.np_random.bit_generator.state = state["action_space"]
    model.replay_buffer = CompressedReplayBuffer.load(folder / "buffer.h5", device=model.device)
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--first", type=int, default=500, help="steps before the interruption (N)")
    p.add_argument("--then", type=int, default=400, help="steps after it (M)")
    p.add_argument("--buffer-size", type=int, default=600, help="small, so that the saved buffer has wrapped")
    args = p.parse_args()
    th.set_num_threads(1)

    straight = new_model(make_pixel_pendulum(seed=0), args)
    straight.learn(args.first)
    straight.learn(args.then, reset_num_timesteps=False)

    first = new_model(make_pixel_pendulum(seed=0), args)
    first.learn(args.first)
    with tempfile.TemporaryDirectory() as tmp:
        save_everything(first, Path(tmp))
        sizes = {f.name: f.stat().st_size for f in Path(tmp).iterdir()}
        del first
        resumed = load_everything(Path(tmp))
        resumed.learn(args.then, reset_num_timesteps=False)

    print(f"saved: {', '.join(f'{k} {v / 1e6:.2f} MB' for k, v in sorted(sizes.items()))}")
    print(f"timesteps {straight.num_timesteps} / {resumed.num_timesteps}, "
          f"gradient steps {straight._n_updates} / {resumed._n_updates}")
    pa, pb = straight.policy.state_dict(), resumed.policy.state_dict()
    same = pa.keys() == pb.keys() and all(th.equal(pa[k], pb[k]) for k in pa)
    same = same and th.equal(straight.log_ent_coef, resumed.log_ent_coef)  # SAC's entropy coefficient
    print(f"identical parameters after resuming: {same}")
    if not same:
        raise SystemExit("the resumed run differs")


if __name__ == "__main__":
    main()
