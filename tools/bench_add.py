"""Single-transition ``add()`` cost on real MsPacman stacks: SB3 (both layouts) against ours, in one process.

    python tools/bench_add.py [--rounds 9] [--block 1000] [--capacity 10000] [--n-envs 1 8]
        [--glibc default spared] [--cpu] [--encode-free] [--background-encode] [--out results/bench_add.json]

Real frames: ``collect_stacked`` from ``tools/atari_data.py`` (SB3's own Atari pipeline, a
uniformly random policy, (4, 84, 84) uint8, ``--n-envs`` envs; cached under ``./data``).
``--steps`` and ``--capacity`` count transitions (divided by n_envs into steps and rows). Each
arm is filled once before timing (steady state: every page touched, ours wrapping), then timed
in blocks of ``--block`` adds, the arms alternated within a round and their order rotated
between rounds. The figures are the median over rounds of each arm's µs per transition and of
its ratio to SB3 with ``optimize_memory_usage=True`` in the same round (the machine is shared
and noisy: compare the ratios). With ``--glibc`` each (glibc, n_envs) runs in a fresh child
under those malloc settings (``tools/_bench_common.GLIBC``). Arms: SB3 ``ReplayBuffer``
(``optimize_memory_usage`` False and True) and ``CompressedReplayBuffer`` with its defaults.
``--encode-free`` adds a diagnostic arm: ours with its codec's ``encode`` replaced, after the
warm-up fill, by one that returns the same stored blob for every chunk (what an add costs
without the compression; that buffer's contents are garbage, it is never read).
``--background-encode`` adds another diagnostic arm, a prototype of sealing off the calling
thread: a full chunk stays open while a worker thread compresses it (zstd releases the GIL), and
the next add installs the finished chunks (tier put, table entry) on the calling thread. It is
not the library's code (this script patches the buffer's chunk array after the warm-up fill);
it answers what moving the encode off the calling thread would buy. With ``--cpu`` every arm
also reports the process's CPU time per transition (all threads: the worker's encode included),
next to the calling thread's.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from _bench_common import GLIBC, run_fresh, save_results  # noqa: E402

ENCODE_FREE = "ours, encode free (diagnostic)"
BACKGROUND = "ours, background encode (prototype)"


def _arms(capacity: int, encode_free: bool = False, n_envs: int = 1, background: bool = False) -> dict[str, Any]:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    from sb3_integration import CompressedReplayBuffer

    obs_space, act_space = spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(9)
    return {
        "SB3 opt=False": ReplayBuffer(capacity, obs_space, act_space, "cpu", n_envs=n_envs),
        "SB3 opt=True": ReplayBuffer(capacity, obs_space, act_space, "cpu", n_envs=n_envs,
                                     optimize_memory_usage=True, handle_timeout_termination=False),
        "ours (default)": CompressedReplayBuffer(capacity, obs_space, act_space, "cpu", n_envs=n_envs),
        **({ENCODE_FREE: CompressedReplayBuffer(capacity, obs_space, act_space, "cpu", n_envs=n_envs)}
           if encode_free else {}),
        **({BACKGROUND: CompressedReplayBuffer(capacity, obs_space, act_space, "cpu", n_envs=n_envs)}
           if background else {}),
    }


def _adds(buf: Any, tr: Any, start: int, n: int, clock: Any = time.perf_counter) -> tuple[float, float]:
    """Seconds per ``add()`` over ``n`` transitions from ``start`` (cycled), by ``clock`` and by the
    process's CPU time (every thread)."""
    m = len(tr)
    t0, p0 = clock(), time.process_time()
    for i in range(start, start + n):
        t = i % m
        buf.add(tr.obs[t], tr.next_obs[t], tr.actions[t], tr.rewards[t], tr.dones[t], tr.infos[t])
    return (clock() - t0) / n, (time.process_time() - p0) / n


def _encode_free(buf: Any, tr: Any) -> None:
    """``buf``'s frame codec encodes nothing from now on: every chunk is stored as one blob
    encoded once here (a real chunk's bytes, so the tier stores what it would)."""
    (store,) = buf.frame_stores.values()
    codec = store.frames.codec
    blob = codec.encode(np.ascontiguousarray(tr.obs[:store.chunk_len, 0, -1]))
    codec.encode = lambda raw: blob  # the instance only: the other arms keep theirs


def _background_encode(buf: Any) -> None:
    """``buf``'s full chunks are compressed on a worker thread and installed by the next add (the
    module docstring). A chunk stays open, so readable, until its bytes are installed."""
    (store,) = buf.frame_stores.values()
    arr = store.frames
    codec = arr.codec
    encode = codec.encode  # the trained codec's (the warm-up fill trained it)
    jobs: queue.SimpleQueue[tuple[int, np.ndarray]] = queue.SimpleQueue()
    done: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()

    def work() -> None:
        while True:
            c, raw = jobs.get()
            done.put((c, encode(raw)))

    threading.Thread(target=work, daemon=True).start()
    ready: list[Any] = []  # the blob the next encode() call returns (the chunk being installed)
    codec.encode = lambda raw: ready.pop() if ready else encode(raw)  # others seal inline, as before

    def seal_full(chunks: Any) -> None:
        with arr._lock:
            while True:  # install what the worker finished
                try:
                    c, blob = done.get_nowait()
                except queue.Empty:
                    break
                if c in arr._table.open:  # (not sealed inline meanwhile)
                    ready.append(blob)
                    arr._seal(c)
            for c in np.asarray(chunks, np.int64).tolist():
                if c in arr._table.open:
                    jobs.put((c, arr._table.open[c]))

    arr.seal_full = seal_full


