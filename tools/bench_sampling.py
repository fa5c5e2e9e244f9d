"""Sampling, add() and memory of the replay buffers, side by side in one process (issue 7).

Every buffer holds the same real Atari transitions (SB3's ``AtariWrapper`` +
``VecFrameStack``, random policy, ~20k steps cycled up to ``--capacity``). Timings
are interleaved: in each repetition every buffer takes ``--block`` samples with the
same seeds, and its time is divided by SB3's ``ReplayBuffer`` time *of the same
repetition*; the table shows the median of those ratios (and their spread), so a
slow moment of a shared machine hits every buffer alike. torch runs on one thread
in every arm (with its default two threads on a busy 2-core box, SB3's own
``th.tensor`` copy costs ~12 ms and flatters everyone else).

Measured per buffer: bytes held for observations per transition (for ours
everything the buffer allocates beyond SB3's small arrays: compressed frames, open
chunks, chunk table, frame index), sample(32) and sample(256) against SB3,
add() against SB3 with ``optimize_memory_usage=True`` (steady state: a second lap
over the full buffer, blocks of adds interleaved), and whether samples equal
SB3's bit for bit. Optionally (``--dqn-steps``) DQN trains on real Pong with
SB3's buffer and ours, same seed: steps/s, the share of ``learn()`` spent in
``sample()``, and whether the trained parameters are identical.

Examples
--------
    .venv/bin/python tools/bench_sampling.py --out results/bench_sampling.json
    .venv/bin/python tools/bench_sampling.py --games Pong --capacity 20000 --reps 5 --dqn-steps 0  # quick
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import (
    ensure_importable,
    env_info,
    md_table,
    parse_kwargs,
    save_results,
    try_import,
)

ensure_importable()

OURS = ["default", "chunk_len=2", "chunk_len=8", "preset=compact", "native=off", "threads=1", "threads=4"]
SB3EB = ["zstd3", "lz4-frame/1"]
OBS_BYTES = 4 * 84 * 84


class Arm:
    """One buffer under test: how to build it, sample it, and size it."""

    def __init__(self, label: str, buf: Any, kind: str, native: bool = True) -> None:
        self.label, self.buf, self.kind, self.native = label, buf, kind, native
        self.ratios: dict[int, list[float]] = {}
        self.ms: dict[int, list[float]] = {}

    def sample(self, batch: int) -> Any:
        if self.native:
            return self.buf.sample(batch)
        from chunkstore import native

        with native.disabled():
            return self.buf.sample(batch)

    def bytes_per_transition(self, n: int) -> float:
        if self.kind == "sb3":
            obs = self.buf.observations.nbytes
            return (obs if self.buf.optimize_memory_usage else 2 * obs) / self.buf.buffer_size
        if self.kind == "sb3eb":
            total = 0
            for name in ("observations", "next_observations"):
                arr = getattr(self.buf, name, None)
                if arr is not None and arr.dtype == object:
                    total += sum(len(x) for x in arr.reshape(-1) if x is not None)
            return total / n
        return self.buf.nbytes_stored / n


def make_buffers(args: argparse.Namespace, obs_space: Any, act_space: Any) -> tuple[list[Arm], Any, Any]:
    from stable_baselines3.common.buffers import ReplayBuffer

    from sb3_integration import CompressedReplayBuffer

    cap = args.capacity
    sb3 = Arm("SB3 ReplayBuffer", ReplayBuffer(cap, obs_space, act_space, "cpu"), "sb3")
    sb3_opt = ReplayBuffer(cap, obs_space, act_space, "cpu", optimize_memory_usage=True,
                           handle_timeout_termination=False)
    arms = [sb3]
    built: dict[str, Any] = {}
    for spec in args.ours:
        kw = parse_kwargs(spec)
        native = kw.pop("native", "on") != "off"
        key = repr(sorted(kw.items()))
        if key not in built:
            built[key] = CompressedReplayBuffer(cap, obs_space, act_space, "cpu", **kw)
        label = "ours " + (spec if spec != "default" else "default")
        arms.append(Arm(label, built[key], "ours", native=native))
    if args.sb3eb:
        mod, err = try_import("sb3_extra_buffers.compressed")
        if mod is None:
            print(f"sb3-extra-buffers not installed ({err}): skipped", file=sys.stderr)
        else:
            from sb3_extra_buffers.compressed.base import find_buffer_dtypes

            dtypes = find_buffer_dtypes(obs_space.shape, elem_dtype=np.uint8)
            for m in args.sb3eb:
                buf = mod.CompressedReplayBuffer(cap, obs_space, act_space, device="cpu",
                                                 compression_method=m, dtypes=dtypes)
                arms.append(Arm(f"sb3-extra-buffers {m}", buf, "sb3eb"))
    return arms, sb3_opt, built["[]"] if "[]" in built else arms[1].buf


def fill(arms: list[Arm], sb3_opt: Any, ours: Any, tr: Any, n: int, block: int) -> dict[str, float]:
    """Fill every buffer to ``n``, then time a second lap of adds, interleaved in blocks."""
    actions = tr.actions.reshape(len(tr), 1, 1)
    steps = len(tr)

    def add(buf: Any, a: int, b: int) -> float:
        t0 = time.perf_counter()
        for i in range(a, b):
            t = i % steps
            buf.add(tr.obs[t], tr.next_obs[t], actions[t], tr.rewards[t], tr.dones[t], tr.infos[t])
        return (time.perf_counter() - t0) / (b - a)

    targets = [sb3_opt, *dict.fromkeys(a.buf for a in arms)]
    for a in range(0, n, block):
        for buf in targets:
            add(buf, a, min(a + block, n))
    ratios, ours_us, sb3_us = [], [], []
    lap = min(n, 20 * block)
    for a in range(n, n + lap, block):  # the steady state: wrap-around, releases
        t_sb3 = add(sb3_opt, a, a + block)
        t_ours = add(ours, a, a + block)
        ratios.append(t_ours / t_sb3)
        ours_us.append(t_ours * 1e6)
        sb3_us.append(t_sb3 * 1e6)
    for buf in targets[1:]:
        if buf is not ours:
            add(buf, n, n + lap)  # same contents in every buffer
    return {"add_ratio": float(np.median(ratios)), "add_ratio_q1": float(np.percentile(ratios, 25)),
            "add_ratio_q3": float(np.percentile(ratios, 75)),
            "add_us_ours": float(np.median(ours_us)), "add_us_sb3_opt": float(np.median(sb3_us))}


def time_samples(arms: list[Arm], batch: int, reps: int, block: int) -> None:
    for arm in arms:  # warm-up (numba cache load, first-touch pages)
        np.random.seed(0)  # noqa: NPY002 - SB3 samples with the global RNG
        for _ in range(3):
            arm.sample(batch)
    for rep in range(reps):
        base = None
        for arm in arms:
            np.random.seed(1000 + rep)  # noqa: NPY002
            t0 = time.perf_counter()
            for _ in range(block):
                arm.sample(batch)
            ms = (time.perf_counter() - t0) / block * 1e3
            base = ms if base is None else base
            arm.ms.setdefault(batch, []).append(ms)
            arm.ratios.setdefault(batch, []).append(ms / base)


def exact(arm: Arm, sb3: Arm) -> bool:
    import torch as th

    for seed in (1, 2):
        np.random.seed(seed)  # noqa: NPY002
        a = arm.sample(64)
        np.random.seed(seed)  # noqa: NPY002
        b = sb3.sample(64)
        for x, y in zip(a, b, strict=True):
            if x is None or y is None:
                if x is not y:
                    return False
            elif not th.equal(x, y):
                return False
    return True


def replay_rows(args: argparse.Namespace, game: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import gymnasium as gym
    from atari_data import collect_stacked

    tr = collect_stacked(game, args.collect_steps, 1, args.seed, args.cache_dir, progress=True)
    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    act_space = gym.spaces.Discrete(int(tr.actions.max()) + 1)
    arms, sb3_opt, ours = make_buffers(args, obs_space, act_space)
    t0 = time.perf_counter()
    add = fill(arms, sb3_opt, ours, tr, args.capacity, args.add_block)
    print(f"{game}: filled {len(arms)} buffers in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    for batch in (32, 256):
        time_samples(arms, batch, args.reps, args.block if batch == 256 else 4 * args.block)
    rows = []
    for arm in arms:
        row: dict[str, Any] = {"game": game, "buffer": arm.label,
                               "bytes_per_transition": arm.bytes_per_transition(args.capacity)}
        for batch in (32, 256):
            r = np.array(arm.ratios[batch])
            row[f"sample{batch}_ms"] = float(np.median(arm.ms[batch]))
            row[f"sample{batch}_ratio"] = float(np.median(r))
            row[f"sample{batch}_ratio_iqr"] = [float(np.percentile(r, 25)), float(np.percentile(r, 75))]
        row["exact"] = True if arm.kind == "sb3" else (exact(arm, arms[0]) if arm.kind == "ours" else None)
        if arm.kind == "ours":
            info = arm.buf.storage_info()["observations"]
            row.update(chunk_len=info["chunk_len"], codec=info["codec"], frames_cbytes=info["frames_cbytes"],
                       index_bytes=info["index_nbytes"], table_bytes=info["chunk_table_nbytes"],
                       ring_frames=info["ring_frames"], frames_written=info["frames_written"])
        rows.append(row)
    return rows, {"game": game, **add}


# -- end to end ----------------------------------------------------------------
def dqn_row(args: argparse.Namespace) -> dict[str, Any]:
    """DQN on real Pong, same seed, SB3's buffer vs ours: steps/s, sample share, parameters.

    The two runs are interleaved in segments of ``--dqn-segment`` steps
    (``learn(..., reset_num_timesteps=False)``), so a busy moment of the machine
    slows both alike. Each run keeps its own copy of the global RNGs (``random``,
    numpy's, torch's: exploration and SB3's sampling draw from them) and swaps it
    in for its segments, so both make the same draws and their parameters must match.
    """
    import random

    import torch as th
    from atari_data import make_env_id
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from sb3_integration import CompressedReplayBuffer

    env_id, kwargs = make_env_id("Pong")
    arms = {}
    for label, cls in (("sb3", None), ("ours", CompressedReplayBuffer)):
        env = VecFrameStack(make_atari_env(env_id, n_envs=1, seed=args.seed, env_kwargs=kwargs), 4)
        model = DQN("CnnPolicy", env, buffer_size=min(args.dqn_steps, 100_000), learning_starts=1000,
                    train_freq=4, batch_size=32, seed=args.seed, device="cpu", replay_buffer_class=cls,
                    optimize_memory_usage=False, verbose=0)
        arms[label] = {"model": model, "env": env, "wall": 0.0, "sample": [0.0]}
        sample = model.replay_buffer.sample

        def timed(*a: Any, _sample: Any = sample, _spent: list[float] = arms[label]["sample"], **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _sample(*a, **k)
            finally:
                _spent[0] += time.perf_counter() - t0

        model.replay_buffer.sample = timed  # type: ignore[method-assign]
    # both models were built from the same seed, so the RNG state after the last build is each one's start
    for arm in arms.values():
        arm["rng"] = (random.getstate(), np.random.get_state(), th.get_rng_state())  # noqa: NPY002
    done = 0
    while done < args.dqn_steps:
        step = min(args.dqn_segment, args.dqn_steps - done)
        for arm in arms.values():
            py_state, np_state, th_state = arm["rng"]
            random.setstate(py_state)
            np.random.set_state(np_state)  # noqa: NPY002
            th.set_rng_state(th_state)
            t0 = time.perf_counter()
            arm["model"].learn(step, reset_num_timesteps=False)
            arm["wall"] += time.perf_counter() - t0
            arm["rng"] = (random.getstate(), np.random.get_state(), th.get_rng_state())  # noqa: NPY002
        done += step
    out: dict[str, Any] = {"steps": args.dqn_steps}
    for label, arm in arms.items():
        out[f"{label}_steps_per_s"] = args.dqn_steps / arm["wall"]
        out[f"{label}_sample_share"] = arm["sample"][0] / arm["wall"]
        arm["env"].close()
    out["steps_per_s_ratio"] = out["ours_steps_per_s"] / out["sb3_steps_per_s"]
    pa, pb = (list(arms[x]["model"].policy.parameters()) for x in ("sb3", "ours"))
    out["parameters_identical"] = all(th.equal(a, b) for a, b in zip(pa, pb, strict=True))
    return out


# -- report --------------------------------------------------------------------
COLUMNS = [("game", "game"), ("buffer", "buffer"), ("bytes_per_transition", "B/transition"),
           ("sample32_ms", "sample(32) ms"), ("sample32_ratio", "sample(32) / SB3"),
           ("sample256_ms", "sample(256) ms"), ("sample256_ratio", "sample(256) / SB3"), ("exact", "= SB3")]


def render(rows: list[dict[str, Any]], adds: list[dict[str, Any]], dqn: dict[str, Any] | None) -> str:
    parts = ["### Sampling and memory (one process, interleaved; ratios are medians of per-repetition ratios)",
             "", md_table(rows, COLUMNS), "", "### add() against SB3 with optimize_memory_usage=True (steady state)",
             "", md_table(adds, [("game", "game"), ("add_us_sb3_opt", "SB3 opt µs"), ("add_us_ours", "ours µs"),
                                 ("add_ratio", "ours / SB3")])]
    if dqn:
        parts += ["", "### DQN on real Pong, same seed", "",
                  md_table([dqn], [("steps", "steps"), ("sb3_steps_per_s", "SB3 steps/s"),
                                   ("ours_steps_per_s", "ours steps/s"), ("steps_per_s_ratio", "ours / SB3"),
                                   ("sb3_sample_share", "SB3 sample share"),
                                   ("ours_sample_share", "ours sample share"),
                                   ("parameters_identical", "parameters identical")])]
    return "\n".join(parts) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> str | None:
    """Bytes per transition against sample(256) time, one marker per buffer and game."""
    mpl, err = try_import("matplotlib")
    if mpl is None:
        return f"matplotlib not installed ({err}): no plot"
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"SB3": "tab:gray", "sb3-extra-buffers": "tab:red", "ours": "tab:blue"}
    for row in rows:
        fam = next(k for k in colors if row["buffer"].startswith(k))
        if fam == "ours" and any(s in row["buffer"] for s in ("native=off", "threads")):
            continue
        marker = "o" if row["game"] == "MsPacman" else "s"
        ax.scatter(row["sample256_ratio"], row["bytes_per_transition"], c=colors[fam], marker=marker)
        if fam == "SB3" and row["game"] != rows[0]["game"]:
            continue  # the same point for every game: one label
        label = (f"{row['buffer']} (both games)" if fam == "SB3"
                 else f"{row['buffer'].replace('ours ', 'chunkstore ')} ({row['game']})")
        ax.annotate(label, (row["sample256_ratio"], row["bytes_per_transition"]), fontsize=7,
                    xytext=(4, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("sample(256) time / SB3 ReplayBuffer (same run)")
    ax.set_ylabel("bytes held per transition (observations)")
    ax.set_title("Replay buffers on real Atari frames, 100k transitions")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", nargs="+", default=["MsPacman", "Pong"])
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--collect-steps", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--ours", nargs="+", default=OURS, help="buffer kwargs per arm; native=off: Python path")
    p.add_argument("--sb3eb", nargs="*", default=SB3EB, help="sb3-extra-buffers methods (none: skip)")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--block", type=int, default=10, help="sample(256) calls per timing (x4 for sample(32))")
    p.add_argument("--add-block", type=int, default=1000)
    p.add_argument("--dqn-steps", type=int, default=20_000, help="0: skip the DQN row")
    p.add_argument("--dqn-segment", type=int, default=2000, help="steps per interleaved learn() call")
    p.add_argument("--out", default=None, help="JSON path (a .md and a .png are written beside it)")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    rows, adds = [], []
    for game in args.games:
        r, a = replay_rows(args, game)
        rows += r
        adds.append(a)
        print(md_table(r, COLUMNS), file=sys.stderr)
        import gc

        gc.collect()
    dqn = dqn_row(args) if args.dqn_steps else None
    md = render(rows, adds, dqn)
    print(md)
    payload = {"env": env_info(), "args": vars(args), "rows": rows, "add": adds, "dqn": dqn}
    if args.out:
        note = plot(rows, Path(args.out).with_suffix(".png"))
        if note:
            print(note, file=sys.stderr)
    save_results(args.out, payload, md)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
