"""SAC on pixels with a compressed replay buffer, against SB3's ReplayBuffer.

    .venv/bin/python examples/sac_pixels.py            # about a minute on a 2-core CPU
    .venv/bin/python examples/sac_pixels.py --steps 20000 --no-compare

The task is ``PixelPendulum`` (``pixel_pendulum.py``: Pendulum-v1 seen as a
64x64 image, 3 frames stacked, no display needed). SAC's ``CnnPolicy`` trains on
it twice with the same seed, once with SB3's ``ReplayBuffer`` and once with
``CompressedReplayBuffer``; the two runs end with identical parameters, and the
compressed buffer holds each distinct frame once, compressed.
"""

from __future__ import annotations

import argparse
import time

import torch as th
from pixel_pendulum import make_pixel_pendulum
from stable_baselines3 import SAC
from stable_baselines3.common.buffers import ReplayBuffer

from sb3_integration import CompressedReplayBuffer


def train(buffer_class: type, args: argparse.Namespace) -> tuple[SAC, float]:
    model = SAC("CnnPolicy", make_pixel_pendulum(seed=args.seed), buffer_size=args.buffer_size,
                learning_starts=args.learning_starts, batch_size=64, train_freq=args.train_freq,
                policy_kwargs={"net_arch": [64, 64]}, replay_buffer_class=buffer_class, seed=args.seed,
                device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(args.steps)
    return model, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--learning-starts", type=int, default=300)
    p.add_argument("--train-freq", type=int, default=4)
    p.add_argument("--buffer-size", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-compare", dest="compare", action="store_false", help="skip the SB3 run")
    args = p.parse_args()
    th.set_num_threads(1)  # small nets on a busy CPU; both runs share the setting

    ours, t_ours = train(CompressedReplayBuffer, args)
    buf = ours.replay_buffer
    n = buf.size() * buf.n_envs
    raw = buf.nbytes_raw / (buf.buffer_size * buf.n_envs) * n  # what SB3's arrays hold for these rows
    print(f"SAC CnnPolicy on PixelPendulum {buf.observation_space.shape}, {args.steps} steps: {t_ours:.1f} s")
    print(f"  transitions stored      {n:,}")
    print(f"  SB3 would hold          {raw / 1e6:,.1f} MB (obs + next_obs; {buf.nbytes_raw / 1e9:,.2f} GB allocated)")
    print(f"  chunkstore holds        {buf.nbytes_stored / 1e6:,.2f} MB "
          f"({buf.nbytes_stored / max(n, 1):,.0f} B/transition)")
    if args.compare:
        ref, t_ref = train(ReplayBuffer, args)
        same = all(th.equal(a, b) for a, b in zip(ref.policy.state_dict().values(),
                                                   ours.policy.state_dict().values(), strict=True))
        print(f"  SB3 ReplayBuffer run    {t_ref:.1f} s")
        print(f"  identical parameters    {same}")
        if not same:
            raise SystemExit("the two runs differ")


if __name__ == "__main__":
    main()
