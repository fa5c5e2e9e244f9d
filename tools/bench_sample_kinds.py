"""sample(32) / sample(256) per vector observation kind against SB3's ReplayBuffer, and held bytes (issue 38).

For Pendulum (3,) with a (1,) action, HalfCheetah (17,) with (6,) and Humanoid (348,) with
(17,) (float32, SAC's default ``buffer_size=1_000_000``, 200k transitions stored), a child
process fills SB3's ``ReplayBuffer`` and our ``CompressedReplayBuffer`` (its defaults) with the
same transitions and times ``sample(32)`` and ``sample(256)`` in interleaved blocks of 10 calls
(SB3, ours, ours, SB3, ...), reporting the median block time per call of each, their ratio and
the microseconds per call over SB3's. It also counts
the bytes each buffer holds with ``tracemalloc`` (as ``tools/bench_held.py`` counts them: what
is allocated from before the buffer is made to after it was filled and sampled; SB3 preallocates
with ``np.zeros``, so its full capacity counts).

Each configuration runs in its own child process, under glibc's default malloc settings and
again with ``MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=17179869184`` (glibc
keeps and reuses freed memory: SB3's fresh batch arrays then cost no page faults); both are
printed. ``--before PATH`` also runs the children with ``PYTHONPATH=PATH`` (a checkout of the
code before a change, e.g. ``git worktree add /tmp/before main``), alternating with this
checkout's, so the table has a before and an after column measured in the same run (each
ratio is against SB3 in the same child).

RGB camera kinds (``--kinds rgb``; ``tools/dmc_data.py``): 3 stacked 84x84 RGB frames,
``(9, 84, 84)`` uint8, rendered by dm_control (cheetah-run, walker-walk, cartpole-swingup, random
actions, ``physics.render(84, 84, camera_id=0)``), ``--rgb-frames`` frames per task, cycled to
``--rgb-rows`` transitions in a buffer of ``--rgb-capacity`` (DrQ's 100k); a (6,) action. Three
kinds: the ``ReplayBuffer`` (n_envs 1), a ``DictReplayBuffer`` of ``pixels`` and the proprioceptive
``state`` (zero-padded to (24,)) against our ``CompressedDictReplayBuffer``, and n_envs 4 (env e
starts a quarter of the data further on). Bytes per transition are counted in a child process of
their own per buffer, filled with each distinct transition once: tracemalloc's count and the RSS
growth (psutil), against SB3's 127,008 B (obs and next_obs). Without dm_control the RGB kinds are
skipped with how to install it; ``--rgb-frames-source synthetic`` uses made-up frames (smoke tests).

Examples
--------
    .venv/bin/python tools/bench_sample_kinds.py --out results/bench_sample_kinds.json
    .venv/bin/python tools/bench_sample_kinds.py --before /tmp/before --out results/bench_sample_kinds.json
    .venv/bin/python tools/bench_sample_kinds.py --rows 20000 --rounds 3 --repeats 1   # quick
    MUJOCO_GL=osmesa .venv/bin/python tools/bench_sample_kinds.py --kinds rgb --repeats 3 \
        --out results/bench_sample_rgb.json
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import GLIBC as BENCH_GLIBC
from _bench_common import child_env, ensure_importable, md_table, save_results

ensure_importable()
import _bench_rgb as rgb  # noqa: E402 (needs ensure_importable)

#: observation and action sizes of the MuJoCo tasks SB3's SAC/TD3 users train on
KINDS = {"Pendulum (3,)": (3, 1), "HalfCheetah (17,)": (17, 6), "Humanoid (348,)": (348, 17)}
#: glibc settings: its defaults, and the one that spares SB3 its page faults
GLIBC = {"default": BENCH_GLIBC["default"], "no-fault": BENCH_GLIBC["spared"]}  # this table's names
BATCHES = (32, 256)
#: sample() calls timed together, SB3's and ours alternating block by block
BLOCK = 10


def _fill(bufs: list[Any], obs_dim: int, act_dim: int, rows: int) -> None:
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((rows + 1, 1, obs_dim)).astype(np.float32)
    act = rng.standard_normal((rows, 1, act_dim)).astype(np.float32)
    rew = rng.standard_normal((rows, 1)).astype(np.float32)
    done = rng.random((rows, 1)) < 0.001
    infos = [{"TimeLimit.truncated": False}]
    for t in range(rows):
        for buf in bufs:
            buf.add(obs[t], obs[t + 1], act[t], rew[t], done[t], infos)


def _held(make: Any, obs_dim: int, act_dim: int) -> int:
    """Bytes tracemalloc counts as allocated from before ``make()`` to after 2,000 adds and a few samples."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    buf = make()
    _fill([buf], obs_dim, act_dim, 2000)
    for b in BATCHES:
        buf.sample(b)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del buf
    gc.collect()
    return int(held)


