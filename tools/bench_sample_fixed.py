"""sample(32) / sample(256) of compressed image observations against SB3's ReplayBuffer (issue 38 item 2).

Two observation kinds, both stored compressed (our ``CompressedReplayBuffer``, its defaults,
prefetch off): Atari frame stacks ``(4, 84, 84)`` uint8 (real Pong frames through SB3's
``AtariWrapper`` + ``VecFrameStack``, ``tools/atari_data.py``) and RGB camera stacks
``(9, 84, 84)`` uint8 (three stacked 84x84 RGB frames, DrQ style: ALE's raw RGB screens resized
to 84x84 with OpenCV's area interpolation, stacked channel-first with zero padding after a
reset). A child process fills SB3's ``ReplayBuffer`` (``optimize_memory_usage=False`` and
``True``) and ours with the same transitions and times ``sample(32)`` and ``sample(256)`` in
interleaved blocks of 10 calls (the order flipping each block), >= 3 rounds; the table gives
the median per-call time of each, ours / SB3 and the microseconds per call over SB3's (the
fixed cost the issue is about, at batch 32).

``--game`` picks the Atari game (Pong by default, the game of the earlier runs). ``--gap-ms``
sleeps before each timed call, as a learner's step that releases the GIL would: caches, the CPU
and the decode's helper thread go cold between calls, which back-to-back calls never show.

Each glibc setting (``tools/_bench_common.py``'s ``GLIBC``: its defaults, and ``spared``, where
glibc reuses freed memory so SB3's fresh batch arrays cost no page faults) runs in its own fresh
child (``run_fresh``). ``--before PATH`` runs the same children with ``PYTHONPATH=PATH`` (a
checkout of the code before a change), alternating with this checkout's.

Examples
--------
    .venv/bin/python tools/bench_sample_fixed.py --out results/bench_sample_fixed.json
    .venv/bin/python tools/bench_sample_fixed.py --before /tmp/before --rounds 3 --samples 40   # quick
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import GLIBC, ensure_importable, md_table, run_fresh, save_results

ensure_importable()

KINDS = ("Atari (4,84,84)", "RGB (9,84,84)")
BATCHES = (32, 256)
ARMS = ("sb3", "sb3_omu", "ours")
#: sample() calls timed together, the arms alternating block by block
BLOCK = 10


def _rgb_transitions(game: str, n: int, cache_dir: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(obs, next_obs, dones) of 3-frame RGB stacks (9, 84, 84) from ALE screens resized to 84x84."""
    import cv2
    from atari_data import collect_frames

    raw = collect_frames(game, n + 1, seed=0, raw_rgb=True, cache_dir=cache_dir)
    small = np.stack([cv2.resize(f, (84, 84), interpolation=cv2.INTER_AREA) for f in raw]).transpose(0, 3, 1, 2)
    dones = np.zeros(n, bool)
    dones[np.arange(n) % 250 == 249] = True  # episodes of 250 steps: stacks padded after each reset
    stacks = np.zeros((n + 1, 9, 84, 84), np.uint8)
    start = 0
    for t in range(n + 1):
        for j in range(3):  # frame j of the stack: the step t - 2 + j, zeros before the episode's start
            s = t - 2 + j
            if s >= start:
                stacks[t, 3 * j:3 * j + 3] = small[s]
        if t < n and dones[t]:
            start = t + 1
    obs = stacks[:-1].copy()
    nxt = stacks[1:].copy()
    for t in np.flatnonzero(dones):  # SB3 stores the terminal observation, not the reset's
        nxt[t] = np.concatenate((stacks[t, 3:], small[t + 1]))
    return obs, nxt, dones


