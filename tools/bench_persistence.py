"""Persistence and larger-than-RAM benchmark on real MsPacman transitions (issue 4).

Part 1, save / load (each row a fresh process): fill a replay buffer with N
transitions (cycling ~20k collected ones), then save and load it:

- SB3 ``ReplayBuffer`` (opt=False) pickled like ``model.save_replay_buffer``;
- sb3-extra-buffers 0.5 (``zstd3`` by default) pickled the same way (its only save);
- ours: ``buffer.save(path)``, ``CompressedReplayBuffer.load(path, device=...)``
  lazily and into RAM (see the ``ours_*`` hooks below).

Targets (issue 4): saving 1M transitions <= 2 s, file <= 1.05x the in-RAM
compressed bytes, lazy load <= 1 s.

Part 2, larger than RAM: 10M MsPacman transitions under a ``HybridTier`` RAM budget
of 256 MB, peak RSS sampled by a thread (psutil), fill rate, sample(256) against
the same store held all in RAM. It runs at two levels:

- ``store``: a ``ChunkedArray`` of frames (what the frame-dedup buffer holds: ~one
  84x84 frame per transition), sampled as a replay buffer would (256 stacks of
  obs + next_obs = 5 consecutive frames each). Needs only chunkstore.
- ``buffer``: ``sb3_integration.CompressedReplayBuffer`` on a HybridTier
  (hook: ``make_ours_on_tier``).

Examples
--------
    .venv/bin/python tools/bench_persistence.py --out results/bench_persistence.json
    .venv/bin/python tools/bench_persistence.py --sizes 100000 --skip-huge          # save/load only
    .venv/bin/python tools/bench_persistence.py --skip-save --huge-transitions 2000000 --huge-level store
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import (
    PeakRSS,
    ensure_importable,
    fmt,
    md_table,
    median_ms,
    progress,
    rss,
    run_fresh,
    save_results,
)

ensure_importable()

MB = 1 << 20
GAME = "MsPacman"


# == hooks for our format (issue 4): fill in once the format exists ============
# Each hook uses only the documented public API. They raise NotImplementedError
# (reported as "not measured") while the API does not exist yet.


def ours_make_buffer(capacity: int, obs_space: Any, act_space: Any, options: dict[str, Any]) -> Any:
    """Our replay buffer with SB3's constructor arguments plus store options."""
    from sb3_integration import CompressedReplayBuffer

    return CompressedReplayBuffer(capacity, obs_space, act_space, device="cpu", n_envs=1, **options)


def ours_in_ram_bytes(buf: Any) -> int:
    """Compressed observation bytes the buffer holds in RAM (frames, open chunks, index)."""
    return int(buf.nbytes_stored)


def ours_other_bytes(buf: Any) -> int:
    """SB3's other arrays (actions, rewards, dones, timeouts), which the file also holds."""
    try:
        return int(buf.storage_info()["_totals"]["other_arrays_nbytes"])
    except (AttributeError, KeyError, TypeError):
        return 0


def ours_save(buf: Any, path: str) -> None:
    """HOOK: ``buffer.save(path)`` writes one HDF5 file (temp file + rename)."""
    if not hasattr(buf, "save"):
        raise NotImplementedError("CompressedReplayBuffer.save(path) does not exist yet")
    buf.save(path)


def ours_load(path: str, *, lazy: bool, device: str = "cpu") -> Any:
    """HOOK: ``CompressedReplayBuffer.load(path, device=...)``, lazy (chunks stay on disk) or in RAM.

    The lazy/in-RAM switch is not documented yet; this tries ``lazy=`` and then
    ``mmap=``. Adjust when the format lands.
    """
    from sb3_integration import CompressedReplayBuffer

    load = getattr(CompressedReplayBuffer, "load", None)
    if load is None:
        raise NotImplementedError("CompressedReplayBuffer.load(path, device=...) does not exist yet")
    for kw in ("lazy", "mmap"):
        try:
            return load(path, device=device, **{kw: lazy})
        except TypeError:
            continue
    if lazy:
        raise NotImplementedError("CompressedReplayBuffer.load has no lazy switch (tried lazy=, mmap=)")
    return load(path, device=device)


