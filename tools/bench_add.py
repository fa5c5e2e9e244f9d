"""Single-transition ``add()`` cost on real MsPacman stacks: SB3 (both layouts) against ours, in one process.

    python tools/bench_add.py [--rounds 9] [--block 1000] [--capacity 10000] [--cpu] [--encode-free] \
        [--out results/bench_add.json]

Real frames: ``collect_stacked`` from ``tools/atari_data.py`` (SB3's own Atari pipeline, a
uniformly random policy, (4, 84, 84) uint8, 1 env; cached under ``./data``). Each arm is a
buffer of ``--capacity`` rows, filled once before timing (steady state: every page touched,
ours past its first chunk and wrapping), then timed in blocks of ``--block`` adds, the arms
alternated within a round and their order rotated between rounds. The figures are the
median over rounds of each arm's µs per add and of its ratio to SB3 with
``optimize_memory_usage=True`` in the same round (the machine is shared and noisy: compare
the ratios). Arms: SB3 ``ReplayBuffer`` (``optimize_memory_usage`` False and True) and
``CompressedReplayBuffer`` with its defaults. ``--encode-free`` adds a diagnostic arm: ours
with its codec's ``encode`` replaced, after the warm-up fill, by one that returns the same stored
blob for every chunk (what an add costs without the compression; that buffer's contents are
garbage, it is never read).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))


def _arms(capacity: int, encode_free: bool = False) -> dict[str, Any]:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from sb3_integration import CompressedReplayBuffer

    obs_space, act_space = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(9)
    return {
        "SB3 opt=False": ReplayBuffer(capacity, obs_space, act_space, "cpu"),
        "SB3 opt=True": ReplayBuffer(capacity, obs_space, act_space, "cpu", optimize_memory_usage=True,
                                     handle_timeout_termination=False),
        "ours (default)": CompressedReplayBuffer(capacity, obs_space, act_space, "cpu"),
        **({"ours, encode free (diagnostic)": CompressedReplayBuffer(capacity, obs_space, act_space, "cpu")}
           if encode_free else {}),
    }


def _adds(buf: Any, tr: Any, start: int, n: int, clock: Any = time.perf_counter) -> float:
    """Seconds per ``add()`` over ``n`` transitions from ``start`` (cycled), by ``clock``."""
    m = len(tr)
    t0 = clock()
    for i in range(start, start + n):
        t = i % m
        buf.add(tr.obs[t], tr.next_obs[t], tr.actions[t], tr.rewards[t], tr.dones[t], tr.infos[t])
    return (clock() - t0) / n


def _encode_free(buf: Any, tr: Any) -> None:
    """``buf``'s frame codec encodes nothing from now on: every chunk is stored as one blob
    encoded once here (a real chunk's bytes, so the tier stores what it would)."""
    (store,) = buf.frame_stores.values()
    codec = store.frames.codec
    blob = codec.encode(np.ascontiguousarray(tr.obs[:store.chunk_len, 0, -1]))
    codec.encode = lambda raw: blob  # the instance only: the other arms keep theirs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--game", default="MsPacman")
    p.add_argument("--steps", type=int, default=3000, help="real transitions collected, then cycled")
    p.add_argument("--capacity", type=int, default=10_000)
    p.add_argument("--block", type=int, default=1000, help="adds per arm per round")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--cpu", action="store_true",
                   help="time with the calling thread's CPU time (time.thread_time) instead of wall time: "
                        "steadier on a shared machine (add() runs on the calling thread only)")
    p.add_argument("--encode-free", action="store_true",
                   help="add a diagnostic arm: ours with every chunk's encode replaced by a stored blob")
    args = p.parse_args(argv)
    clock = time.thread_time if args.cpu else time.perf_counter

    import torch as th
    from atari_data import collect_stacked

    th.set_num_threads(1)
    tr = collect_stacked(args.game, args.steps, n_envs=1, seed=0)
    arms = _arms(args.capacity, args.encode_free)
    cursor = dict.fromkeys(arms, 0)
    for name, buf in arms.items():  # warm-up: fill once, so every arm is timed at steady state
        _adds(buf, tr, 0, args.capacity + 1)
        cursor[name] = args.capacity + 1
    if args.encode_free:  # after the fill: the codec is trained by then (training replaces it)
        _encode_free(arms["ours, encode free (diagnostic)"], tr)
    names = list(arms)
    per: dict[str, list[float]] = {n: [] for n in names}
    ratio: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        got = {}
        for name in order:
            got[name] = _adds(arms[name], tr, cursor[name], args.block, clock)
            cursor[name] += args.block
        for name in names:
            per[name].append(got[name] * 1e6)
            ratio[name].append(got[name] / got["SB3 opt=True"])
    rows = [{"arm": n, "add_us": float(np.median(per[n])), "vs_sb3_opt_true": float(np.median(ratio[n])),
             "add_us_rounds": per[n], "ratio_rounds": ratio[n]} for n in names]
    lines = [f"add() per call, {args.game} (4, 84, 84) uint8, 1 env, capacity {args.capacity}, "
             f"{args.rounds} rounds x {args.block} adds (medians, {'thread CPU' if args.cpu else 'wall'} time)",
             "| arm | µs / add | / SB3 opt=True |", "|---|---|---|"]
    lines += [f"| {r['arm']} | {r['add_us']:.1f} | {r['vs_sb3_opt_true']:.2f} |" for r in rows]
    print("\n".join(lines))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M:%S"), "game": args.game,
                                        "capacity": args.capacity, "block": args.block, "rounds": args.rounds,
                                        "clock": "thread_time" if args.cpu else "perf_counter",
                                        "frames": "real (atari_data.collect_stacked, random policy, seed 0)",
                                        "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