def _data(kind: str, rows: int, cache_dir: str | None, game: str = "Pong") -> dict[str, Any]:
    from atari_data import collect_stacked

    rng = np.random.default_rng(0)
    if kind.startswith("Atari"):
        tr = collect_stacked(game, rows, seed=0, cache_dir=cache_dir)
        return {"obs": tr.obs[:, 0], "next_obs": tr.next_obs[:, 0], "dones": tr.dones[:, 0].astype(bool),
                "actions": tr.actions[:, 0].reshape(rows, -1), "rewards": tr.rewards[:, 0].astype(np.float32)}
    obs, nxt, dones = _rgb_transitions(game, rows, cache_dir)
    return {"obs": obs, "next_obs": nxt, "dones": dones,
            "actions": rng.uniform(-1, 1, (rows, 6)).astype(np.float32),
            "rewards": rng.standard_normal(rows).astype(np.float32)}


def child(cfg: dict[str, Any]) -> dict[str, Any]:
    """One process: each kind, SB3's two buffers against ours, interleaved; the medians per call."""
    import torch as th
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from sb3_integration import CompressedReplayBuffer

    th.set_num_threads(1)
    out: dict[str, Any] = {"glibc_env": {k: os.environ.get(k) for k in GLIBC["spared"]}}
    for kind in KINDS:
        d = _data(kind, cfg["rows"], cfg.get("cache_dir"), cfg.get("game", "Pong"))
        obs_space = spaces.Box(0, 255, d["obs"].shape[1:], np.uint8)
        act_space = spaces.Discrete(6) if kind.startswith("Atari") else spaces.Box(-1, 1, (6,), np.float32)
        cap = cfg["capacity"]
        bufs = {"sb3": ReplayBuffer(cap, obs_space, act_space, "cpu"),
                "sb3_omu": ReplayBuffer(cap, obs_space, act_space, "cpu", optimize_memory_usage=True,
                                        handle_timeout_termination=False),
                "ours": CompressedReplayBuffer(cap, obs_space, act_space, "cpu")}
        infos = [{"TimeLimit.truncated": False}]
        for t in range(cfg["rows"]):
            for buf in bufs.values():
                buf.add(d["obs"][t][None], d["next_obs"][t][None], d["actions"][t][None], d["rewards"][t:t + 1],
                        d["dones"][t:t + 1], infos)
        del d
        gc.collect()
        times: dict[tuple[str, int], list[float]] = {}
        order = list(bufs.items())
        for _ in range(cfg["rounds"]):
            for batch in BATCHES:
                for buf in bufs.values():
                    for _ in range(5):
                        buf.sample(batch)
                gap = cfg.get("gap_ms", 0) / 1000
                for block in range(cfg["samples"] * (4 if batch == 32 else 1) // BLOCK):
                    for name, buf in order[::-1] if block % 2 else order:
                        if gap:  # each call after a pause: a learner's step, caches and threads gone cold
                            spent = 0.0
                            for _ in range(BLOCK):
                                time.sleep(gap)
                                t0 = time.perf_counter()
                                buf.sample(batch)
                                spent += time.perf_counter() - t0
                            times.setdefault((name, batch), []).append(spent / BLOCK)
                            continue
                        t0 = time.perf_counter()
                        for _ in range(BLOCK):
                            buf.sample(batch)
                        times.setdefault((name, batch), []).append((time.perf_counter() - t0) / BLOCK)
        for batch in BATCHES:
            med = {name: statistics.median(times[(name, batch)]) * 1e6 for name in ARMS}
            out[f"{kind}|{batch}"] = {**{f"{n}_us": v for n, v in med.items()},
                                      "ratio": med["ours"] / med["sb3"], "ratio_omu": med["ours"] / med["sb3_omu"],
                                      "over_us": med["ours"] - med["sb3"], "over_omu_us": med["ours"] - med["sb3_omu"]}
        bufs["ours"].close()
        del bufs, order
        gc.collect()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=100_000, help="buffer_size (SB3's DQN default: 1M)")
    parser.add_argument("--rows", type=int, default=1500, help="transitions stored before sampling")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per child (medians)")
    parser.add_argument("--samples", type=int, default=60, help="sample(256) calls per round (x4 for sample(32))")
    parser.add_argument("--glibc", nargs="+", default=list(GLIBC), choices=list(GLIBC))
    parser.add_argument("--before", default=None, help="PYTHONPATH of the code before the change (a checkout)")
    parser.add_argument("--cache-dir", default=None, help="tools/atari_data.py's cache (default ./data)")
    parser.add_argument("--game", default="Pong", help="the Atari game of both kinds' frames")
    parser.add_argument("--gap-ms", type=float, default=0.0,
                        help="sleep before each timed call (a learner step that releases the GIL): 0, back to back")
    parser.add_argument("--out", default=None, help="JSON file (a .md table is written beside it)")
    parser.add_argument("--config", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.config is not None:
        print(json.dumps(child(json.loads(args.config))))
        return {}

    cfg = {"capacity": args.capacity, "rows": args.rows, "rounds": args.rounds, "samples": args.samples,
           "cache_dir": args.cache_dir, "game": args.game, "gap_ms": args.gap_ms}
    versions = {"after": None, **({"before": args.before} if args.before else {})}
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for glibc in args.glibc:
        for version, path in versions.items():
            print(f"child: glibc {glibc}, {version}", file=sys.stderr, flush=True)
            old = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = path or str(Path(__file__).resolve().parent.parent)
            try:
                res = run_fresh(Path(__file__).resolve(), cfg, timeout=3600, glibc=glibc)
            finally:
                os.environ.pop("PYTHONPATH") if old is None else os.environ.__setitem__("PYTHONPATH", old)
            if "error" in res:
                raise RuntimeError(f"child ({glibc}, {version}) failed: {res['error']}")
            runs[(glibc, version)] = res

    rows = []
    for glibc in args.glibc:
        for kind in KINDS:
            for batch in BATCHES:
                row: dict[str, Any] = {"glibc": glibc, "kind": kind, "batch": batch}
                for version in versions:
                    r = runs[(glibc, version)][f"{kind}|{batch}"]
                    row.update({f"{version}_{k}": v for k, v in r.items()})
                rows.append(row)
    cols: list[Any] = [("glibc", "glibc"), ("kind", "observations"), ("batch", "batch")]
    for v in versions:
        cols += [(f"{v}_sb3_us", f"SB3 µs ({v} run)"), (f"{v}_sb3_omu_us", f"SB3 omu µs ({v} run)"),
                 (f"{v}_ours_us", f"ours µs ({v})"), (f"{v}_ratio", f"ours/SB3 ({v})"),
                 (f"{v}_ratio_omu", f"ours/SB3 omu ({v})")]
    over = [{"glibc": r["glibc"], "kind": r["kind"], **{f"{v}_over": r[f"{v}_over_us"] for v in versions},
             **{f"{v}_over_omu": r[f"{v}_over_omu_us"] for v in versions}} for r in rows if r["batch"] == 32]
    over_cols: list[Any] = ["glibc", ("kind", "observations")]
    for v in versions:
        over_cols += [(f"{v}_over", f"µs over SB3 ({v})"), (f"{v}_over_omu", f"µs over SB3 omu ({v})")]
    md = ["## sample() of compressed image observations: ours / SB3's ReplayBuffer (same process, interleaved)",
          "", f"{args.game} frames; capacity {args.capacity:,}, {args.rows:,} transitions stored, "
          f"{args.rounds} rounds per child, "
          + (f"each call after a {args.gap_ms:g} ms sleep, " if args.gap_ms else "calls back to back, ")
          + "prefetch off, medians per call; `omu`: SB3 with `optimize_memory_usage=True`. glibc `spared`: "
          "`MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=17179869184`.", "",
          md_table(rows, cols), "", "## Cost per call over SB3's at batch 32", "", md_table(over, over_cols)]
    print("\n".join(md))
    payload = {"config": {**cfg, "before": args.before, "glibc": args.glibc}, "rows": rows,
               "runs": {f"{g}|{v}": r for (g, v), r in runs.items()}}
    save_results(args.out, payload, "\n".join(md))
    return payload


if __name__ == "__main__":
    main()
