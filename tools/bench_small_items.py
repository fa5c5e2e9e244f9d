"""Replay buffers of small observations: sample(256) against SB3, by small-array storage and thread rule.

SAC, TD3 and DQN default to ``buffer_size=1_000_000``; on a vector env (Pendulum: 12-byte
float32 observations, a 1-dim float action) a batch is a few KB. This fills SB3's
``ReplayBuffer`` and ours (the default, which keeps SB3's small arrays raw for float actions at
this size; ``small_arrays="compressed"``, what the default was for every buffer of 1M transitions
before; ``compression_method="none"``, observations in raw chunks) with the same transitions
and times ``sample(256)`` in one process, interleaving the buffers and the two thread rules
(``chunkstore.native.PARALLEL_MIN_BYTES``: 0, every read of 64 items or more wakes a helper;
the default, reads of fewer bytes stay on the caller) over several rounds, and reports medians
and ratios to SB3 measured in the same run.
``--obs-dim 17 --act-dim 6`` is HalfCheetah's shape.

Examples
--------
    .venv/bin/python tools/bench_small_items.py --out results/bench_small_items.json
    .venv/bin/python tools/bench_small_items.py --rows 2000 --rounds 3      # quick
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, save_results

ensure_importable()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=1_000_000, help="buffer_size (SAC's default)")
    parser.add_argument("--rows", type=int, default=100_000, help="transitions added before sampling")
    parser.add_argument("--obs-dim", type=int, default=3, help="float32 observation size (Pendulum: 3)")
    parser.add_argument("--act-dim", type=int, default=1, help="float32 action size (Pendulum: 1)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (medians are reported)")
    parser.add_argument("--samples", type=int, default=100, help="samples timed per round")
    parser.add_argument("--out", default=None, help="JSON file (a .md table is written beside it)")
    args = parser.parse_args(argv)

    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from chunkstore import native
    from sb3_integration import CompressedReplayBuffer

    obs_space = spaces.Box(-8, 8, (args.obs_dim,), np.float32)
    act_space = spaces.Box(-2, 2, (args.act_dim,), np.float32)
    buffers = {
        "SB3 ReplayBuffer": ReplayBuffer(args.capacity, obs_space, act_space, "cpu"),
        "ours, default": CompressedReplayBuffer(args.capacity, obs_space, act_space, "cpu"),
        "ours, small_arrays=compressed": CompressedReplayBuffer(args.capacity, obs_space, act_space, "cpu",
                                                                small_arrays="compressed"),
        "ours, compression_method=none": CompressedReplayBuffer(args.capacity, obs_space, act_space, "cpu",
                                                                compression_method="none"),
    }
    rng = np.random.default_rng(0)
    for _ in range(args.rows):
        obs = rng.standard_normal((1, args.obs_dim)).astype(np.float32)
        act = rng.standard_normal((1, args.act_dim)).astype(np.float32)
        for buf in buffers.values():
            buf.add(obs, obs + 1, act, np.ones(1, np.float32), np.zeros(1, bool), [{}])
    rules = {"helper from 64 items (PARALLEL_MIN_BYTES=0)": 0,
             f"default (PARALLEL_MIN_BYTES={native.PARALLEL_MIN_BYTES})": native.PARALLEL_MIN_BYTES}
    default_rule = native.PARALLEL_MIN_BYTES
    times: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(args.rounds):
            for rule, min_bytes in rules.items():
                native.PARALLEL_MIN_BYTES = min_bytes
                for name, buf in buffers.items():
                    if name.startswith("SB3") and min_bytes != default_rule:
                        continue  # SB3's buffer has no threads: timed once per round
                    buf.sample(args.batch)
                    start = time.perf_counter()
                    for _ in range(args.samples):
                        buf.sample(args.batch)
                    times.setdefault((name, rule), []).append((time.perf_counter() - start) / args.samples)
    finally:
        native.PARALLEL_MIN_BYTES = default_rule
    base = float(np.median(next(v for (n, _), v in times.items() if n.startswith("SB3"))))
    rows = [{"buffer": name, "threads rule": "-" if name.startswith("SB3") else rule,
             "sample_us": float(np.median(v)) * 1e6, "vs_sb3": float(np.median(v)) / base}
            for (name, rule), v in times.items()]
    table = md_table(rows, [("buffer", "buffer"), ("threads rule", "reads"),
                            ("sample_us", f"sample({args.batch}) µs, median"), ("vs_sb3", "/ SB3 (same run)")])
    default_small = buffers["ours, default"].small_arrays
    title = (f"({args.obs_dim},) float32 observations, ({args.act_dim},) float32 actions, buffer_size "
             f"{args.capacity:,} (the default keeps small arrays {default_small}), {args.rows:,} "
             f"transitions, {args.rounds} interleaved rounds of {args.samples} samples")
    print(title)
    print(table)
    payload = {"config": vars(args), "rows": rows, "raw_seconds": {f"{n} | {r}": v for (n, r), v in times.items()}}
    save_results(args.out, payload, f"{title}\n\n{table}")
    return payload


if __name__ == "__main__":
    main()
