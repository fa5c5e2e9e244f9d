"""What add()'s SB3-exact checks cost: add() time of ours against SB3's, per source tree.

    python tools/bench_add_checks.py --out results/bench_add_checks.json [--root OTHER_TREE ...]

For each source tree (this one, and any ``--root``: e.g. an export of an older
commit), a fresh process fills SB3's buffer and ours with the same Atari-shaped
frame stacks ((4, 84, 84) uint8, replay n_envs 1; rollout n_envs 8) and times
``add()`` in interleaved blocks; the figure is the median over blocks of ours / SB3
(the machine is noisy: compare the ratios, not the microseconds). Rows: the
observations arrive exactly as stored (uint8: the fast path) or as int64 (the
checked-and-cast path).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
import numpy as np, torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer, RolloutBuffer
import sb3_integration
from sb3_integration import CompressedReplayBuffer, CompressedRolloutBuffer

th.set_num_threads(1)
rng = np.random.default_rng(0)
space, act = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6)

def stream(n_envs, T):
    stack = np.zeros((n_envs, 4, 84, 84), np.uint8)
    for t in range(T):
        nxt = np.roll(stack, -1, axis=1)
        nxt[:, -1] = rng.integers(0, 64, (n_envs, 84, 84), dtype=np.uint8)
        yield stack, nxt
        stack = nxt

def replay_args(cast, T):
    for obs, nxt in stream(1, T):
        o, n = (obs.astype(np.int64), nxt.astype(np.int64)) if cast else (obs, nxt)
        yield o, n, np.array([1]), np.array([0.5], np.float32), np.array([False]), [{}]

def rollout_args(cast, T):
    for obs, _ in stream(8, T):
        yield (obs.astype(np.int64) if cast else obs, np.arange(8), np.ones(8, np.float32), np.zeros(8, bool),
               th.zeros(8), th.zeros(8))

def per_add(buf, args):
    t0 = time.perf_counter()
    for a in args:
        buf.add(*a)
    return (time.perf_counter() - t0) / len(args)

out = {"sb3_integration": sb3_integration.__file__}
for kind, make, gen, T, blocks in (
        ("replay", lambda c: c(100_000, space, act, "cpu"), replay_args, 400, 9),
        ("rollout", lambda c: c(128, space, act, "cpu", n_envs=8), rollout_args, 128, 9)):
    for cast in (False, True):
        args = list(gen(cast, T))
        ratios, ours_us, sb3_us = [], [], []
        for b in range(blocks):
            times = {}
            for cls in ((ReplayBuffer, CompressedReplayBuffer) if kind == "replay"
                        else (RolloutBuffer, CompressedRolloutBuffer))[:: 1 if b % 2 else -1]:
                buf = make(cls)
                per_add(buf, args[:8])  # warm-up (first chunk, dictionary training not included below)
                buf.reset()
                times[cls.__module__.startswith("sb3_integration")] = per_add(buf, args)
            ratios.append(times[True] / times[False])
            ours_us.append(times[True] * 1e6)
            sb3_us.append(times[False] * 1e6)
        out[f"{kind}, obs {'int64' if cast else 'uint8'}"] = {
            "ours_over_sb3": float(np.median(ratios)), "ours_us": float(np.median(ours_us)),
            "sb3_us": float(np.median(sb3_us))}
print(json.dumps(out))
"""


def run_tree(root: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=1200,
                          cwd=root)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", default=[], help="another source tree to compare")
    parser.add_argument("--rounds", type=int, default=2, help="processes per tree, interleaved")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    trees = [ROOT, *map(Path, args.root)]
    label = {str(t): ("this tree" if t == ROOT else t.name) for t in trees}
    results: dict[str, list[dict]] = {str(t): [] for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            results[str(tree)].append(run_tree(tree))
    table = []
    for tree, runs in results.items():
        for case in [k for k in runs[0] if k != "sb3_integration"]:
            ratios = sorted(r[case]["ours_over_sb3"] for r in runs)
            table.append({"tree": label[tree], "case": case, "ours_over_sb3": ratios[len(ratios) // 2],
                          "runs": [r[case] for r in runs]})
    lines = ["| tree | case | add() ours / SB3 | ours µs | SB3 µs |", "|---|---|---|---|---|"]
    for row in table:  # medians over the runs (processes)
        us = {k: sorted(r[k] for r in row["runs"])[len(row["runs"]) // 2] for k in ("ours_us", "sb3_us")}
        lines.append(f"| {row['tree']} | {row['case']} | {row['ours_over_sb3']:.2f} | {us['ours_us']:.0f} "
                     f"| {us['sb3_us']:.0f} |")
    print("\n".join(lines))
    if args.out:
        args.out.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M:%S"), "rounds": args.rounds,
                                        "rows": table}, indent=1))
        args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