def make_ours_on_tier(capacity: int, obs_space: Any, act_space: Any, tier: Any, options: dict[str, Any]) -> Any:
    """HOOK: our replay buffer whose chunks live in ``tier`` (a HybridTier / MemoryTier).

    The store-option name is not documented yet; this tries ``tier=`` then
    ``store_options={"tier": ...}``.
    """
    from sb3_integration import CompressedReplayBuffer

    for kw in ({"tier": tier}, {"store_options": {"tier": tier}}):
        try:
            return CompressedReplayBuffer(capacity, obs_space, act_space, device="cpu", n_envs=1, **kw, **options)
        except TypeError:
            continue
    raise NotImplementedError("CompressedReplayBuffer takes no tier option yet (tried tier=, store_options=)")


# == children ==================================================================


def _spaces() -> tuple[Any, Any]:
    from bench_buffers import _spaces as spaces

    return spaces(GAME)


def _fill(buf: Any, tr: Any, n_adds: int, desc: str = "") -> float:
    n = len(tr)
    actions = tr.actions.reshape(n, 1, 1)
    t0 = time.perf_counter()
    for a in range(n_adds):
        t = a % n
        buf.add(tr.obs[t], tr.next_obs[t], actions[t], tr.rewards[t], tr.dones[t], tr.infos[t])
    return time.perf_counter() - t0


def _samples_equal(a: Any, b: Any, seed: int) -> bool:
    """Same seeded sample() from two buffers: bit-identical observations and next observations."""
    np.random.seed(seed)  # noqa: NPY002 - SB3 samples with the global RNG
    sa = a.sample(256)
    np.random.seed(seed)  # noqa: NPY002
    sb = b.sample(256)
    return all(np.array_equal(getattr(sa, f).cpu().numpy(), getattr(sb, f).cpu().numpy())
               for f in ("observations", "next_observations", "actions", "rewards", "dones"))


def child_save(cfg: dict[str, Any]) -> dict[str, Any]:
    from atari_data import collect_stacked

    tr = collect_stacked(GAME, cfg["collect_steps"], 1, cfg["seed"], cfg.get("cache_dir"))
    obs_space, act_space = _spaces()
    n_adds = cfg["transitions"]
    kind = cfg["kind"]
    if kind == "sb3":
        from stable_baselines3.common.buffers import ReplayBuffer

        buf = ReplayBuffer(n_adds, obs_space, act_space, device="cpu", n_envs=1)
    elif kind == "sb3eb":
        from sb3_extra_buffers.compressed import CompressedReplayBuffer as EB

        buf = EB(n_adds, obs_space, act_space, device="cpu", n_envs=1, compression_method=cfg["method"])
    else:
        buf = ours_make_buffer(n_adds, obs_space, act_space, cfg.get("options", {}))
    res: dict[str, Any] = {"fill_s": _fill(buf, tr, n_adds)}
    np.random.seed(cfg["seed"])  # noqa: NPY002
    ref = buf.sample(256)
    ref = {f: getattr(ref, f).cpu().numpy() for f in ("observations", "next_observations")}
    tmp = tempfile.mkdtemp(dir=cfg.get("tmp_dir"))
    try:
        if kind == "ours":
            res.update(_ours_save_load(buf, tmp, cfg, ref))
        else:
            res.update(_pickle_save_load(buf, tmp, cfg, ref))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def _check_ref(buf: Any, seed: int, ref: dict[str, np.ndarray]) -> bool:
    np.random.seed(seed)  # noqa: NPY002
    s = buf.sample(256)
    return all(np.array_equal(getattr(s, f).cpu().numpy(), v) for f, v in ref.items())


def _pickle_save_load(buf: Any, tmp: str, cfg: dict[str, Any], ref: dict[str, np.ndarray]) -> dict[str, Any]:
    path = os.path.join(tmp, "buffer.pkl")
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        pickle.dump(buf, f, protocol=pickle.HIGHEST_PROTOCOL)  # SB3's save_to_pkl
        f.flush()
        os.fsync(f.fileno())
    save_s = time.perf_counter() - t0
    del buf
    gc.collect()
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    load_s = time.perf_counter() - t0
    return {"save_s": save_s, "file_bytes": os.path.getsize(path), "load_s": load_s,
            "exact_after_load": _check_ref(loaded, cfg["seed"], ref)}