def _time_blocks(bufs: dict[str, Any], cfg: dict[str, Any], out: dict[str, Any], kind: str) -> None:
    """Blocks of BLOCK calls, SB3's and ours alternating (the order flipping each block); the medians.

    A burst of load from elsewhere on a shared box lands on a few blocks of both arms instead of
    on one arm's whole round.
    """
    times: dict[tuple[str, int], list[float]] = {}
    order = list(bufs.items())
    for _ in range(cfg["rounds"]):
        for batch in BATCHES:
            for buf in bufs.values():
                for _ in range(5):
                    buf.sample(batch)
            for block in range(max(2, cfg["samples"] * (4 if batch == 32 else 1) // BLOCK)):
                for name, buf in order[::-1] if block % 2 else order:
                    t0 = time.perf_counter()
                    for _ in range(BLOCK):
                        buf.sample(batch)
                    times.setdefault((name, batch), []).append((time.perf_counter() - t0) / BLOCK)
    for batch in BATCHES:
        sb3, ours = (statistics.median(times[(name, batch)]) for name in ("sb3", "ours"))
        out[f"{kind}|{batch}"] = {"sb3_us": sb3 * 1e6, "ours_us": ours * 1e6, "ratio": ours / sb3,
                                  "over_us": (ours - sb3) * 1e6}


def _rgb_child(cfg: dict[str, Any], out: dict[str, Any]) -> None:
    """The RGB camera kinds: buffers of ``--rgb-capacity`` holding ``--rgb-rows`` transitions."""
    kinds = cfg.get("rgb_kinds") or []
    data = rgb.Data(cfg["rgb_frames"], cfg["rgb_source"]) if kinds else None
    for kind in kinds:
        layout, n_envs = rgb.KINDS[kind]
        rgb.make("ours", layout, 64 * n_envs, n_envs).close()  # what a process loads once
        bufs = {arm: rgb.make(arm, layout, cfg["rgb_capacity"], n_envs) for arm in ("sb3", "ours")}
        t0 = time.perf_counter()
        for t in range(cfg["rgb_rows"] // n_envs):
            row = data.row(t, n_envs, layout)  # type: ignore[union-attr]
            for buf in bufs.values():
                buf.add(*row)
        out[f"{kind}|fill_s"] = time.perf_counter() - t0
        _time_blocks(bufs, {**cfg, "samples": cfg["rgb_samples"]}, out, kind)
        for buf in bufs.values():
            getattr(buf, "close", lambda: None)()
        del bufs
        gc.collect()


def child(cfg: dict[str, Any]) -> dict[str, Any]:
    """One process: every kind, SB3 against ours, interleaved rounds; the medians and held bytes."""
    import torch as th
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from sb3_integration import CompressedReplayBuffer

    th.set_num_threads(1)
    out: dict[str, Any] = {}
    if cfg.get("held_rgb"):
        return rgb.held(cfg["held_rgb"])
    _rgb_child(cfg, out)
    for kind in cfg.get("kinds", list(KINDS)):
        obs_dim, act_dim = KINDS[kind]
        obs_space = spaces.Box(-10, 10, (obs_dim,), np.float32)
        act_space = spaces.Box(-1, 1, (act_dim,), np.float32)
        makers = {"sb3": partial(ReplayBuffer, cfg["capacity"], obs_space, act_space, "cpu"),
                  "ours": partial(CompressedReplayBuffer, cfg["capacity"], obs_space, act_space, "cpu")}
        makers["ours"]().close()  # first use loads what a process loads once (not the buffer's bytes)
        held = {name: _held(make, obs_dim, act_dim) for name, make in makers.items()}
        bufs = {name: make() for name, make in makers.items()}
        _fill(list(bufs.values()), obs_dim, act_dim, cfg["rows"])
        _time_blocks(bufs, cfg, out, kind)
        storage = bufs["ours"].__dict__.get("_storage")
        out[f"{kind}|held"] = {"sb3": held["sb3"], "ours": held["ours"], "ratio": held["ours"] / held["sb3"],
                               "storage": None if storage is None else str(storage.get(None))}
        for buf in bufs.values():
            getattr(buf, "close", lambda: None)()
        del bufs
        gc.collect()
    return out


def _run_child(cfg: dict[str, Any], glibc: str, pythonpath: str | None) -> dict[str, Any]:
    env = child_env("spared" if glibc == "no-fault" else "default")
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(cfg)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=cfg.get("timeout", 1800))
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode or not lines:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def _rgb_kinds(args: argparse.Namespace) -> list[str]:
    """The RGB kinds to run: none without ``rgb`` in ``--kinds``, or (printing how to install it) without dm_control."""
    if "rgb" not in args.kinds:
        return []
    if args.rgb_frames_source == "dmc":
        import dmc_data

        why = dmc_data.available()
        if why is not None:
            print(f"skipping the RGB camera kinds: {dmc_data.INSTALL_HINT} ({why})", file=sys.stderr)
            return []
    return list(rgb.KINDS)


def _held_rgb(args: argparse.Namespace, kinds: list[str]) -> list[dict[str, Any]]:
    """Bytes per RGB transition: one child per (glibc setting, kind, arm)."""
    rows = []
    for glibc in args.glibc:
        for kind in kinds:
            row: dict[str, Any] = {"glibc": glibc, "kind": kind, "sb3_nominal": rgb.SB3_OBS_BYTES}
            for arm in ("sb3", "ours"):
                cfg = {"held_rgb": {"kind": kind, "arm": arm, "rgb_frames": args.rgb_frames,
                                    "rgb_source": args.rgb_frames_source}}
                res = _run_child(cfg, glibc, None)
                row.update({f"{arm}_traced": res["traced_per_transition"], f"{arm}_rss": res["rss_per_transition"],
                            f"{arm}_traced_marginal": res.get("traced_marginal"),
                            f"{arm}_rss_marginal": res.get("rss_marginal"), "transitions": res["transitions"]})
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=1_000_000, help="buffer_size (SAC's default)")
    parser.add_argument("--rows", type=int, default=200_000, help="transitions stored before sampling")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per child (medians)")
    parser.add_argument("--samples", type=int, default=200, help="sample(256) calls per round (x4 for sample(32))")
    parser.add_argument("--repeats", type=int, default=1, help="children per (glibc setting, version)")
    parser.add_argument("--glibc", nargs="+", default=list(GLIBC), choices=list(GLIBC))
    parser.add_argument("--kinds", nargs="+", default=["vector", "rgb"], choices=["vector", "rgb"],
                        help="vector observations, RGB camera stacks (dm_control), or both")
    parser.add_argument("--rgb-frames", type=int, default=700, help="rendered frames per dm_control task")
    parser.add_argument("--rgb-frames-source", default="dmc", choices=["dmc", "synthetic"],
                        help="synthetic: made-up frames of the same shapes, without dm_control (smoke tests)")
    parser.add_argument("--rgb-rows", type=int, default=10_000, help="RGB transitions stored before sampling")
    parser.add_argument("--rgb-capacity", type=int, default=100_000, help="RGB buffer_size (DrQ's)")
    parser.add_argument("--rgb-samples", type=int, default=40, help="RGB sample(256) calls per round (x4 for 32)")
    parser.add_argument("--held-only", action="store_true", help="RGB bytes per transition only (no timing)")
    parser.add_argument("--before", default=None, help="PYTHONPATH of the code before the change (a checkout)")
    parser.add_argument("--out", default=None, help="JSON file (a .md table is written beside it)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return {}

    vector = list(KINDS) if "vector" in args.kinds else []
    rgb_kinds = _rgb_kinds(args)
    cfg = {"capacity": args.capacity, "rows": args.rows, "rounds": args.rounds, "samples": args.samples,
           "kinds": vector, "rgb_kinds": rgb_kinds, "rgb_frames": args.rgb_frames,
           "rgb_source": args.rgb_frames_source, "rgb_rows": args.rgb_rows, "rgb_capacity": args.rgb_capacity,
           "rgb_samples": args.rgb_samples}
    here = str(Path(__file__).resolve().parent.parent)
    versions = {"after": here, **({"before": args.before} if args.before else {})}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(0 if args.held_only or not vector + rgb_kinds else args.repeats):
        for glibc in args.glibc:
            for version, path in versions.items():
                print(f"child: glibc {glibc}, {version} ({path})", file=sys.stderr, flush=True)
                runs.setdefault((glibc, version), []).append(_run_child(cfg, glibc, path))
    held_rgb = _held_rgb(args, rgb_kinds) if rgb_kinds else []

    rows, held_rows = [], []
    for glibc in args.glibc if not args.held_only else ():
        for kind in vector + rgb_kinds:
            for batch in BATCHES:
                row: dict[str, Any] = {"glibc": glibc, "kind": kind, "batch": batch}
                for version in versions:
                    res = [r[f"{kind}|{batch}"] for r in runs[(glibc, version)]]
                    row[f"{version}_ratio"] = statistics.median(x["ratio"] for x in res)
                    row[f"{version}_ratio_range"] = [min(x["ratio"] for x in res), max(x["ratio"] for x in res)]
                    row[f"{version}_range"] = "{:.2f}-{:.2f}".format(*row[f"{version}_ratio_range"])
                    row[f"{version}_us"] = statistics.median(x["ours_us"] for x in res)
                    row[f"{version}_sb3_us"] = statistics.median(x["sb3_us"] for x in res)
                    row[f"{version}_over_us"] = statistics.median(x["over_us"] for x in res)
                rows.append(row)
            for version in versions if kind in KINDS else ():
                h = runs[(glibc, version)][0][f"{kind}|held"]
                held_rows.append({"glibc": glibc, "kind": kind, "version": version, "sb3_MB": h["sb3"] / 1e6,
                                  "ours_MB": h["ours"] / 1e6, "ratio": h["ratio"], "storage": h["storage"]})

    cols: list[Any] = [("glibc", "glibc"), ("kind", "observations"), ("batch", "batch")]
    for version in versions:
        cols += [(f"{version}_sb3_us", f"SB3 µs ({version} run)"), (f"{version}_us", f"ours µs ({version})"),
                 (f"{version}_ratio", f"ours/SB3 ({version})"), (f"{version}_range", f"children's range ({version})"),
                 (f"{version}_over_us", f"µs over SB3 ({version})")]
    md = ["## sample() per observation kind: ours / SB3's ReplayBuffer (same process, interleaved)",
          "", f"vector kinds: capacity {args.capacity:,}, {args.rows:,} transitions stored; RGB kinds: capacity "
          f"{args.rgb_capacity:,}, {args.rgb_rows:,} transitions stored ({args.rgb_frames} {args.rgb_frames_source} "
          f"frames per task, cycled); {args.rounds} rounds per child, "
          f"{args.repeats} child(ren) per setting; medians over children. glibc `no-fault`: "
          "`MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=17179869184`.", "",
          md_table(rows, cols)]
    if held_rows:
        md += ["", "## Bytes held (tracemalloc: made, 2,000 adds, one sample of each size)", "",
               md_table(held_rows, ["glibc", "kind", "version", ("sb3_MB", "SB3 MB"), ("ours_MB", "ours MB"),
                                    ("ratio", "ours/SB3"), ("storage", "our storage")])]
    if held_rgb:
        md += ["", "## RGB bytes per transition (a child per buffer, each distinct transition added once)", "",
               md_table(held_rgb, ["glibc", "kind", "transitions", ("sb3_nominal", "SB3 obs+next_obs B"),
                                   ("sb3_traced", "SB3 B (tracemalloc)"), ("sb3_rss", "SB3 B (RSS)"),
                                   ("ours_traced", "ours B (tracemalloc)"), ("ours_rss", "ours B (RSS)"),
                                   ("sb3_traced_marginal", "SB3 B marginal (tracemalloc)"),
                                   ("ours_traced_marginal", "ours B marginal (tracemalloc)"),
                                   ("ours_rss_marginal", "ours B marginal (RSS)")]),
               "", "B: bytes per transition, all held over the transitions added; marginal: the growth over the "
               "second half of the adds per transition (without what a buffer holds whatever its size: our "
               "reused sample() output blocks, 2 x 256 stacks after a sample(256))."]
    print("\n".join(md))
    payload = {"config": {**cfg, "repeats": args.repeats, "before": args.before}, "rows": rows, "held": held_rows,
               "held_rgb": held_rgb, "runs": {f"{g}|{v}": r for (g, v), r in runs.items()}}
    save_results(args.out, payload, "\n".join(md))
    return payload


if __name__ == "__main__":
    main()
