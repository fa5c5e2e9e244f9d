"""Bytes a replay buffer holds against the bytes it reports, counted by tracemalloc (issue 18, part 2).

For each game and configuration, in a fresh process: a warm-up buffer loads
everything that is loaded once per process (numba and its kernels, zstd
contexts, the read path's scratch buffers); then, under ``tracemalloc``, a
buffer of each capacity is filled to a lap and a quarter with real Atari
transitions (so its ring has wrapped, released and recycled), sampled once with
each batch size, and measured: the bytes tracemalloc counts as allocated since
the buffer was made (numpy reports its data buffers to tracemalloc, so segments,
chunk buffers and tables are in it, as is every Python object) against the
buffer's own ``nbytes_held`` (what ``storage_info()["_totals"]["nbytes_held"]``
reports) and ``nbytes_stored``. The marginal cost of a transition between the
two capacities cancels everything a buffer holds once (output blocks, scratch).

Also counted: the marginal number of allocated *blocks* (Python objects and numpy
buffers) per 1000 sealed chunks: zero when no chunk has a Python object of its own.

Examples
--------
    .venv/bin/python tools/bench_held.py --out results/bench_held.json
    .venv/bin/python tools/bench_held.py --games Pong --capacities 20000 40000    # quick
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ensure_importable, md_table, parse_kwargs, run_fresh, save_results

ensure_importable()

CONFIGS = ["default", "preset=compact"]


def _fill(buf: Any, tr: Any, n: int) -> None:
    actions = tr.actions.reshape(len(tr), 1, 1)
    for a in range(n):
        t = a % len(tr)
        buf.add(tr.obs[t], tr.next_obs[t], actions[t], tr.rewards[t], tr.dones[t], tr.infos[t])


def _sealed_chunks(buf: Any) -> int:
    return sum(fs.frames.nchunks for fs in buf.frame_stores.values() if fs.frames is not None)


def child(cfg: dict[str, Any]) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from atari_data import collect_stacked

    from sb3_integration import CompressedReplayBuffer

    torch.set_num_threads(1)
    tr = collect_stacked(cfg["game"], cfg["collect_steps"], 1, cfg["seed"], cfg.get("cache_dir"))
    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    act_space = gym.spaces.Discrete(int(tr.actions.max()) + 1)
    options = parse_kwargs(cfg["config"])

    def make(cap: int) -> Any:
        return CompressedReplayBuffer(cap, obs_space, act_space, "cpu", **options)

    warm = make(2000)  # numba, kernels, codec contexts, scratch: loaded once per process
    _fill(warm, tr, 3000)
    for batch in (32, 256):
        warm.sample(batch)
    warm.close()
    del warm
    gc.collect()
    tracemalloc.start()
    rows = []
    for cap in cfg["capacities"]:
        gc.collect()
        before_bytes = tracemalloc.get_traced_memory()[0]
        before_blocks = _blocks()
        buf = make(cap)
        _fill(buf, tr, cap + cap // 4)
        for batch in (32, 256):
            buf.sample(batch)
        gc.collect()
        totals = buf.storage_info()["_totals"]
        info = buf.storage_info()["observations"]
        rows.append({
            "capacity": cap,
            "traced_bytes": tracemalloc.get_traced_memory()[0] - before_bytes,
            "traced_blocks": _blocks() - before_blocks,
            "nbytes_held": totals["nbytes_held"],
            "nbytes_stored": totals["nbytes_stored"],
            "small_arrays": totals["other_arrays_nbytes"],
            "held": info["held"],
            "sealed_chunks": _sealed_chunks(buf),
            "tier": buf.frame_stores[None].frames.tier.info(),
        })
        buf.close()
        del buf
    tracemalloc.stop()
    return {"rows": rows}


def _blocks() -> int:
    return sum(stat.count for stat in tracemalloc.take_snapshot().statistics("filename"))


def summarize(game: str, config: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    small, big = rows[0], rows[-1]
    n = big["capacity"] - small["capacity"]

    def per(key: str) -> float:
        return (big[key] - small[key]) / n

    held_obs = per("traced_bytes") - per("small_arrays")
    return {
        "game": game, "config": config, "capacities": f"{small['capacity']:,} -> {big['capacity']:,}",
        "traced_per_transition": per("traced_bytes"),
        "reported_held_per_transition": per("nbytes_held"),
        "traced_vs_reported": per("traced_bytes") / per("nbytes_held"),
        "traced_obs_per_transition": held_obs,
        "stored_per_transition": per("nbytes_stored"),
        "held_at_big_per_transition": (big["nbytes_held"] - big["small_arrays"]) / big["capacity"],
        "blocks_per_1000_chunks": 1000 * (big["traced_blocks"] - small["traced_blocks"])
        / max(1, big["sealed_chunks"] - small["sealed_chunks"]),
        "tier_slack_at_big": big["tier"]["nbytes"] - big["tier"]["used_nbytes"],
        "segments_at_big": big["tier"]["nsegments"],
    }


COLUMNS = [("game", "game"), ("config", "config"), ("capacities", "capacities"),
           ("traced_per_transition", "tracemalloc B/transition"),
           ("reported_held_per_transition", "reported held B/transition"),
           ("traced_vs_reported", "tracemalloc / reported"),
           ("traced_obs_per_transition", "tracemalloc B/transition, observations"),
           ("stored_per_transition", "nbytes_stored B/transition"),
           ("blocks_per_1000_chunks", "allocated blocks per 1000 chunks"),
           ("segments_at_big", "segments"), ("tier_slack_at_big", "tier slack bytes")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", nargs="+", default=["MsPacman", "Pong"])
    p.add_argument("--configs", nargs="+", default=CONFIGS)
    p.add_argument("--capacities", nargs=2, type=int, default=[50_000, 100_000])
    p.add_argument("--collect-steps", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--out", default=None, help="JSON path (a .md is written beside it)")
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)  # child mode
    args = p.parse_args(argv)
    if args.config:
        print(json.dumps(child(json.loads(args.config)), default=str))
        return 0
    rows, raw = [], []
    for game in args.games:
        for config in args.configs:
            cfg = {"game": game, "config": config, "capacities": args.capacities,
                   "collect_steps": args.collect_steps, "seed": args.seed, "cache_dir": args.cache_dir}
            res = run_fresh(__file__, cfg, timeout=args.timeout)
            if "error" in res:
                print(f"{game} {config}: {res['error']}", file=sys.stderr)
                continue
            raw.append({"game": game, "config": config, **res})
            rows.append(summarize(game, config, res["rows"]))
            print(md_table(rows[-1:], COLUMNS), file=sys.stderr)
    md = "### Held bytes: tracemalloc against the buffer's report (marginal per transition)\n\n" + \
        md_table(rows, COLUMNS) + "\n"
    print(md)
    save_results(args.out, {"args": vars(args), "rows": rows, "raw": raw}, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
