"""Head-to-head replay / rollout buffer benchmark on real Atari transitions (issue 3).

Every configuration runs in a fresh interpreter (this script with ``--config``),
so RSS growth and timings are not polluted by earlier configurations. Compared:
SB3 ``ReplayBuffer`` (optimize_memory_usage False / True), sb3-extra-buffers 0.5
(``zstd3``, ``zstd-5``, ``lz4-frame/1``), and ``sb3_integration.CompressedReplayBuffer``
(defaults plus alternatives from ``--ours``). A PPO-shaped rollout benchmark
(8 envs x 128 steps, 4 epochs of ``get(256)``) compares SB3's ``RolloutBuffer``
with ``sb3_integration.CompressedRolloutBuffer``.

The buffer is filled to ``--capacity`` by cycling ~20k collected transitions
(``tools/atari_data.collect_stacked``, cached under ./data).

Examples
--------
    .venv/bin/python tools/bench_buffers.py --out results/bench_buffers.json
    .venv/bin/python tools/bench_buffers.py --capacity 10000 --games Pong --no-pickle   # quick
    .venv/bin/python tools/bench_buffers.py --only sb3 sb3eb                            # baselines
    .venv/bin/python tools/bench_buffers.py --only ours --ours default "chunk_len=64,compression_method=zstd3"
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import (
    ensure_importable,
    fmt,
    md_table,
    parse_kwargs,
    progress,
    robust_ms,
    rss,
    run_fresh,
    save_results,
    try_import,
)

ensure_importable()

MB = 1 << 20
SB3EB_METHODS = ["zstd3", "zstd-5", "lz4-frame/1"]
OURS_DEFAULT = ["default", "preset=compact", "compression_method=lz4-block"]


# == child: one configuration =================================================


def _spaces(game: str) -> tuple[Any, Any]:
    import gymnasium as gym
    from atari_data import make_env_id

    env_id, kw = make_env_id(game)
    env = gym.make(env_id, **kw)
    n = int(env.action_space.n)
    env.close()
    return gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(n)


def _replay_class(kind: str) -> Any:
    """Import the buffer class (imports are not part of a buffer's RSS growth)."""
    if kind == "sb3":
        from stable_baselines3.common.buffers import ReplayBuffer

        return ReplayBuffer
    if kind == "sb3eb":
        from sb3_extra_buffers.compressed import CompressedReplayBuffer as EB

        return EB
    if kind == "ours":
        from sb3_integration import CompressedReplayBuffer

        return CompressedReplayBuffer
    raise ValueError(kind)


def _make_replay(cls: Any, cfg: dict[str, Any], obs_space: Any, act_space: Any) -> Any:
    cap, kind, opt = cfg["capacity"], cfg["kind"], cfg.get("opt", False)
    common = dict(device="cpu", n_envs=1, optimize_memory_usage=opt, handle_timeout_termination=not opt)
    if kind == "sb3eb":
        common["compression_method"] = cfg["method"]
    if kind == "ours":
        common.update(cfg.get("options", {}))
    return cls(cap, obs_space, act_space, **common)


def _stored_bytes(buf: Any, kind: str) -> tuple[int, str]:
    """Observation storage (obs + next_obs) and how it was counted."""
    if kind == "sb3":
        nxt = getattr(buf, "next_observations", None)  # absent with optimize_memory_usage=True
        nxt = nxt.nbytes if nxt is not None else 0
        return buf.observations.nbytes + nxt, "ndarray nbytes"
    if kind == "sb3eb":
        # sb3-extra-buffers keeps one python bytes object per (pos, env) in object arrays
        total = 0
        for arr in (buf.observations, getattr(buf, "next_observations", None)):
            if isinstance(arr, np.ndarray):
                total += sum(len(b) for b in arr.ravel() if b is not None)
        return total, "sum(len(bytes)) of its object arrays"
    return int(buf.nbytes_stored), "buffer.nbytes_stored"


def _check_exact(buf: Any, tr: Any, n_adds: int, rng: np.random.Generator) -> dict[str, Any]:
    """Sample 256 stored positions and compare with the transitions that were added there."""
    cap = buf.buffer_size
    upper = cap if buf.full else buf.pos
    idx = rng.integers(0, upper, 256)
    # position p holds add number a with a % cap == p and a the last such add
    last = n_adds - 1
    add_no = idx + ((last - idx) // cap) * cap
    src = add_no % len(tr)
    s = buf._get_samples(idx)
    obs = s.observations.cpu().numpy()
    nxt = s.next_observations.cpu().numpy()
    return {
        "obs_exact": bool(np.array_equal(obs, tr.obs[src, 0])),
        "next_obs_exact": bool(np.array_equal(nxt, tr.next_obs[src, 0])),
        "next_obs_mismatches": int(sum(not np.array_equal(a, b)
                                       for a, b in zip(nxt, tr.next_obs[src, 0], strict=True))),
    }


def _pickle_save(buf: Any, path: str) -> float:
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        pickle.dump(buf, f, protocol=pickle.HIGHEST_PROTOCOL)  # what SB3's save_to_pkl does
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - t0


def _pickle_load(path: str) -> tuple[float, Any]:
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    return time.perf_counter() - t0, loaded


def child_replay(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch  # imported before the RSS baseline, like the buffer's own imports
    from atari_data import collect_stacked

    th_threads = cfg.get("torch_threads")
    if th_threads:
        torch.set_num_threads(th_threads)
    tr = collect_stacked(cfg["game"], cfg["collect_steps"], 1, cfg["seed"], cfg.get("cache_dir"))
    obs_space, act_space = _spaces(cfg["game"])
    n, cap = len(tr), cfg["capacity"]
    n_adds = cap
    rng = np.random.default_rng(cfg["seed"])
    actions = tr.actions.reshape(n, 1, 1)

    cls = _replay_class(cfg["kind"])
    if cfg["kind"] == "ours":
        # what a process loads once (numba and the native read/write kernels, ~110 MB of RSS,
        # stated apart in the README) comes before the baseline: a small buffer adds and samples
        warm = _make_replay(cls, {**cfg, "capacity": 64}, obs_space, act_space)
        for t in range(32):
            warm.add(tr.obs[t], tr.next_obs[t], actions[t], tr.rewards[t], tr.dones[t], tr.infos[t])
        warm.sample(16)
        warm.close()
        del warm
        gc.collect()
    rss0 = rss()
    buf = _make_replay(cls, cfg, obs_space, act_space)
    rss_ctor = rss() - rss0
    block = 1000
    blocks = []
    t0 = time.perf_counter()
    for b0 in range(0, n_adds, block):
        tb = time.perf_counter()
        for a in range(b0, min(b0 + block, n_adds)):
            t = a % n
            buf.add(tr.obs[t], tr.next_obs[t], actions[t], tr.rewards[t], tr.dones[t], tr.infos[t])
        blocks.append((time.perf_counter() - tb) / (min(b0 + block, n_adds) - b0))
    fill_s = time.perf_counter() - t0
    rss_growth = rss() - rss0
    stored, how = _stored_bytes(buf, cfg["kind"])

    np.random.seed(cfg["seed"])  # noqa: NPY002 - SB3 samples with the global RNG
    sample = robust_ms(lambda: buf.sample(256), n=cfg["samples"])
    res: dict[str, Any] = {
        "transitions": n_adds,
        "stored_bytes": stored,
        "stored_how": how,
        "bytes_per_transition": stored / n_adds,
        "rss_ctor_bytes": rss_ctor,
        "rss_growth_bytes": rss_growth,
        # median over blocks of 1000 adds: robust to other processes; mean beside it
        "add_us": float(np.median(blocks) * 1e6),
        "add_us_mean": fill_s / n_adds * 1e6,
        "fill_s": fill_s,
        "sample_ms": sample["ms"],
        "sample_median_ms": sample["median_ms"],
        **_check_exact(buf, tr, n_adds, rng),
    }
    if cfg["kind"] == "ours":
        fn = getattr(buf, "storage_info", None)  # effective codec / chunk_len / bytes per key
        if callable(fn):
            try:
                res["ours_storage_info"] = json.loads(json.dumps(fn(), default=str))
            except Exception as e:
                res["ours_storage_info"] = repr(e)
    if cfg.get("pickle", True):
        with tempfile.TemporaryDirectory(dir=cfg.get("tmp_dir")) as tmp:
            path = os.path.join(tmp, "buffer.pkl")
            res["pickle_save_s"] = _pickle_save(buf, path)
            res["pickle_bytes"] = os.path.getsize(path)
            del buf  # never hold a 5.6 GB buffer twice
            gc.collect()
            res["pickle_load_s"], loaded = _pickle_load(path)
            res["pickle_exact"] = _check_exact(loaded, tr, n_adds, np.random.default_rng(cfg["seed"] + 1))["obs_exact"]
    return res


def child_rollout(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch
    from atari_data import collect_stacked

    n_envs, n_steps = cfg["n_envs"], cfg["n_steps"]
    if cfg.get("torch_threads"):
        torch.set_num_threads(cfg["torch_threads"])
    tr = collect_stacked(cfg["game"], n_steps, n_envs, cfg["seed"], cfg.get("cache_dir"))
    obs_space, act_space = _spaces(cfg["game"])
    kw = dict(device="cpu", gae_lambda=0.95, gamma=0.99, n_envs=n_envs)
    if cfg["kind"] == "sb3":
        from stable_baselines3.common.buffers import RolloutBuffer as cls
    elif cfg["kind"] == "sb3eb":
        from sb3_extra_buffers.compressed import CompressedRolloutBuffer as cls

        kw["compression_method"] = cfg["method"]
    else:
        from sb3_integration import CompressedRolloutBuffer as cls

        kw.update(cfg.get("options", {}))
    g = torch.Generator().manual_seed(cfg["seed"])
    values = torch.randn(n_steps, n_envs, generator=g)
    log_probs = torch.randn(n_steps, n_envs, generator=g)
    starts = np.vstack([np.ones((1, n_envs), np.float32), tr.dones[:-1].astype(np.float32)])
    rss0 = rss()
    buf = cls(n_steps, obs_space, act_space, **kw)

    def one_rollout() -> None:
        buf.reset()
        for t in range(n_steps):
            buf.add(tr.obs[t], tr.actions[t], tr.rewards[t], starts[t], values[t], log_probs[t])
        buf.compute_returns_and_advantage(last_values=values[-1], dones=tr.dones[-1])
        for _ in range(cfg["epochs"]):
            for _batch in buf.get(cfg["batch"]):
                pass

    np.random.seed(cfg["seed"])  # noqa: NPY002 - SB3 samples with the global RNG
    timing = robust_ms(one_rollout, n=cfg["repeats"], groups=cfg["repeats"], warmup=1)  # min of repeats
    # correctness: the rollout's observations, in get() order, equal what was added
    np.random.seed(cfg["seed"])  # noqa: NPY002 - SB3 samples with the global RNG
    buf.reset()
    for t in range(n_steps):
        buf.add(tr.obs[t], tr.actions[t], tr.rewards[t], starts[t], values[t], log_probs[t])
    buf.compute_returns_and_advantage(last_values=values[-1], dones=tr.dones[-1])
    got = torch.cat([b.observations for b in buf.get(None)]).cpu().numpy()
    want = tr.obs[:n_steps].swapaxes(0, 1).reshape(n_steps * n_envs, *tr.obs.shape[2:])
    return {
        "rollout_ms": timing["ms"],
        "rollout_median_ms": timing["median_ms"],
        "rss_growth_bytes": rss() - rss0,
        # get() permutes rows; compare as multisets of rows
        "obs_exact": sorted(x.tobytes() for x in got) == sorted(x.tobytes() for x in want),
    }


def run_child(cfg: dict[str, Any]) -> dict[str, Any]:
    fn = child_rollout if cfg.get("bench") == "rollout" else child_replay
    return fn(cfg)


# == parent ===================================================================


def replay_configs(args: argparse.Namespace, game: str) -> list[dict[str, Any]]:
    base = dict(bench="replay", game=game, capacity=args.capacity, collect_steps=args.collect_steps,
                seed=args.seed, cache_dir=args.cache_dir, samples=args.samples, pickle=not args.no_pickle,
                tmp_dir=args.tmp_dir, torch_threads=args.torch_threads)
    cfgs: list[dict[str, Any]] = []
    if "sb3" in args.only:
        cfgs += [dict(base, kind="sb3", opt=False, label="SB3 ReplayBuffer"),
                 dict(base, kind="sb3", opt=True, label="SB3 ReplayBuffer")]
    if "sb3eb" in args.only:
        cfgs += [dict(base, kind="sb3eb", opt=False, method=m, label=f"sb3eb {m}") for m in args.sb3eb]
    if "ours" in args.only:
        for spec in args.ours:
            opts = parse_kwargs(spec)
            cfgs.append(dict(base, kind="ours", opt=False, options=opts, label=f"ours {spec}"))
    return cfgs


def rollout_configs(args: argparse.Namespace, game: str) -> list[dict[str, Any]]:
    base = dict(bench="rollout", game=game, n_envs=8, n_steps=128, epochs=4, batch=256,
                repeats=args.rollout_repeats, seed=args.seed, cache_dir=args.cache_dir,
                torch_threads=args.torch_threads)
    cfgs = []
    if "sb3" in args.only:
        cfgs.append(dict(base, kind="sb3", label="SB3 RolloutBuffer"))
    if "sb3eb" in args.only:
        cfgs.append(dict(base, kind="sb3eb", method="zstd3", label="sb3eb RolloutBuffer zstd3"))
    if "ours" in args.only:
        import inspect

        from sb3_integration import CompressedRolloutBuffer, rollout

        accepted = {*inspect.signature(CompressedRolloutBuffer.__init__).parameters,
                    *inspect.signature(rollout.CompressedRolloutBuffer.__init__).parameters}
        for spec in args.ours:
            options = parse_kwargs(spec)
            if set(options) <= accepted:  # replay-only options (preset, tier, ...) have no rollout row
                cfgs.append(dict(base, kind="ours", options=options, label=f"ours Rollout {spec}"))
    return cfgs


def prepare_data(args: argparse.Namespace) -> dict[str, float]:
    """Collect (or load from cache) once in the parent, so children only read the cache."""
    from atari_data import collect_stacked

    secs = {}
    for game in args.games:
        tr = collect_stacked(game, args.collect_steps, 1, args.seed, args.cache_dir, progress=True)
        secs[game] = tr.collect_s
        if not args.no_rollout:
            collect_stacked(game, 128, 8, args.seed, args.cache_dir)
        del tr
    return secs


def ours_available() -> str | None:
    mod, err = try_import("sb3_integration")
    if err:
        return err
    missing = [c for c in ("CompressedReplayBuffer", "CompressedRolloutBuffer") if not hasattr(mod, c)]
    return f"sb3_integration has no {', '.join(missing)} yet" if missing else None


TIME_KEYS = ("add_us", "add_us_mean", "fill_s", "sample_ms", "sample_median_ms", "pickle_save_s", "pickle_load_s",
             "rollout_ms", "rollout_median_ms")


def merge_rounds(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from several rounds of a config: times are the minimum over rounds."""
    ok = [r for r in rs if "error" not in r]
    if not ok:
        return rs[0]
    out = dict(ok[0])
    for k in TIME_KEYS:
        vals = [r[k] for r in ok if k in r]
        if vals:
            out[k] = min(vals)
    out["rounds"] = len(ok)
    return out


def one_line(cfg: dict[str, Any], res: dict[str, Any]) -> str:
    if "error" in res:
        return res["error"]
    if cfg["bench"] == "rollout":
        return f"{fmt(res.get('rollout_ms'))} ms"
    return (f"{fmt(res.get('bytes_per_transition'))} B/tr, {fmt(res.get('add_us'))} µs/add, "
            f"sample {fmt(res.get('sample_ms'))} ms, RSS +{fmt(res.get('rss_growth_bytes', 0) / MB)} MB")


def summarize(rows: list[dict[str, Any]], roll: list[dict[str, Any]], games: list[str]) -> list[dict[str, Any]]:
    """Issue 3's targets as ratios of rows measured in this run."""
    limits = {"MsPacman": 320, "Pong": 50}
    out = []

    def find(game: str, label: str, opt: bool | None = None) -> dict[str, Any] | None:
        for r in rows:
            if r["game"] == game and r["label"] == label and (opt is None or r.get("opt") == opt) and "error" not in r:
                return r
        return None

    for game in games:
        sb3_f, sb3_t = find(game, "SB3 ReplayBuffer", False), find(game, "SB3 ReplayBuffer", True)
        eb = find(game, "sb3eb zstd3")
        for r in rows:
            if r["game"] != game or r["kind"] != "ours" or "error" in r:
                continue
            bpt = r["bytes_per_transition"]
            checks = []
            if game in limits:
                checks.append(("bytes/transition", bpt, limits[game], bpt <= limits[game]))
            if eb:
                checks.append(("bytes vs sb3eb zstd3 / 10", bpt / (eb["bytes_per_transition"] / 10), 1.0,
                               bpt <= eb["bytes_per_transition"] / 10))
            allowed = 1.2 * r["stored_bytes"] + 50 * MB
            checks.append(("RSS growth / (1.2 stored + 50 MB)", r["rss_growth_bytes"] / allowed, 1.0,
                           r["rss_growth_bytes"] <= allowed))
            if sb3_f:
                q = r["sample_ms"] / sb3_f["sample_ms"]
                checks.append(("sample(256) / SB3 opt=False", q, 1.5, q <= 1.5))
            if sb3_t:
                q = r["add_us"] / sb3_t["add_us"]
                checks.append(("add() / SB3 opt=True", q, 1.5, q <= 1.5))
            for name, val, lim, ok in checks:
                out.append({"game": game, "config": r["label"], "target": name, "value": val, "limit": lim,
                            "met": ok})
    for game in games:
        base = next((r for r in roll if r["game"] == game and r["kind"] == "sb3" and "error" not in r), None)
        for r in roll:
            if r["game"] == game and r["kind"] == "ours" and base and "error" not in r:
                q = r["rollout_ms"] / base["rollout_ms"]
                out.append({"game": game, "config": r["label"], "target": "rollout / SB3 RolloutBuffer",
                            "value": q, "limit": 1.2, "met": q <= 1.2})
    return out


REPLAY_COLS = [("game", "game"), ("label", "buffer"), ("opt", "opt"), ("bytes_per_transition", "bytes/transition"),
               ("stored_mb", "stored MB"), ("rss_growth_mb", "RSS growth MB"), ("add_us", "µs/add"),
               ("sample_ms", "sample(256) ms"), ("sample_vs_sb3", "sample / SB3 opt=False"),
               ("add_vs_sb3opt", "add / SB3 opt=True"), ("pickle_mb", "pickle MB"),
               ("pickle_save_s", "pickle save s"), ("pickle_load_s", "pickle load s"), ("exact", "exact")]
ROLL_COLS = [("game", "game"), ("label", "buffer"), ("rollout_ms", "fill+4 epochs get(256) ms"),
             ("vs_sb3", "/ SB3"), ("rss_growth_mb", "RSS growth MB"), ("obs_exact", "exact")]


def decorate(rows: list[dict[str, Any]], roll: list[dict[str, Any]]) -> None:
    for r in rows:
        if "error" in r:
            continue
        info = r.get("ours_storage_info")
        obs_info = info.get("observations") if isinstance(info, dict) else None
        if isinstance(obs_info, dict) and "codec" in obs_info:
            r["label"] += f" [{obs_info['codec']}, chunk_len {obs_info.get('chunk_len')}]"
        ref_f = next((x for x in rows if x["game"] == r["game"] and x["kind"] == "sb3" and not x.get("opt")
                      and "error" not in x), None)
        ref_t = next((x for x in rows if x["game"] == r["game"] and x["kind"] == "sb3" and x.get("opt")
                      and "error" not in x), None)
        r["stored_mb"] = r["stored_bytes"] / MB
        r["rss_growth_mb"] = r["rss_growth_bytes"] / MB
        r["sample_vs_sb3"] = r["sample_ms"] / ref_f["sample_ms"] if ref_f else None
        r["add_vs_sb3opt"] = r["add_us"] / ref_t["add_us"] if ref_t else None
        if "pickle_bytes" in r:
            r["pickle_mb"] = r["pickle_bytes"] / MB
        r["exact"] = ("obs" if r["obs_exact"] else "OBS DIFFER") + (
            "+next" if r["next_obs_exact"] else f", next differs x{r['next_obs_mismatches']}")
    for r in roll:
        if "error" in r:
            continue
        ref = next((x for x in roll if x["game"] == r["game"] and x["kind"] == "sb3" and "error" not in x), None)
        r["vs_sb3"] = r["rollout_ms"] / ref["rollout_ms"] if ref else None
        r["rss_growth_mb"] = r["rss_growth_bytes"] / MB


def render(rows: list[dict[str, Any]], roll: list[dict[str, Any]], summary: list[dict[str, Any]],
           args: argparse.Namespace, skipped: list[str]) -> str:
    parts = [f"### Replay buffers: capacity {args.capacity:,}, (4,84,84) uint8, n_envs 1, "
             f"filled by cycling {args.collect_steps:,} real transitions; each row a fresh process\n",
             md_table([r for r in rows if "error" not in r], REPLAY_COLS)]
    errs = [r for r in rows + roll if "error" in r]
    if roll:
        parts += ["\n### PPO-shaped rollout: 8 envs x 128 steps, compute_returns, 4 epochs of get(256); "
                  f"median of {args.rollout_repeats}\n", md_table([r for r in roll if "error" not in r], ROLL_COLS)]
    if summary:
        parts += ["\n### Issue 3 targets (ratios within this run)\n",
                  md_table(summary, ["game", "config", "target", "value", "limit", "met"])]
    if errs or skipped:
        parts.append("\n### Not measured\n")
        parts += [f"- {r['game']} {r['label']}: {r['error']}" for r in errs]
        parts += [f"- {s}" for s in skipped]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--games", nargs="+", default=["MsPacman", "Pong"])
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--collect-steps", type=int, default=20_000, help="real transitions collected, then cycled")
    p.add_argument("--only", nargs="+", default=["sb3", "sb3eb", "ours"], choices=["sb3", "sb3eb", "ours"])
    p.add_argument("--sb3eb", nargs="+", default=SB3EB_METHODS, help="sb3-extra-buffers compression methods")
    p.add_argument("--ours", nargs="+", default=OURS_DEFAULT,
                   help='our configs: "default" or comma-separated kwargs, e.g. '
                        '"compression_method=lz4-block,chunk_len=16"')
    p.add_argument("--samples", type=int, default=100, help="sample(256) calls timed (median)")
    p.add_argument("--no-pickle", action="store_true", help="skip the pickle save/load measurement")
    p.add_argument("--no-rollout", action="store_true")
    p.add_argument("--rollout-repeats", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1,
                   help="run every config this many times, round-robin; times are the minimum")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=1, help="torch threads in every arm (1: see bench_sampling)")
    p.add_argument("--cache-dir", default=None, help="Atari data cache (default ./data)")
    p.add_argument("--tmp-dir", default=None, help="where pickles are written (default: system temp)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per configuration")
    p.add_argument("--out", default=None, help="JSON output; a .md with the tables is written beside it")
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)  # child mode
    args = p.parse_args(argv)

    if args.config:
        cfg = json.loads(args.config)
        print(json.dumps(run_child(cfg)))
        return 0

    skipped: list[str] = []
    if "ours" in args.only and (why := ours_available()):
        skipped.append(f"ours (sb3_integration): not importable yet — {why}")
        args.only = [o for o in args.only if o != "ours"]
    collect_s = prepare_data(args)
    cfgs = [c for g in args.games for c in replay_configs(args, g)]
    if not args.no_rollout:
        cfgs += [c for g in args.games for c in rollout_configs(args, g)]
    results: list[list[dict[str, Any]]] = [[] for _ in cfgs]
    bar = progress(total=len(cfgs) * args.rounds, desc="configs", unit="cfg")
    for rnd in range(args.rounds):
        # round-robin: a burst of load from other processes hits one round of a config, not all
        for i, cfg in enumerate(cfgs):
            bar.set_postfix_str(f"r{rnd} {cfg['game']} {cfg['label']}{' opt' if cfg.get('opt') else ''}")
            res = run_fresh(__file__, cfg, timeout=args.timeout)
            results[i].append(res)
            bar.update(1)
            bar.write(f"{cfg['game']:9s} {cfg['label']:38s} opt={cfg.get('opt')!s:5s} {one_line(cfg, res)}",
                      file=sys.stderr)
    bar.close()
    rows, roll = [], []
    for cfg, rs in zip(cfgs, results, strict=True):
        res = {k: cfg[k] for k in ("game", "label", "kind") if k in cfg} | {"opt": cfg.get("opt"), "config": cfg}
        res.update(merge_rounds(rs))
        (roll if cfg["bench"] == "rollout" else rows).append(res)
    decorate(rows, roll)
    summary = summarize(rows, roll, args.games)
    md = render(rows, roll, summary, args, skipped)
    print(md)
    save_results(args.out, {"args": vars(args), "collect_s": collect_s, "replay": rows, "rollout": roll,
                            "targets": summary, "skipped": skipped}, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
