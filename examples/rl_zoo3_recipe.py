"""rl-zoo3 with chunkstore's buffers: the recipe of docs/rl-zoo3.md, run for a few thousand steps.

    .venv/bin/python examples/rl_zoo3_recipe.py          # about a minute on a 2-core CPU

Runs, from the repository root, the two command lines of the recipe with a small
``-n`` (and a small ``learning_starts``), into a temporary log folder:

* DQN with ``examples/rl_zoo3_dqn.yml`` (``replay_buffer_class: CompressedReplayBuffer``,
  made visible to rl-zoo3 by ``--gym-packages sb3_integration.zoo``) and
  ``--save-replay-buffer``;
* PPO with ``examples/rl_zoo3_ppo.py`` (a Python hyperparameter file whose dict holds
  ``rollout_buffer_class=CompressedRolloutBuffer``).

Then it opens what rl-zoo3 saved: the replay buffer pickle (a compressed buffer:
kilobytes where SB3's would take hundreds of megabytes) and the PPO model.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from stable_baselines3 import PPO
from stable_baselines3.common.save_util import load_from_pkl

ROOT = Path(__file__).resolve().parent.parent
ENV = "PongNoFrameskip-v4"


def zoo(*args: str) -> None:
    cmd = [sys.executable, "-m", "rl_zoo3.train", "--env", ENV, "--seed", "0", "--num-threads", "1",
           "--eval-freq", "-1", "--vec-env", "dummy", "--verbose", "0", *args]
    print("$ python", " ".join(cmd[1:]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:  # rl-zoo3 prints its whole configuration: show it only when it failed
        print(done.stdout[-5000:], done.stderr[-5000:], sep="\n")
        raise SystemExit(f"rl_zoo3.train exited with {done.returncode}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dqn-steps", type=int, default=2500)
    p.add_argument("--ppo-steps", type=int, default=1024)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as logs:
        zoo("--algo", "dqn", "--gym-packages", "sb3_integration.zoo", "-conf", "examples/rl_zoo3_dqn.yml",
            "-n", str(args.dqn_steps), "-params", "learning_starts:500", "--save-replay-buffer", "-f", logs)
        run = Path(logs) / "dqn" / f"{ENV}_1"
        buf = load_from_pkl(run / "replay_buffer.pkl")
        n = buf.size() * buf.n_envs
        raw = buf.nbytes_raw / (buf.buffer_size * buf.n_envs) * n
        print(f"DQN: {type(buf).__module__}.{type(buf).__name__}, {n:,} transitions; replay_buffer.pkl "
              f"{(run / 'replay_buffer.pkl').stat().st_size / 1e6:.2f} MB (SB3's would hold {raw / 1e6:,.0f} MB)")

        zoo("--algo", "ppo", "-conf", "examples/rl_zoo3_ppo.py", "-n", str(args.ppo_steps), "-f", logs)
        model = PPO.load(Path(logs) / "ppo" / f"{ENV}_1" / f"{ENV}.zip", device="cpu")
        print(f"PPO: trained {model.num_timesteps:,} steps with rollout_buffer_class="
              f"{model.rollout_buffer_class.__module__}.{model.rollout_buffer_class.__name__}")


if __name__ == "__main__":
    main()
