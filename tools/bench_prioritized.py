"""Prioritized replay: the priority index against cpprb, and a whole prioritized sample (issue 25).

Every arm runs in a fresh process of its own (``run_fresh``), so one arm's memory and
loaded code do not count in another's; each arm runs ``--rounds`` times, the arms of a part
taking turns, and keeps its least time (other processes only ever slow an arm down). Three parts:

1. **The index alone** (``chunkstore.priority.PriorityIndex``) against cpprb's
   ``PrioritizedReplayBuffer`` with one 1-byte field, at each ``--index-capacities``, every slot
   given a priority: ``sample(k)`` + ``update(k)`` latency (k = 32, 256; the minimum over groups
   of the group medians, see ``robust_ms``) and the bytes per slot the process holds for it
   (RSS after minus before, and for the index what tracemalloc counts). The index arm also
   checks its distribution: chi-square of 10^6 stratified draws on a skewed vector.
   The device index (``chunkstore.priority.torch_index``, torch ops) runs the same steps on the
   cpu beside them: the comparison that decides which index the buffers keep.
2. **Whole buffers on real Atari stacks** (Pong, SB3's AtariWrapper + VecFrameStack(4), random
   actions; ``tools/atari_data.py``) at ``--atari-capacity``: this project's prioritized buffer
   (``sample(256)`` alone and with ``update_priorities(256)``), this project's uniform buffer
   (``sample(256)``), and cpprb's ``PrioritizedReplayBuffer`` with ``next_of="obs"`` and
   ``stack_compress="obs"`` (its memory options; stacks channel-last as it requires):
   ``sample(256)`` + ``update_priorities(256)`` and bytes per transition held (RSS).
3. **TorchRL**: whether its prioritized replay buffer runs here (its segment trees are a C++
   extension built against another torch).

Examples
--------
    .venv/bin/python tools/bench_prioritized.py --out results/bench_prioritized.json
    .venv/bin/python tools/bench_prioritized.py --index-capacities 100000 --atari-capacity 20000  # quick
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import (
    ensure_importable,
    env_info,
    md_table,
    robust_ms,
    rss,
    run_fresh,
    save_results,
)

ensure_importable()

BATCHES = (32, 256)


def _timed(fn: Any, n: int) -> dict[str, float]:
    """Wall ms (``robust_ms``) and process CPU ms per call (every thread's CPU time, least over
    10 groups of calls): on a loaded machine the CPU time is the steadier of the two."""
    import time

    wall = robust_ms(fn, n=n)["ms"]
    per, best = max(1, n // 10), float("inf")
    for _ in range(10):
        t0 = time.process_time()
        for _ in range(per):
            fn()
        best = min(best, (time.process_time() - t0) / per)
    return {"ms": wall, "cpu_ms": best * 1e3}


# -- part 1: the index alone ---------------------------------------------------------------
def _index_arm(cfg: dict[str, Any]) -> dict[str, Any]:
    from chunkstore.priority import PriorityIndex

    cap, rng = cfg["capacity"], np.random.default_rng(0)
    warm = PriorityIndex(1000)  # numba kernels loaded before the baseline
    warm.set(np.arange(1000))
    s, _, g = warm.sample(256)
    warm.update(s, np.ones(256), g)
    del warm
    gc.collect()
    before = rss()
    tracemalloc.start()
    ix = PriorityIndex(cap)
    for lo in range(0, cap, 1 << 20):  # every slot gets a priority, a million at a time
        hi = min(cap, lo + (1 << 20))
        ix.set(np.arange(lo, hi), rng.random(hi - lo) * 10)
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    held = rss() - before
    out: dict[str, Any] = {"rss_per_slot": held / cap, "traced_per_slot": traced / cap,
                           "nbytes_per_slot": ix.nbytes / cap}
    for k in BATCHES:
        new = rng.random(k) * 10

        def step(k: int = k, new: np.ndarray = new) -> None:
            slots, _, gens = ix.sample(k)
            ix.update(slots, new, gens)

        t = _timed(step, cfg["reps"])
        out[f"ms_{k}"], out[f"cpu_ms_{k}"] = t["ms"], t["cpu_ms"]
    out["chi2"] = _chi_square()
    return out


def _chi_square() -> dict[str, float]:
    """10^6 draws on a skewed vector against p^alpha / sum: independent draws (chi-square, scipy's
    p-value) and stratified ones (the largest deviation from the expected count per sample; at
    most 2 when exact)."""
    from chunkstore.priority import PriorityIndex

    try:
        from scipy import stats
    except ImportError:  # the statistic without its p-value
        stats = None

    rng = np.random.default_rng(1)
    n = 1000
    mass = np.exp(rng.uniform(np.log(1e-6), np.log(10.0), n)) ** 0.6
    ix = PriorityIndex(n)
    ix.set(np.arange(n), mass)
    out: dict[str, float] = {}
    for stratified in (False, True):
        counts = np.zeros(n)
        for _ in range(4):
            counts += np.bincount(ix.sample(250_000, rng, stratified=stratified)[0], minlength=n)
        expected = mass / mass.sum() * counts.sum()
        if stratified:
            out["stratified_max_deviation_per_sample"] = float(np.abs(counts - expected).max() / 4)
            continue
        keep = expected >= 5
        obs = np.r_[counts[keep], counts[~keep].sum()]
        exp = np.r_[expected[keep], expected[~keep].sum()]
        chi2 = float(((obs - exp) ** 2 / exp).sum())
        p = float(stats.chi2.sf(chi2, len(obs) - 1)) if stats is not None else float("nan")
        out.update(chi2=chi2, dof=len(obs) - 1, p_value=p)
    return out


def _cpprb_index_arm(cfg: dict[str, Any]) -> dict[str, Any]:
    import cpprb

    cap, rng = cfg["capacity"], np.random.default_rng(0)
    warm = cpprb.PrioritizedReplayBuffer(1000, {"x": {"dtype": np.uint8}})
    warm.add(x=np.zeros(10, np.uint8), priorities=np.ones(10))
    del warm
    gc.collect()
    before = rss()
    rb = cpprb.PrioritizedReplayBuffer(cap, {"x": {"dtype": np.uint8}}, alpha=0.6)
    for lo in range(0, cap, 1 << 20):
        hi = min(cap, lo + (1 << 20))
        rb.add(x=np.zeros(hi - lo, np.uint8), priorities=rng.random(hi - lo) * 10)
    held = rss() - before
    out: dict[str, Any] = {"rss_per_slot": held / cap,
                           "version": cpprb.__version__ if hasattr(cpprb, "__version__") else _dist_version("cpprb")}
    for k in BATCHES:
        new = rng.random(k) * 10

        def step(k: int = k, new: np.ndarray = new) -> None:
            s = rb.sample(k, beta=0.4)
            rb.update_priorities(s["indexes"], new)

        t = _timed(step, cfg["reps"])
        out[f"ms_{k}"], out[f"cpu_ms_{k}"] = t["ms"], t["cpu_ms"]
    return out


def _torch_index_arm(cfg: dict[str, Any]) -> dict[str, Any]:
    """The device index (torch ops) on the cpu: what the host index is compared with."""
    import torch

    from chunkstore.priority.torch_index import TorchPriorityIndex

    torch.set_num_threads(1)
    cap = cfg["capacity"]
    before = rss()
    ix = TorchPriorityIndex(cap)
    for lo in range(0, cap, 1 << 20):
        hi = min(cap, lo + (1 << 20))
        ix.set(torch.arange(lo, hi), torch.rand(hi - lo, dtype=torch.float64) * 10)
    tensors = (ix.masses, ix.generations, ix.block_sums, ix.block_mins)
    out: dict[str, Any] = {"rss_per_slot": (rss() - before) / cap,
                           "nbytes_per_slot": sum(t.numel() * t.element_size() for t in tensors) / cap}
    for k in BATCHES:
        new = torch.rand(k, dtype=torch.float64) * 10

        def step(k: int = k, new: Any = new) -> None:
            slots, _, gens = ix.sample(k)
            ix.update(slots, new, gens)

        t = _timed(step, cfg["reps"])
        out[f"ms_{k}"], out[f"cpu_ms_{k}"] = t["ms"], t["cpu_ms"]
    return out


def _dist_version(name: str) -> str | None:
    import importlib.metadata as md

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


# -- part 2: whole buffers on real Atari stacks ------------------------------------------------
def _atari(cfg: dict[str, Any]) -> Any:
    from atari_data import collect_stacked

    return collect_stacked(cfg["game"], cfg["collect_steps"], 1, 0, cfg.get("cache_dir"))


def _ours_atari_arm(cfg: dict[str, Any]) -> dict[str, Any]:
    import gymnasium as gym
    import torch

    from sb3_integration import CompressedPrioritizedReplayBuffer, CompressedReplayBuffer

    torch.set_num_threads(1)
    tr = _atari(cfg)
    prioritized = cfg["arm"] == "ours_prioritized"
    cls = CompressedPrioritizedReplayBuffer if prioritized else CompressedReplayBuffer
    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    act_space = gym.spaces.Discrete(int(tr.actions.max()) + 1)
    actions = tr.actions.reshape(len(tr), 1, 1)

    def fill(buf: Any, n: int) -> None:
        for a in range(n):
            t = a % len(tr)
            buf.add(tr.obs[t], tr.next_obs[t], actions[t], tr.rewards[t], tr.dones[t], tr.infos[t])

    warm = cls(2000, obs_space, act_space, "cpu")
    fill(warm, 2100)
    warm.sample(256)
    warm.close()
    del warm
    gc.collect()
    cap, rng = cfg["capacity"], np.random.default_rng(0)
    before = rss()
    buf = cls(cap, obs_space, act_space, "cpu")
    t0, c0 = time.perf_counter(), time.process_time()
    fill(buf, cap)
    add_s, add_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    if prioritized:  # every transition gets a priority of its own
        buf.update_priorities(np.arange(cap), rng.exponential(1.0, cap))
    held = rss() - before
    out: dict[str, Any] = {"rss_per_transition": held / cap, "nbytes_held_per_transition": buf.nbytes_held / cap,
                           "add_us": 1e6 * add_s / cap, "add_cpu_us": 1e6 * add_cpu_s / cap}
    np.random.seed(0)  # noqa: NPY002 - SB3's sampling RNG
    t = _timed(lambda: buf.sample(256), cfg["reps"])
    out["sample_ms"], out["sample_cpu_ms"] = t["ms"], t["cpu_ms"]
    if prioritized:
        # the same buffer sampled uniformly (SB3's path of the uniform class), rounds interleaved
        # with prioritized ones: a ratio free of the difference between two processes
        uniform = CompressedReplayBuffer.sample.__get__(buf)
        pri_ms, uni_ms = [], []
        for _ in range(10):
            pri_ms.append(robust_ms(lambda: buf.sample(256), n=max(10, cfg["reps"] // 10), groups=2)["ms"])
            uni_ms.append(robust_ms(lambda: uniform(256), n=max(10, cfg["reps"] // 10), groups=2)["ms"])
        out["same_buffer_prioritized_ms"], out["same_buffer_uniform_ms"] = min(pri_ms), min(uni_ms)
        out["priority_nbytes_per_transition"] = buf.priority_index.nbytes / cap
        td = rng.exponential(1.0, 256)

        def step() -> None:
            s = buf.sample(256)
            buf.update_priorities(s.indices, td)

        t = _timed(step, cfg["reps"])
        out["sample_update_ms"], out["sample_update_cpu_ms"] = t["ms"], t["cpu_ms"]
    return out


def _cpprb_atari_arm(cfg: dict[str, Any]) -> dict[str, Any]:
    import cpprb

    tr = _atari(cfg)
    cap, rng = cfg["capacity"], np.random.default_rng(0)
    obs_cl = np.ascontiguousarray(tr.obs[:, 0].transpose(0, 2, 3, 1))  # (T, 84, 84, 4): stack axis last
    next_cl = np.ascontiguousarray(tr.next_obs[:, 0].transpose(0, 2, 3, 1))
    dones = tr.dones.reshape(len(tr))
    spec = {"obs": {"shape": (84, 84, 4), "dtype": np.uint8}, "act": {"dtype": np.int64},
            "rew": {}, "done": {}}
    warm = cpprb.PrioritizedReplayBuffer(1000, spec, next_of="obs", stack_compress="obs")
    for t in range(300):
        warm.add(obs=obs_cl[t], next_obs=next_cl[t], act=int(tr.actions.reshape(-1)[t]), rew=0.0, done=0.0)
    warm.sample(32)
    del warm
    gc.collect()
    before = rss()
    rb = cpprb.PrioritizedReplayBuffer(cap, spec, next_of="obs", stack_compress="obs", alpha=0.6)
    acts, rews = tr.actions.reshape(-1), tr.rewards.reshape(-1)
    t0, c0 = time.perf_counter(), time.process_time()
    for a in range(cap):
        t = a % len(tr)
        rb.add(obs=obs_cl[t], next_obs=next_cl[t], act=int(acts[t]), rew=float(rews[t]), done=float(dones[t]))
        if dones[t] or t == len(tr) - 1:
            rb.on_episode_end()
    add_s, add_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    rb.update_priorities(np.arange(cap), rng.exponential(1.0, cap))
    held = rss() - before
    td = rng.exponential(1.0, 256)

    def step() -> None:
        s = rb.sample(256, beta=0.4)
        rb.update_priorities(s["indexes"], td)

    t, t2 = _timed(step, cfg["reps"]), _timed(lambda: rb.sample(256, beta=0.4), cfg["reps"])
    return {"rss_per_transition": held / cap, "sample_update_ms": t["ms"], "sample_update_cpu_ms": t["cpu_ms"],
            "sample_ms": t2["ms"], "sample_cpu_ms": t2["cpu_ms"], "add_us": 1e6 * add_s / cap,
            "add_cpu_us": 1e6 * add_cpu_s / cap}


# -- part 3: TorchRL ----------------------------------------------------------------------------
def _torchrl_arm(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"torch": torch.__version__, "torchrl": _dist_version("torchrl")}
    try:
        from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

        rb = PrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=LazyTensorStorage(1000))
        rb.extend(torch.zeros(100, 1))
        rb.sample(32)
        out["runs"] = True
    except Exception as e:  # report why, as the issue asks
        out["runs"] = False
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return out


def _chi_text(c: dict[str, Any] | None) -> str:
    if not c:
        return "-"
    return (f"independent draws chi2 = {c['chi2']:.1f} on {c['dof']} dof, p = {c['p_value']:.3g}; stratified: "
            f"largest deviation from the expected count {c['stratified_max_deviation_per_sample']:.2f} per sample "
            "(exact: at most 2)")


ARMS = {"index": _index_arm, "cpprb_index": _cpprb_index_arm, "torch_index": _torch_index_arm,
        "ours_prioritized": _ours_atari_arm, "ours_uniform": _ours_atari_arm, "cpprb_atari": _cpprb_atari_arm,
        "torchrl": _torchrl_arm}


def child(cfg: dict[str, Any]) -> dict[str, Any]:
    return ARMS[cfg["arm"]](cfg)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index-capacities", nargs="+", type=int, default=[1_000_000, 10_000_000])
    p.add_argument("--atari-capacity", type=int, default=100_000)
    p.add_argument("--whole-arms", default="ours_prioritized,ours_uniform,cpprb_atari",
                   help="whole-buffer arms, comma-separated (cpprb holds ~7 KB a transition: leave it out at 10M)")
    p.add_argument("--game", default="Pong")
    p.add_argument("--collect-steps", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=2, help="runs of each arm, arms taking turns (least time kept)")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--out", default=None, help="JSON path (a .md is written beside it)")
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)  # child mode
    args = p.parse_args(argv)
    if args.config:
        print(json.dumps(child(json.loads(args.config)), default=str))
        return 0

    def run_once(arm: str, **cfg: Any) -> dict[str, Any]:
        res = run_fresh(__file__, {"arm": arm, "reps": args.reps, **cfg}, timeout=args.timeout)
        print(f"{arm} {cfg}: {res}", file=sys.stderr)
        return res

    def run_rounds(arms: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Each arm ``--rounds`` times, the arms taking turns: a time is the least over the rounds
        (other processes on a shared machine only ever slow an arm down), the rest the first round's."""
        rounds = [[run_once(arm, **cfg) for arm, cfg in arms] for _ in range(args.rounds)]
        out = []
        for i in range(len(arms)):
            results = [r[i] for r in rounds if "error" not in r[i]]
            if not results:
                out.append(rounds[0][i])
                continue
            best = dict(results[0])
            for key, value in best.items():
                if ("ms" in key or key.endswith("_us")) and isinstance(value, float):
                    best[key] = min(r[key] for r in results)
            best["rounds"] = len(results)
            out.append(best)
        return out

    def run(arm: str, **cfg: Any) -> dict[str, Any]:
        return run_rounds([(arm, cfg)])[0]

    index_rows = []
    for cap in args.index_capacities:
        ours, cpp, tix = run_rounds([(arm, {"capacity": cap}) for arm in ("index", "cpprb_index", "torch_index")])
        row: dict[str, Any] = {"capacity": cap}
        for name, res in (("ours", ours), ("cpprb", cpp), ("torch", tix)):
            row.update({f"{name}_{k}": v for k, v in res.items() if k != "chi2"})
        for k in BATCHES:
            if f"ours_ms_{k}" in row and f"cpprb_ms_{k}" in row:
                row[f"speedup_{k}"] = row[f"cpprb_ms_{k}"] / row[f"ours_ms_{k}"]
                row[f"cpu_speedup_{k}"] = row[f"cpprb_cpu_ms_{k}"] / row[f"ours_cpu_ms_{k}"]
        if "ours_rss_per_slot" in row and "cpprb_rss_per_slot" in row:
            row["bytes_ratio"] = row["ours_rss_per_slot"] / row["cpprb_rss_per_slot"]
        row["chi2"] = ours.get("chi2")
        index_rows.append(row)

    atari_cfg = {"capacity": args.atari_capacity, "game": args.game, "collect_steps": args.collect_steps,
                 "cache_dir": args.cache_dir}
    names = tuple(args.whole_arms.split(","))
    unknown = set(names) - {"ours_prioritized", "ours_uniform", "cpprb_atari"}
    if unknown:
        raise SystemExit(f"--whole-arms: unknown arms {sorted(unknown)}")
    whole = dict(zip(names, run_rounds([(arm, atari_cfg) for arm in names]), strict=True))
    torchrl = run_once("torchrl")
    pri, uni, cpp = (whole.get(n, {}) for n in ("ours_prioritized", "ours_uniform", "cpprb_atari"))
    def row(arm: str, res: dict[str, Any]) -> dict[str, Any]:
        keys = ("sample_ms", "sample_update_ms", "sample_cpu_ms", "sample_update_cpu_ms", "add_us", "add_cpu_us",
                "rss_per_transition")
        return {"arm": arm, **{k: res.get(k) for k in keys}, "nbytes_held": res.get("nbytes_held_per_transition")}

    labels = {"ours_prioritized": "chunkstore prioritized", "ours_uniform": "chunkstore uniform",
              "cpprb_atari": "cpprb PER (next_of + stack_compress)"}
    whole_rows = [row(labels[n], whole[n]) for n in names]
    ratios = {}
    if "same_buffer_prioritized_ms" in pri:
        ratios["prioritized_vs_uniform_sample_same_buffer"] = \
            pri["same_buffer_prioritized_ms"] / pri["same_buffer_uniform_ms"]
    if "sample_ms" in pri and "sample_ms" in uni:
        ratios["prioritized_vs_uniform_sample"] = pri["sample_ms"] / uni["sample_ms"]
    if "sample_update_ms" in pri and "sample_update_ms" in cpp:
        ratios["cpprb_vs_ours_sample_update"] = cpp["sample_update_ms"] / pri["sample_update_ms"]
        ratios["cpprb_vs_ours_sample_update_cpu"] = cpp["sample_update_cpu_ms"] / pri["sample_update_cpu_ms"]
    for arm, res in (("prioritized", pri), ("uniform", uni)):
        if "add_us" in res and "add_us" in cpp:
            ratios[f"ours_{arm}_vs_cpprb_add"] = res["add_us"] / cpp["add_us"]
    if "sample_cpu_ms" in pri and "sample_cpu_ms" in uni:
        ratios["prioritized_vs_uniform_sample_cpu"] = pri["sample_cpu_ms"] / uni["sample_cpu_ms"]
    if "rss_per_transition" in pri and "rss_per_transition" in cpp:
        ratios["ours_vs_cpprb_bytes_rss"] = pri["rss_per_transition"] / cpp["rss_per_transition"]
        ratios["ours_nbytes_held_vs_cpprb_rss"] = pri["nbytes_held_per_transition"] / cpp["rss_per_transition"]

    md = ["### Priority index alone vs cpprb PrioritizedReplayBuffer (sample(k) + update(k), every slot prioritized)\n",
          md_table(index_rows, [("capacity", "capacity"), ("ours_ms_256", "ours 256 (ms)"),
                                ("cpprb_ms_256", "cpprb 256 (ms)"), ("speedup_256", "cpprb / ours, 256"),
                                ("cpu_speedup_256", "cpprb / ours, 256, CPU time"),
                                ("ours_ms_32", "ours 32 (ms)"), ("cpprb_ms_32", "cpprb 32 (ms)"),
                                ("speedup_32", "cpprb / ours, 32"),
                                ("ours_rss_per_slot", "ours B/slot (RSS)"),
                                ("ours_traced_per_slot", "ours B/slot (tracemalloc)"),
                                ("cpprb_rss_per_slot", "cpprb B/slot (RSS, 1-byte field included)"),
                                ("torch_ms_256", "torch-op index on cpu 256 (ms)"),
                                ("torch_ms_32", "torch-op index on cpu 32 (ms)"),
                                ("torch_nbytes_per_slot", "torch-op index B/slot (its tensors)")]),
          f"\n\n### Whole buffers, real {args.game} stacks, capacity {args.atari_capacity:,}\n",
          md_table(whole_rows, [("arm", "arm"), ("sample_ms", "sample(256) ms"),
                                ("sample_update_ms", "sample(256) + update(256) ms"),
                                ("sample_cpu_ms", "sample(256) CPU ms"),
                                ("sample_update_cpu_ms", "sample(256) + update(256) CPU ms"),
                                ("add_us", "add() µs (whole fill, mean)"), ("add_cpu_us", "add() CPU µs"),
                                ("rss_per_transition", "B/transition (RSS)"),
                                ("nbytes_held", "B/transition (nbytes_held + priorities)")]),
          "\n\nRatios (same run): " + ", ".join(f"{k} = {v:.3g}" for k, v in ratios.items()),
          "\n\nDistribution (10^6 draws, p^0.6 over 7 orders of magnitude, 1000 slots): "
          + _chi_text(index_rows[0].get("chi2") if index_rows else None),
          f"\n\nTorchRL: {torchrl}\n"]
    text = "".join(md)
    print(text)
    save_results(args.out, {"args": vars(args), "env": env_info(), "index": index_rows, "whole": whole,
                            "whole_rows": whole_rows, "ratios": ratios, "torchrl": torchrl}, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
