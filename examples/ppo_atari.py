"""PPO on Atari with the compressed rollout buffer, against SB3's RolloutBuffer.

    .venv/bin/python examples/ppo_atari.py                    # about a minute on a 2-core CPU
    .venv/bin/python examples/ppo_atari.py --game Breakout --rollouts 50 --no-compare

Real frames: ``PongNoFrameskip-v4`` (ale-py ships the ROM) through SB3's
``make_atari_env`` and ``VecFrameStack(4)``, 8 envs x 128 steps per rollout.
PPO trains twice with the same seed, with SB3's ``RolloutBuffer`` and with
``CompressedRolloutBuffer``; the runs end with identical parameters. The
compressed buffer stores each distinct frame of the stacks once (by default
without a codec: a rollout is rewritten every 1,024 steps, see
``sb3_integration/rollout.py``).
"""

from __future__ import annotations

import argparse
import time

import ale_py
import gymnasium as gym
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack

from sb3_integration import CompressedRolloutBuffer

gym.register_envs(ale_py)


def train(buffer_class: type, args: argparse.Namespace) -> tuple[PPO, float]:
    env = VecFrameStack(make_atari_env(f"{args.game}NoFrameskip-v4", n_envs=8, seed=args.seed), 4)
    kwargs = {"compression_method": args.codec} if buffer_class is CompressedRolloutBuffer else {}
    model = PPO("CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=2.5e-4,
                clip_range=0.1, ent_coef=0.01, vf_coef=0.5, rollout_buffer_class=buffer_class,
                rollout_buffer_kwargs=kwargs, seed=args.seed, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(args.rollouts * 8 * 128)
    return model, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--game", default="Pong")
    p.add_argument("--rollouts", type=int, default=2, help="rollouts of 8 envs x 128 steps")
    p.add_argument("--codec", default="none", help="compression_method of the rollout buffer")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-compare", dest="compare", action="store_false", help="skip the SB3 run")
    args = p.parse_args()
    th.set_num_threads(1)  # both runs share the setting

    ours, t_ours = train(CompressedRolloutBuffer, args)
    buf = ours.rollout_buffer
    raw = buf.nbytes_raw  # what SB3's RolloutBuffer holds for a rollout
    print(f"PPO CnnPolicy on {args.game}, {args.rollouts} rollouts of 8 x 128 steps: {t_ours:.1f} s")
    print(f"  observations per rollout, SB3 RolloutBuffer   {raw / 1e6:,.1f} MB")
    print(f"  observations per rollout, chunkstore ({args.codec})  {buf.nbytes_stored / 1e6:,.1f} MB")
    if args.compare:
        ref, t_ref = train(RolloutBuffer, args)
        same = all(th.equal(a, b) for a, b in zip(ref.policy.state_dict().values(),
                                                   ours.policy.state_dict().values(), strict=True))
        print(f"  SB3 RolloutBuffer run {t_ref:.1f} s; identical parameters: {same}")
        if not same:
            raise SystemExit("the two runs differ")


if __name__ == "__main__":
    main()
