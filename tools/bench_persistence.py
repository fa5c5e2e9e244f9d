"""Persistence and larger-than-RAM benchmark on real MsPacman transitions (issue 4).

Part 1, save / load (each row a fresh process): fill a replay buffer with N
transitions (cycling ~20k collected ones), then save and load it:

- SB3 ``ReplayBuffer`` (opt=False) pickled like ``model.save_replay_buffer``;
- sb3-extra-buffers 0.5 (``zstd3`` by default) pickled the same way (its only save);
- ours: ``buffer.save(path)``, ``CompressedReplayBuffer.load(path, device=...)``
  lazily and into RAM (see the ``ours_*`` hooks below).

Targets (issue 4): saving 1M transitions <= 2 s, file <= 1.05x the in-RAM
compressed bytes, lazy load <= 1 s. Our rows run once per file format (``--formats``,
default 3 and 2: the ``CHUNKSTORE_SAVE_FORMAT`` variable set in the child), so the
current format is compared with the previous one in the same run; saves and lazy
loads are repeated (``--repeats``) and their median reported.

Part 1b, layouts (issue 18), store level: one ``ChunkedArray`` of N real frames per
codec, saved by ``chunkstore.hdf5.save`` in each layout (format 2; format 3; format 3
with ``plain_readable=False``), the layouts interleaved in repeated rounds in one
process: save s, lazy load s, their ratios to format 2's, file size against the
in-RAM compressed bytes, chunks per HDF5 chunk, whether plain h5py + hdf5plugin reads
the frames, exactness.

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
    .venv/bin/python tools/bench_persistence.py --only ours --skip-huge --out results/bench_persistence_v3.json
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

    if cfg.get("save_format"):  # buffer.save() writes the format this variable names
        os.environ["CHUNKSTORE_SAVE_FORMAT"] = str(cfg["save_format"])

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
    saves = []
    for _ in range(cfg.get("repeats", 1)):  # each save replaces the file, as a user's would
        t0 = time.perf_counter()
        ours_save(buf, path)
        saves.append(time.perf_counter() - t0)
    res.update(save_s=float(np.median(saves)), save_s_all=saves)
    res["file_bytes"] = os.path.getsize(path)
    res["file_format"] = _file_format(path)
    res["file_vs_ram"] = res["file_bytes"] / res["in_ram_bytes"]
    # the file also holds actions / rewards / dones / timeouts: compare with everything in RAM too
    res["file_vs_ram_all"] = res["file_bytes"] / (res["in_ram_bytes"] + res["other_arrays_bytes"])
    del buf
    gc.collect()
    for lazy in (True, False):
        key = "lazy" if lazy else "ram"
        try:
            loads = []
            for _ in range(cfg.get("repeats", 1) if lazy else 1):
                t0 = time.perf_counter()
                loaded = ours_load(path, lazy=lazy)
                loads.append(time.perf_counter() - t0)
                if len(loads) < cfg.get("repeats", 1) and lazy:
                    loaded.close()
                    del loaded
                    gc.collect()
            res[f"load_{key}_s"], res[f"load_{key}_s_all"] = float(np.median(loads)), loads
            t0 = time.perf_counter()
            res[f"exact_{key}"] = _check_ref(loaded, cfg["seed"], ref)
            res[f"first_sample_{key}_ms"] = (time.perf_counter() - t0) * 1e3
            res[f"sample_{key}_ms"] = median_ms(lambda b=loaded: b.sample(256), n=30)
            del loaded
            gc.collect()
        except NotImplementedError as e:
            res[f"load_{key}_error"] = str(e)
    return res


def _file_format(path: str) -> dict[str, Any]:
    """The file's format version and each array's chunks per HDF5 chunk (as its header says)."""
    from chunkstore import hdf5

    with hdf5.load(path, lazy=True, cache=0) as store:
        return {"version": store.header["format_version"],
                "chunks_per_hdf5_chunk": store.header.get("chunks_per_hdf5_chunk", {})}


# == part 1b: layouts, store level ===============================================

LAYOUTS = {"format 2": {"format_version": 2}, "format 3": {"format_version": 3},
           "format 3, plain_readable=False": {"format_version": 3, "plain_readable": False}}


def child_layouts(cfg: dict[str, Any]) -> dict[str, Any]:
    """One frames array of ``cfg["transitions"]`` real frames, saved in every layout in turn."""
    from atari_data import collect_frames

    from chunkstore import ChunkedArray, hdf5

    frames = collect_frames(GAME, cfg["collect_steps"], cfg["seed"], cache_dir=cfg.get("cache_dir"))
    n = cfg["transitions"]
    arr = ChunkedArray(n, (84, 84), np.uint8, chunk_len=cfg["chunk_len"], codec=cfg["codec"], name="frames")
    for start in range(0, n, len(frames)):
        arr.write(start, frames[: min(len(frames), n - start)])
    arr.flush()
    layouts = {k: v for k, v in LAYOUTS.items()
               if v.get("plain_readable", True) or arr.codec.hdf5_filter is not None}  # else same as format 3
    times: dict[str, dict[str, list[float]]] = {k: {"save": [], "lazy": []} for k in layouts}
    rows: dict[str, dict[str, Any]] = {}
    idx = np.random.default_rng(cfg["seed"]).integers(0, n, 256)
    tmp = tempfile.mkdtemp(dir=cfg.get("tmp_dir"))
    try:
        for _ in range(cfg["repeats"]):  # rounds: every layout sees the same machine load
            for label, kwargs in layouts.items():
                path = os.path.join(tmp, "frames.h5")
                t0 = time.perf_counter()
                hdf5.save(path, {"frames": arr}, progress=False, **kwargs)
                times[label]["save"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                with hdf5.load(path, lazy=True) as store:
                    times[label]["lazy"].append(time.perf_counter() - t0)
                    got = store.arrays["frames"]
                    t0 = time.perf_counter()
                    exact = bool(np.array_equal(got.take(idx), frames[idx % len(frames)]))
                    first_ms = (time.perf_counter() - t0) * 1e3
                    rows[label] = {"file_bytes": os.path.getsize(path), "exact": exact, "first_take_ms": first_ms,
                                   "group": store.header["chunks_per_hdf5_chunk"]["frames"],
                                   "hdf5_filter": store.header["hdf5_filters"]["frames"],
                                   "plain_h5py": _plain_read(path, frames[:8])}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for label, row in rows.items():
        row.update(save_s=float(np.median(times[label]["save"])), load_lazy_s=float(np.median(times[label]["lazy"])),
                   save_s_all=times[label]["save"], load_lazy_s_all=times[label]["lazy"],
                   file_vs_ram=row["file_bytes"] / arr.cbytes)
    return {"codec": arr.codec.name, "chunks": int(arr.nchunks), "cbytes": int(arr.cbytes), "layouts": rows}


def _plain_read(path: str, want: np.ndarray) -> str:
    """What plain h5py + hdf5plugin returns for the first frames: "yes" (exact), "fails loudly", "WRONG"."""
    import h5py
    import hdf5plugin  # noqa: F401 - the Zstd filter

    try:
        with h5py.File(path, "r") as f:
            got = f["frames"][: len(want)]
    except OSError:
        return "fails loudly"
    return "yes" if np.array_equal(got, want) else "WRONG"


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
        child = {"huge": child_huge, "layouts": child_layouts}.get(cfg["bench"], child_save)
        return child(cfg)
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
            cfgs += [dict(base, kind="ours", options=args.ours_options, transitions=n, save_format=v,
                          repeats=args.repeats, label=f"chunkstore save/load, format {v}") for v in args.formats]
    return cfgs


def layout_configs(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [dict(bench="layouts", transitions=n, codec=codec, chunk_len=args.layout_chunk_len, seed=args.seed,
                 collect_steps=args.collect_steps, cache_dir=args.cache_dir, tmp_dir=args.tmp_dir,
                 repeats=args.repeats, label=f"layouts {codec}")
            for n in args.layout_sizes for codec in args.layout_codecs]


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


def render_layouts(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    flat = []
    for r in rows:
        if "error" in r:
            continue
        base = r["layouts"].get("format 2", {})
        for label, lay in r["layouts"].items():
            flat.append({"transitions": r["transitions"], "codec": r["codec"], "layout": label,
                         "group": lay["group"], "hdf5_filter": lay["hdf5_filter"], "save_s": lay["save_s"],
                         "save_ratio": lay["save_s"] / base["save_s"] if base else None,
                         "load_lazy_s": lay["load_lazy_s"],
                         "lazy_ratio": lay["load_lazy_s"] / base["load_lazy_s"] if base else None,
                         "file_mb": lay["file_bytes"] / MB, "file_vs_ram": lay["file_vs_ram"],
                         "first_take_ms": lay["first_take_ms"], "plain_h5py": lay["plain_h5py"],
                         "exact": lay["exact"]})
    if not flat:
        return []
    return [f"\n### Layouts, store level: one frames array of real {GAME} frames, chunk_len "
            f"{args.layout_chunk_len}, layouts interleaved in {args.repeats} rounds in one process (medians)\n",
            md_table(flat, [("transitions", "frames"), ("codec", "codec"), ("layout", "layout"),
                            ("group", "chunks per HDF5 chunk"), ("hdf5_filter", "declared filter"),
                            ("save_s", "save s"), ("save_ratio", "save / format 2"),
                            ("load_lazy_s", "lazy load s"), ("lazy_ratio", "lazy load / format 2"),
                            ("file_mb", "file MB"), ("file_vs_ram", "file / in-RAM bytes"),
                            ("first_take_ms", "first take(256) ms"), ("plain_h5py", "plain h5py reads"),
                            ("exact", "exact")])]


def render(save_rows: list[dict[str, Any]], huge_rows: list[dict[str, Any]], args: argparse.Namespace,
           layout_rows: list[dict[str, Any]] | None = None) -> str:
    parts = []
    if save_rows:
        for r in save_rows:
            if "error" not in r:
                r["file_mb"] = r["file_bytes"] / MB
                r["load_s"] = r.get("load_s", r.get("load_lazy_s"))
        ours = [r for r in save_rows if r.get("kind") == "ours" and "error" not in r]
        for r in ours:  # against the previous format's row of the same size, same run
            v2 = next((o for o in ours if o["transitions"] == r["transitions"]
                       and o["config"].get("save_format") == 2), None)
            r["save_ratio"] = r["save_s"] / v2["save_s"] if v2 else None
        parts += [f"### Save / load, {GAME}, each row a fresh process\n", md_table(
            [r for r in save_rows if "error" not in r],
            [("transitions", "transitions"), ("label", "buffer"), ("file_mb", "file MB"), ("save_s", "save s"),
             ("save_ratio", "save / format 2"),
             ("load_s", "load s (lazy for ours)"), ("load_ram_s", "load into RAM s"),
             ("file_vs_ram", "file / in-RAM obs"), ("file_vs_ram_all", "file / in-RAM obs + other arrays"),
             ("first_sample_lazy_ms", "first sample after lazy load ms"),
             ("exact_after_load", "exact (pickle)"), ("exact_lazy", "exact (lazy)"), ("exact_ram", "exact (RAM)")])]
        if ours:
            parts.append("\nTargets: " + "; ".join(
                f"{r['label']}, {r['transitions']:,}: save {fmt(r['save_s'])} s (<= 2 s at 1M), file/RAM "
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
    parts += render_layouts(layout_rows or [], args)
    errs = [r for r in save_rows + huge_rows + (layout_rows or []) if "error" in r]
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
    p.add_argument("--ours-options", type=json.loads, default={},
                   help='JSON kwargs for our buffer, e.g. \'{"chunk_len": 64}\'')
    p.add_argument("--formats", nargs="+", type=int, default=[3, 2], help="file formats our rows save in")
    p.add_argument("--repeats", type=int, default=3, help="saves and lazy loads per row (median reported)")
    p.add_argument("--layout-sizes", nargs="+", type=int, default=[1_000_000], help="frames of the layout rows")
    p.add_argument("--layout-codecs", nargs="+", default=["zstd3+dict", "zstd3"])
    p.add_argument("--layout-chunk-len", type=int, default=4)
    p.add_argument("--skip-layouts", action="store_true")
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
    cfgs = (([] if args.skip_save else save_configs(args)) + ([] if args.skip_layouts else layout_configs(args))
            + ([] if args.skip_huge else huge_configs(args)))
    save_rows, huge_rows, layout_rows = [], [], []
    bar = progress(cfgs, desc="configs", unit="cfg")
    for cfg in bar:
        bar.set_postfix_str(cfg["label"])
        res = {"label": cfg["label"], "kind": cfg.get("kind"), "level": cfg.get("level"), "tier": cfg.get("tier"),
               "transitions": cfg["transitions"], "config": cfg}
        res.update(run_fresh(__file__, cfg, timeout=args.timeout))
        {"huge": huge_rows, "layouts": layout_rows}.get(cfg["bench"], save_rows).append(res)
        bar.write(f"{cfg['label']:32s} {cfg['transitions']:>11,}: "
                  + (res["error"] if "error" in res else
                     ", ".join(f"{k}={fmt(res[k])}" for k in ("save_s", "load_s", "load_lazy_s", "file_bytes",
                                                              "fill_per_s", "sample_ms", "peak_rss") if k in res)),
                  file=sys.stderr)
    md = render(save_rows, huge_rows, args, layout_rows)
    print(md)
    save_results(args.out, {"args": vars(args), "save": save_rows, "huge": huge_rows, "layouts": layout_rows}, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