def _ours_save_load(buf: Any, tmp: str, cfg: dict[str, Any], ref: dict[str, np.ndarray]) -> dict[str, Any]:
    path = os.path.join(tmp, "buffer.h5")
    res: dict[str, Any] = {"in_ram_bytes": ours_in_ram_bytes(buf), "other_arrays_bytes": ours_other_bytes(buf)}
    t0 = time.perf_counter()
    ours_save(buf, path)
    res["save_s"] = time.perf_counter() - t0
    res["file_bytes"] = os.path.getsize(path)
    res["file_vs_ram"] = res["file_bytes"] / res["in_ram_bytes"]
    # the file also holds actions / rewards / dones / timeouts: compare with everything in RAM too
    res["file_vs_ram_all"] = res["file_bytes"] / (res["in_ram_bytes"] + res["other_arrays_bytes"])
    del buf
    gc.collect()
    for lazy in (True, False):
        key = "lazy" if lazy else "ram"
        try:
            t0 = time.perf_counter()
            loaded = ours_load(path, lazy=lazy)
            res[f"load_{key}_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            res[f"exact_{key}"] = _check_ref(loaded, cfg["seed"], ref)
            res[f"first_sample_{key}_ms"] = (time.perf_counter() - t0) * 1e3
            res[f"sample_{key}_ms"] = median_ms(lambda b=loaded: b.sample(256), n=30)
            del loaded
            gc.collect()
        except NotImplementedError as e:
            res[f"load_{key}_error"] = str(e)
    return res


def child_huge(cfg: dict[str, Any]) -> dict[str, Any]:
    """10M transitions under a RAM budget (tier=hybrid) or all in RAM (tier=memory)."""
    from chunkstore import HybridTier, MemoryTier

    tmp = tempfile.mkdtemp(prefix="bench-hybrid-", dir=cfg.get("disk_dir"))
    try:
        tier = (HybridTier(cfg["ram_budget_mb"] * MB, tmp) if cfg["tier"] == "hybrid" else MemoryTier())
        fn = _huge_store if cfg["level"] == "store" else _huge_buffer
        res = fn(cfg, tier)
        res["disk_bytes"] = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
        res["tier_info"] = tier.info()
        tier.close()
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _huge_store(cfg: dict[str, Any], tier: Any) -> dict[str, Any]:
    from atari_data import collect_frames

    from chunkstore import ChunkedArray

    frames = collect_frames(GAME, cfg["collect_steps"], cfg["seed"], cache_dir=cfg.get("cache_dir"))
    n = cfg["transitions"]  # ~one distinct frame per transition in the frame-dedup layout
    rss0 = rss()
    with PeakRSS() as peak:
        arr = ChunkedArray(n, item_shape=(84, 84), dtype=np.uint8, chunk_len=cfg["chunk_len"],
                           codec=cfg["codec"], tier=tier, name="frames")
        t0 = time.perf_counter()
        for start in range(0, n, len(frames)):
            arr.write(start, frames[: min(len(frames), n - start)])
        arr.flush()
        fill_s = time.perf_counter() - t0
        rng = np.random.default_rng(cfg["seed"])
        out = np.empty((256 * 5, 84, 84), np.uint8)

        def sample() -> None:
            # a replay sample: 256 transitions, obs + next_obs stacks = frames i-3 .. i+1
            ends = rng.integers(4, n - 1, 256)
            idx = (ends[:, None] + np.arange(-3, 2)[None, :]).ravel()
            arr.take(idx, out=out)

        sample_ms = median_ms(sample, n=cfg["samples"])
        check_idx = rng.integers(0, n, 64)
        exact = bool(np.array_equal(arr.take(check_idx), frames[check_idx % len(frames)]))
    return {"fill_s": fill_s, "fill_per_s": n / fill_s, "sample_ms": sample_ms, "cbytes": int(arr.cbytes),
            "cratio": float(arr.cratio), "peak_rss": peak.peak, "rss_before": rss0,
            "peak_growth": peak.peak - rss0, "exact": exact, "cache": arr.cache_info()}


def _huge_buffer(cfg: dict[str, Any], tier: Any) -> dict[str, Any]:
    from atari_data import collect_stacked

    tr = collect_stacked(GAME, cfg["collect_steps"], 1, cfg["seed"], cfg.get("cache_dir"))
    source = sum(a.nbytes for a in (tr.obs, tr.next_obs, tr.actions, tr.rewards, tr.dones))
    obs_space, act_space = _spaces()
    n = cfg["transitions"]
    from sb3_integration import CompressedReplayBuffer  # imports (numba) before the baseline

    del CompressedReplayBuffer
    rss0 = rss()
    with PeakRSS() as peak:
        buf = make_ours_on_tier(n, obs_space, act_space, tier, cfg.get("options", {}))
        fill_s = _fill(buf, tr, n)
        np.random.seed(cfg["seed"])  # noqa: NPY002
        sample_ms = median_ms(lambda: buf.sample(256), n=cfg["samples"])
        stored = ours_in_ram_bytes(buf)
    return {"fill_s": fill_s, "fill_per_s": n / fill_s, "sample_ms": sample_ms, "cbytes": stored,
            "small_arrays_bytes": int(buf.small_nbytes), "source_bytes": source,
            "peak_rss": peak.peak, "peak_rss_without_source": peak.peak - source,
            "rss_before": rss0, "peak_growth": peak.peak - rss0}


def run_child(cfg: dict[str, Any]) -> dict[str, Any]:
    try:
        return child_huge(cfg) if cfg["bench"] == "huge" else child_save(cfg)
    except NotImplementedError as e:
        return {"error": f"not implemented yet: {e}"}


# == parent ====================================================================


def save_configs(args: argparse.Namespace) -> list[dict[str, Any]]:
    base = dict(bench="save", collect_steps=args.collect_steps, seed=args.seed, cache_dir=args.cache_dir,
                tmp_dir=args.tmp_dir)
    cfgs = []
    for n in args.sizes:
        big = n > args.baseline_max
        if "sb3" in args.only and not big:
            cfgs.append(dict(base, kind="sb3", transitions=n, label="SB3 ReplayBuffer pickle"))
        if "sb3eb" in args.only and not big:
            cfgs += [dict(base, kind="sb3eb", method=m, transitions=n, label=f"sb3eb {m} pickle") for m in args.sb3eb]
        if "ours" in args.only:
            cfgs.append(dict(base, kind="ours", options=args.ours_options, transitions=n, label="ours save/load"))
    return cfgs


def huge_configs(args: argparse.Namespace) -> list[dict[str, Any]]:
    base = dict(bench="huge", transitions=args.huge_transitions, ram_budget_mb=args.ram_budget_mb,
                seed=args.seed, cache_dir=args.cache_dir, disk_dir=args.disk_dir, samples=args.samples,
                codec=args.codec, chunk_len=args.chunk_len,
                options={"compression_method": args.codec, "chunk_len": args.chunk_len, **args.ours_options})
    levels = ["store", "buffer"] if args.huge_level == "both" else [args.huge_level]
    cfgs = []
    for level in levels:
        steps = args.collect_steps if level == "store" else args.huge_collect_steps
        for tier in ("hybrid", "memory"):
            cfgs.append(dict(base, level=level, tier=tier, collect_steps=steps,
                             label=f"{level} on {tier}" + (f" {args.ram_budget_mb} MB" if tier == "hybrid" else "")))
    return cfgs


def render(save_rows: list[dict[str, Any]], huge_rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    parts = []
    if save_rows:
        for r in save_rows:
            if "error" not in r:
                r["file_mb"] = r["file_bytes"] / MB
                r["load_s"] = r.get("load_s", r.get("load_lazy_s"))
        parts += [f"### Save / load, {GAME}, each row a fresh process\n", md_table(
            [r for r in save_rows if "error" not in r],
            [("transitions", "transitions"), ("label", "buffer"), ("file_mb", "file MB"), ("save_s", "save s"),
             ("load_s", "load s (lazy for ours)"), ("load_ram_s", "load into RAM s"),
             ("file_vs_ram", "file / in-RAM obs"), ("file_vs_ram_all", "file / in-RAM obs + other arrays"), ("first_sample_lazy_ms", "first sample after lazy load ms"),
             ("exact_after_load", "exact (pickle)"), ("exact_lazy", "exact (lazy)"), ("exact_ram", "exact (RAM)")])]
        ours = [r for r in save_rows if r.get("kind") == "ours" and "error" not in r]
        if ours:
            parts.append("\nTargets: " + "; ".join(
                f"{r['transitions']:,}: save {fmt(r['save_s'])} s (<= 2 s at 1M), file/RAM "
                f"{fmt(r['file_vs_ram'])} obs only, {fmt(r.get('file_vs_ram_all'))} incl. other arrays (<= 1.05), "
                f"lazy load {fmt(r.get('load_lazy_s'))} s (<= 1 s)"
                for r in ours))
    if huge_rows:
        for r in huge_rows:
            if "error" not in r:
                r.update(peak_rss_mb=r["peak_rss"] / MB, peak_growth_mb=r["peak_growth"] / MB,
                         cbytes_mb=r["cbytes"] / MB, disk_mb=r.get("disk_bytes", 0) / MB,
                         peak_wo_source_mb=r.get("peak_rss_without_source", r["peak_rss"]) / MB)
        for level in ("store", "buffer"):
            rows = [r for r in huge_rows if r.get("level") == level and "error" not in r]
            ram = next((r for r in rows if r["tier"] == "memory"), None)
            for r in rows:
                r["sample_vs_ram"] = r["sample_ms"] / ram["sample_ms"] if ram else None
            if rows:
                parts += [f"\n### Larger than RAM ({level} level): {args.huge_transitions:,} {GAME} transitions, "
                          f"{args.codec} chunk_len {args.chunk_len}\n", md_table(rows, [
                              ("label", "tier"), ("cbytes_mb", "compressed MB"), ("disk_mb", "on disk MB"),
                              ("fill_per_s", "fill / s"), ("sample_ms", "sample(256) ms"),
                              ("sample_vs_ram", "/ all-RAM"), ("peak_rss_mb", "peak RSS MB"),
                              ("peak_wo_source_mb", "peak RSS without source data MB"),
                              ("peak_growth_mb", "peak RSS growth MB"), ("exact", "exact")])]
    errs = [r for r in save_rows + huge_rows if "error" in r]
    if errs:
        parts += ["\n### Not measured\n", *[f"- {r['label']} ({r.get('transitions', '')}): {r['error']}" for r in errs]]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="+", type=int, default=[100_000, 1_000_000], help="transitions saved")
    p.add_argument("--only", nargs="+", default=["sb3", "sb3eb", "ours"], choices=["sb3", "sb3eb", "ours"])
    p.add_argument("--sb3eb", nargs="+", default=["zstd3"], help="sb3-extra-buffers methods")
    p.add_argument("--baseline-max", type=int, default=100_000,
                   help="largest size for the pickle baselines (SB3 needs 56 GB at 1M)")
    p.add_argument("--ours-options", type=json.loads, default={}, help='JSON kwargs for our buffer, e.g. \'{"chunk_len": 64}\'')
    p.add_argument("--collect-steps", type=int, default=20_000)
    p.add_argument("--skip-save", action="store_true")
    p.add_argument("--skip-huge", action="store_true")
    p.add_argument("--huge-transitions", type=int, default=10_000_000)
    p.add_argument("--huge-level", choices=["store", "buffer", "both"], default="both")
    p.add_argument("--huge-collect-steps", type=int, default=5000,
                   help="real transitions cycled in the buffer-level run (kept small: they count in RSS)")
    p.add_argument("--ram-budget-mb", type=int, default=256)
    p.add_argument("--codec", default="zstd1", help="codec of the larger-than-RAM runs (store and buffer)")
    p.add_argument("--chunk-len", type=int, default=64)
    p.add_argument("--samples", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--tmp-dir", default=None, help="where save files go (default: system temp)")
    p.add_argument("--disk-dir", default=None, help="where the HybridTier spills (default: system temp)")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--out", default=None)
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.config:
        print(json.dumps(run_child(json.loads(args.config)), default=str))
        return 0

    from atari_data import collect_frames, collect_stacked

    collect_stacked(GAME, args.collect_steps, 1, args.seed, args.cache_dir, progress=True)
    if not args.skip_huge:
        collect_frames(GAME, args.collect_steps, args.seed, cache_dir=args.cache_dir, progress=True)
        collect_stacked(GAME, args.huge_collect_steps, 1, args.seed, args.cache_dir, progress=True)
    cfgs = ([] if args.skip_save else save_configs(args)) + ([] if args.skip_huge else huge_configs(args))
    save_rows, huge_rows = [], []
    bar = progress(cfgs, desc="configs", unit="cfg")
    for cfg in bar:
        bar.set_postfix_str(cfg["label"])
        res = {"label": cfg["label"], "kind": cfg.get("kind"), "level": cfg.get("level"), "tier": cfg.get("tier"),
               "transitions": cfg["transitions"], "config": cfg}
        res.update(run_fresh(__file__, cfg, timeout=args.timeout))
        (huge_rows if cfg["bench"] == "huge" else save_rows).append(res)
        bar.write(f"{cfg['label']:32s} {cfg['transitions']:>11,}: "
                  + (res["error"] if "error" in res else
                     ", ".join(f"{k}={fmt(res[k])}" for k in ("save_s", "load_s", "load_lazy_s", "file_bytes",
                                                              "fill_per_s", "sample_ms", "peak_rss") if k in res)),
                  file=sys.stderr)
    md = render(save_rows, huge_rows, args)
    print(md)
    save_results(args.out, {"args": vars(args), "save": save_rows, "huge": huge_rows}, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