def _measure(cfg: dict[str, Any]) -> dict[str, Any]:
    """One configuration (``game, steps, n_envs, capacity, block, rounds, cpu, encode_free``), timed here."""
    import torch as th
    from atari_data import collect_stacked

    th.set_num_threads(1)
    clock = time.thread_time if cfg["cpu"] else time.perf_counter
    n = cfg["n_envs"]  # --steps and --capacity count transitions: the same frames and bytes at every n_envs
    tr = collect_stacked(cfg["game"], max(cfg["steps"] // n, 64), n_envs=n, seed=0)
    rows = max(cfg["capacity"] // n, 64)
    arms = _arms(rows, cfg["encode_free"], n, cfg.get("background", False))
    fill = rows + 1  # every page touched, ours wrapping
    cursor = dict.fromkeys(arms, fill)
    for buf in arms.values():  # warm-up: fill once, so every arm is timed at steady state
        _adds(buf, tr, 0, fill)
    if cfg["encode_free"]:  # after the fill: the codec is trained by then (training replaces it)
        _encode_free(arms[ENCODE_FREE], tr)
    if BACKGROUND in arms:
        _background_encode(arms[BACKGROUND])
    names = list(arms)
    per: dict[str, list[float]] = {n: [] for n in names}
    proc: dict[str, list[float]] = {n: [] for n in names}
    ratio: dict[str, list[float]] = {n: [] for n in names}
    for r in range(cfg["rounds"]):
        order = names[r % len(names):] + names[: r % len(names)]
        got, got_proc = {}, {}
        for name in order:
            got[name], got_proc[name] = _adds(arms[name], tr, cursor[name], cfg["block"], clock)
            cursor[name] += cfg["block"]
        for name in names:
            per[name].append(got[name] * 1e6 / cfg["n_envs"])  # per transition
            proc[name].append(got_proc[name] * 1e6 / cfg["n_envs"])
            ratio[name].append(got[name] / got["SB3 opt=True"])
    return {**cfg, "rows": [{"arm": n, "us_per_transition": float(np.median(per[n])),
                             "process_cpu_us_per_transition": float(np.median(proc[n])),
                             "vs_sb3_opt_true": float(np.median(ratio[n])), "us_rounds": per[n],
                             "ratio_rounds": ratio[n]} for n in names]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--game", default="MsPacman")
    p.add_argument("--steps", type=int, default=3000, help="real transitions collected (steps x n_envs), then cycled")
    p.add_argument("--capacity", type=int, default=10_000, help="transitions (buffer_size x n_envs)")
    p.add_argument("--block", type=int, default=1000, help="add() calls per arm per round")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--n-envs", type=int, nargs="+", default=[1])
    p.add_argument("--glibc", nargs="+", default=None, choices=sorted(GLIBC),
                   help="run each configuration in a fresh child under these malloc settings (default: in-process)")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--config", default=None, help=argparse.SUPPRESS)  # child mode (run_fresh)
    p.add_argument("--cpu", action="store_true",
                   help="time with the calling thread's CPU time (time.thread_time) instead of wall time: "
                        "steadier on a shared machine (add() runs on the calling thread only)")
    p.add_argument("--encode-free", action="store_true",
                   help="add a diagnostic arm: ours with every chunk's encode replaced by a stored blob")
    p.add_argument("--background-encode", action="store_true",
                   help="add a prototype arm: ours with full chunks compressed on a worker thread (docstring)")
    args = p.parse_args(argv)
    if args.config:
        print(json.dumps(_measure(json.loads(args.config))))
        return 0
    base = {"game": args.game, "steps": args.steps, "capacity": args.capacity, "block": args.block,
            "rounds": args.rounds, "cpu": args.cpu, "encode_free": args.encode_free,
            "background": args.background_encode}
    results = []
    for glibc in args.glibc or [None]:
        for n_envs in args.n_envs:
            cfg = {**base, "n_envs": n_envs}
            res = _measure(cfg) if glibc is None else run_fresh(__file__, cfg, glibc=glibc)
            results.append({"glibc": glibc or "in-process", **cfg, **res})
    lines = [f"add() per transition, {args.game} (4, 84, 84) uint8, capacity {args.capacity} transitions, "
             f"{args.rounds} rounds x {args.block} adds per arm, interleaved (medians, "
             f"{'thread CPU' if args.cpu else 'wall'} time; ratios within each round)",
             "| glibc | n_envs | arm | µs / transition | / SB3 opt=True | process CPU µs / transition |",
             "|---|---|---|---|---|---|"]
    for res in results:
        if "error" in res:
            lines.append(f"| {res['glibc']} | {res['n_envs']} | error: {res['error'][:80]} | | | |")
            continue
        lines += [f"| {res['glibc']} | {res['n_envs']} | {r['arm']} | {r['us_per_transition']:.1f} "
                  f"| {r['vs_sb3_opt_true']:.2f} | {r['process_cpu_us_per_transition']:.1f} |" for r in res["rows"]]
    print("\n".join(lines))
    save_results(args.out, {"when": time.strftime("%Y-%m-%d %H:%M:%S"),
                            "frames": "real (atari_data.collect_stacked, random policy, seed 0)",
                            "results": results}, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
